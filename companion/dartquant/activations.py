"""Calibration activations: synthetic, a real MiniLM layer, and a LLaMA model's R1/R2 sites.

* :func:`synthetic_activations` — the spec's stand-in for post-RMSNorm LLM activations: a Laplace(0, 1)
  bulk, a few "massive" channels scaled ×20, then every token divided by its RMS (unit per-channel scale,
  which the Whip loss assumes).
* :func:`minilm_activations` — the inputs of every ``intermediate.dense`` (d = 384) of the pretrained
  all-MiniLM-L6-v2 on standard-library docstrings (padding tokens dropped), with the layer's weight.
* :func:`collect_calibration` — the official ``get_train_data.py`` for a LLaMA-layout model, done in memory:
  the inputs of ``q_proj`` and ``up_proj`` of every layer pooled for R1, the inputs of ``o_proj`` layer by
  layer for R2. Faithful to the paper where the code slips: **every** calibration sample is kept (the
  official ``R1Dataset`` regex ``sample_(\\d{1,2})_`` silently drops sample indices ≥ 100), and tokens are
  subsampled in memory (``tokens_per_sample``, Alg. 1's token sampling) instead of storing every fp16
  activation on disk (≈137 GB + 69 GB for Llama-2-7B); ``tokens_per_sample=None`` keeps whole samples, as
  the official code does.
"""

from __future__ import annotations

import torch

from companion.core import ParameterError, check_float, check_int


def synthetic_activations(tokens: int = 4096, dim: int = 256, massive: int = 4, factor: float = 20.0,
                          seed: int = 0) -> torch.Tensor:
    """[tokens, dim] Laplace(0, 1) activations with ``massive`` channels ×``factor``, RMS-normalised per token."""
    check_int("tokens", tokens, lo=1)
    check_int("dim", dim, lo=2)
    check_int("massive", massive, lo=0, hi=dim)
    check_float("factor", factor, lo=0.0, lo_open=True)
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(tokens, dim, generator=g, dtype=torch.float64).clamp(1e-12, 1 - 1e-12) - 0.5
    x = -torch.sign(u) * torch.log1p(-2 * u.abs())  # inverse CDF of Laplace(0, 1)
    ch = torch.randperm(dim, generator=g)[:massive]
    x[:, ch] *= factor
    x = x / x.pow(2).mean(dim=-1, keepdim=True).sqrt()
    return x.float()


def minilm_activations(n_texts: int = 64, max_length: int = 128, seed: int = 0) -> dict:
    """``{"layers": [[tokens, 384] per layer], "weights": [[1536, 384]], "bias": [...]}`` of MiniLM's
    ``intermediate.dense`` on ``n_texts`` standard-library docstrings (padding excluded)."""
    from companion.models import load_minilm, stdlib_texts

    check_int("n_texts", n_texts, lo=1)
    check_int("max_length", max_length, lo=8, hi=512)
    tok, model = load_minilm()
    texts = stdlib_texts(n_texts, seed=seed)
    layers = model.encoder.layer
    grabbed = [[] for _ in layers]
    handles = [layer.intermediate.dense.register_forward_pre_hook(
        lambda _m, inp, i=i: grabbed[i].append(inp[0].detach())) for i, layer in enumerate(layers)]
    try:
        enc = tok(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        with torch.no_grad():
            model(**enc)
    finally:
        for h in handles:
            h.remove()
    keep = enc["attention_mask"].bool()
    return {"layers": [torch.cat(g)[keep].float() for g in grabbed],
            "weights": [layer.intermediate.dense.weight.detach().float() for layer in layers],
            "bias": [layer.intermediate.dense.bias.detach().float() for layer in layers],
            "tokens": int(keep.sum()), "texts": n_texts}


def collect_calibration(model, input_ids: torch.Tensor, tokens_per_sample: int | None = 64, seed: int = 0,
                        batch: int = 8) -> dict:
    """R1 and R2 training data from a LLaMA-layout model (norms fused first, see :mod:`.rotation`).

    Returns ``{"r1": [S·2·layers, k, d], "r1_sample": [S·2·layers] (the calibration sample of each row),
    "r2": [[S, k, H·b] per layer], "r2_sample": [S]}`` where k = ``tokens_per_sample`` (or the whole
    sequence length when None). The k positions are drawn (seeded) once per forward batch of ``batch``
    samples and shared by its samples. Nothing is written to disk.
    """
    from companion.dartquant.rotation import llama_parts

    parts = llama_parts(model)
    if not isinstance(input_ids, torch.Tensor) or input_ids.ndim != 2:
        raise ParameterError("input_ids", getattr(input_ids, "shape", input_ids), "a [samples, seq_len] token tensor")
    S, L = input_ids.shape
    if tokens_per_sample is not None:
        check_int("tokens_per_sample", tokens_per_sample, lo=1, hi=L)
    check_int("batch", batch, lo=1)
    g = torch.Generator().manual_seed(seed)
    n_layers = len(parts.layers)
    r1 = {(i, s): [] for i in range(n_layers) for s in ("q", "up")}
    r2 = {i: [] for i in range(n_layers)}
    pos_holder = {}

    def take(t):  # [B, L, d] -> [B, k, d] at the batch's sampled positions
        return t.detach()[:, pos_holder["pos"]] if "pos" in pos_holder else t.detach()

    hooks = []
    for i, layer in enumerate(parts.layers):
        hooks.append(layer.self_attn.q_proj.register_forward_pre_hook(lambda _m, a, i=i: r1[(i, "q")].append(take(a[0]))))
        hooks.append(layer.mlp.up_proj.register_forward_pre_hook(lambda _m, a, i=i: r1[(i, "up")].append(take(a[0]))))
        hooks.append(layer.self_attn.o_proj.register_forward_pre_hook(lambda _m, a, i=i: r2[i].append(take(a[0]))))
    device = next(model.parameters()).device
    try:
        with torch.no_grad():
            for b0 in range(0, S, batch):
                ids = input_ids[b0:b0 + batch].to(device)
                if tokens_per_sample is not None:
                    pos_holder["pos"] = torch.randperm(L, generator=g)[:tokens_per_sample].sort().values.to(device)
                model(input_ids=ids)
    finally:
        for h in hooks:
            h.remove()
    r1_rows, r1_ids = [], []
    for (i, s), chunks in r1.items():
        x = torch.cat(chunks).float()
        r1_rows.append(x)
        r1_ids.append(torch.arange(S))
    return {"r1": torch.cat(r1_rows), "r1_sample": torch.cat(r1_ids),
            "r2": [torch.cat(r2[i]).float() for i in range(n_layers)], "r2_sample": torch.arange(S),
            "samples": S, "tokens_per_sample": tokens_per_sample or L}

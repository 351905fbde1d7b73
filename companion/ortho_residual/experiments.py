"""The CPU experiments of paper 10: the digits ViT for three rules, a char-level LM, the precision table.

* :func:`digits_data` -- scikit-learn's ``load_digits`` (1,797 images of 8x8), standardised, a seeded
  train/test split; patch 2 gives 16 tokens.
* :func:`train_vit` -- one rule (``"linear"``, ``"feature"``, ``"global"``) from a seed; the same seed
  gives the same initial weights and batch order for every rule (the adds have no parameters), so the
  runs differ only in the residual rule. Snapshots of every connection's statistics on a fixed probe
  batch are taken during training (the explorer's training-step slider).
* :func:`train_char_lm` -- the LLaMA-shaped decoder at d = 64, 4 layers on bytes of standard-library
  docstrings (:func:`companion.models.stdlib_texts`), linear vs Orthogonal-F.
* :func:`precision_table` -- |cos(x, f_perp)| when the projection runs in fp64, fp32 or bf16 (the
  official code's bf16 coefficient, and bf16 activations with an fp32 coefficient).

The paper's recipe (ViT-S: Adam lr 1e-3, batch 1024, 300 epochs, heavy augmentation) is far beyond a
CPU minute; here: AdamW, cosine schedule, no augmentation, tens to hundreds of steps.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch
import torch.nn.functional as F

from companion.core import ParameterError, check_choice, check_int
from companion.ortho_residual.models import LlamaConfig, LlamaDecoder, TinyViT, recording
from companion.ortho_residual.residual import EPS, MODES, orthogonal_component

PRECISIONS = ("fp64", "fp32", "bf16")
BF16_FACTOR = 10.0  # the official bf16 coefficient's |cos(x, f_perp)| exceeds the fp32 one by at least this factor
STAT_KEYS = ("x_norm", "rho_par", "rho_ortho", "abs_cos_x_out", "cos_x_update", "growth_min", "shrink_share")


def digits_data(seed: int = 0, test_fraction: float = 0.25, image_size: int = 8) -> dict:
    """``{"x_train", "y_train", "x_test", "y_test"}``: images ``[N, 1, image_size, image_size]`` (standardised;
    ``image_size > 8``: the 8x8 digits upsampled bilinearly, more pixels per patch but no new information), labels."""
    from sklearn.datasets import load_digits

    check_int("image_size", image_size, lo=8)
    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32)[:, None] / 16.0
    if image_size != 8:
        x = F.interpolate(x, size=(image_size, image_size), mode="bilinear", align_corners=False)
    x = (x - x.mean()) / x.std()
    y = torch.tensor(d.target, dtype=torch.long)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    n_test = int(round(test_fraction * len(y)))
    te, tr = perm[:n_test], perm[n_test:]
    return {"x_train": x[tr], "y_train": y[tr], "x_test": x[te], "y_test": y[te]}


def _lr(step: int, steps: int, lr: float, warmup: int) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return lr * 0.5 * (1 + math.cos(math.pi * t))


def snapshot(model, run, inputs, *, precisions: bool = True) -> list[dict]:
    """Per-connection statistics of one forward pass on ``inputs`` (eval mode, no grad):
    ``[{"block", "add", "mode", <STAT_KEYS>, "cos_fp64", "cos_fp32", "cos_bf16"}]`` in forward order.

    ``cos_<p>`` is the mean |cos(x, f_perp)| when the projection of the recorded ``(x, f)`` is done in
    precision ``p`` (:func:`perp_cosine`), whatever rule the model trains with."""
    was = model.training
    model.eval()
    with torch.no_grad(), recording(model, keep_inputs=precisions) as conns:
        run(inputs)
    model.train(was)
    rows = []
    for i, c in enumerate(conns):
        s = c.stats[0]
        row = {"block": i // 2, "add": ("attn", "mlp")[i % 2], "mode": c.mode, **{k: s[k] for k in STAT_KEYS}}
        if precisions:
            x, f = c.inputs[0]
            mode = "global" if c.mode == "global" else "feature"
            for p in PRECISIONS:
                row[f"cos_{p}"] = perp_cosine(x, f, precision=p, mode=mode)["mean"]
        rows.append(row)
    return rows


def train_vit(mode: str, data: dict, *, steps: int = 150, batch: int = 128, lr: float = 2e-3, d: int = 64,
              depth: int = 6, heads: int = 4, image_size: int = 8, patch: int = 2, seed: int = 0, snapshots: int = 6,
              probe: int = 128, eps: float = EPS, coef_dtype: str = "float32", weight_decay: float = 1e-4,
              device: str | torch.device = "cpu") -> dict:
    """Train :class:`TinyViT` (``image_size`` pixels, ``patch``-pixel patches) with one residual rule on ``device``;
    returns curves, test metrics and snapshots."""
    check_choice("mode", mode, MODES)
    check_int("steps", steps, lo=1)
    check_int("batch", batch, lo=1)
    check_int("snapshots", snapshots, lo=1)
    torch.manual_seed(seed)
    model = TinyViT(image_size=image_size, patch=patch, d=d, depth=depth, heads=heads, methods=mode, eps=eps,
                    coef_dtype=coef_dtype).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    gen = torch.Generator().manual_seed(seed + 1)
    xtr, ytr, xte, yte = (data[k].to(device) for k in ("x_train", "y_train", "x_test", "y_test"))
    probe_x = xte[:probe]
    snap_at = sorted({0, *np.linspace(0, steps, snapshots + 1).round().astype(int)[1:].tolist()})
    snaps, losses, t0 = [], [], time.perf_counter()
    order = torch.randperm(len(ytr), generator=gen)
    pos = 0
    for step in range(steps + 1):
        if step in snap_at:
            snaps.append({"step": step, "rows": snapshot(model, model, probe_x)})
        if step == steps:
            break
        if pos + batch > len(ytr):
            order, pos = torch.randperm(len(ytr), generator=gen), 0
        idx = order[pos:pos + batch].to(device)
        pos += batch
        for g in opt.param_groups:
            g["lr"] = _lr(step, steps, lr, warmup=max(1, steps // 10))
        loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        logits = model(xte)
        test_loss = F.cross_entropy(logits, yte).item()
        test_acc = (logits.argmax(-1) == yte).float().mean().item()
    return {"mode": mode, "seed": seed, "steps": steps, "loss": losses, "test_loss": test_loss, "test_acc": test_acc,
            "snapshots": snaps, "seconds": time.perf_counter() - t0, "model": model}


def char_corpus(seq_len: int = 64, seed: int = 0, val_fraction: float = 0.1) -> dict:
    """Bytes of standard-library docstrings as ``uint8`` tensors (train / validation split by text)."""
    from companion.models import stdlib_texts

    texts = stdlib_texts(seed=seed)
    n_val = max(1, int(len(texts) * val_fraction))
    enc = lambda ts: torch.tensor(list("\n".join(ts).encode("utf-8", "replace")), dtype=torch.long)  # noqa: E731
    train, val = enc(texts[n_val:]), enc(texts[:n_val])
    if len(val) < 4 * (seq_len + 1):
        raise ParameterError("seq_len", seq_len, f"small enough for the validation text ({len(val)} bytes)")
    return {"train": train, "val": val, "seq_len": seq_len}


def _windows(data: torch.Tensor, n: int, seq_len: int, gen) -> torch.Tensor:
    starts = torch.randint(0, len(data) - seq_len - 1, (n,), generator=gen)
    return torch.stack([data[s:s + seq_len + 1] for s in starts.tolist()])


def train_char_lm(mode: str, corpus: dict, *, steps: int = 100, batch: int = 32, lr: float = 3e-3, d: int = 64,
                  n_layers: int = 4, heads: int = 4, seed: int = 0, snapshots: int = 4, val_batches: int = 4) -> dict:
    """Train the byte-level LLaMA-shaped decoder with one rule; validation loss on held-out texts."""
    check_choice("mode", mode, MODES)
    check_int("steps", steps, lo=1)
    L = corpus["seq_len"]
    cfg = LlamaConfig(vocab=256, d=d, n_layers=n_layers, n_heads=heads, n_kv_heads=heads,
                      ffn=int(8 * d / 3 + 0.5), max_len=L + 1)
    torch.manual_seed(seed)
    model = LlamaDecoder(cfg, methods=mode)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed + 7)
    vgen = torch.Generator().manual_seed(12345)
    val = [_windows(corpus["val"], batch, L, vgen) for _ in range(val_batches)]
    snap_at = sorted({0, *np.linspace(0, steps, snapshots + 1).round().astype(int)[1:].tolist()})
    snaps, losses, t0 = [], [], time.perf_counter()
    for step in range(steps + 1):
        if step in snap_at:
            snaps.append({"step": step, "rows": snapshot(model, model, val[0][:8, :-1], precisions=False)})
        if step == steps:
            break
        for g in opt.param_groups:
            g["lr"] = _lr(step, steps, lr, warmup=max(1, steps // 10))
        loss = model.loss(_windows(corpus["train"], batch, L, gen))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        val_loss = float(np.mean([model.loss(v).item() for v in val]))
    return {"mode": mode, "seed": seed, "steps": steps, "loss": losses, "val_loss": val_loss, "snapshots": snaps,
            "seconds": time.perf_counter() - t0, "config": cfg.as_dict()}


def perp_cosine(x: torch.Tensor, f: torch.Tensor, *, precision: str = "fp32", mode: str = "feature",
                eps: float = EPS) -> dict:
    """|cos(x, f_perp)| (per token, or per sample for ``"global"``) when the projection runs in ``precision``:

    * ``"fp64"``: x, f and the coefficient in float64 (vit-pytorch);
    * ``"fp32"``: float32 throughout (this package's default);
    * ``"bf16"``: x and f rounded to bfloat16 and the official ``coef_dtype="input"`` path (the coefficient
      cast to bf16, as under bf16 autocast);
    * ``"bf16_fp32coef"``: bf16 activations, the coefficient in fp32, f_perp rounded back to bf16.

    The cosine is measured in float64 between the (rounded) x and the returned f_perp."""
    check_choice("precision", precision, PRECISIONS + ("bf16_fp32coef",))
    dt = {"fp64": torch.float64, "fp32": torch.float32}.get(precision, torch.bfloat16)
    coef = {"fp64": "float64", "fp32": "float32", "bf16": "input", "bf16_fp32coef": "float32"}[precision]
    xr, fr = x.to(dt), f.to(dt)
    perp = orthogonal_component(xr, fr, mode=mode, eps=eps, coef_dtype=coef)
    xd, pd = xr.double(), perp.double()
    dims = tuple(range(1, x.ndim)) if mode == "global" else (-1,)
    cos = (xd * pd).sum(dims) / (xd.norm(dim=dims) * pd.norm(dim=dims)).clamp_min(1e-300)
    return {"mean": cos.abs().mean().item(), "max": cos.abs().max().item()}


def precision_table(x: torch.Tensor, f: torch.Tensor, *, mode: str = "feature") -> list[dict]:
    """One row per precision: mean and max |cos(x, f_perp)| on the same ``(x, f)``."""
    return [{"precision": p, **perp_cosine(x, f, precision=p, mode=mode)} for p in PRECISIONS + ("bf16_fp32coef",)]


def precision_check(precision: list[dict]) -> dict:
    """The audit of the official code's bf16 coefficient on one :func:`precision_table`: the ratio of its
    mean |cos(x, f_perp)| to the fp32 projection's, and whether it exceeds ``BF16_FACTOR`` (the notebook's
    Checks section asserts ``ok``; this is not a paper claim, so it has no row in the claims table)."""
    by = {r["precision"]: r["mean"] for r in precision}
    ratio = by["bf16"] / max(by["fp32"], 1e-300)
    return {"ratio": ratio, "ok": ratio > BF16_FACTOR, "text": (
        f"mean |cos(x, f_perp)|: " + ", ".join(f"{p} {v:.1e}" for p, v in by.items())
        + f"; the official bf16 coefficient is {ratio:.0f}x the fp32 projection's (asserted > {BF16_FACTOR:.0f}x)")}


def stream_summary(result: dict) -> dict:
    """Across every add of every snapshot of one training run: the smallest stream-norm growth, the
    largest share of shrinking tokens, the largest mean |cos(x, update)| and the mean |rho_par| and
    mean |cos(x, f)| of the final snapshot."""
    rows = [r for s in result["snapshots"] for r in s["rows"]]
    final = result["snapshots"][-1]["rows"]
    return {
        "growth_min": min(r["growth_min"] for r in rows),
        "shrink_share_max": max(r["shrink_share"] for r in rows),
        "cos_update_max": max(r["cos_x_update"] for r in rows),
        "rho_par_mean": float(np.mean([abs(r["rho_par"]) for r in final])),
        "abs_cos_x_out_mean": float(np.mean([r["abs_cos_x_out"] for r in final])),
    }

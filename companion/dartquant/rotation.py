"""Placing R1-R4 in a LLaMA-layout model and running it W-A-KV quantized (paper Sec. 3.1, Fig. 1).

**Computational invariance**: Y = X Wᵀ = (X R)(Rᵀ Wᵀ) for orthogonal R.

* RMSNorm gains first (:func:`fuse_norms`): diag(g) does not commute with R1, so g is folded into the
  linears that read the norm's output (W ← W diag(g) for q/k/v after ``input_layernorm``, gate/up after
  ``post_attention_layernorm``, ``lm_head`` after the final norm) and g ← 1. RMS(x R) = RMS(x), so the
  normalisation itself commutes with R1 once the gains are 1. Tied embeddings are untied.
* **R1** (d×d, all layers): the residual stream becomes x R1. Embeddings E ← E R1; readers (q, k, v, gate,
  up, lm_head) W ← W R1; writers (o, down) W ← R1ᵀ W.
* **R2** (head_dim², one per KV head, shared in its GQA group): v_h ← v_h R2[h] by W_v[h] ← R2[h]ᵀ W_v[h],
  and W_o[:, j] ← W_o[:, j] R2[kv(j)] for the query heads j of that group.
* **R3** (online, not learned): q, k ← q H, k H after RoPE (q kᵀ unchanged), which matters for K quantization.
* **R4** (online, not learned): the ``down_proj`` input x ← x H and W_down ← W_down H.

DartQuant learns R1 and R2 (:mod:`.qr_orth`), fuses them, and keeps R3/R4 as random Hadamard. Rotating a
model whose norm gains are not fused raises ``ValueError`` (the invariance would silently break).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from companion.core import ParameterError, check_choice, check_int
from companion.dartquant.hadamard import hadamard_transform, supported
from companion.dartquant.quant import gptq_quantize, quantize_activations, quantize_weight_rtn

_ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
_MLP = ("gate_proj", "up_proj", "down_proj")


@dataclass
class LlamaParts:
    embed: nn.Embedding
    layers: list
    norm: nn.Module
    lm_head: nn.Linear
    heads: int
    kv_heads: int
    head_dim: int


def llama_parts(model) -> LlamaParts:
    """The pieces of a LLaMA-layout causal LM; a model without them raises ``ValueError`` naming what is missing."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if inner is None or layers is None or len(layers) == 0:
        raise ValueError("expected a LLaMA-layout causal LM with model.model.layers (e.g. LlamaForCausalLM); "
                         f"got {type(model).__name__}")
    for i, layer in enumerate(layers):
        for owner, names in (("self_attn", _ATTN), ("mlp", _MLP)):
            mod = getattr(layer, owner, None)
            missing = [n for n in names if not isinstance(getattr(mod, n, None), nn.Linear)]
            if mod is None or missing:
                raise ValueError(f"layer {i} lacks the projections {owner}.{missing or list(names)}: DartQuant needs "
                                 "q/k/v/o_proj in self_attn and gate/up/down_proj in mlp")
        for nm in ("input_layernorm", "post_attention_layernorm"):
            if getattr(layer, nm, None) is None:
                raise ValueError(f"layer {i} lacks {nm}")
    cfg = model.config
    heads = cfg.num_attention_heads
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    lm_head = getattr(model, "lm_head", None)
    if not isinstance(lm_head, nn.Linear) or getattr(inner, "norm", None) is None:
        raise ValueError("expected model.lm_head (nn.Linear) and model.model.norm")
    return LlamaParts(inner.embed_tokens, list(layers), inner.norm, lm_head, heads, kv, head_dim)


def norms_fused(model) -> bool:
    """True when every RMSNorm gain of the model is exactly 1."""
    p = llama_parts(model)
    norms = [p.norm] + [n for layer in p.layers for n in (layer.input_layernorm, layer.post_attention_layernorm)]
    return all(bool((n.weight == 1).all()) for n in norms)


@torch.no_grad()
def fuse_norms(model):
    """Fold every RMSNorm gain into the following linears and set the gains to 1 (in place; returns model)."""
    p = llama_parts(model)
    if p.lm_head.weight is p.embed.weight or p.lm_head.weight.data_ptr() == p.embed.weight.data_ptr():
        p.lm_head.weight = nn.Parameter(p.embed.weight.detach().clone())
        model.config.tie_word_embeddings = False

    def fold(norm, linears):
        g = norm.weight.double()
        for lin in linears:
            lin.weight.copy_((lin.weight.double() * g[None, :]).to(lin.weight.dtype))
        norm.weight.fill_(1.0)

    for layer in p.layers:
        fold(layer.input_layernorm, [layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj])
        fold(layer.post_attention_layernorm, [layer.mlp.gate_proj, layer.mlp.up_proj])
    fold(p.norm, [p.lm_head])
    return model


def _left(lin: nn.Linear, r: torch.Tensor):   # W <- W R  (a reader of the rotated stream)
    lin.weight.copy_((lin.weight.double() @ r).to(lin.weight.dtype))


def _right(lin: nn.Linear, r: torch.Tensor):  # W <- Rᵀ W (a writer into the rotated stream)
    lin.weight.copy_((r.T @ lin.weight.double()).to(lin.weight.dtype))
    if lin.bias is not None:
        lin.bias.copy_((lin.bias.double() @ r).to(lin.bias.dtype))


@torch.no_grad()
def rotate_model(model, r1: torch.Tensor | None = None, r2: list | None = None, r4: bool = False):
    """Fuse R1 ([d, d]), per-layer R2 ([K, b, b] each) and, with ``r4``, the down_proj Hadamard into the
    weights (in place; returns model). The norms must be fused first (:func:`fuse_norms`)."""
    p = llama_parts(model)
    if not norms_fused(model):
        raise ValueError("RMSNorm gains are not fused: call fuse_norms(model) before rotating "
                         "(diag(g) does not commute with R1, so the rotated model would differ)")
    d = p.embed.weight.shape[1]
    if r1 is not None:
        r1 = r1.detach().double().cpu().to(p.embed.weight.device)
        if r1.shape != (d, d):
            raise ParameterError("r1", tuple(r1.shape), f"a [{d}, {d}] rotation")
        p.embed.weight.copy_((p.embed.weight.double() @ r1).to(p.embed.weight.dtype))
        for layer in p.layers:
            for lin in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj,
                        layer.mlp.gate_proj, layer.mlp.up_proj):
                _left(lin, r1)
            _right(layer.self_attn.o_proj, r1)
            _right(layer.mlp.down_proj, r1)
        _left(p.lm_head, r1)
    if r2 is not None:
        if len(r2) != len(p.layers):
            raise ParameterError("r2", f"{len(r2)} matrices", f"one [K, b, b] per layer ({len(p.layers)})")
        K, b, g = p.kv_heads, p.head_dim, p.heads // p.kv_heads
        for layer, r in zip(p.layers, r2):
            r = r.detach().double().to(p.embed.weight.device)
            if r.shape != (K, b, b):
                raise ParameterError("r2", tuple(r.shape), f"[{K}, {b}, {b}] (one rotation per KV head)")
            wv = layer.self_attn.v_proj.weight
            wv.copy_(torch.einsum("kij,kic->kjc", r, wv.double().reshape(K, b, -1)).reshape(wv.shape).to(wv.dtype))
            if layer.self_attn.v_proj.bias is not None:
                bv = layer.self_attn.v_proj.bias
                bv.copy_(torch.einsum("kij,ki->kj", r, bv.double().reshape(K, b)).reshape(-1).to(bv.dtype))
            wo = layer.self_attn.o_proj.weight
            rr = r.repeat_interleave(g, dim=0)  # [H, b, b]
            wo.copy_(torch.einsum("ohi,hij->ohj", wo.double().reshape(wo.shape[0], -1, b), rr).reshape(wo.shape).to(wo.dtype))
    if r4:
        for layer in p.layers:
            down = layer.mlp.down_proj
            if not supported(down.weight.shape[1]):
                raise ParameterError("intermediate_size", down.weight.shape[1], "a width with a Hadamard construction for R4")
            down.weight.copy_(hadamard_transform(down.weight.double()).to(down.weight.dtype))
        model._dartquant_r4 = True
    return model


# ------------------------------------------------------------------------------------------ quantized runs

@torch.no_grad()
def quantize_weights(model, bits: int = 4, method: str = "rtn", group: int | None = 128, calib_ids=None):
    """Fake-quantize every linear of the decoder layers (``lm_head`` stays 16-bit, as the paper).

    ``method="gptq"`` needs ``calib_ids`` [S, L]: each linear's inputs are recorded on the model as it is
    (deviation: the official pipeline quantizes layer by layer on the outputs of the already-quantized
    layers; here all inputs come from one full-precision pass, which is simpler and close at small depth)."""
    check_choice("method", method, ("rtn", "gptq"))
    p = llama_parts(model)
    lins = {f"{i}.{n}": getattr(getattr(layer, owner), n) for i, layer in enumerate(p.layers)
            for owner, names in (("self_attn", _ATTN), ("mlp", _MLP)) for n in names}
    inputs = {}
    if method == "gptq":
        if calib_ids is None:
            raise ParameterError("calib_ids", None, "calibration token ids [samples, seq_len] for GPTQ")
        online = getattr(model, "_dartquant_r4", False)
        hooks = [lin.register_forward_pre_hook(
            lambda m, a, k=k: inputs.setdefault(k, []).append(
                (hadamard_transform(a[0].float()) if (online and k.endswith("down_proj")) else a[0].float()).reshape(-1, a[0].shape[-1]))
        ) for k, lin in lins.items()]
        try:
            model(input_ids=calib_ids.to(p.embed.weight.device))
        finally:
            for h in hooks:
                h.remove()
    for k, lin in lins.items():
        w = lin.weight
        q = gptq_quantize(w.float(), torch.cat(inputs[k]), bits, group) if method == "gptq" else quantize_weight_rtn(w.float(), bits, group)
        w.copy_(q.to(w.dtype))
    return model


@contextlib.contextmanager
def quantized_activations(model, a_bits: int | None = 4, kv_bits: int | None = None, clip: float = 0.9,
                          r3: bool = False, ste: bool = False):
    """Inside the block the model runs with per-token asymmetric activation quantization of every decoder
    linear's input (``o_proj`` grouped per head), the online R4 Hadamard when :func:`rotate_model` fused it,
    and, with ``kv_bits`` or ``r3``, K/V quantization (groups of head_dim) and the online R3 on Q, K after RoPE.
    ``None`` bits = not quantized. ``ste`` passes gradients straight through the rounding (for end-to-end
    rotation training, as SpinQuant)."""
    from companion.models.attention import attention_session, dense_attention

    p = llama_parts(model)
    online = getattr(model, "_dartquant_r4", False)
    hooks = []

    def fq(x, bits, c, group=None):
        q = quantize_activations(x, bits, c, group=group)
        return x + (q - x).detach() if ste else q

    def pre(name):
        def hook(_m, args):
            x = args[0]
            if name == "down_proj" and online:
                x = hadamard_transform(x.float()).to(x.dtype)
            if a_bits is not None:
                x = fq(x, a_bits, clip, group=p.head_dim if name == "o_proj" else None)
            return (x,) + tuple(args[1:])
        return hook

    for layer in p.layers:
        for owner, names in (("self_attn", _ATTN), ("mlp", _MLP)):
            for n in names:
                hooks.append(getattr(getattr(layer, owner), n).register_forward_pre_hook(pre(n)))

    def handler(*, q, k, v, causal, scaling, **_):
        if r3:
            q, k = hadamard_transform(q.float()).to(q.dtype), hadamard_transform(k.float()).to(k.dtype)
        if kv_bits is not None:
            k = fq(k, kv_bits, 1.0)
            v = fq(v, kv_bits, 1.0)
        return dense_attention(q, k, v, causal, scaling)

    try:
        if kv_bits is not None or r3:
            with attention_session(model, handler):
                yield model
        else:
            yield model
    finally:
        for h in hooks:
            h.remove()


@torch.no_grad()
def perplexity(model, ids: torch.Tensor, batch: int = 8) -> float:
    """exp(mean next-token cross-entropy) over ``ids`` [S, L]."""
    check_int("batch", batch, lo=1)
    dev = next(model.parameters()).device
    tot, n = 0.0, 0
    for b0 in range(0, ids.shape[0], batch):
        x = ids[b0:b0 + batch].to(dev)
        logits = model(input_ids=x).logits.float()
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum")
        tot += float(loss)
        n += x[:, 1:].numel()
    return math.exp(tot / n)


def invariance_check(seed: int = 0, hidden: int = 128, layers: int = 2, heads: int = 4, kv_heads: int = 2,
                     seq_len: int = 32) -> dict:
    """Build a tiny random LLaMA (GQA, non-trivial RMSNorm gains), fuse its norms, fuse a random-Hadamard R1,
    per-KV-head random-Hadamard R2 and R4, run it with the online R3 (no quantization) and compare logits."""
    import copy

    from companion.dartquant.hadamard import random_hadamard
    from companion.models import tiny_llama

    model = tiny_llama(hidden_size=hidden, num_layers=layers, num_heads=heads, num_kv_heads=kv_heads,
                       intermediate_size=2 * hidden, seed=seed)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.5 * torch.randn(p.shape, generator=g))
    ids = torch.randint(0, model.config.vocab_size, (2, seq_len), generator=g)
    with torch.no_grad():
        ref = model(input_ids=ids).logits
    rot = fuse_norms(copy.deepcopy(model))
    b = hidden // heads
    rotate_model(rot, random_hadamard(hidden, seed), [random_hadamard(b, seed + 1 + i).unsqueeze(0).repeat(kv_heads, 1, 1)
                                                      for i in range(layers)], r4=True)
    with torch.no_grad(), quantized_activations(rot, None, None, r3=True):
        out = rot(input_ids=ids).logits
    return {"max_abs_diff": float((out - ref).abs().max()), "max_abs_logit": float(ref.abs().max()),
            "model": f"tiny LLaMA d={hidden}, {layers} layers, {heads} heads / {kv_heads} KV heads, random init and gains"}

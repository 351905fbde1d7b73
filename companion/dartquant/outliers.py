"""Massive activation channels put into a small LLaMA-layout model by a function-preserving transform.

Pretrained LLMs carry a few channels whose activations are one to three orders of magnitude larger than the
rest, in the same channels at every layer (Dettmers et al. 2022, "LLM.int8()"; Sun et al. 2024, "Massive
activations in large language models"); these are the outliers a rotation spreads (paper Sec. 1, Fig. 3).
Byte-level models trained for seconds have none, so without a rotation W4A4KV4 barely hurts them. To study
the rotations where they matter, :func:`inject_massive_channels` scales a few channels of every RMSNorm gain
by s and divides the matching input columns of the linears that read that norm's output by s:

    g_c ← s·g_c,   W[:, c] ← W[:, c] / s   (q/k/v after ``input_layernorm``, gate/up after
                                            ``post_attention_layernorm``), for c in the chosen channels,

so W (x ⊙ g) is unchanged and the float model computes the same function (to rounding), while the inputs of
q/k/v/gate/up now carry channels s times larger than the rest, and those columns of W are s times smaller.
Here the phenomenon is put in, not grown by training: the notebook and the study say so.

Folding the gains into the linears (:func:`companion.dartquant.rotation.fuse_norms`, the first step of every
rotation method, since diag(g) does not commute with R1) gives W diag(s·g) / s = W diag(g): it removes the
injected channels exactly. The study therefore measures this injection without a rotation only, and compares
the rotations on the residual-stream injection below.

**Massive channels in the residual stream**, where every rotation must act. Real LLMs carry their massive
activations in a few fixed channels of the residual stream itself, so a change of the norm gains cannot
hide them. :func:`inject_stream_channels` puts them there in a fused model (gains 1) by an orthogonal change
of basis of the residual stream: the top k right singular vectors u_1..u_k (uncentred) of the stream's
hidden states on calibration tokens (:func:`stream_directions`: the inputs of every layer's two RMSNorms,
each token scaled to unit RMS, which is what the norms pass to the linears) are mapped onto k channels
e_c1..e_ck by a product Q of k Householder reflections (:func:`householder_basis`, Q u_i = e_ci), fused as
R1 = Qᵀ with :func:`companion.dartquant.rotation.rotate_model`. By computational invariance (paper Sec. 3.1,
Y = X Wᵀ = (X R)(Rᵀ Wᵀ)) the float model is unchanged, while channel c_i of every q/k/v/gate/up input now
holds the stream's component along u_i: the stream's dominant component sits in a few channels, as in
pretrained LLMs. This phenomenon, too, is put in by hand. No later fusion undoes it: a rotation method has to
spread it. :func:`channel_rms_ratio` measures it (largest channel RMS over the median channel RMS).
"""

from __future__ import annotations

import math

import torch

from companion.core import ParameterError, check_float, check_int
from companion.dartquant.rotation import llama_parts, norms_fused, rotate_model


def check_channels(channels, width: int) -> list[int]:
    """A non-empty list of distinct channel indices in [0, width)."""
    if isinstance(channels, (str, bytes)) or not hasattr(channels, "__iter__"):
        raise ParameterError("channels", channels, f"a non-empty list of distinct integers in [0, {width})")
    out = list(channels)
    if not out or any(isinstance(c, bool) or not isinstance(c, int) for c in out):
        raise ParameterError("channels", channels, f"a non-empty list of distinct integers in [0, {width})")
    bad = [c for c in out if not 0 <= c < width]
    if bad:
        raise ParameterError("channels", bad, f"channel indices in [0, {width}) (the model's hidden size is {width})")
    if len(set(out)) != len(out):
        raise ParameterError("channels", channels, "distinct channel indices (a channel repeated would be scaled twice)")
    return out


def pick_channels(width: int, count: int, seed: int = 0) -> list[int]:
    """``count`` distinct channels of ``width``, drawn at random (seeded), sorted."""
    check_int("width", width, lo=1)
    check_int("count", count, lo=1, hi=width)
    g = torch.Generator().manual_seed(seed)
    return sorted(int(c) for c in torch.randperm(width, generator=g)[:count])


@torch.no_grad()
def inject_massive_channels(model, channels, scale: float):
    """Scale ``channels`` of every layer's two RMSNorm gains by ``scale`` and divide the matching input columns
    of q/k/v_proj (after ``input_layernorm``) and gate/up_proj (after ``post_attention_layernorm``) by it, in
    place (returns model). The float model's outputs are unchanged to rounding; see the module docstring."""
    check_float("scale", scale, lo=0.0, lo_open=True)
    p = llama_parts(model)
    ch = torch.tensor(check_channels(channels, p.embed.weight.shape[1]), device=p.embed.weight.device)
    for layer in p.layers:
        for norm, readers in ((layer.input_layernorm, (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj)),
                              (layer.post_attention_layernorm, (layer.mlp.gate_proj, layer.mlp.up_proj))):
            norm.weight[ch] *= scale
            for lin in readers:
                lin.weight[:, ch] /= scale
    return model


def _reader_inputs_mean(model, input_ids: torch.Tensor, stat) -> float:
    """``stat`` of the q_proj and up_proj inputs of every layer on ``input_ids``, averaged over those inputs."""
    p = llama_parts(model)
    values = []

    def grab(_m, args):
        values.append(float(stat(args[0].float().reshape(-1, args[0].shape[-1]))))

    hooks = [lin.register_forward_pre_hook(grab) for layer in p.layers for lin in (layer.self_attn.q_proj, layer.mlp.up_proj)]
    try:
        with torch.no_grad():
            model(input_ids=input_ids.to(p.embed.weight.device))
    finally:
        for h in hooks:
            h.remove()
    out = sum(values) / len(values)
    if not math.isfinite(out):
        raise ValueError(f"the model's q_proj/up_proj inputs are not finite (statistic {out})")
    return out


def channel_peak_ratio(model, input_ids: torch.Tensor) -> float:
    """How massive the largest channel of the q_proj and up_proj inputs is, token by token: the median over
    tokens of max_c |x_c| / rms(x), averaged over those inputs of every layer: a few units for Gaussian-like
    channels, and at most √d, reached when one channel carries the whole token."""
    return _reader_inputs_mean(model, input_ids,
                               lambda x: (x.abs().amax(-1) / x.pow(2).mean(-1).sqrt().clamp_min(1e-30)).median())


def channel_rms_ratio(model, input_ids: torch.Tensor) -> float:
    """How massive the largest channel of the q_proj and up_proj inputs is over all tokens: the largest
    channel RMS over the median channel RMS, averaged over those inputs of every layer (about 1 for channels
    of equal scale; a channel that holds the stream's dominant component stands far above the rest)."""
    def stat(x):
        rms = x.pow(2).mean(0).sqrt()
        return rms.max() / rms.median().clamp_min(1e-30)

    return _reader_inputs_mean(model, input_ids, stat)


@torch.no_grad()
def stream_directions(model, input_ids: torch.Tensor, k: int = 1, batch: int = 8) -> torch.Tensor:
    """The top ``k`` right singular vectors (uncentred, so a common offset counts) of the residual stream's
    hidden states on ``input_ids`` [S, L]: the inputs of every layer's ``input_layernorm`` and
    ``post_attention_layernorm``, each token scaled to unit RMS, pooled over layers and tokens (one R1 serves
    every layer). Returns a float64 [k, d] tensor of orthonormal rows, the largest singular value first."""
    p = llama_parts(model)
    d = p.embed.weight.shape[1]
    check_int("k", k, lo=1, hi=d)
    check_int("batch", batch, lo=1)
    if input_ids.dim() != 2 or input_ids.shape[0] == 0:
        raise ParameterError("input_ids", tuple(input_ids.shape), "token ids of shape [samples >= 1, seq_len]")
    dev = p.embed.weight.device
    gram = torch.zeros(d, d, dtype=torch.float64, device=dev)

    def grab(_m, args):
        nonlocal gram
        x = args[0].detach().double().reshape(-1, d)
        x = x / x.pow(2).mean(-1, keepdim=True).sqrt().clamp_min(1e-30)
        gram += x.T @ x

    hooks = [n.register_forward_pre_hook(grab) for layer in p.layers
             for n in (layer.input_layernorm, layer.post_attention_layernorm)]
    try:
        for b0 in range(0, input_ids.shape[0], batch):
            model(input_ids=input_ids[b0:b0 + batch].to(dev))
    finally:
        for h in hooks:
            h.remove()
    if not bool(torch.isfinite(gram).all()):
        raise ValueError("the residual stream's hidden states are not finite")
    _, vecs = torch.linalg.eigh(gram)  # eigenvalues ascending: the right singular vectors of the stacked states
    return vecs[:, -k:].flip(-1).T.contiguous().cpu()


def householder_basis(directions: torch.Tensor, channels) -> torch.Tensor:
    """An orthogonal Q [d, d] (float64) with Q u_i = e_ci for each orthonormal row u_i of ``directions`` [k, d]
    and channel c_i of ``channels`` (k distinct channels): the product of k Householder reflections
    H_i = I − 2 v vᵀ / vᵀv, v = Q_{i−1} u_i − e_ci. Each H_i keeps e_c1..e_c(i−1), since v is orthogonal to
    them (Q_{i−1} u_i ⟂ Q_{i−1} u_j = e_cj, and the channels are distinct), so every earlier mapping holds."""
    if not isinstance(directions, torch.Tensor) or directions.dim() != 2 or directions.shape[0] < 1:
        raise ParameterError("directions", getattr(directions, "shape", directions), "a [k, d] tensor with k >= 1 rows")
    k, d = directions.shape
    ch = check_channels(channels, d)
    if len(ch) != k:
        raise ParameterError("channels", ch, f"one channel per direction ({k})")
    u = directions.detach().double().cpu()
    if not bool(torch.isfinite(u).all()):
        raise ParameterError("directions", "non-finite entries", "finite orthonormal rows")
    off = float((u @ u.T - torch.eye(k, dtype=torch.float64)).abs().max())
    if off > 1e-6:
        raise ParameterError("directions", f"rows with |U Uᵀ − I| up to {off:.1e}", "orthonormal rows (|U Uᵀ − I| <= 1e-6)")
    q = torch.eye(d, dtype=torch.float64)
    for row, c in zip(u, ch):
        v = q @ row
        v[c] -= 1.0
        nv = float(v @ v)
        if nv > 1e-24:  # else Q already maps u_i onto e_ci
            q = q - (2.0 / nv) * torch.outer(v, v @ q)
    return q


@torch.no_grad()
def inject_stream_channels(model, channels, input_ids: torch.Tensor, batch: int = 8):
    """Put the residual stream's top ``len(channels)`` directions (:func:`stream_directions` on ``input_ids``)
    into ``channels`` by the change of basis Q of :func:`householder_basis`, fused as R1 = Qᵀ (the stream
    x becomes x Qᵀ, so channel c_i holds x · u_i), in place. The model's norms must be fused first. The float
    model computes the same function (computational invariance); see the module docstring. Returns
    ``(model, Q)``."""
    p = llama_parts(model)
    ch = check_channels(channels, p.embed.weight.shape[1])
    if not norms_fused(model):
        raise ValueError("RMSNorm gains are not fused: call fuse_norms(model) before changing the stream's basis")
    q = householder_basis(stream_directions(model, input_ids, len(ch), batch), ch)
    rotate_model(model, r1=q.T)
    return model, q

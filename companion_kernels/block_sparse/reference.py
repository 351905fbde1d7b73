"""Plain-PyTorch oracles for block-sparse attention and SeerAttention's pooled attention map.

Both build the token-level mask explicitly and run masked dense softmax attention in float32 (or
float64 when the inputs are float64). The attention reference takes as many heads at once as keep the
score buffer under ``_MAX_SCORES`` elements (all of them for short inputs, one at a time for long ones),
so the quadratic buffer stays bounded and short inputs pay no Python loop. They run on any device, CPU included, and are the ground truth of the
Triton kernels in ``triton.py`` (which never imports this module).

``block_sparse_attention_reference``: out_i = sum_j softmax_j(s_ij) v_j over the keys j that lie in a
selected key block of i's query block (and j <= i when causal), s_ij = sm_scale * q_i . k_j.
A query row with no admissible key returns zeros (never NaN). GQA: query head h reads key/value head
h // (Hq / Hkv), the ``repeat_kv`` convention.

``pooled_attention_map_reference``: SeerAttention's distillation target (paper 01, Sec. 3.2; official
``seer_attn/kernels/attn_pooling_kernel.py``): P = softmax(s) with the causal mask, then
gt[I, J] = max_{i in I, j in J} P_ij (a 2-D max-pool with kernel = stride = block size, ragged last
blocks pooled over their valid tokens), then each row of gt is divided by its sum. Causally masked
entries are 0. The official kernel returns bf16; we return float32.
"""

from __future__ import annotations

import math

import torch

__all__ = ["block_sparse_attention_reference", "pooled_attention_map_reference", "token_mask_from_blocks"]


#: the largest score buffer (heads × N × N elements) the attention reference builds at once
_MAX_SCORES = 1 << 24


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def token_mask_from_blocks(block_mask: torch.Tensor, n: int, block_size: int, causal: bool) -> torch.Tensor:
    """Block mask ``[..., nQB, nKB]`` -> token mask ``[..., n, n]`` (cropped ragged tail, causal applied)."""
    tok = block_mask.repeat_interleave(block_size, dim=-2).repeat_interleave(block_size, dim=-1)
    tok = tok[..., :n, :n]
    if causal:
        tok = tok & torch.ones(n, n, dtype=torch.bool, device=block_mask.device).tril()
    return tok


def _block_mask_from_index(block_index: torch.Tensor, block_count: torch.Tensor, nkb: int) -> torch.Tensor:
    max_k = block_index.shape[-1]
    valid = torch.arange(max_k, device=block_index.device) < block_count.unsqueeze(-1).to(torch.long)
    idx = torch.where(valid, block_index.to(torch.long), torch.full_like(block_index, nkb, dtype=torch.long))
    out = torch.zeros(*idx.shape[:-1], nkb + 1, dtype=torch.bool, device=idx.device)
    out.scatter_(-1, idx, True)
    return out[..., :nkb]


def block_sparse_attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block_index: torch.Tensor,
    block_count: torch.Tensor,
    *,
    block_size: int = 64,
    causal: bool = True,
    sm_scale: float | None = None,
) -> torch.Tensor:
    """Masked dense attention restricted to the selected key blocks; returns ``q.dtype`` ``[B, Hq, N, D]``.

    ``block_index``/``block_count`` may have size-1 batch/head dims (broadcast)."""
    b, hq, n, d = q.shape
    hkv = k.shape[1]
    group = hq // hkv
    nkb = math.ceil(n / block_size)
    scale = 1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)
    ct = _compute_dtype(q)
    bmask = _block_mask_from_index(block_index, block_count, nkb)
    bmask = bmask.expand(b, hq, *bmask.shape[-2:])
    out = torch.empty_like(q)
    heads = max(1, min(hq, _MAX_SCORES // max(1, n * n)))
    kv_head = torch.arange(hq, device=q.device) // group
    for bi in range(b):
        for h0 in range(0, hq, heads):
            hs = slice(h0, min(hq, h0 + heads))
            qs = q[bi, hs].to(ct)
            ks = k[bi, kv_head[hs]].to(ct)
            vs = v[bi, kv_head[hs]].to(ct)
            tok = token_mask_from_blocks(bmask[bi, hs], n, block_size, causal)
            s = (qs @ ks.transpose(-1, -2)) * scale
            s = s.masked_fill(~tok, float("-inf"))
            m = s.amax(dim=-1, keepdim=True)
            m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # empty rows: avoid -inf - -inf
            p = torch.exp(s - m)
            den = p.sum(dim=-1, keepdim=True)
            o = (p @ vs) / torch.where(den > 0, den, torch.ones_like(den))
            out[bi, hs] = o.to(q.dtype)
    return out


def pooled_attention_map_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    block_size: int = 64,
    causal: bool = True,
    sm_scale: float | None = None,
) -> torch.Tensor:
    """Row-normalised 2-D max-pool of softmax(q k^T * sm_scale), float32 ``[B, Hq, nQB, nKB]``."""
    b, hq, n, d = q.shape
    hkv = k.shape[1]
    group = hq // hkv
    nb = math.ceil(n / block_size)
    pad = nb * block_size - n
    scale = 1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)
    ct = _compute_dtype(q)
    out = torch.empty(b, hq, nb, nb, dtype=torch.float32, device=q.device)
    for bi in range(b):
        for h in range(hq):
            s = (q[bi, h].to(ct) @ k[bi, h // group].to(ct).T) * scale
            if causal:
                s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool, device=q.device).tril(), float("-inf"))
            p = torch.softmax(s, dim=-1)
            p = torch.nn.functional.pad(p, (0, pad, 0, pad))  # zeros never win a max of probabilities
            pooled = p.reshape(nb, block_size, nb, block_size).amax(dim=(1, 3))
            pooled = pooled / pooled.sum(dim=-1, keepdim=True)
            out[bi, h] = pooled.to(torch.float32)
    return out

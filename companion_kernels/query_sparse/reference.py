"""Plain-PyTorch oracle for the query-sparse dense attention op (paper 09, Δ Attention).

Paper: Willette, Lee, Hwang, "Δ Attention: Fast and Accurate Sparse Attention Inference by Delta
Correction", NeurIPS 2025 (arXiv 2505.11254). Algorithm 1 needs `f_dense(Q̃, K, V)`: full (key-dense)
softmax attention for a *subset* of query rows Q̃ (every γ-th row plus a dense tail), each row
attending to the keys up to its own absolute position (causal) or to all keys (bidirectional).
Eq. 6/7 then add Δ_j = (ÃV)_j − (A*V)_{jγ} to the γ sparse rows of block j.

Two entry points, the same contract as `triton.py` (which never imports this file):

* `query_sparse_attention(q, k, v, rows, causal, sm_scale)` -> `[B, Hq, M, D]`, row m is
  softmax(q[rows[m]] · k[:lim]ᵀ · scale) · v[:lim] with lim = rows[m] + 1 (causal) or N.
* `query_sparse_delta_(out, q, k, v, gamma, num_delta_rows, propagate, causal, sm_scale)`: in place
  on the sparse output `out` `[B, Hq, N, D]`. With s_p = num_delta_rows (a multiple of γ), anchors are
  a = 0, γ, …, s_p − γ and the tail is s_p … N−1. Anchor rows and tail rows are overwritten with their
  dense rows; with `propagate=True` (Δ) the rows a+1 … a+γ−1 also get Δ_a = dense_a − out_a added
  (Eq. 6/7); with `propagate=False` this is the paper's "recompute" ablation (Eq. 5).

Deviation from the official code: the anchor row itself is written as the dense row (not
sparse + (dense − sparse)), which is the same number mathematically and exact in floating point.
GQA: query head h reads key/value head h // (Hq / Hkv), like `repeat_kv` in the official code.
Everything is computed in float32 (float64 for float64 inputs) and returned in the input dtype.
"""

from __future__ import annotations

import math

import torch


def _expand_kv(x: torch.Tensor, hq: int) -> torch.Tensor:
    """[B, Hkv, N, D] -> [B, Hq, N, D] (query head h uses kv head h // group)."""
    group = hq // x.shape[1]
    return x if group == 1 else x.repeat_interleave(group, dim=1)


def query_sparse_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    rows: torch.Tensor,
    *,
    causal: bool = True,
    sm_scale: float | None = None,
    chunk: int = 1024,
) -> torch.Tensor:
    """Dense attention for the query rows `rows` only. q [B,Hq,N,D], k/v [B,Hkv,N,D] -> [B,Hq,M,D]."""
    b, hq, n, d = q.shape
    scale = 1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)
    acc = torch.promote_types(q.dtype, torch.float32)       # float32, or float64 for float64 inputs
    kf = _expand_kv(k, hq).to(acc)
    vf = _expand_kv(v, hq).to(acc)
    rows = rows.to(device=q.device, dtype=torch.long)
    keys = torch.arange(n, device=q.device)
    outs = []
    for start in range(0, rows.numel(), chunk):
        r = rows[start:start + chunk]
        qs = q[:, :, r].to(acc)                                  # [B,Hq,m,D]
        s = torch.matmul(qs, kf.transpose(-1, -2)) * scale        # [B,Hq,m,N]
        if causal:
            allowed = keys[None, :] <= r[:, None]                 # [m,N]
            s = s.masked_fill(~allowed, float("-inf"))
        p = torch.softmax(s, dim=-1)
        outs.append(torch.matmul(p, vf))
    if not outs:
        return q.new_empty(b, hq, 0, d)
    return torch.cat(outs, dim=2).to(q.dtype)


def delta_rows(n: int, gamma: int, num_delta_rows: int, device=None) -> torch.Tensor:
    """The dense rows of Algorithm 1: anchors 0, γ, …, s_p − γ, then the tail s_p … n − 1."""
    anchors = torch.arange(0, num_delta_rows, gamma, device=device)
    tail = torch.arange(num_delta_rows, n, device=device)
    return torch.cat([anchors, tail])


def query_sparse_delta_(
    out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    gamma: int,
    num_delta_rows: int,
    propagate: bool = True,
    causal: bool = True,
    sm_scale: float | None = None,
) -> torch.Tensor:
    """Apply the Δ correction (or the recompute ablation) to the sparse output `out`, in place."""
    b, hq, n, d = q.shape
    s_p = int(num_delta_rows)
    rows = delta_rows(n, gamma, s_p, device=q.device)
    acc = torch.promote_types(q.dtype, torch.float32)
    dense = query_sparse_attention(q, k, v, rows, causal=causal, sm_scale=sm_scale).to(acc)
    n_anchor = s_p // gamma
    dense_anchor, dense_tail = dense[:, :, :n_anchor], dense[:, :, n_anchor:]
    if propagate and n_anchor > 0:
        blocks = out[:, :, :s_p].view(b, hq, n_anchor, gamma, d)
        delta = dense_anchor - blocks[:, :, :, 0].to(acc)           # Δ_j = (ÃV)_j − (A*V)_{jγ}
        blocks.copy_((blocks.to(acc) + delta[:, :, :, None]).to(out.dtype))
    if n_anchor > 0:
        out[:, :, 0:s_p:gamma] = dense_anchor.to(out.dtype)       # anchors exactly dense
    out[:, :, s_p:] = dense_tail.to(out.dtype)                    # dense tail (official cut_n rule)
    return out

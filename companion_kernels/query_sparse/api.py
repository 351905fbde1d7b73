"""Public API of the query-sparse dense attention op (paper 09, Δ Attention, Algorithm 1).

`query_sparse_attention(q, k, v, rows, *, causal=True, sm_scale=None, impl="auto")`
    Dense attention for the selected query rows only: q [B, Hq, N, D], k/v [B, Hkv, N, D]
    (Hq a multiple of Hkv: GQA), rows a 1-D integer tensor of strictly increasing positions in
    [0, N). Row m attends keys 0 … rows[m] (causal) or all keys. Returns [B, Hq, M, D].

`query_sparse_delta_(out, q, k, v, *, gamma, num_delta_rows, propagate=True, ...)`
    The Δ step of Algorithm 1 fused into the same kernel, in place on the sparse output `out`
    [B, Hq, N, D]: anchors 0, γ, …, s_p − γ and tail s_p … N − 1 computed densely; anchors and tail
    overwritten with their dense rows; with propagate=True each anchor's Δ = dense − sparse is added
    to the next γ − 1 rows (Eq. 6/7), with propagate=False nothing is propagated (recompute, Eq. 5).

impl: "auto" (Triton on CUDA, the PyTorch reference elsewhere), "triton" (CUDA, or the CPU with
TRITON_INTERPRET=1), "reference".
"""

from __future__ import annotations

import torch

from ..dispatch import (FLOAT_DTYPES, check_bool, check_impl, check_int, check_same, check_scale, check_tensor,
                        resolve_impl)
from . import reference as _ref

_OP = "query_sparse"


def _fail(msg: str):
    raise ValueError(f"{_OP}: {msg}")


def _check_qkv(q, k, v):
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, op=_OP, dim=4, layout="[B, H, N, D]", dtypes=FLOAT_DTYPES + (torch.float64,),
                     last_dim_contiguous=True)
    check_same("q", q, {"k": k, "v": v}, op=_OP)
    if k.shape != v.shape:
        _fail(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    b, hq, n, d = q.shape
    if k.shape[0] != b or k.shape[2] != n or k.shape[3] != d:
        _fail(f"k/v shape {tuple(k.shape)} does not match q {tuple(q.shape)}: need [B, Hkv, N, D] "
              "with the same B, N (prefill: queries and keys share positions) and D")
    if k.shape[1] < 1 or hq % k.shape[1] != 0:
        _fail(f"query heads ({hq}) must be a multiple of key/value heads ({k.shape[1]})")
    if n < 1 or d < 1:
        _fail(f"empty q of shape {tuple(q.shape)}")
    if d > 256:
        _fail(f"head dim {d} > 256 is not supported")


def _resolve_impl(impl: str, device: torch.device, dtype: torch.dtype) -> str:
    check_impl(impl, op=_OP)
    why = None if dtype in FLOAT_DTYPES else "float64 runs only with impl='reference' (or 'auto')"
    return resolve_impl(impl, device, op=_OP, unsupported=why)


def _check_rows(rows, n, device, validate):
    check_tensor("rows", rows, op=_OP, dim=1, layout="(a 1-D integer tensor of query positions)",
                 dtypes=(torch.int32, torch.int64), device=device)
    if validate and rows.numel() > 0:
        flags = torch.stack([
            (rows.min() < 0) | (rows.max() >= n),
            (rows[1:] <= rows[:-1]).any(),
        ]).tolist()                                   # one device sync
        if flags[0]:
            _fail(f"rows must lie in [0, N={n}), got min {int(rows.min())}, max {int(rows.max())}")
        if flags[1]:
            _fail("rows must be strictly increasing (sorted, no repeats)")


def query_sparse_attention(q, k, v, rows, *, causal: bool = True, sm_scale: float | None = None,
                           impl: str = "auto", config: dict | None = None,
                           validate: bool = True) -> torch.Tensor:
    """Dense attention for the query rows `rows` (see the module docstring). Returns [B, Hq, M, D]."""
    _check_qkv(q, k, v)
    _check_rows(rows, q.shape[2], q.device, validate)
    check_bool("causal", causal, op=_OP)
    check_scale("sm_scale", sm_scale, op=_OP)
    which = _resolve_impl(impl, q.device, q.dtype)
    if which == "reference":
        return _ref.query_sparse_attention(q, k, v, rows, causal=causal, sm_scale=sm_scale)
    from . import triton as _tri
    return _tri.query_sparse_attention(q, k, v, rows.to(torch.int32), causal=causal,
                                       sm_scale=sm_scale, config=config)


def query_sparse_delta_(out, q, k, v, *, gamma: int, num_delta_rows: int, propagate: bool = True,
                        causal: bool = True, sm_scale: float | None = None, impl: str = "auto",
                        config: dict | None = None) -> torch.Tensor:
    """In-place Δ correction of the sparse output `out` [B, Hq, N, D] (see the module docstring)."""
    _check_qkv(q, k, v)
    check_tensor("out", out, op=_OP, last_dim_contiguous=True)
    if out.shape != q.shape:
        _fail(f"out must be the sparse output with q's shape {tuple(q.shape)}, got {tuple(out.shape)}")
    check_same("q", q, {"out": out}, op=_OP)
    n = q.shape[2]
    check_int("gamma", gamma, op=_OP, low=1, note=" (the anchor stride γ)")
    check_int("num_delta_rows", num_delta_rows, op=_OP, low=0, high=n, note=f" (N={n})")
    if num_delta_rows % gamma != 0:
        _fail(f"num_delta_rows={num_delta_rows} must be a multiple of gamma={gamma}")
    check_bool("propagate", propagate, op=_OP)
    check_bool("causal", causal, op=_OP)
    check_scale("sm_scale", sm_scale, op=_OP)
    which = _resolve_impl(impl, q.device, q.dtype)
    if which == "reference":
        return _ref.query_sparse_delta_(out, q, k, v, gamma=gamma, num_delta_rows=num_delta_rows,
                                        propagate=propagate, causal=causal, sm_scale=sm_scale)
    from . import triton as _tri
    return _tri.query_sparse_delta_(out, q, k, v, gamma=gamma, num_delta_rows=num_delta_rows,
                                    propagate=propagate, causal=causal, sm_scale=sm_scale,
                                    config=config)


def delta_rows(n: int, gamma: int, num_delta_rows: int, device=None) -> torch.Tensor:
    """Positions of the dense rows of Algorithm 1: anchors 0, γ, …, s_p − γ, then s_p … n − 1."""
    return _ref.delta_rows(n, gamma, num_delta_rows, device=device)

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

import os

import torch

from . import reference as _ref

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_IMPLS = ("auto", "triton", "reference")


def _fail(msg: str):
    raise ValueError(f"query_sparse: {msg}")


def _check_qkv(q, k, v):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            _fail(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            _fail(f"{name} must be 4-D [B, H, N, D], got shape {tuple(t.shape)}")
        if t.dtype not in _DTYPES and t.dtype != torch.float64:
            _fail(f"{name}.dtype must be one of float16, bfloat16, float32 (float64 with impl='reference'), "
                  f"got {t.dtype}")
    if not (q.dtype == k.dtype == v.dtype):
        _fail(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        _fail(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    if k.shape != v.shape:
        _fail(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    b, hq, n, d = q.shape
    if k.shape[0] != b or k.shape[2] != n or k.shape[3] != d:
        _fail(f"k/v shape {tuple(k.shape)} does not match q {tuple(q.shape)}: need [B, Hkv, N, D] "
              "with the same B, N (prefill: queries and keys share positions) and D")
    if hq % k.shape[1] != 0:
        _fail(f"query heads ({hq}) must be a multiple of key/value heads ({k.shape[1]})")
    if n < 1 or d < 1:
        _fail(f"empty q of shape {tuple(q.shape)}")
    if d > 256:
        _fail(f"head dim {d} > 256 is not supported")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.stride(-1) != 1:
            _fail(f"{name} must be contiguous in its last (head-dim) axis; call .contiguous()")


def _resolve_impl(impl: str, device: torch.device, dtype: torch.dtype) -> str:
    if impl not in _IMPLS:
        _fail(f"impl must be one of {_IMPLS}, got {impl!r}")
    if dtype == torch.float64:
        if impl == "triton":
            _fail("float64 runs only with impl='reference' (or 'auto')")
        return "reference"
    if impl == "auto":
        return "triton" if device.type == "cuda" else "reference"
    if impl == "triton" and device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        _fail("impl='triton' needs a CUDA tensor, or TRITON_INTERPRET=1 to run the Triton "
              "interpreter on the CPU; use impl='reference' or 'auto' instead")
    return impl


def _check_rows(rows, n, device, validate):
    if not isinstance(rows, torch.Tensor) or rows.dim() != 1:
        _fail("rows must be a 1-D integer tensor of query positions")
    if rows.dtype not in (torch.int32, torch.int64):
        _fail(f"rows must be int32 or int64, got {rows.dtype}")
    if rows.device != device:
        _fail(f"rows is on {rows.device} but q is on {device}")
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
    if not isinstance(causal, bool):
        _fail(f"causal must be a bool, got {causal!r}")
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
    if not isinstance(out, torch.Tensor) or out.shape != q.shape:
        _fail(f"out must be the sparse output with q's shape {tuple(q.shape)}, got "
              f"{tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__}")
    if out.dtype != q.dtype or out.device != q.device:
        _fail(f"out must match q's dtype/device ({q.dtype}, {q.device}), got ({out.dtype}, {out.device})")
    if out.stride(-1) != 1:
        _fail("out must be contiguous in its last (head-dim) axis")
    n = q.shape[2]
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
        _fail(f"gamma must be an int >= 1, got {gamma!r}")
    if isinstance(num_delta_rows, bool) or not isinstance(num_delta_rows, int) \
            or not 0 <= num_delta_rows <= n or num_delta_rows % gamma != 0:
        _fail(f"num_delta_rows must be an int in [0, N={n}] and a multiple of gamma={gamma}, "
              f"got {num_delta_rows!r}")
    if not isinstance(propagate, bool) or not isinstance(causal, bool):
        _fail("propagate and causal must be bools")
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

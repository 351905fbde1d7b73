"""Validated entry point of ScaleKV's fused token selection (paper 03, Sec. 3.4).

``scalekv_select(q_window, keys, values, window_idx, capacity)`` keeps, per (batch, head), the
``capacity`` cached keys/values that ScaleKV retains: the observation-window keys plus the
``capacity - |W|`` keys with the largest max-pooled window scores, in position order. See
``reference.py`` for the exact definition (and its one deviation from the official code: ties are
broken by position) and ``triton.py`` for the kernels.

``impl="auto"`` runs the Triton kernels on CUDA tensors (up to ``MAX_TRITON_KEYS`` keys) and the
PyTorch reference elsewhere; ``"triton"`` forces the kernels (on the CPU only under
``TRITON_INTERPRET=1``); ``"reference"`` forces the oracle.
"""

from __future__ import annotations

import torch

from ..dispatch import FLOAT_DTYPES, IMPLS, check_choice, check_impl, check_tensor, resolve_impl
from .reference import scalekv_select_reference

__all__ = ["scalekv_select", "IMPLS", "SCORES"]

SCORES = ("logits", "softmax")
_OP = "scalekv_select"
_REFERENCE_DTYPES = FLOAT_DTYPES + (torch.float64,)


def _validate(q_window, keys, values, window_idx, capacity, kernel_size, score, impl):
    for name, t in (("q_window", q_window), ("keys", keys), ("values", values), ("window_idx", window_idx)):
        check_tensor(name, t, op=_OP)
    check_impl(impl, op=_OP)
    check_choice("score", score, SCORES, op=_OP, note=" ('logits' is the official code, 'softmax' the paper's text)")
    for name, t in (("q_window", q_window), ("keys", keys), ("values", values)):
        check_tensor(name, t, op=_OP, dim=4, layout="[batch, heads, tokens, head_dim]", dtypes=_REFERENCE_DTYPES)
    b, h, n, d = keys.shape
    if values.shape[:3] != (b, h, n):
        raise ValueError(f"values shape {tuple(values.shape)} must match keys {tuple(keys.shape)} in batch, heads and tokens")
    if q_window.shape[0] != b or q_window.shape[1] != h or q_window.shape[3] != d:
        raise ValueError(f"q_window shape {tuple(q_window.shape)} must be [{b}, {h}, W, {d}] to match keys {tuple(keys.shape)}")
    if keys.dtype != values.dtype or q_window.dtype != keys.dtype:
        raise TypeError(f"q_window, keys and values must share a dtype, got {q_window.dtype}, {keys.dtype}, {values.dtype}")
    if window_idx.dim() != 1 or window_idx.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"window_idx must be a 1-D int32/int64 tensor of key positions, got shape {tuple(window_idx.shape)} dtype {window_idx.dtype}")
    w = window_idx.numel()
    if w != q_window.shape[2] or w < 1:
        raise ValueError(f"window_idx has {w} positions but q_window has {q_window.shape[2]} window queries (need the same, >= 1)")
    devices = {t.device for t in (q_window, keys, values, window_idx)}
    if len(devices) != 1:
        raise ValueError(f"all inputs must be on one device, got {sorted(str(x) for x in devices)}")
    wcpu = window_idx.detach().cpu()
    if int(wcpu.min()) < 0 or int(wcpu.max()) >= n:
        raise ValueError(f"window_idx must lie in [0, {n}) (the key positions), got min {int(wcpu.min())} max {int(wcpu.max())}")
    if torch.unique(wcpu).numel() != w:
        raise ValueError("window_idx must hold distinct positions")
    if isinstance(capacity, bool) or not isinstance(capacity, int) or not (w <= capacity <= n):
        raise ValueError(f"capacity={capacity!r} is not allowed: expected an integer with |window| = {w} <= capacity <= {n} keys")
    if isinstance(kernel_size, bool) or not isinstance(kernel_size, int) or kernel_size < 1 or kernel_size % 2 == 0:
        raise ValueError(f"kernel_size={kernel_size!r} is not allowed: expected a positive odd integer (the code uses 5)")


def _use_triton(keys: torch.Tensor, impl: str) -> bool:
    from .triton import MAX_TRITON_KEYS

    if impl == "triton" and keys.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{_OP}: impl='triton' supports float16, bfloat16 and float32; float64 runs with impl='reference'")
    why = None
    if keys.dtype not in FLOAT_DTYPES:
        why = f"the Triton kernels take float16, bfloat16 and float32, got {keys.dtype}"
    elif keys.shape[2] > MAX_TRITON_KEYS:
        why = (f"impl='triton' supports up to {MAX_TRITON_KEYS} keys per head (a score row lives in registers), "
               f"got {keys.shape[2]}")
    return resolve_impl(impl, keys.device, op=_OP, unsupported=why) == "triton"


def scalekv_select(
    q_window: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    window_idx: torch.Tensor,
    capacity: int,
    *,
    kernel_size: int = 5,
    score: str = "logits",
    impl: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ScaleKV's retained ``(keys [B,H,C,D], values [B,H,C,Dv], index [B,H,C])`` for ``capacity`` C.

    ``q_window [B,H,W,D]`` are the window queries, ``window_idx [W]`` their (distinct) positions
    among the ``N`` keys, shared by all heads. The triton path needs contiguous inputs.
    """
    _validate(q_window, keys, values, window_idx, capacity, kernel_size, score, impl)
    if _use_triton(keys, impl):
        for name, t in (("q_window", q_window), ("keys", keys), ("values", values)):
            if not t.is_contiguous():
                raise ValueError(f"{_OP}: {name} must be contiguous for the Triton kernel (call .contiguous() first)")
        from .triton import scalekv_select_triton

        return scalekv_select_triton(q_window, keys, values, window_idx, capacity, kernel_size=kernel_size, score=score)
    return scalekv_select_reference(q_window, keys, values, window_idx, capacity, kernel_size=kernel_size, score=score)

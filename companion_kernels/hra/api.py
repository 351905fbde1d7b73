"""Validated entry point of the fused HRA op (HyperET, Peng et al., NeurIPS 2025, Eq. 10).

``hra_fused(w0, coef, kind=..., c=0.01, impl="auto")`` returns ``log0(W_s ⊗_c exp0(W0))`` row-wise for a
frozen W0 ``[R, n]`` or a stack ``[G, R, n]`` and structured W_s given as coefficients ``[K, n]`` /
``[G, K, n]`` (format: ``reference.py``). ``impl="auto"`` runs the Triton kernel on CUDA tensors it supports
and the PyTorch reference elsewhere; ``impl="triton"`` forces the kernel (on the CPU only under
``TRITON_INTERPRET=1``). Dispatch and guards: ``companion_kernels.dispatch``. Gradients flow to ``coef``
only: W0 is a constant, as in the official code (``fix_filt = ... .data``).
"""

from __future__ import annotations

import math

import torch

from ..dispatch import IMPLS, check_choice, check_impl, check_same, check_tensor, resolve_impl
from . import reference

KINDS = ("diagonal", "block", "banded")
TRITON_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_WIDTH = 8192
_OP = "hra"


def _validate(w0, coef, kind, c):
    check_choice("kind", kind, KINDS, op=_OP)
    if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) or c <= 0:
        raise ValueError(f"{_OP}: c={c!r} is not allowed: expected a finite number > 0 (the ball has curvature -c)")
    check_tensor("w0", w0, op=_OP, floating=True)
    check_tensor("coef", coef, op=_OP, floating=True)
    if w0.dim() not in (2, 3):
        raise ValueError(f"{_OP}: w0 must be [R, n] or [G, R, n], got shape {tuple(w0.shape)}")
    if coef.dim() != w0.dim():
        raise ValueError(f"{_OP}: coef must be [K, n] for w0 [R, n] or [G, K, n] for w0 [G, R, n]; got coef {tuple(coef.shape)} with w0 {tuple(w0.shape)}")
    if w0.dim() == 3 and coef.shape[0] != w0.shape[0]:
        raise ValueError(f"{_OP}: coef has {coef.shape[0]} matrices but w0 has {w0.shape[0]} (leading dimension G must match)")
    n, k = w0.shape[-1], coef.shape[-2]
    if coef.shape[-1] != n:
        raise ValueError(f"{_OP}: coef's last dimension {coef.shape[-1]} must equal w0's width n={n}")
    if kind == "diagonal" and k != 1:
        raise ValueError(f"{_OP}: kind='diagonal' needs K=1 coefficient row, got K={k}")
    if kind == "block" and (k < 1 or n % k):
        raise ValueError(f"{_OP}: kind='block' needs the block side K={k} to divide the width n={n}")
    if kind == "banded" and (k % 2 == 0 or (k - 1) // 2 >= n):
        raise ValueError(f"{_OP}: kind='banded' needs K = 2d + 1 rows (odd) with bandwidth d < n={n}; got K={k}")
    check_same("w0", w0, {"coef": coef}, op=_OP, dtype=False)


def _unsupported(w0: torch.Tensor, coef: torch.Tensor) -> str | None:
    """Why the Triton kernel cannot take these inputs (None when it can)."""
    if w0.dtype not in TRITON_DTYPES:
        return f"the Triton kernel takes w0 in float16, bfloat16 or float32, got {w0.dtype}"
    if not w0.is_contiguous():
        return "w0 must be contiguous for the Triton kernel; call w0.contiguous() first"
    if w0.shape[-1] > MAX_WIDTH or coef.shape[-2] > 64:
        return (f"the Triton kernel handles widths n <= {MAX_WIDTH} and K <= 64 coefficient rows; "
                f"got n={w0.shape[-1]}, K={coef.shape[-2]}")
    return None


class _HRAFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, w0, coef, block_mode, sqrt_c):
        from .triton import hra_forward

        coef_c = coef.detach().to(torch.float32).contiguous()
        ctx.save_for_backward(w0, coef_c)
        ctx.block_mode, ctx.sqrt_c, ctx.coef_dtype = block_mode, sqrt_c, coef.dtype
        return hra_forward(w0, coef_c, block_mode, sqrt_c)

    @staticmethod
    def backward(ctx, grad_out):
        from .triton import hra_backward

        w0, coef_c = ctx.saved_tensors
        grad_coef = None
        if ctx.needs_input_grad[1]:
            grad_coef = hra_backward(w0, coef_c, grad_out.contiguous(), ctx.block_mode, ctx.sqrt_c).to(ctx.coef_dtype)
        return None, grad_coef, None, None


def hra_fused(w0: torch.Tensor, coef: torch.Tensor, *, kind: str, c: float = 0.01, impl: str = "auto") -> torch.Tensor:
    """``log0(W_s ⊗_c exp0(W0))`` row-wise; see the module docstring for shapes and formats."""
    check_impl(impl, op=_OP)
    _validate(w0, coef, kind, c)
    if impl == "triton":  # the kernel's own input rules, named rather than fallen back from
        check_tensor("w0", w0, op=_OP, dtypes=TRITON_DTYPES)
        check_tensor("w0", w0, op=_OP, contiguous=True)
    impl = resolve_impl(impl, w0.device, op=_OP, unsupported=_unsupported(w0, coef))
    squeeze = w0.dim() == 2
    if squeeze:
        w0, coef = w0.unsqueeze(0), coef.unsqueeze(0)
    if impl == "reference":
        out = reference.hra_reference(w0, coef, kind, float(c))
    else:
        out = _HRAFunction.apply(w0.detach(), coef, kind == "block", float(c) ** 0.5)
    return out.squeeze(0) if squeeze else out

"""Validated entry point of the fused rotate-quantize-Whip op (DartQuant, Shao et al., NeurIPS 2025).

``rotate_quant_whip(x, r, bits=4, clip=0.9, impl="auto", variant="split")`` returns ``(Q(x @ r), whip)``: the
per-token asymmetric b-bit fake quantization (clip ratio ``clip``) of the rotated activations in x's dtype,
shape of ``x``, and the per-token Whip sums ``Σ_channels exp(−|x @ r|)`` (Eq. 4; the loss is their mean) in
fp32, shape ``x.shape[:-1]``. ``x`` is ``[..., n]``; ``r`` ``[n, n]`` in x's dtype. Definitions:
``reference.py``; the kernels: ``triton.py``, where ``variant`` picks the schedule (:data:`VARIANTS`):
``"fused"``, one program per row block sweeping the width twice, ``"split"``, a tiled GEMM writing per-tile
row partials, then a row-wise quantization pass, or ``"matmul"``, the GEMM by ``torch.mm`` (cuBLAS on a GPU: the
same Y as eager PyTorch), then a Triton row pass that finds each token's range and quantizes it (the reference
ignores ``variant``). Dispatch and guards:
``companion_kernels.dispatch`` (``impl="auto"`` runs the kernel on CUDA and the reference elsewhere;
``impl="triton"`` on the CPU only under ``TRITON_INTERPRET=1``).

Bad input raises: a ``variant`` not in :data:`VARIANTS`, ``bits`` outside 2..8, ``clip`` outside (0, 1], a
non-square or non-2-D ``r``, a width mismatch, tensors on two devices or of two dtypes, and
(``check_finite=True``, the default; it costs one pass and a host sync) NaN or infinite entries in ``x`` or
``r``. Forward only: no autograd through the kernel.
"""

from __future__ import annotations

import math

import torch

from ..dispatch import IMPLS, check_choice, check_impl, check_int, check_same, check_tensor, interpreting, resolve_impl
from . import reference

TRITON_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
VARIANTS = ("fused", "split", "matmul")  # the kernel's schedules (triton.py)
_OP = "rotate_quant_whip"

__all__ = ["IMPLS", "TRITON_DTYPES", "VARIANTS", "rotate_quant_whip"]


def _validate(x, r, bits, clip, variant, check_finite):
    check_choice("variant", variant, VARIANTS, op=_OP, note=" (the Triton kernel's schedule)")
    check_int("bits", bits, op=_OP, low=2, high=8, note=" (the activation bit width)")
    if isinstance(clip, bool) or not isinstance(clip, (int, float)) or not math.isfinite(clip) or not 0 < clip <= 1:
        raise ValueError(f"{_OP}: clip={clip!r} is not allowed: expected a number in (0, 1] (the clip ratio, 0.9 in the paper)")
    check_tensor("x", x, op=_OP, floating=True)
    check_tensor("r", r, op=_OP, floating=True, dim=2, layout="[n, n]")
    if x.dim() < 1 or x.shape[-1] < 1:
        raise ValueError(f"{_OP}: x must be [..., n] with n >= 1, got shape {tuple(x.shape)}")
    if r.shape[0] != r.shape[1]:
        raise ValueError(f"{_OP}: r must be square [n, n] (a rotation), got shape {tuple(r.shape)}")
    if r.shape[0] != x.shape[-1]:
        raise ValueError(f"{_OP}: width mismatch: x has {x.shape[-1]} channels but r is {tuple(r.shape)}; r must be [n, n] with n = x.shape[-1]")
    check_same("x", x, {"r": r}, op=_OP)
    if check_finite:
        for name, t in (("x", x), ("r", r)):
            if not bool(torch.isfinite(t).all()):
                bad = int((~torch.isfinite(t)).sum())
                raise ValueError(f"{_OP}: {name} has {bad} NaN or infinite entries; the quantizer's range would be undefined")


def _unsupported(x: torch.Tensor) -> str | None:
    if x.dtype not in TRITON_DTYPES:
        return f"the Triton kernel takes float32, float16 or bfloat16, got {x.dtype}"
    return None


def rotate_quant_whip(x: torch.Tensor, r: torch.Tensor, *, bits: int = 4, clip: float = 0.9, impl: str = "auto",
                      variant: str = "split", check_finite: bool = True):
    """``(Q(x @ r), whip)``; see the module docstring."""
    check_impl(impl, op=_OP)
    _validate(x, r, bits, clip, variant, check_finite)
    if impl == "triton":
        check_tensor("x", x, op=_OP, dtypes=TRITON_DTYPES)
    impl = resolve_impl(impl, x.device, op=_OP, unsupported=_unsupported(x))
    lead, n = x.shape[:-1], x.shape[-1]
    x2 = x.reshape(-1, n)
    if impl == "reference":
        yq, whip = reference.rotate_quant_whip_reference(x2, r, bits, float(clip))
    else:
        from .triton import rotate_quant_whip_triton

        yq, whip = rotate_quant_whip_triton(x2.contiguous(), r.contiguous(), bits, float(clip),
                                            interpret=interpreting() and x.device.type != "cuda", variant=variant)
    return yq.reshape(x.shape), whip.reshape(lead)

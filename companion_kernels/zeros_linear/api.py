"""Entry point of the ZeroS chunked linear-attention op: input validation and dispatch.

Paper 04 (ZeroS, NeurIPS 2025). Implementation choice and guards follow ``companion_kernels/dispatch.py``:
``impl="auto"`` runs the Triton kernels on CUDA tensors they take and the O(T^2) reference
otherwise; ``"triton"`` forces the kernels (on a CPU only under ``TRITON_INTERPRET=1``);
``"reference"`` forces the oracle (float64 allowed). Semantics: ``reference.py``; kernels:
``triton.py``. Any T >= 1 works: the last chunk may be partial.
"""

from __future__ import annotations

import torch

from ..dispatch import FLOAT_DTYPES, check_bool, check_choice, check_impl, check_same, check_tensor, resolve_impl
from .reference import zeros_linear_reference

__all__ = ["zeros_linear"]

_OP = "zeros_linear"
_CHUNKS = (16, 32, 64, 128)
_MAX_DIM = 256


def _check(q, k, v, s, sigma1, sigmah, sigma0, causal, impl, chunk_size):
    check_impl(impl, op=_OP)
    dtypes = FLOAT_DTYPES + ((torch.float64,) if impl == "reference" else ())
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, op=_OP, dim=4, layout="[B, T, H, d]", dtypes=dtypes)
    check_same("q", q, {"k": k, "v": v}, op=_OP)
    B, T, H, d = q.shape
    if T < 1:
        raise ValueError(f"{_OP}: sequence length T must be >= 1, got T=0")
    if tuple(k.shape) != tuple(q.shape):
        raise ValueError(f"{_OP}: k shape {tuple(k.shape)} must equal q shape {tuple(q.shape)} ([B, T, H, d])")
    if tuple(v.shape[:3]) != (B, T, H):
        raise ValueError(f"{_OP}: v shape {tuple(v.shape)} must be [B={B}, T={T}, H={H}, dv]")
    if d < 1 or v.shape[3] < 1:
        raise ValueError(f"{_OP}: head dims must be >= 1, got d={d}, dv={v.shape[3]}")
    gates = [("s", s), ("sigma1", sigma1), ("sigmah", sigmah)] + ([("sigma0", sigma0)] if sigma0 is not None else [])
    for name, t in gates:
        check_tensor(name, t, op=_OP, floating=True)
        if tuple(t.shape) != (B, T, H):
            raise ValueError(f"{_OP}: {name} must have shape [B, T, H] = {(B, T, H)}, got {tuple(t.shape)}")
    check_same("q", q, dict(gates), op=_OP, dtype=False)
    check_bool("causal", causal, op=_OP)
    check_choice("chunk_size", chunk_size, _CHUNKS, op=_OP, note=" (tokens per chunk of the Triton kernels)")


def _unsupported(q, k, v):
    """Why the Triton kernels cannot take these inputs (None when they can)."""
    d, dv = q.shape[-1], v.shape[-1]
    if q.dtype == torch.float64:
        return "float64 inputs are not supported by the Triton kernels; allowed: float32, float16, bfloat16"
    if d > _MAX_DIM or dv > _MAX_DIM:
        return f"the Triton kernels support head dims up to {_MAX_DIM}, got d={d}, dv={dv}"
    return None


def zeros_linear(q, k, v, s, sigma1, sigmah, sigma0=None, *, causal: bool = True, impl: str = "auto",
                 chunk_size: int = 64) -> torch.Tensor:
    """ZeroS attention ``o_t = sum_{i<=t} r_{t,i} (q_t . k_i) v_i`` -> ``[B, T, H, dv]`` in ``v.dtype``.

    Args:
        q, k: ``[B, T, H, d]`` unit query/key directions (RoPE applied, then normalised; not checked).
        v: ``[B, T, H, dv]`` values.
        s: ``[B, T, H]`` per-step logits (the key step's radial logit ``s_i``).
        sigma1, sigmah: ``[B, T, H]`` gate values in (0, 1) (after the sigmoid) for the first-order
            and higher-order terms; ``sigma0`` (optional) the first-layer zero-order gate value.
        causal: causal (default) or bidirectional.
        impl: "auto" | "triton" | "reference".
        chunk_size: tokens per chunk of the Triton kernels (16, 32, 64 or 128); T need not be a multiple.

    Differentiable in every tensor argument on both paths.
    """
    _check(q, k, v, s, sigma1, sigmah, sigma0, causal, impl, chunk_size)
    impl = resolve_impl(impl, q.device, op=_OP, unsupported=_unsupported(q, k, v))
    if impl == "reference":
        return zeros_linear_reference(q, k, v, s, sigma1, sigmah, sigma0, causal=causal)
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, op=_OP, contiguous=True)
    from .triton import zeros_linear_triton

    return zeros_linear_triton(q, k, v, s, sigma1, sigmah, sigma0, causal=causal, chunk_size=chunk_size)

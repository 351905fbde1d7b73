"""Entry point of the ZeroS chunked linear-attention op: input validation and dispatch.

Paper 04 (ZeroS, NeurIPS 2025). ``impl="auto"`` runs the Triton kernels when the tensors are on a
CUDA device and the O(T^2) reference otherwise; ``"triton"`` forces the kernels (on a CPU only
under ``TRITON_INTERPRET=1``); ``"reference"`` forces the oracle. Semantics: ``reference.py``;
kernels: ``triton.py``.
"""

from __future__ import annotations

import os

import torch

from .reference import zeros_linear_reference

__all__ = ["zeros_linear"]

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_IMPLS = ("auto", "triton", "reference")
_MAX_DIM = 256


def _resolve_impl(impl: str, device: torch.device) -> str:
    if impl == "auto":
        return "triton" if device.type == "cuda" else "reference"
    if impl == "triton" and device.type != "cuda" and os.environ.get("TRITON_INTERPRET", "0") != "1":
        raise ValueError("impl='triton' needs CUDA tensors (or TRITON_INTERPRET=1 for the CPU interpreter); use impl='auto'")
    return impl


def _check(q, k, v, s, sigma1, sigmah, sigma0, causal, impl, chunk_size):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D [B, T, H, d], got shape {tuple(t.shape)}")
        if t.dtype not in _DTYPES and not (t.dtype == torch.float64 and impl == "reference"):
            raise TypeError(f"{name} has dtype {t.dtype}; allowed: float32, float16, bfloat16 (float64 with impl='reference')")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    B, T, H, d = q.shape
    if T < 1:
        raise ValueError("sequence length T must be >= 1, got T=0")
    if tuple(k.shape) != tuple(q.shape):
        raise ValueError(f"k shape {tuple(k.shape)} must equal q shape {tuple(q.shape)} ([B, T, H, d])")
    if tuple(v.shape[:3]) != (B, T, H):
        raise ValueError(f"v shape {tuple(v.shape)} must be [B={B}, T={T}, H={H}, dv]")
    if d < 1 or v.shape[3] < 1:
        raise ValueError(f"head dims must be >= 1, got d={d}, dv={v.shape[3]}")
    gates = [("s", s), ("sigma1", sigma1), ("sigmah", sigmah)] + ([("sigma0", sigma0)] if sigma0 is not None else [])
    for name, t in gates:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if tuple(t.shape) != (B, T, H):
            raise ValueError(f"{name} must have shape [B, T, H] = {(B, T, H)}, got {tuple(t.shape)}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got {t.dtype}")
    for name, t in [("k", k), ("v", v)] + gates:
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; put all tensors on one device")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {causal!r}")
    if impl not in _IMPLS:
        raise ValueError(f"impl={impl!r} is not allowed; choose one of {_IMPLS}")
    if chunk_size not in (16, 32, 64, 128):
        raise ValueError(f"chunk_size={chunk_size!r} is not supported; allowed: 16, 32, 64, 128")


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
        chunk_size: tokens per chunk of the Triton kernels (16, 32, 64 or 128).

    Differentiable in every tensor argument on both paths.
    """
    _check(q, k, v, s, sigma1, sigmah, sigma0, causal, impl, chunk_size)
    impl = _resolve_impl(impl, q.device)
    if impl == "reference":
        return zeros_linear_reference(q, k, v, s, sigma1, sigmah, sigma0, causal=causal)
    d, dv = q.shape[-1], v.shape[-1]
    if d > _MAX_DIM or dv > _MAX_DIM:
        raise ValueError(f"the Triton kernels support head dims up to {_MAX_DIM}, got d={d}, dv={dv}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous for impl='triton' (strides {t.stride()}); call .contiguous()")
    from .triton import zeros_linear_triton

    return zeros_linear_triton(q, k, v, s, sigma1, sigmah, sigma0, causal=causal, chunk_size=chunk_size)

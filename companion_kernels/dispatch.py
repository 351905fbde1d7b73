"""Implementation choice and input guards shared by every op's ``api.py``.

One rule for every op:

* ``impl="reference"`` runs the plain-PyTorch oracle (any device, float64 allowed);
* ``impl="triton"`` runs the Triton kernel: on CUDA tensors, or on CPU tensors only when the
  Triton interpreter is on (``TRITON_INTERPRET=1``, see :func:`interpreting`); the op names the
  inputs the kernel cannot take;
* ``impl="auto"`` runs the kernel on CUDA tensors the kernel supports and the reference otherwise.
  It never picks the interpreter: the interpreter is a test tool, chosen with ``impl="triton"``.

Exception types are the same everywhere: ``TypeError`` for a wrong type (not a tensor, a dtype
that is not allowed, two tensors of different dtypes, a non-bool flag) and ``ValueError`` for a
wrong value (shape, device, layout, range, an ``impl`` the inputs cannot run on). Every message
names the argument, the value and what is allowed, prefixed with the op's name.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence

import torch

__all__ = [
    "IMPLS",
    "FLOAT_DTYPES",
    "interpreting",
    "resolve_impl",
    "check_impl",
    "check_tensor",
    "check_same",
    "check_bool",
    "check_choice",
    "check_int",
    "check_scale",
]

IMPLS = ("auto", "triton", "reference")
#: dtypes the Triton kernels take (bf16 is wrong under the interpreter, right on a GPU).
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

_TRUE = ("1", "true", "yes", "on", "y")


def interpreting() -> bool:
    """True when the Triton interpreter is on (``TRITON_INTERPRET`` set to 1/true/yes/on, as Triton reads it).

    Read at call time so a test can switch it with ``monkeypatch.setenv``; the kernels themselves must
    be imported after it is set (``triton.jit`` reads it at decoration).
    """
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in _TRUE


def _name(op: str) -> str:
    return f"{op}: " if op else ""


def check_impl(impl, *, op: str = "") -> str:
    """``impl`` must be one of :data:`IMPLS` (``ValueError`` otherwise)."""
    if not isinstance(impl, str) or impl not in IMPLS:
        raise ValueError(f"{_name(op)}impl={impl!r} is not allowed; choose one of {IMPLS}")
    return impl


def resolve_impl(impl: str, device: torch.device, *, op: str = "", unsupported: str | None = None) -> str:
    """The implementation to run: ``"triton"`` or ``"reference"`` (module docstring for the rule).

    ``unsupported``: ``None`` when the kernel takes these inputs, otherwise the reason it does not
    (e.g. ``"head dim D=24 is not supported by the Triton kernel; allowed: (32, 64, 128)"``):
    ``auto`` then falls back to the reference and ``triton`` raises ``ValueError`` with the reason.
    """
    check_impl(impl, op=op)
    device = torch.device(device)
    if impl == "reference":
        return "reference"
    if impl == "auto":
        return "triton" if device.type == "cuda" and unsupported is None else "reference"
    if device.type != "cuda" and not interpreting():
        raise ValueError(
            f"{_name(op)}impl='triton' needs CUDA tensors (got {device}) or TRITON_INTERPRET=1 for the CPU "
            "interpreter; use impl='auto' or impl='reference'"
        )
    if unsupported is not None:
        raise ValueError(f"{_name(op)}{unsupported} (use impl='reference' or impl='auto')")
    return "triton"


def check_tensor(
    name: str,
    t,
    *,
    op: str = "",
    dim: int | Sequence[int] | None = None,
    layout: str = "",
    dtypes: Iterable[torch.dtype] | None = None,
    floating: bool = False,
    device: torch.device | None = None,
    last_dim_contiguous: bool = False,
    contiguous: bool = False,
) -> torch.Tensor:
    """Guard one tensor argument; returns it.

    ``dim``: allowed number(s) of dimensions (``layout`` names them, e.g. ``"[B, H, N, D]"``);
    ``dtypes``: allowed dtypes (TypeError); ``floating``: any floating dtype (TypeError);
    ``device``: the device it must be on; ``last_dim_contiguous``: stride 1 in the last axis;
    ``contiguous``: fully contiguous.
    """
    p = _name(op)
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{p}{name} must be a torch.Tensor, got {type(t).__name__}")
    if dim is not None:
        dims = (dim,) if isinstance(dim, int) else tuple(dim)
        if t.dim() not in dims:
            want = " or ".join(f"{d}-D" for d in dims)
            raise ValueError(f"{p}{name} must be {want}{' ' + layout if layout else ''}, got shape {tuple(t.shape)}")
    if dtypes is not None:
        allowed = tuple(dtypes)
        if t.dtype not in allowed:
            names = ", ".join(str(d).replace("torch.", "") for d in allowed)
            raise TypeError(f"{p}{name} has dtype {t.dtype}; allowed: {names}")
    if floating and not torch.is_floating_point(t):
        raise TypeError(f"{p}{name} must be a floating-point tensor, got {t.dtype}")
    if device is not None and t.device != torch.device(device):
        raise ValueError(f"{p}{name} is on {t.device} but must be on {device}; put all tensors on one device")
    if last_dim_contiguous and t.dim() > 0 and t.stride(-1) != 1:
        raise ValueError(
            f"{p}{name} must have a contiguous last dim (stride 1), got strides {t.stride()}; call .contiguous()"
        )
    if contiguous and not t.is_contiguous():
        raise ValueError(f"{p}{name} must be contiguous (strides {t.stride()}); call .contiguous()")
    return t


def check_same(ref_name: str, ref: torch.Tensor, others: dict, *, op: str = "", dtype: bool = True,
               device: bool = True) -> None:
    """Every tensor in ``others`` (name → tensor) shares ``ref``'s dtype (TypeError) and device (ValueError)."""
    p = _name(op)
    for name, t in others.items():
        if dtype and t.dtype != ref.dtype:
            raise TypeError(f"{p}{name}.dtype {t.dtype} differs from {ref_name}.dtype {ref.dtype}; use one dtype")
        if device and t.device != ref.device:
            raise ValueError(f"{p}{name} is on {t.device} but {ref_name} is on {ref.device}; put all tensors on one device")


def check_bool(name: str, value, *, op: str = "") -> bool:
    """A flag must be a real ``bool`` (TypeError otherwise: 0/1 or None are refused)."""
    if not isinstance(value, bool):
        raise TypeError(f"{_name(op)}{name} must be a bool, got {value!r}")
    return value


def check_choice(name: str, value, allowed: Sequence, *, op: str = "", note: str = ""):
    """``value`` must be one of ``allowed`` (ValueError)."""
    if value not in tuple(allowed):
        raise ValueError(f"{_name(op)}{name}={value!r} is not allowed; choose one of {tuple(allowed)}{note}")
    return value


def check_int(name: str, value, *, op: str = "", low: int | None = None, high: int | None = None,
              note: str = "") -> int:
    """An integer (not a bool) in ``[low, high]`` (ValueError, with the allowed range)."""
    ok = isinstance(value, int) and not isinstance(value, bool)
    ok = ok and (low is None or value >= low) and (high is None or value <= high)
    if not ok:
        lo = "-inf" if low is None else low
        hi = "inf" if high is None else high
        raise ValueError(f"{_name(op)}{name}={value!r} is not allowed: expected an integer in [{lo}, {hi}]{note}")
    return value


def check_scale(name: str, value, *, op: str = "", allow_none: bool = True) -> float | None:
    """A positive finite number (or None when ``allow_none``), e.g. the softmax scale (ValueError)."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        extra = " or None" if allow_none else ""
        raise ValueError(f"{_name(op)}{name}={value!r} is not allowed: expected a positive finite number{extra}")
    return value

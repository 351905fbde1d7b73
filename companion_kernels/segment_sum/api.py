"""Validated entry point of the segment sum: gather–message–scatter over an edge list.

``segment_sum(values, rows, size, *, gather=None, plan=None, impl="auto")`` returns ``out [size, F]`` with
``out[r] = Σ_{e : rows[e] = r} values[gather[e] if gather is not None else e]`` (``values`` [E, F], or
[V, F] with ``gather`` [E] picking its rows). ``impl="reference"`` is ``index_add_``; ``impl="triton"`` is
the CSR kernel of :mod:`.triton` (on CUDA, or on the CPU under ``TRITON_INTERPRET=1``); ``impl="auto"``
picks the kernel on CUDA tensors it supports (float16/bfloat16/float32/float64). The kernel needs the CSR
plan of ``rows`` (:func:`plan`): pass one built once per edge list to reuse it across calls, or leave
``plan=None`` to build it here (a sort and one host sync for the range check). Receivers that are already
sorted need no sort: ``plan(rows, size, presorted=True)`` checks that they are, and
``reference.sorted_csr_plan`` (exported as ``sorted_csr_plan``) builds the same plan unchecked, with no host
sync, for callers whose receivers are sorted by construction.

Differentiable in ``values`` (first order): the backward of a segment sum is the gather
``grad_values[e] = grad_out[rows[e]]``, followed with ``gather`` by ``index_add`` of those rows into the
gathered source. That backward is itself not differentiable: asking for its graph (``create_graph=True``,
a double backward) raises a ``RuntimeError``; the reference path supports any order. Dispatch and guards: ``companion_kernels.dispatch``.
"""

from __future__ import annotations

import torch

from ..dispatch import IMPLS, check_bool, check_impl, check_int, check_tensor, resolve_impl  # noqa: F401 (IMPLS re-exported)
from . import reference
from .reference import Plan

INDEX_DTYPES = (torch.int64, torch.int32)
TRITON_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_OP = "segment_sum"


def _index(name: str, t, length: int | None, device) -> torch.Tensor:
    check_tensor(name, t, op=_OP, dim=1, layout="[E]", dtypes=INDEX_DTYPES, device=device)
    if length is not None and t.shape[0] != length:
        raise ValueError(f"{_OP}: {name} has {t.shape[0]} entries but must have {length} (one per edge)")
    return t.long()


def _check_range(name: str, t: torch.Tensor, high: int, what: str) -> None:
    if t.numel() == 0:
        return
    lo, hi = torch.stack([t.min(), t.max()]).tolist()
    if lo < 0 or hi >= high:
        raise ValueError(f"{_OP}: {name} has entries in [{lo}, {hi}] but must lie in [0, {high - 1}] ({what})")


def plan(rows: torch.Tensor, size: int, *, presorted: bool = False) -> Plan:
    """CSR plan of the receivers ``rows`` [E] (int64/int32, each in [0, size)): ``Plan(perm, offsets)``.

    Build it once per edge list (e.g. once per pruned line-edge list of a graph) and pass it to every
    :func:`segment_sum` call over those rows. ``presorted=True``: ``rows`` is non-decreasing (checked), the
    plan needs no sort and its ``perm`` is None (the identity)."""
    check_int("size", size, op=_OP, low=0)
    check_bool("presorted", presorted, op=_OP)
    rows = _index("rows", rows, None, None)
    _check_range("rows", rows, size, f"receivers of an output with size={size} rows")
    if not presorted:
        return reference.csr_plan(rows, size)
    down = (rows[1:] < rows[:-1]).nonzero()
    if down.numel():
        e = int(down[0, 0]) + 1
        raise ValueError(f"{_OP}: presorted=True but rows is not sorted: rows[{e}] = {int(rows[e])} < rows[{e - 1}] = "
                         f"{int(rows[e - 1])}; pass presorted=False to sort it")
    return reference.sorted_csr_plan(rows, size)


_build_plan = plan  # segment_sum's keyword argument ``plan`` shadows the function


class _SegmentSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, values, rows, gather, src, offsets, size):
        from .triton import segment_sum_csr

        ctx.save_for_backward(rows, gather)
        ctx.num_values = values.shape[0]
        return segment_sum_csr(values, src, offsets, size)

    @staticmethod
    def backward(ctx, grad_out):
        if torch.is_grad_enabled():  # create_graph=True: a graph of this backward was asked for
            raise RuntimeError(f"{_OP}: the Triton path is differentiable once; a double backward (create_graph=True) "
                               "is not supported: use impl='reference' (index_add_) for higher derivatives")
        rows, gather = ctx.saved_tensors
        grad = grad_out[rows]  # ∂/∂values[e] of Σ_r <g_r, out_r> = g_{rows[e]}
        if gather is not None:  # values[gather[e]] was used: sum the edges' rows back into the sources
            grad = torch.zeros(ctx.num_values, grad.shape[-1], dtype=grad.dtype, device=grad.device).index_add(
                0, gather, grad)
        return grad, None, None, None, None, None


def segment_sum(values: torch.Tensor, rows: torch.Tensor, size: int, *, gather: torch.Tensor | None = None,
                plan: Plan | None = None, impl: str = "auto") -> torch.Tensor:
    """``out [size, F]``, ``out[r] = Σ_{e: rows[e] = r} values[gather[e] or e]``; see the module docstring."""
    check_impl(impl, op=_OP)
    check_int("size", size, op=_OP, low=0)
    check_tensor("values", values, op=_OP, dim=2, layout="[E, F]", floating=True)
    device = values.device
    E = rows.shape[0] if isinstance(rows, torch.Tensor) and rows.dim() == 1 else None
    if gather is None:
        rows = _index("rows", rows, values.shape[0], device)
    else:
        rows = _index("rows", rows, None, device)
        gather = _index("gather", gather, E, device)
        _check_range("gather", gather, values.shape[0], f"row ids of values with {values.shape[0]} rows")
    if plan is not None:
        if not isinstance(plan, Plan):
            raise TypeError(f"{_OP}: plan must be a Plan from segment_sum.plan(rows, size), got {type(plan).__name__}")
        perm = "identity" if plan.perm is None else tuple(plan.perm.shape)
        if (plan.offsets.shape != (size + 1,) or plan.offsets.device != device
                or (plan.perm is not None and plan.perm.shape != rows.shape)):
            raise ValueError(f"{_OP}: plan (perm {perm}, offsets {tuple(plan.offsets.shape)} on {plan.offsets.device}) "
                             f"does not fit rows [{rows.shape[0]}] and size={size} on {device}; build it with "
                             "plan(rows, size)")
    unsupported = None if values.dtype in TRITON_DTYPES else f"the Triton kernel takes {TRITON_DTYPES}, got {values.dtype}"
    if impl == "triton":
        check_tensor("values", values, op=_OP, dtypes=TRITON_DTYPES)
    impl = resolve_impl(impl, device, op=_OP, unsupported=unsupported)
    if impl == "reference":
        if plan is None:
            _check_range("rows", rows, size, f"receivers of an output with size={size} rows")
        return reference.segment_sum_reference(values, rows, size, gather)
    if plan is None:
        plan = _build_plan(rows, size)
    src = gather if plan.perm is None else (plan.perm if gather is None else gather[plan.perm])
    return _SegmentSum.apply(values.contiguous() if values.stride(-1) != 1 else values, rows, gather, src,
                             plan.offsets, size)

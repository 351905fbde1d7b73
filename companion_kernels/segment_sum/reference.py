"""PyTorch oracle of the segment sum (gather–message–scatter) and the CSR plans the Triton kernel uses.

``out[r] = Σ_{e : rows[e] = r} values[gather[e] if gather is given else e]`` for r < size, i.e.
``zeros(size, F).index_add_(0, rows, values[gather])``. Runs anywhere, any floating dtype, differentiable
through PyTorch's own autograd.

A plan is the CSR layout of the receivers: ``perm`` lists the edges by receiver and ``offsets[r]:offsets[r + 1]``
is receiver r's segment in ``perm``. Two builds:

* :func:`csr_plan` sorts the receivers (stable, so every segment keeps the edges' order and the kernel's sum is
  deterministic and in ``index_add_``'s order);
* :func:`sorted_csr_plan` is for receivers that are already sorted (non-decreasing), as the line-edge lists of
  HollowFlow's graph builder are by construction: no sort, ``perm = None`` (the identity, which the kernel skips)
  and the offsets from one ``searchsorted``, with no host synchronisation.

A message-passing step whose edge list is fixed for a graph builds its plan once and reuses it for every call
(forward and backward).
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class Plan(NamedTuple):
    """CSR layout of ``rows``: ``perm`` [E] (int64, edges sorted by receiver, stable), or None when ``rows`` is
    already sorted (the identity); ``offsets`` [size + 1] (int64)."""

    perm: torch.Tensor | None
    offsets: torch.Tensor


def _offsets(sorted_rows: torch.Tensor, size: int) -> torch.Tensor:
    """``offsets[r] = #{e : rows[e] < r}`` for r = 0…size, from the sorted receivers."""
    bounds = torch.arange(size + 1, dtype=sorted_rows.dtype, device=sorted_rows.device)
    return torch.searchsorted(sorted_rows.contiguous(), bounds)  # a column of an edge list is strided


def csr_plan(rows: torch.Tensor, size: int) -> Plan:
    """The CSR plan of ``rows`` (int64, values in [0, size), not checked here: see ``api.plan``)."""
    sorted_rows, perm = torch.sort(rows, stable=True)
    return Plan(perm, _offsets(sorted_rows, size))


def sorted_csr_plan(rows: torch.Tensor, size: int) -> Plan:
    """The CSR plan of receivers ``rows`` that are already sorted (int64, non-decreasing, in [0, size); not
    checked here: see ``api.plan(..., presorted=True)``): ``Plan(None, offsets)``, no sort, no host sync."""
    return Plan(None, _offsets(rows, size))


def segment_sum_reference(values: torch.Tensor, rows: torch.Tensor, size: int,
                          gather: torch.Tensor | None = None) -> torch.Tensor:
    """``zeros(size, F).index_add_(0, rows, values[gather])`` (``values`` itself when ``gather`` is None)."""
    src = values if gather is None else values[gather]
    return torch.zeros(size, values.shape[1], dtype=values.dtype, device=values.device).index_add_(0, rows, src)

"""PyTorch oracle of the segment sum (gather–message–scatter) and the CSR plan the Triton kernel uses.

``out[r] = Σ_{e : rows[e] = r} values[gather[e] if gather is given else e]`` for r < size, i.e.
``zeros(size, F).index_add_(0, rows, values[gather])``. Runs anywhere, any floating dtype, differentiable
through PyTorch's own autograd.

:func:`plan` sorts the receivers once (stable, so every segment keeps the edges' order and the kernel's
sum is deterministic): ``perm`` lists the edges by receiver and ``offsets[r]:offsets[r + 1]`` is receiver
r's segment in ``perm``. A message-passing step whose edge list is fixed for a graph builds it once and
reuses it for every call (forward and backward).
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class Plan(NamedTuple):
    """CSR layout of ``rows``: ``perm`` [E] (int64, edges sorted by receiver, stable), ``offsets`` [size + 1]."""

    perm: torch.Tensor
    offsets: torch.Tensor


def csr_plan(rows: torch.Tensor, size: int) -> Plan:
    """The CSR plan of ``rows`` (int64, values in [0, size), not checked here: see ``api.plan``)."""
    sorted_rows, perm = torch.sort(rows, stable=True)
    bounds = torch.arange(size + 1, dtype=sorted_rows.dtype, device=rows.device)
    offsets = torch.searchsorted(sorted_rows, bounds)  # offsets[r] = #{e : rows[e] < r}
    return Plan(perm, offsets)


def segment_sum_reference(values: torch.Tensor, rows: torch.Tensor, size: int,
                          gather: torch.Tensor | None = None) -> torch.Tensor:
    """``zeros(size, F).index_add_(0, rows, values[gather])`` (``values`` itself when ``gather`` is None)."""
    src = values if gather is None else values[gather]
    return torch.zeros(size, values.shape[1], dtype=values.dtype, device=values.device).index_add_(0, rows, src)

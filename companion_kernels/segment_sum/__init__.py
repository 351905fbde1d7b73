"""Segment sum (gather–message–scatter) over an edge list: ``out[r] = Σ_{e: rows[e] = r} values[gather[e] or e]``.

The aggregation of message passing (HollowFlow's NoBGNN, paper 13: m_ij = Σ_k m_kij over the pruned
line edges). :func:`plan` sorts the receivers once (CSR; :func:`sorted_csr_plan` skips the sort for receivers
already sorted, as HollowFlow's line-edge lists are by construction), the Triton kernel (:mod:`.triton`) sums each
segment in registers without atomics, :mod:`.reference` holds the ``index_add_`` oracle.
"""

from .api import IMPLS, segment_sum
from .api import plan
from .reference import Plan, csr_plan, segment_sum_reference, sorted_csr_plan

__all__ = ["IMPLS", "Plan", "csr_plan", "plan", "segment_sum", "segment_sum_reference", "sorted_csr_plan"]

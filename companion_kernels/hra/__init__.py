"""Fused hyperbolic radius adjustment (HyperET, Eq. 10): ``log0(W_s ⊗_c exp0(W0))`` for structured W_s."""

from .api import IMPLS, KINDS, hra_fused
from .reference import closed_form, dense_ws, hra_reference

__all__ = ["IMPLS", "KINDS", "closed_form", "dense_ws", "hra_fused", "hra_reference"]

"""Query-sparse, key-dense attention (the `f_dense(Q̃, K, V)` of Δ Attention, paper 09) with a fused Δ epilogue.

See `api.py` for the contract; `reference.py` is the PyTorch oracle, `triton.py` the kernel.
"""

from .api import delta_rows, query_sparse_attention, query_sparse_delta_

__all__ = ["query_sparse_attention", "query_sparse_delta_", "delta_rows"]

"""Block-sparse FlashAttention (SeerAttention, paper 01; Delta Attention, paper 09): reference, Triton
kernels (forward and backward: ``block_sparse_attention`` is differentiable in q, k, v), validated entry
points and mask helpers. Import as ``companion_kernels.block_sparse``."""

from .api import block_sparse_attention, pooled_attention_map
from .masks import (
    causal_block_mask,
    dense_to_index,
    index_to_dense,
    mask_density,
    random_block_mask,
    sink_window_mask,
    threshold_mask,
    topk_mask,
    topk_rows,
)
from .reference import block_sparse_attention_reference, pooled_attention_map_reference

__all__ = [
    "block_sparse_attention",
    "pooled_attention_map",
    "block_sparse_attention_reference",
    "pooled_attention_map_reference",
    "dense_to_index",
    "index_to_dense",
    "threshold_mask",
    "topk_mask",
    "topk_rows",
    "sink_window_mask",
    "random_block_mask",
    "causal_block_mask",
    "mask_density",
]

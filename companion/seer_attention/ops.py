"""Thin dispatch to the block-sparse op (``companion_kernels.block_sparse``) for any block size.

SeerAttention (arXiv 2410.13276) runs with 64-token blocks on 8k-128k contexts, i.e. 128-2048 blocks
per row. all-MiniLM-L6-v2 takes at most 512 tokens, which is only 8 blocks of 64: a top-k at 90%
sparsity would keep less than one block per row. We therefore use 16-token blocks on MiniLM
(32 blocks per row, the block count of a 2k-token prompt at the paper's block size), so 50/70/90%
sparsity keep 16/9/3 blocks per row. The op's validated entry points accept block sizes 64 and 128
(what the Triton kernels compile for); for other block sizes we call the op's plain-PyTorch
reference functions directly, which implement the same semantics for any block size. Nothing here
re-implements the op.

Also here: the *attention-mass* map used for evaluation (not an op of the kernel library): the share
of each query block's softmax mass that falls in each key block, i.e. the mean over the block's
queries of the summed probabilities. Its rows sum to 1, so "recall" of a mask is the kept mass.
"""

from __future__ import annotations

import math

import torch

KERNEL_BLOCK_SIZES = (64, 128)


def _bs():
    import companion_kernels.block_sparse as bs

    return bs


def pooled_attention_map(q, k, *, block_size: int, causal: bool, sm_scale: float | None = None, impl: str = "auto"):
    """The distillation target ``[B, H, nQB, nKB]`` (row-normalised block max-pool of softmax attention)."""
    bs = _bs()
    if block_size in KERNEL_BLOCK_SIZES and q.shape[-1] in (32, 64, 128):
        return bs.pooled_attention_map(q, k, block_size=block_size, causal=causal, sm_scale=sm_scale, impl=impl)
    return bs.pooled_attention_map_reference(q, k, block_size=block_size, causal=causal, sm_scale=sm_scale)


def block_sparse_attention(q, k, v, mask: torch.Tensor, *, block_size: int, causal: bool, sm_scale: float | None = None, impl: str = "auto"):
    """Block-sparse attention of ``q, k, v [B, H, N, d]`` with a boolean block ``mask [B|1, H|1, n, n]``."""
    bs = _bs()
    index, count = bs.dense_to_index(mask)
    if block_size in KERNEL_BLOCK_SIZES and q.shape[-1] in (32, 64, 128):
        return bs.block_sparse_attention(
            q.contiguous(), k.contiguous(), v.contiguous(), index, count, block_size=block_size, causal=causal,
            sm_scale=sm_scale, impl=impl,
        )
    return bs.block_sparse_attention_reference(q, k, v, index, count, block_size=block_size, causal=causal, sm_scale=sm_scale)


def block_mass_map(q, k, *, block_size: int, causal: bool, sm_scale: float | None = None, chunk: int = 2048) -> torch.Tensor:
    """``[B, H, nQB, nKB]`` float32: for each query block, the mean over its queries of the softmax mass
    in each key block. Computed in query chunks (O(chunk * N) memory). ``k`` may have fewer heads (GQA)."""
    B, H, N, d = q.shape
    rep = H // k.shape[1]
    if rep > 1:
        k = k.repeat_interleave(rep, dim=1)
    scale = 1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)
    n = -(-N // block_size)
    pad = n * block_size - N
    chunk = max(block_size, (chunk // block_size) * block_size)
    out = torch.zeros(B, H, n, n, dtype=torch.float32, device=q.device)
    kf = k.float()
    for s in range(0, N, chunk):
        e = min(N, s + chunk)
        sc = (q[:, :, s:e].float() @ kf.transpose(-1, -2)) * scale
        if causal:
            i = torch.arange(s, e, device=q.device)[:, None]
            j = torch.arange(N, device=q.device)[None, :]
            sc = sc.masked_fill(j > i, float("-inf"))
        p = torch.softmax(sc, dim=-1)
        p = torch.nn.functional.pad(p, (0, pad)).reshape(B, H, e - s, n, block_size).sum(-1)  # [B,H,rows,n]
        rows_block = torch.arange(s, e, device=q.device) // block_size
        out.index_add_(2, rows_block, p)
    counts = torch.full((n,), float(block_size), device=q.device)
    counts[-1] = block_size - pad
    return out / counts[:, None]

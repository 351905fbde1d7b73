"""Thin dispatch to the block-sparse op (``companion_kernels.block_sparse``) for any block size.

SeerAttention (arXiv 2410.13276) runs with 64-token blocks on 8k-128k contexts, i.e. 128-2048 blocks
per row. all-MiniLM-L6-v2 takes at most 512 tokens, which is only 8 blocks of 64: a top-k at 90%
sparsity would keep less than one block per row. We therefore use 16-token blocks on MiniLM
(32 blocks per row, the block count of a 2k-token prompt at the paper's block size), so 50/70/90%
sparsity keep 16/9/3 blocks per row. The op's Triton kernels compile for block sizes 64 and 128;
with ``impl="auto"`` other block sizes run its plain-PyTorch reference, which has the same semantics.
Nothing here re-implements the op.

Also here: the *attention-mass* map used for evaluation (not an op of the kernel library): the share
of each query block's softmax mass that falls in each key block, i.e. the mean over the block's
queries of the summed probabilities. Its rows sum to 1, so "recall" of a mask is the kept mass.
"""

from __future__ import annotations

import math

import torch

def _bs():
    import companion_kernels.block_sparse as bs

    return bs


def pooled_attention_map(q, k, *, block_size: int, causal: bool, sm_scale: float | None = None, impl: str = "auto"):
    """The distillation target ``[B, H, nQB, nKB]`` (row-normalised block max-pool of softmax attention)."""
    return _bs().pooled_attention_map(q.contiguous(), k.contiguous(), block_size=block_size, causal=causal, sm_scale=sm_scale, impl=impl)


def block_sparse_attention(q, k, v, mask: torch.Tensor, *, block_size: int, causal: bool, sm_scale: float | None = None, impl: str = "auto"):
    """Block-sparse attention of ``q, k, v [B, H, N, d]`` with a boolean block ``mask [B|1, H|1, n, n]``."""
    bs = _bs()
    index, count = bs.dense_to_index(mask)
    return bs.block_sparse_attention(
        q.contiguous(), k.contiguous(), v.contiguous(), index, count, block_size=block_size, causal=causal,
        sm_scale=sm_scale, impl=impl,
    )


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


def pooled_attention_map_rbuffer(q, k, *, block_size: int, causal: bool, sm_scale: float | None = None, kv_tile: int | None = None) -> torch.Tensor:
    """The paper's fused ground-truth algorithm written out in PyTorch, as an independent check of
    the op (SeerAttention Sec. 3.2; official ``attn_pooling_kernel.py``): a FlashAttention-2 style
    online softmax over key tiles of ``block_size`` tokens that keeps, per query row ``i`` and key
    block ``j``, the row maximum of the logits ``r_ij`` in a buffer ``R [N, n]`` beside the running
    max ``m_i`` and normaliser ``l_i``. After the loop ``a_ij = exp(r_ij - m_i) / l_i`` is the largest
    probability of row ``i`` inside block ``j``; a column-max over the ``B`` rows of each query
    block and a row normalisation give the target. ``R`` is ``O(N^2 / B)`` per head, which is why the
    paper's kernel does this on-chip. ``kv_tile`` (default ``block_size``) must be a multiple of it."""
    B_, H, N, d = q.shape
    rep = H // k.shape[1]
    if rep > 1:
        k = k.repeat_interleave(rep, dim=1)
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    q, k = q.to(ct), k.to(ct)
    scale = 1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)
    tile = kv_tile or block_size
    if tile % block_size:
        raise ValueError(f"kv_tile={tile} must be a multiple of block_size={block_size}")
    n = -(-N // block_size)
    R = torch.full((B_, H, N, n), float("-inf"), dtype=ct, device=q.device)
    m = torch.full((B_, H, N), float("-inf"), dtype=ct, device=q.device)
    l = torch.zeros((B_, H, N), dtype=ct, device=q.device)
    rows = torch.arange(N, device=q.device)
    for s in range(0, N, tile):
        e = min(N, s + tile)
        sc = (q @ k[:, :, s:e].transpose(-1, -2)) * scale  # [B, H, N, tile]
        if causal:
            sc = sc.masked_fill(torch.arange(s, e, device=q.device)[None, :] > rows[:, None], float("-inf"))
        m_new = torch.maximum(m, sc.amax(-1))
        safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
        l = l * torch.exp(torch.where(torch.isfinite(m), m - safe, torch.full_like(m, float("-inf")))) + torch.exp(sc - safe[..., None]).sum(-1)
        m = m_new
        for b0 in range(s, e, block_size):
            b1 = min(e, b0 + block_size)
            R[..., b0 // block_size] = sc[..., b0 - s:b1 - s].amax(-1)
    safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    A = torch.exp(R - safe[..., None]) / l[..., None]  # [B, H, N, n]: max probability of row i in block j
    pad = n * block_size - N
    A = torch.nn.functional.pad(A, (0, 0, 0, pad)).reshape(B_, H, n, block_size, n).amax(-2)
    return (A / A.sum(-1, keepdim=True)).float() if ct != torch.float64 else A / A.sum(-1, keepdim=True)

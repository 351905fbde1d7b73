"""GPU path of paper 09 (Δ Attention): block-sparse sink + window prefill, then the fused Δ kernel.

Used by the GPU study (`python -m companion.bench delta_attention`, stages in `ladder.py`; no plotly here).

* Sparse pass A*V: `companion_kernels.block_sparse.block_sparse_attention` with the block-granular
  StreamingLLM mask `sink_window_mask(sink_blocks = ⌈sink/bs⌉, window_blocks = ⌈window/bs⌉)`: every
  query block keeps the first sink blocks, the window blocks before it and its own (causal inside).
  Block granularity is what the official code does too (HiP's block-sparse kernel with
  `sink_token_size=1024`, `sliding_window_size=2048`); a few more keys than the token window sit at
  the window edge. bs = 128 matches the anchors' FlexAttention mask (8 sink + 16 window blocks).
* Δ: `companion_kernels.query_sparse.query_sparse_delta_` computes the anchors (every γ-th row) and
  the dense tail (official cut_n rule, `attention.delta_plan`) and adds Δ in place, in one kernel.
* `delta_prefill_unfused` is the official code's order of operations (dense rows into a buffer, then
  gather / subtract / reshape-add in PyTorch), kept as the comparison for the fused epilogue.
"""

from __future__ import annotations

import math

import torch

from companion.delta_attention.attention import check_sparse_config, delta_plan
from companion_kernels.query_sparse import query_sparse_attention, query_sparse_delta_

GiB = 1024 ** 3


def sparse_index(n: int, *, sink: int, window: int, block_size: int = 128, device=None):
    """(block_index, block_count, kept share of causal blocks) of the sink + window block mask."""
    from companion_kernels.block_sparse import dense_to_index, mask_density, sink_window_mask

    sink, window = check_sparse_config(n, sink=sink, window=window)
    nb = math.ceil(n / block_size)
    mask = sink_window_mask(nb, nb, sink_blocks=math.ceil(sink / block_size),
                            window_blocks=math.ceil(window / block_size), causal=True, device=device)
    index, count = dense_to_index(mask)
    share = mask_density(mask, causal=True)
    del mask
    return index[None, None], count[None, None], share


def sparse_prefill(q, k, v, index, count, *, block_size: int = 128, impl: str = "auto"):
    """A*V: the block-sparse sink + window pass, [B, Hq, N, D]."""
    from companion_kernels.block_sparse import block_sparse_attention

    return block_sparse_attention(q, k, v, index, count, block_size=block_size, causal=True, impl=impl,
                                  check_index=False)


def delta_prefill(q, k, v, index, count, *, gamma: int, tail: int = 128, block_size: int = 128,
                  propagate: bool = True, impl: str = "auto", config: dict | None = None):
    """Algorithm 1 on the GPU: sparse pass, then the fused Δ (or recompute) kernel, in place."""
    out = sparse_prefill(q, k, v, index, count, block_size=block_size, impl=impl)
    plan = delta_plan(q.shape[2], gamma, tail)
    return query_sparse_delta_(out, q, k, v, gamma=plan.gamma, num_delta_rows=plan.s_p,
                               propagate=propagate, impl=impl, config=config)


def delta_prefill_unfused(q, k, v, index, count, *, gamma: int, tail: int = 128, block_size: int = 128,
                          impl: str = "auto", config: dict | None = None):
    """The official code's order: dense rows to a buffer, then gather, subtract, reshape-add."""
    out = sparse_prefill(q, k, v, index, count, block_size=block_size, impl=impl)
    b, h, n, d = q.shape
    plan = delta_plan(n, gamma, tail)
    rows = plan.dense_rows(device=q.device).to(torch.int32)
    dense = query_sparse_attention(q, k, v, rows, impl=impl, config=config, validate=False)
    na = plan.num_anchors
    if na:
        delta = dense[:, :, :na] - out[:, :, 0:plan.s_p:gamma]
        blocks = out[:, :, :plan.s_p].view(b, h, na, gamma, d)
        blocks += delta[:, :, :, None]
    out[:, :, plan.s_p:] = dense[:, :, na:]
    return out


def bytes_needed(n: int, *, hq: int = 32, hkv: int = 8, d: int = 128, dtype=torch.bfloat16) -> int:
    """Device memory one ladder step holds at its peak, with 10 % slack for indices and workspaces:
    q, k, v plus either three [B, Hq, N, D] buffers (sparse output, its copy for the Δ-only timing,
    the output of a timed call) or, for the dense SDPA baselines, K/V expanded to Hq heads and the
    dense output (also three Hq-sized tensors)."""
    el = torch.empty((), dtype=dtype).element_size()
    per_head = n * d * el
    total = (hq + 2 * hkv + 3 * hq) * per_head
    return int(total * 1.1)


def check_free_memory(n: int, **kw) -> tuple[int, int]:
    """(needed, free) bytes on the current CUDA device; raises MemoryError with both when short."""
    free, _ = torch.cuda.mem_get_info()
    need = bytes_needed(n, **kw)
    if need > free:
        raise MemoryError(f"N={n}: needs about {need / GiB:.1f} GiB of GPU memory, {free / GiB:.1f} GiB free")
    return need, free

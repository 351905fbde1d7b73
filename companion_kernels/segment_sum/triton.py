"""Triton segment sum over a CSR layout: ``out[r] = Σ_{j < len_r} values[src[offsets[r] + j]]``.

The caller (``api.py``) passes ``src = perm`` (or ``gather[perm]``, which fuses the gather of the source
rows into the load) and ``offsets`` from the CSR plan (format in ``reference.py``; this file does not
import it). ``src = None`` is the identity (receivers already sorted, no gather): the kernel then reads
``values[offsets[r] + j]`` directly and loads no index. One program owns ``BLOCK_R`` receivers ×
``BLOCK_F`` features: it walks the receivers' segments in lock-step, up to the longest segment of its block (masked beyond each segment's end),
accumulates in registers (float32, or float64 for float64 inputs) and writes each output element once.
Every output element is summed in the same order on every run: deterministic, no atomics, and empty
segments give exact zeros. Ragged segments cost the block's longest one; in the pruned line graphs of
HollowFlow a receiver (j, k) has at most deg(j) − 1 senders, so segments are short and even.

Interpreter note: triton 3.6's CPU interpreter cannot use a computed scalar as a ``for`` bound (it calls
``int()`` on a 1-element array), so under ``INTERPRET`` the same body runs in a ``while`` loop, as in
``block_sparse``; compiled code keeps the ``for`` loop.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..dispatch import interpreting
from ..host import cdiv, next_power_of_2


@triton.jit
def _add_edge(acc, j, values, src, start, length, f, fm, stride_v, DIRECT: tl.constexpr):
    """acc += values[src[start + j]] (``values[start + j]`` when DIRECT) for the receivers whose segment is
    longer than j."""
    live = j < length
    if DIRECT:
        e = start + j
    else:
        e = tl.load(src + start + j, mask=live, other=0)
    v = tl.load(values + e[:, None] * stride_v + f[None, :], mask=live[:, None] & fm[None, :], other=0.0)
    return acc + v.to(acc.dtype)


@triton.jit(do_not_specialize=["size", "F", "stride_v", "stride_o"])  # one compile per width block, whatever E
def _segment_sum_kernel(values, src, offsets, out, size, F, stride_v, stride_o,
                        BLOCK_R: tl.constexpr, BLOCK_F: tl.constexpr, F64: tl.constexpr, DIRECT: tl.constexpr,
                        INTERPRET: tl.constexpr):
    pid_r = tl.program_id(0)
    pid_f = tl.program_id(1)
    r = pid_r.to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    f = pid_f * BLOCK_F + tl.arange(0, BLOCK_F)
    rm = r < size
    fm = f < F
    start = tl.load(offsets + r, mask=rm, other=0)
    length = tl.load(offsets + r + 1, mask=rm, other=0) - start
    if F64:
        acc = tl.zeros([BLOCK_R, BLOCK_F], dtype=tl.float64)
    else:
        acc = tl.zeros([BLOCK_R, BLOCK_F], dtype=tl.float32)
    longest = tl.max(length, axis=0)
    if INTERPRET:  # the CPU interpreter cannot take a computed scalar as a for-loop bound
        j = 0
        while j < longest:
            acc = _add_edge(acc, j, values, src, start, length, f, fm, stride_v, DIRECT)
            j += 1
    else:
        for j in range(0, longest):
            acc = _add_edge(acc, j, values, src, start, length, f, fm, stride_v, DIRECT)
    tl.store(out + r[:, None] * stride_o + f[None, :], acc.to(out.dtype.element_ty), mask=rm[:, None] & fm[None, :])


def block_sizes(F: int) -> tuple[int, int]:
    """(BLOCK_R, BLOCK_F): the feature block covers F up to 128 (one program per row block for hidden
    widths ≤ 128), the receiver block keeps the tile at 4,096 elements."""
    block_f = min(128, next_power_of_2(max(1, F)))
    return max(1, 4096 // block_f), block_f


def segment_sum_csr(values: torch.Tensor, src: torch.Tensor | None, offsets: torch.Tensor, size: int,
                    out: torch.Tensor | None = None) -> torch.Tensor:
    """``out [size, F]`` (allocated unless given): the segment sums of ``values`` [V, F] (last dim contiguous)
    over ``src`` [E] (int64 row ids into ``values``; None: row e is edge e) in the segments ``offsets``
    [size + 1] (int64)."""
    F = values.shape[1]
    if out is None:
        out = torch.empty(size, F, dtype=values.dtype, device=values.device)
    if size == 0 or F == 0:
        return out
    block_r, block_f = block_sizes(F)
    grid = (cdiv(size, block_r), cdiv(F, block_f))
    _segment_sum_kernel[grid](values, src, offsets, out, size, F, values.stride(0), out.stride(0),
                              BLOCK_R=block_r, BLOCK_F=block_f, F64=values.dtype == torch.float64,
                              DIRECT=src is None, INTERPRET=interpreting())
    return out

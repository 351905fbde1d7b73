"""Timing and inputs shared by the attention-kernel studies: SeerAttention's two (paper 01, ``study`` and
``kernel_bench``) and Δ Attention's prefill ladder (paper 09, ``companion.delta_attention.ladder``).

* :func:`time_call`: the median milliseconds of a call, by the method its length allows (``do_bench`` under
  :data:`EVENTS_MS`, CUDA events above, one timed call above :data:`SINGLE_MS`), and which method it was;
* :func:`sdpa_causal`: causal SDPA pinned to one backend (the dense peers: flash, cuDNN);
* :func:`random_qkv`, :func:`attention_flops`: the inputs and the work of one attention layer;
* :func:`flex_block_mask`: FlexAttention's ``BlockMask`` of a causal block mask (the sparse peer).

Every study times the peers first at each size, so that a deadline never leaves our kernel without them.
No plotly here.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch

from companion.core import ParameterError, time_ms

#: calls at least this long (ms) are timed with CUDA events (median of 3 after a warm-up) instead of do_bench
EVENTS_MS = 100.0
#: calls at least this long (ms) are timed once
SINGLE_MS = 2000.0
#: ``torch.nn.attention.SDPBackend`` member of each dense backend a profile may name
SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION", "math": "MATH"}
#: how the results name each dense backend
SDPA_LABELS = {"flash": "SDPA flash", "cudnn": "SDPA cuDNN", "math": "SDPA math"}
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def sync(device) -> None:
    """Wait for the device (a no-op off CUDA)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _events(fn: Callable[[], object], reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        out.append(start.elapsed_time(end))
    return out


def time_call(fn: Callable[[], object], device, *, warm: bool = True) -> tuple[float, str]:
    """``(milliseconds, how it was timed)`` of ``fn()``.

    On CUDA: one untimed call (unless ``warm`` is False: a call whose kernels ran at a smaller size), then one
    timed with CUDA events; from its length, ``triton.testing.do_bench``'s median (under :data:`EVENTS_MS`), the
    median of 3 event-timed calls, or that one call (over :data:`SINGLE_MS`). Elsewhere (the CPU smoke run): the
    wall clock of one call."""
    if torch.device(device).type != "cuda":
        return time_ms(fn, device, cpu_warmup=0, cpu_reps=1), "wall clock, one call (CPU)"
    if warm:
        fn()
        torch.cuda.synchronize()
    first = _events(fn, 1)[0]
    if first >= SINGLE_MS:
        return first, "CUDA events, single run" + ("" if warm else " (no warm-up at this size)")
    if first >= EVENTS_MS:
        return statistics.median(_events(fn, 3)), "CUDA events, median of 3 after a warm-up"
    return time_ms(fn, device), "do_bench median"


def check_backends(name: str, backends) -> list[str]:
    """The dense backends a profile names: a non-empty list of :data:`SDPA_BACKENDS` keys."""
    if not isinstance(backends, (list, tuple)) or not backends or any(b not in SDPA_BACKENDS for b in backends):
        raise ParameterError(name, backends, f"a non-empty list of {sorted(SDPA_BACKENDS)}")
    return list(backends)


def check_dtype(name: str, dtype) -> torch.dtype:
    """The torch dtype a profile names (one of :data:`DTYPES`)."""
    if dtype not in DTYPES:
        raise ParameterError(name, dtype, f"one of {sorted(DTYPES)}")
    return DTYPES[dtype]


def sdpa_causal(backend: str) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """``f(q, k, v)``: causal ``scaled_dot_product_attention`` run by the SDPA ``backend`` alone (a key of
    :data:`SDPA_BACKENDS`); q, k, v with the same number of heads."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    chosen = getattr(SDPBackend, SDPA_BACKENDS[backend])

    def f(q, k, v):
        with sdpa_kernel([chosen]):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    return f


def random_qkv(n: int, *, q_heads: int, kv_heads: int | None = None, head_dim: int, device, dtype, seed: int):
    """Standard normal ``q [1, q_heads, n, head_dim]`` and ``k, v [1, kv_heads, n, head_dim]`` (``kv_heads``
    defaults to ``q_heads``), drawn on ``device`` from ``seed``."""
    g = torch.Generator(device=device).manual_seed(seed)
    shapes = ((1, q_heads, n, head_dim), (1, kv_heads or q_heads, n, head_dim), (1, kv_heads or q_heads, n, head_dim))
    return tuple(torch.randn(*s, device=device, dtype=dtype, generator=g) for s in shapes)


def attention_flops(heads: int, head_dim: int, n: int, density: float = 1.0) -> float:
    """Multiply-add FLOPs of causal attention over the kept share ``density`` of the causal blocks:
    2 matmuls × 2 FLOP × heads × head_dim × n² / 2 (batch 1)."""
    return 4.0 * heads * head_dim * n * n / 2.0 * density


def flex_block_mask(mask: torch.Tensor, block_size: int, seq_len: int):
    """FlexAttention ``BlockMask`` keeping the blocks of a causal boolean block mask ``[B, H, n, n]``: those
    below the diagonal as full blocks (no mask_mod), the diagonal as partial blocks under the causal mask_mod,
    FlexAttention's fastest form of the same attention."""
    from torch.nn.attention.flex_attention import BlockMask

    n = mask.shape[-1]
    diag = torch.eye(n, dtype=torch.bool, device=mask.device)
    below = torch.ones(n, n, dtype=torch.bool, device=mask.device).tril(-1)

    def lists(m):  # kept block ids first (ascending), their count
        return m.sum(-1, dtype=torch.int32), torch.argsort((~m).to(torch.int8), dim=-1, stable=True).to(torch.int32)

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    partial_count, partial_index = lists(mask & diag)
    full_count, full_index = lists(mask & below)
    return BlockMask.from_kv_blocks(partial_count, partial_index, full_count, full_index, BLOCK_SIZE=block_size,
                                    mask_mod=causal, seq_lengths=(seq_len, seq_len))

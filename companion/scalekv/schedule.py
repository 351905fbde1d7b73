"""Scale schedules of next-scale prediction and the analytic KV-cache size (paper 03, Sec. 2-3).

Paper: Li et al., *Memory-Efficient Visual Autoregressive Modeling with Scale-Aware KV Cache
Compression* (ScaleKV), NeurIPS 2025, arXiv 2505.19602. In VAR-style next-scale prediction step
``k`` emits a whole ``h_k x w_k`` token map and attends to every earlier map plus its own, so the
KV cache after step ``k`` holds ``N_k = sum_{j<=k} h_j w_j`` tokens per layer. Infinity at 1024^2
uses the side lengths ``INFINITY_1024`` (10,521 tokens in all).

Memory is defined explicitly here (the official issue #5 shows users confused by it): the bytes of
retained K *and* V tensors, ``2 * tokens * heads * head_dim * bytes_per_element * batch`` per
layer. Classifier-free guidance doubles the batch in Infinity; ``kv_bytes`` takes the batch as
given. (The paper's 84,328 MB full cache for Infinity-8B at batch 8 is not reproduced by this
formula with or without CFG doubling [checked numerically]; we report our own definition.)
"""

from __future__ import annotations

from collections.abc import Sequence

from companion.core import ParameterError

__all__ = [
    "INFINITY_1024",
    "INFINITY_8B",
    "INFINITY_2B",
    "check_schedule",
    "map_sizes",
    "cumulative_tokens",
    "kv_bytes",
]

INFINITY_1024 = (1, 2, 4, 6, 8, 12, 16, 20, 24, 32, 40, 48, 64)
# Geometry from the official tools/run_infinity.py: 8B depth 40, width 3584, 28 heads; 2B depth 32, width 2048, 16 heads.
INFINITY_8B = {"layers": 40, "heads": 28, "head_dim": 128}
INFINITY_2B = {"layers": 32, "heads": 16, "head_dim": 128}


def check_schedule(sides: Sequence[int], name: str = "scales") -> tuple[int, ...]:
    """Side lengths of square token maps, strictly increasing positive integers (at least 2 scales)."""
    try:
        sides = tuple(sides)
    except TypeError:
        raise ParameterError(name, sides, "a sequence of strictly increasing positive integers, e.g. (1, 2, 3, 4, 6, 8, 12, 16)") from None
    if len(sides) < 2 or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sides):
        raise ParameterError(name, sides, "at least two positive integer side lengths, e.g. (1, 2, 3, 4, 6, 8, 12, 16)")
    if any(b <= a for a, b in zip(sides, sides[1:])):
        raise ParameterError(name, sides, "a strictly increasing schedule (each token map larger than the previous one)")
    return sides


def map_sizes(sides: Sequence[int]) -> list[int]:
    """Tokens per map ``|r_k| = side_k^2``."""
    return [s * s for s in check_schedule(sides)]


def cumulative_tokens(sides: Sequence[int]) -> list[int]:
    """``N_k``: tokens in the full KV cache after step ``k`` (including map ``k``)."""
    out, total = [], 0
    for n in map_sizes(sides):
        total += n
        out.append(total)
    return out


def kv_bytes(tokens: int, heads: int, head_dim: int, *, layers: int = 1, batch: int = 1, bytes_per_element: int = 2) -> int:
    """Bytes of retained K and V: ``2 * layers * batch * tokens * heads * head_dim * bytes``."""
    return 2 * int(layers) * int(batch) * int(tokens) * int(heads) * int(head_dim) * int(bytes_per_element)

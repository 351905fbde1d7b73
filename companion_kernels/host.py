"""Integer helpers for the host side of the launchers (grids, tile sizes).

In Triton 3.6 ``triton.cdiv`` and ``triton.next_power_of_2`` are constexpr functions: each call from host
code first unwraps its arguments, about 2 µs against tens of nanoseconds for the arithmetic. A launch-bound
call adds that up (a ZeroS forward at T = 2k made eight such calls), so launchers use these instead; kernel
code keeps Triton's."""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for integers, as ``triton.cdiv``."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two ≥ ``n`` for ``n ≥ 1`` (0 for 0), as ``triton.next_power_of_2``."""
    return 1 << (n - 1).bit_length() if n > 0 else 0

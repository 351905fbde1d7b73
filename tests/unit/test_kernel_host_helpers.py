"""The launchers' integer helpers equal Triton's ``cdiv`` and ``next_power_of_2`` (which cost ~2 µs a host call)."""

import triton

from companion_kernels.host import cdiv, next_power_of_2


def test_cdiv_equals_tritons():
    assert all(cdiv(a, b) == triton.cdiv(a, b) for a in range(0, 1100) for b in range(1, 130))
    assert cdiv(2**40 + 1, 64) == triton.cdiv(2**40 + 1, 64)


def test_next_power_of_2_equals_tritons():
    assert all(next_power_of_2(n) == triton.next_power_of_2(n) for n in range(0, 70_000))
    assert next_power_of_2(2**31 + 1) == 2**32

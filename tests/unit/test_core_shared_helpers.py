"""The helpers written once for every paper: time_ms, limit_threads, Paper, Claim rows, RoPE."""

import math
import time

import pytest
import torch

from companion.core import Claim, Claims, Paper, judge, limit_threads, not_run, time_ms
from companion.core.timing import CPU_CLOCKS
from companion.core.validation import ParameterError
from companion.models import apply_rope, rope_cos_sin, rotate_half


def test_time_ms_is_a_median_of_cpu_calls():
    calls = []
    ms = time_ms(lambda: calls.append(1), "cpu", cpu_warmup=2, cpu_reps=3)
    assert len(calls) == 5 and ms >= 0 and math.isfinite(ms)
    with pytest.raises(ValueError, match="cpu_reps"):
        time_ms(lambda: None, "cpu", cpu_reps=0)


def test_time_ms_is_the_median_in_milliseconds(monkeypatch):
    """On a scripted clock the three timed calls last 0.25 s, 2 s and 0.5 s: the median is 500 ms (the mean would be
    917 ms, the fastest 250 ms), and the untimed warm-up call reads no clock."""
    ticks = iter([0.0, 0.25, 10.0, 12.0, 20.0, 20.5])
    monkeypatch.setitem(CPU_CLOCKS, "wall", lambda: next(ticks))
    assert time_ms(lambda: None, "cpu", cpu_warmup=1, cpu_reps=3) == 500.0


def test_time_ms_process_clock_counts_work_not_waiting():
    """A sleep takes wall time and no CPU time: the process clock, used where a shared machine's load must not move a
    verdict, reads it as almost nothing; a busy loop reads as work on both clocks."""
    assert time_ms(lambda: time.sleep(0.03), "cpu", cpu_warmup=0, cpu_reps=1) >= 25
    assert time_ms(lambda: time.sleep(0.03), "cpu", cpu_warmup=0, cpu_reps=1, cpu_clock="process") < 10

    def spin(until=0.02):
        start = time.process_time()
        while time.process_time() - start < until:
            pass
    assert time_ms(spin, "cpu", cpu_warmup=0, cpu_reps=1, cpu_clock="process") >= 19
    with pytest.raises(ValueError, match="cpu_clock must be one of wall, process, got 'cpu'"):
        time_ms(lambda: None, "cpu", cpu_clock="cpu")


def test_limit_threads_restores():
    before = torch.get_num_threads()
    with limit_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with limit_threads(None):
        assert torch.get_num_threads() == before
    with pytest.raises(ValueError):
        with limit_threads(0):
            pass


def test_limit_threads_restores_a_count_it_changed():
    """The block sets a count other than the current one (which is 1 under OMP_NUM_THREADS=1), and the old one comes
    back after it."""
    before = torch.get_num_threads()
    with limit_threads(before + 1):
        assert torch.get_num_threads() == before + 1
    assert torch.get_num_threads() == before


def test_paper_identity_is_validated():
    p = Paper("07", "graph_multiview", "GMV: a title", "2501.01234", None)
    assert p.notebook == "07_graph_multiview" and p.venue == "NeurIPS 2025"
    for bad in (dict(number="7"), dict(slug="Bad-Slug"), dict(title=" "), dict(arxiv="abc")):
        args = dict(number="07", slug="x", title="T", arxiv=None, code=None) | bad
        with pytest.raises(ValueError):
            Paper(**args)


def test_claim_rows_are_validated_and_extended():
    row = Claim("c", "paper", "measured", "scale", judge([0.0], 0.1, kind="exact"))
    claims = Claims("00_tour").extend([row, row])
    assert claims.items == [row, row]
    with pytest.raises(TypeError, match="companion.core.judge"):
        Claim("c", "p", "m", "s", "reproduced")  # a verdict is never written by hand
    with pytest.raises(ParameterError):
        Claim("", "p", "m", "s", not_run("needs a GPU"))
    with pytest.raises(TypeError):
        claims.extend([{"claim": "c"}])


def test_rope_is_a_rotation_and_relative():
    d, base = 16, 10000.0
    cos, sin = rope_cos_sin(40, d, base=base, dtype=torch.float64)
    x = torch.randn(40, d, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    y = apply_rope(x, cos, sin)
    assert torch.allclose(y.norm(dim=-1), x.norm(dim=-1))          # a rotation keeps norms
    q, k = torch.randn(d, dtype=torch.float64), torch.randn(d, dtype=torch.float64)
    dots = [(apply_rope(q, cos[t + 3], sin[t + 3]) * apply_rope(k, cos[t], sin[t])).sum() for t in range(0, 30, 7)]
    assert torch.allclose(torch.stack(dots), dots[0].expand(len(dots)))  # depends on the offset only
    assert torch.equal(rotate_half(rotate_half(x)), -x)
    c2, _ = rope_cos_sin(torch.tensor([0, 5]), d, dtype=torch.float64)
    assert torch.allclose(c2[1], cos[5])
    with pytest.raises(ValueError, match="even"):
        rope_cos_sin(4, 7)
    with pytest.raises(ValueError, match="layout"):
        rope_cos_sin(4, 8, layout="other")

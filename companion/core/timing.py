"""Timing helpers written once for every paper: a timer (wall clock or process time), a median-of-runs timer, a
CUDA-graph capture and a CPU-thread limit.

GPU speed is measured in ``benchmarks/`` with :func:`time_ms` (``triton.testing.do_bench``); tests
never assert on time.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator


def _cuda_sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


CPU_CLOCKS = {"wall": time.perf_counter, "process": time.process_time}


def _clock(arg: str, name: str) -> Callable[[], float]:
    """The clock ``name`` of :data:`CPU_CLOCKS`; a ``ValueError`` naming the argument ``arg`` otherwise."""
    if name not in CPU_CLOCKS:
        raise ValueError(f"{arg} must be one of {', '.join(CPU_CLOCKS)}, got {name!r}")
    return CPU_CLOCKS[name]


class Timer:
    """``with Timer() as t: ...`` then ``t.seconds``; synchronises CUDA when asked. ``clock``: ``"wall"``
    (``time.perf_counter``) or ``"process"`` (``time.process_time``, as in :func:`time_ms`)."""

    def __init__(self, cuda_sync: bool = False, clock: str = "wall"):
        self.cuda_sync = cuda_sync
        self._clock = _clock("clock", clock)
        self.seconds = float("nan")

    def _sync(self) -> None:
        if self.cuda_sync:
            _cuda_sync()

    def __enter__(self) -> "Timer":
        self._sync()
        self._start = self._clock()
        return self

    def __exit__(self, *exc) -> None:
        self._sync()
        self.seconds = self._clock() - self._start


def time_ms(fn: Callable[[], object], device="cpu", *, warmup: int = 25, rep: int = 100,
            cpu_warmup: int = 1, cpu_reps: int = 5, cpu_clock: str = "wall", grad_to_none=None) -> float:
    """Median milliseconds of ``fn()``.

    On a CUDA ``device``: ``triton.testing.do_bench(fn, warmup, rep, return_mode="median")`` (``warmup``
    and ``rep`` are milliseconds there, as in Triton). Elsewhere: ``cpu_warmup`` untimed calls, then the
    median of ``cpu_reps`` calls on ``cpu_clock``: ``"wall"`` (``time.perf_counter``) or ``"process"``
    (``time.process_time``: the CPU time the process spent, which other processes sharing the cores do not
    inflate; the measure for single-threaded work judged on a shared machine; it sums every thread's time).
    """
    kind = device.type if hasattr(device, "type") else str(device).split(":")[0]
    if kind == "cuda":
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, grad_to_none=grad_to_none,
                                             return_mode="median"))
    if cpu_reps < 1:
        raise ValueError(f"cpu_reps must be at least 1, got {cpu_reps}")
    clock = _clock("cpu_clock", cpu_clock)
    for _ in range(cpu_warmup):
        fn()
    times = []
    for _ in range(cpu_reps):
        start = clock()
        fn()
        times.append((clock() - start) * 1e3)
    return float(statistics.median(times))


def cuda_graph(fn: Callable[[], object], *, warmup: int = 3) -> Callable[[], None]:
    """``fn`` captured in a CUDA graph: its ``replay`` (the kernels of one ``fn()`` with no host in between).

    ``fn`` runs ``warmup`` times on a side stream first, as capture asks (autotuners, lazy allocations and
    compilation happen there, not in the graph). A ``fn`` that cannot be captured raises from here.
    """
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("cuda_graph needs a CUDA device")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


@contextlib.contextmanager
def limit_threads(n: int | None) -> Iterator[None]:
    """Use ``n`` torch intra-op CPU threads inside the block (``None``: leave as is), then restore.

    Small per-op work on a busy two-core machine only gains contention from intra-op threads.
    """
    if n is None:
        yield
        return
    import torch

    if int(n) < 1:
        raise ValueError(f"limit_threads needs n >= 1 or None, got {n}")
    old = torch.get_num_threads()
    torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(old)

"""A wall-clock timer for notebooks and CLIs (GPU speed is measured in benchmarks/ with do_bench)."""

from __future__ import annotations

import time


class Timer:
    """``with Timer() as t: ...`` then ``t.seconds``; synchronises CUDA when asked."""

    def __init__(self, cuda_sync: bool = False):
        self.cuda_sync = cuda_sync
        self.seconds = float("nan")

    def _sync(self) -> None:
        if self.cuda_sync:
            import torch

            if torch.cuda.is_available():
                torch.cuda.synchronize()

    def __enter__(self) -> "Timer":
        self._sync()
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self._sync()
        self.seconds = time.perf_counter() - self._start

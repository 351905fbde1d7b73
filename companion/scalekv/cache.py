"""Cache policies: when and how a layer's KV cache is compressed after each scale (paper 03, Sec. 3.4).

Faithful to the official ``scale_kv.py::ScaleKVCluster.update_kv`` (StargazerX0/ScaleKV @ eb0615a):

* nothing happens while the cache is at most ``base_capacity`` (= ``B_uniform``) long and no
  compression has happened yet; afterwards every step compresses to its layer/scale capacity;
* the last scale uses the previous scale's capacity and clears the flag (next image starts fresh);
* a cache no longer than its capacity is left alone;
* the observation window is the ``window_size`` (16) centroids of a ``sqrt(W) x sqrt(W)`` grid of
  patches over the current map (row ``i * (H / g) + (H / g - 1) // 2``), or the last ``W`` cache
  entries when the map is smaller than the grid; the window queries are the current map's queries
  at those positions (clamped to the map, as the code does);
* selection: :func:`companion_kernels.scalekv_select.scalekv_select` (window scores, window keys
  excluded, ``max_pool1d(kernel 5)``, top-k plus the window, sorted by position). ``capacity <
  |W|`` keeps the window only, as the code intends (its branch for that case never assigns the
  indices and would fail; our budgets never ask for it).

Baseline selectors at the same capacities: ``streaming`` (StreamingLLM: the first ``n_sink`` = 4
cache entries plus the most recent) and ``recent`` (sliding window).

Deviation: the official patch recomputes the queries from ``mat_qkv`` without the query bias, the
cosine normalisation and RoPE, while the cached keys have all three; we score with the queries the
layer actually attended with (a mismatch we read as an oversight, not a design choice).
"""

from __future__ import annotations

import math

import torch

from companion.core import ParameterError, check_int
from companion.scalekv.budgets import Budgets
from companion.scalekv.model import LayerCache
from companion.scalekv.schedule import map_sizes

__all__ = ["CachePolicy", "window_positions"]


def window_positions(side: int, start: int, key_len: int, window_size: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """Observation window of the current ``side x side`` map that starts at cache index ``start``.

    Returns ``(cache_indices [W], query_indices [W])``: patch centroids of a ``g x g`` grid
    (``g = sqrt(window_size)``), or the last ``min(W, key_len)`` cache entries when ``side < g``.
    """
    g = math.isqrt(window_size)
    if g * g != window_size:
        raise ParameterError("window_size", window_size, "a perfect square (the window is a g x g grid of patch centroids; the paper uses 16)")
    if side >= g:
        patch = side // g
        centre = [min(side - 1, max(0, i * patch + (patch - 1) // 2)) for i in range(g)]
        local = torch.tensor([r * side + c for r in centre for c in centre], dtype=torch.long)
        local = torch.unique(local)
        glob = local + start
    else:
        w = min(window_size, key_len)
        glob = torch.arange(key_len - w, key_len, dtype=torch.long)
        local = glob - start
    return glob, local.clamp(0, side * side - 1)


class CachePolicy:
    """Applies a :class:`~companion.scalekv.budgets.Budgets` table during :func:`~companion.scalekv.model.generate`."""

    def __init__(self, budgets: Budgets, *, window_size: int = 16, kernel_size: int = 5, score: str = "logits",
                 n_sink: int = 4, impl: str = "auto"):
        if not isinstance(budgets, Budgets):
            raise TypeError(f"budgets must be a Budgets table, got {type(budgets).__name__}")
        self.budgets = budgets
        self.window_size = check_int("window_size", window_size, lo=1)
        if math.isqrt(window_size) ** 2 != window_size:
            raise ParameterError("window_size", window_size, "a perfect square (the paper uses 16)")
        self.kernel_size = check_int("kernel_size", kernel_size, lo=1)
        self.score, self.n_sink, self.impl = score, check_int("n_sink", n_sink, lo=0), impl
        self.sizes = map_sizes(budgets.sides)
        self.reached: list[bool] = []

    @property
    def name(self) -> str:
        return self.budgets.method

    def reset(self, layers: int) -> None:
        if layers != self.budgets.layers:
            raise ValueError(f"the budget table has {self.budgets.layers} layers but the model has {layers}")
        self.reached = [False] * layers

    def capacity(self, layer: int, scale: int) -> int:
        nk = len(self.sizes)
        return int(self.budgets.table[layer, scale if scale < nk - 1 else nk - 2])

    def compress(self, layer: int, scale: int, cache: LayerCache, q: torch.Tensor) -> None:
        """Compress ``cache`` in place after step ``scale``; ``q [B, H, |r_k|, D]`` are that step's queries."""
        key_len = cache.length
        if key_len <= self.budgets.base and not self.reached[layer]:
            return
        self.reached[layer] = True
        cap = self.capacity(layer, scale)
        if scale == len(self.sizes) - 1:
            self.reached[layer] = False
        if key_len <= cap:
            return
        b, h = cache.k.shape[:2]
        sel = self.budgets.selector
        if sel == "snapkv":
            side = self.budgets.sides[scale]
            start = key_len - self.sizes[scale]
            glob, local = window_positions(side, start, key_len, self.window_size)
            glob, local = glob.to(q.device), local.to(q.device)
            cap = max(cap, glob.numel())
            from companion_kernels.scalekv_select import scalekv_select

            qw = q.index_select(2, local).contiguous()
            kk, vv, idx = scalekv_select(qw, cache.k.contiguous(), cache.v.contiguous(), glob, cap,
                                         kernel_size=self.kernel_size, score=self.score, impl=self.impl)
            cache.k, cache.v = kk, vv
            cache.pos = torch.gather(cache.pos, 2, idx)
            return
        if sel == "streaming":
            sink = min(self.n_sink, cap)
            idx = torch.cat([torch.arange(sink), torch.arange(key_len - (cap - sink), key_len)])
        elif sel == "recent":
            idx = torch.arange(key_len - cap, key_len)
        else:
            raise ValueError(f"unknown selector {sel!r}")
        idx = idx.to(cache.k.device)
        cache.k, cache.v, cache.pos = cache.k[:, :, idx], cache.v[:, :, idx], cache.pos[:, :, idx]

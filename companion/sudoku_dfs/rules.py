"""Batched rule engine: naked and hidden singles for many boards at once, in numpy (CPU) or torch (GPU).

Paper 06 (arXiv 2509.22023), Section 3.1: the rules are naked singles (a cell with one candidate)
and hidden singles (a value with one possible cell in a row, column or box). The official C code
keeps four candidate bitmask tables and fires a rule when a popcount is 1. Here every board is a row
of cell bitmasks (bit v-1 = value v still possible) and every step is a gather or a bitwise
operation over ``[B, cells]`` / ``[B, units, n]`` integer arrays: the values placed in each unit
are an OR over the unit's cells, a hidden single is a bit seen exactly once in a unit (an
"at least once" / "at least twice" pair of OR-accumulators), popcounts come from a lookup table. So
thousands of boards propagate in lockstep, on the CPU or the GPU.

``propagate`` applies *all* singles of a board at once and repeats to a fixpoint. For a board whose
remaining moves are all correct (any sub-board of a unique-solution puzzle), the fixpoint equals the
one reached by applying singles one at a time in any order, because applying a correct single only
removes candidates. That is what backdoor enumeration needs (:mod:`companion.sudoku_dfs.backdoors`); the
sequential engine in :mod:`companion.sudoku_dfs.solver` is the reference the tests compare against.

Status codes are :class:`companion.sudoku_dfs.board.Status` stored as int8: ``OPEN`` (stuck: no rule
applies, board incomplete), ``SOLVED``, ``CONTRADICTION``
(an empty cell without candidates, a value with no place in a unit lacking it, one cell forced to two
values, or one value forced into two cells of a unit).

Backends: numpy arrays (and lists) run in numpy, which is single-threaded and so does not fight
another process for the two CPU cores the way torch's intra-op threads do; torch tensors (or
``device="cuda"``) run in torch, on the tensor's device. Both run the same code below. Nothing here
imports plotly; the GPU benchmark uses :func:`propagate` directly.
"""

from __future__ import annotations

import numpy as np
import torch

from companion.sudoku_dfs.board import Status, geometry


_TABLES: dict = {}


class _NP:
    """The handful of array operations the engine needs, for numpy."""

    name = "numpy"

    @staticmethod
    def tables(n):
        key = ("np", n)
        if key not in _TABLES:
            g = geometry(n)
            value = np.zeros(1 << n, dtype=np.int64)
            for v in range(1, n + 1):
                value[1 << (v - 1)] = v
            pop = np.array([bin(i).count("1") for i in range(1 << n)], dtype=np.int32)
            _TABLES[key] = (np.array(g.units), np.array(g.cell_units), pop, value)
        return _TABLES[key]

    zeros_like = staticmethod(np.zeros_like)
    where = staticmethod(np.where)

    @staticmethod
    def last_first(x):
        return np.ascontiguousarray(np.moveaxis(x, -1, 0))

    @staticmethod
    def copy(x):
        return x.copy()

    @staticmethod
    def status(size, like):
        return np.full(size, int(Status.OPEN), dtype=np.int8)

    @staticmethod
    def nonzero(mask):
        return np.flatnonzero(mask)

    @staticmethod
    def ones_bool(size, like):
        return np.ones(size, dtype=bool)

    @staticmethod
    def cast_like(x, like):
        return x.astype(like.dtype)


class _TORCH:
    """The same operations for torch tensors (any device)."""

    name = "torch"

    @staticmethod
    def tables(n, device):
        key = ("torch", n, str(device))
        if key not in _TABLES:
            units, cell_units, pop, value = _NP.tables(n)
            _TABLES[key] = tuple(torch.as_tensor(np.array(a), device=device) for a in (units, cell_units, pop, value))
        return _TABLES[key]

    zeros_like = staticmethod(torch.zeros_like)
    where = staticmethod(torch.where)

    @staticmethod
    def last_first(x):
        return x.movedim(-1, 0).contiguous()

    @staticmethod
    def copy(x):
        return x.clone()

    @staticmethod
    def status(size, like):
        return torch.full((size,), int(Status.OPEN), dtype=torch.int8, device=like.device)

    @staticmethod
    def nonzero(mask):
        return mask.nonzero().squeeze(1)

    @staticmethod
    def ones_bool(size, like):
        return torch.ones(size, dtype=torch.bool, device=like.device)

    @staticmethod
    def cast_like(x, like):
        return x.to(like.dtype)


def _prepare(boards, device=None):
    """``(boards as int32 array/tensor, backend, n)``; numpy unless given a tensor or a device."""
    if isinstance(boards, torch.Tensor) or device is not None:
        t = boards if isinstance(boards, torch.Tensor) else torch.as_tensor(np.array(boards, dtype=np.int32))
        if device is not None:
            t = t.to(device)
        arr, xp = t.to(torch.int32), _TORCH
    else:
        arr, xp = np.array(boards, dtype=np.int32), _NP
    if arr.ndim != 2 or arr.shape[1] not in (16, 81):
        raise ValueError(f"boards must have shape [B, 16] or [B, 81], got {tuple(arr.shape)}")
    if arr.shape[0] and (int(arr.min()) < 0 or int(arr.max()) > (4 if arr.shape[1] == 16 else 9)):
        raise ValueError("board values must be 0 (empty) or 1..n")
    return arr, xp, (4 if arr.shape[1] == 16 else 9)


def _tables_for(xp, n, arr):
    return xp.tables(n) if xp is _NP else xp.tables(n, arr.device)


def _or_over_last(xp, x):
    """(OR, bits seen at least twice) over the last dimension of an int array of bitmasks."""
    xs = xp.last_first(x)
    once = xp.copy(xs[0])
    twice = xp.zeros_like(once)
    for k in range(1, xs.shape[0]):
        m = xs[k]
        twice |= once & m
        once |= m
    return once, twice


def _analyze(b, xp, n):
    units, cell_units, popcount, _ = _tables_for(xp, n, b)
    full = (1 << n) - 1
    empty = b == 0
    zero = xp.zeros_like(b)
    bits = xp.where(empty, zero, (zero + 1) << ((b - 1) * (~empty)))
    placed, dup_bits = _or_over_last(xp, bits[:, units])  # [B, 3n]
    pc = placed[:, cell_units]  # [B, N, 3]
    blocked = pc[..., 0] | pc[..., 1] | pc[..., 2]
    cand = xp.where(empty, ~blocked & full, zero)
    ncand = popcount[cand]
    once, twice = _or_over_last(xp, cand[:, units])  # [B, 3n]
    missing = (full & ~placed & ~once) != 0
    single = once & ~twice
    sc = single[:, cell_units]
    hidden = cand & (sc[..., 0] | sc[..., 1] | sc[..., 2])
    naked = xp.where(empty & (ncand == 1), cand, zero)
    forced = naked | hidden
    _, forced_twice = _or_over_last(xp, forced[:, units])
    dup = (dup_bits != 0).any(1)
    contradiction = (
        dup | (empty & (ncand == 0)).any(1) | missing.any(1) | (popcount[forced] > 1).any(1) | (forced_twice != 0).any(1)
    )
    solved = ~empty.any(1) & ~dup
    status = xp.status(b.shape[0], b)
    status[solved] = int(Status.SOLVED)
    status[contradiction] = int(Status.CONTRADICTION)
    return cand, forced, status


def _bits_to_bool(masks, n):
    if isinstance(masks, torch.Tensor):
        shifts = torch.arange(n, device=masks.device, dtype=masks.dtype)
        return ((masks.unsqueeze(-1) >> shifts) & 1).bool()
    return ((masks[..., None] >> np.arange(n, dtype=masks.dtype)) & 1).astype(bool)


def analyze(boards, device=None):
    """Candidates, forced moves and status of every board.

    Returns ``cand [B, N, n] bool``, ``forced [B, N, n] bool`` (every naked and hidden single) and
    ``status [B] int8``.
    """
    b, xp, n = _prepare(boards, device)
    cand, forced, status = _analyze(b, xp, n)
    return _bits_to_bool(cand, n), _bits_to_bool(forced, n), status


def propagate(boards, device=None, max_iters: int | None = None):
    """Apply all singles to a fixpoint, for every board at once.

    Returns ``(boards [B, N] int32, status [B] int8, iterations)``; the input is not modified.
    """
    b, xp, n = _prepare(boards, device)
    b = xp.copy(b)
    N = b.shape[1]
    max_iters = max_iters or N + 1
    value_of = _tables_for(xp, n, b)[3]
    active = xp.ones_bool(b.shape[0], b)
    status = xp.status(b.shape[0], b)
    it = 0
    while it < max_iters:
        idx = xp.nonzero(active)
        if idx.shape[0] == 0:
            break
        sub = b[idx]
        _, forced, st = _analyze(sub, xp, n)
        status[idx] = st
        fires = (forced != 0) & (st == int(Status.OPEN))[:, None]
        moving = fires.any(1)
        sub = xp.where(fires, xp.cast_like(value_of[forced], sub), sub)
        b[idx] = sub
        active[idx[~moving]] = False
        it += 1
    if bool(active.any()):  # a last status for boards still moving at the iteration cap
        idx = xp.nonzero(active)
        status[idx] = _analyze(b[idx], xp, n)[2]
    return b, status, it

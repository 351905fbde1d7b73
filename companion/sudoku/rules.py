"""Batched rule engine: naked and hidden singles for many boards at once, in torch (CPU or GPU).

Paper 06 (arXiv 2509.22023), Section 3.1: the rules are naked singles (a cell with one candidate)
and hidden singles (a value with one possible cell in a row, column or box). The official C code
keeps four candidate bitmask tables and fires a rule when a popcount is 1. Here every board is a row
of cell bitmasks (bit v-1 = value v still possible) and every step is a gather or a bitwise
operation over ``[B, cells]`` / ``[B, units, n]`` integer tensors: the values placed in each unit
are an OR over the unit's cells, a hidden single is a bit seen exactly once in a unit (an
"at least once" / "at least twice" pair of OR-accumulators), popcounts come from a lookup table. So
thousands of boards propagate in lockstep, on the CPU or the GPU.

``propagate`` applies *all* singles of a board at once and repeats to a fixpoint. For a board whose
remaining moves are all correct (any sub-board of a unique-solution puzzle), the fixpoint equals the
one reached by applying singles one at a time in any order, because applying a correct single only
removes candidates. That is what backdoor enumeration needs (:mod:`companion.sudoku.backdoors`); the
sequential engine in :mod:`companion.sudoku.solver` is the reference the tests compare against.

Status codes: ``OPEN`` (stuck: no rule applies, board incomplete), ``SOLVED``, ``CONTRADICTION``
(an empty cell without candidates, a value with no place in a unit lacking it, one cell forced to two
values, or one value forced into two cells of a unit).

Nothing here imports plotly; the GPU benchmark uses :func:`propagate` directly.
"""

from __future__ import annotations

import numpy as np
import torch

from companion.sudoku.board import geometry

OPEN, SOLVED, CONTRADICTION = 0, 1, 2
STATUS_NAMES = {OPEN: "open", SOLVED: "solved", CONTRADICTION: "contradiction"}

_TABLES: dict = {}


def _tables(n: int, device):
    """Index tables of the bitmask engine: unit cells, cell units, popcount and bit -> value."""
    key = (n, str(device))
    if key not in _TABLES:
        g = geometry(n)
        units = torch.tensor(g.units, dtype=torch.long, device=device)  # [3n, n]
        cell_units = torch.tensor(g.cell_units, dtype=torch.long, device=device)  # [N, 3]
        popcount = torch.tensor([bin(i).count("1") for i in range(1 << n)], dtype=torch.int32, device=device)
        value = torch.zeros(1 << n, dtype=torch.long, device=device)
        for v in range(1, n + 1):
            value[1 << (v - 1)] = v
        _TABLES[key] = (units, cell_units, popcount, value)
    return _TABLES[key]


def _as_boards(boards, device=None) -> torch.Tensor:
    if isinstance(boards, torch.Tensor):
        t = boards
    else:
        t = torch.as_tensor(np.array(boards, dtype=np.int64))
    if t.ndim != 2 or t.shape[1] not in (16, 81):
        raise ValueError(f"boards must have shape [B, 16] or [B, 81], got {tuple(t.shape)}")
    if device is not None:
        t = t.to(device)
    return t.long()


def _or_over_last(x: torch.Tensor):
    """(OR, bits seen at least twice) over the last dimension of an int tensor of bitmasks."""
    xs = x.movedim(-1, 0).contiguous()
    once = xs[0].clone()
    twice = torch.zeros_like(once)
    for k in range(1, xs.shape[0]):
        m = xs[k]
        twice |= once & m
        once |= m
    return once, twice


def analyze_bits(boards, device=None):
    """Bitmask analysis of every board: ``(cand [B, N], forced [B, N], status [B])``.

    ``cand[b, c]`` has bit v-1 set when v is a candidate of the empty cell c; ``forced[b, c]`` has the
    bits of every single (naked or hidden) that fires in c.
    """
    b = _as_boards(boards, device)
    N = b.shape[1]
    n = 4 if N == 16 else 9
    units, cell_units, popcount, _ = _tables(n, b.device)
    full = (1 << n) - 1
    b32 = b.to(torch.int32)
    empty = b32 == 0
    bits = torch.where(empty, torch.zeros_like(b32), torch.ones_like(b32) << (b32 - 1).clamp(min=0))
    placed, dup_bits = _or_over_last(bits[:, units])  # [B, 3n]
    pc = placed[:, cell_units]  # [B, N, 3]
    blocked = pc[..., 0] | pc[..., 1] | pc[..., 2]
    cand = torch.where(empty, ~blocked & full, torch.zeros_like(blocked))
    ncand = popcount[cand.long()]
    once, twice = _or_over_last(cand[:, units])  # [B, 3n]
    missing = (full & ~placed & ~once) != 0
    single = once & ~twice
    sc = single[:, cell_units]
    hidden = cand & (sc[..., 0] | sc[..., 1] | sc[..., 2])
    naked = torch.where(empty & (ncand == 1), cand, torch.zeros_like(cand))
    forced = naked | hidden
    _, forced_twice = _or_over_last(forced[:, units])
    contradiction = (
        (dup_bits != 0).any(1)
        | (empty & (ncand == 0)).any(1)
        | missing.any(1)
        | (popcount[forced.long()] > 1).any(1)
        | (forced_twice != 0).any(1)
    )
    solved = ~empty.any(1) & ~(dup_bits != 0).any(1)
    status = torch.full((b.shape[0],), OPEN, dtype=torch.int8, device=b.device)
    status[solved] = SOLVED
    status[contradiction] = CONTRADICTION
    return cand, forced, status


def _bits_to_bool(masks: torch.Tensor, n: int) -> torch.Tensor:
    shifts = torch.arange(n, device=masks.device, dtype=masks.dtype)
    return ((masks.unsqueeze(-1) >> shifts) & 1).bool()


def analyze(boards, device=None):
    """Candidates, forced moves and status of every board.

    Returns ``cand [B, N, n] bool``, ``forced [B, N, n] bool`` (every naked and hidden single) and
    ``status [B] int8``.
    """
    b = _as_boards(boards, device)
    n = 4 if b.shape[1] == 16 else 9
    cand, forced, status = analyze_bits(b)
    return _bits_to_bool(cand, n), _bits_to_bool(forced, n), status


def propagate(boards, device=None, max_iters: int | None = None):
    """Apply all singles to a fixpoint, for every board at once.

    Returns ``(boards [B, N] long, status [B] int8, iterations)``. The input is not modified.
    """
    b = _as_boards(boards, device).clone()
    N = b.shape[1]
    max_iters = max_iters or N + 1
    value_of = _tables(4 if N == 16 else 9, b.device)[3]
    active = torch.ones(b.shape[0], dtype=torch.bool, device=b.device)
    status = torch.full((b.shape[0],), OPEN, dtype=torch.int8, device=b.device)
    it = 0
    while it < max_iters:
        idx = active.nonzero().squeeze(1)
        if idx.numel() == 0:
            break
        sub = b[idx]
        _, forced, st = analyze_bits(sub)
        status[idx] = st
        fires = (forced != 0) & (st == OPEN).unsqueeze(1)
        moving = fires.any(1)
        sub = torch.where(fires, value_of[forced.long()], sub)
        b[idx] = sub
        active[idx[~moving]] = False
        it += 1
    if active.any():  # a last status for boards that were still moving at the iteration cap
        idx = active.nonzero().squeeze(1)
        status[idx] = analyze_bits(b[idx])[2]
    return b, status, it


def candidate_moves(boards) -> list[list[tuple[int, int]]]:
    """For each board, every (cell, value) that does not conflict with a placed value."""
    cand, _, _ = analyze(boards)
    out = []
    for c in cand.cpu().numpy():
        cells, vals = np.nonzero(c)
        out.append([(int(x), int(v) + 1) for x, v in zip(cells, vals)])
    return out

"""Backdoors and the two guessing oracles (paper 06, Section 4 and App. D/E).

Paper: Giannoulis, Pantis, Tzamos, NeurIPS 2025 (arXiv 2509.22023).

After the rules reach their fixpoint a puzzle is either solved or *stuck*. A **backdoor** of a stuck
puzzle is a move (cell, value) such that placing it and running the rules to a fixpoint solves the
puzzle. In the one-level-guessing-with-restarts setting a policy that guesses the move ``i`` with
probability ``p_i`` succeeds on each trial with probability ``p(S) = sum_{i in S} p_i`` (S = the
backdoor set), so its expected number of guesses is ``1 / p(S)`` (a geometric number of trials).

The two oracles the paper compares the learned guesser against:

* **upper-bound oracle** ("random empty cell with its correct value"): pick an empty cell of the
  fixpoint board uniformly and write its correct value; ``p(S) = |S| / #empty cells`` (every backdoor
  is a correct value, one per cell, because the solution is unique).
* **lower-bound oracle** ("any non-conflicting move"): pick a candidate move uniformly;
  ``p(S) = |S| / #candidate moves``. It is the pessimistic curve.

Enumeration is batched (:func:`companion.sudoku_dfs.rules.propagate`): every candidate move of every
stuck puzzle becomes its own board, all boards propagate in lockstep. ``backdoors_reference`` does
the same one board at a time with the sequential engine and is the test oracle.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from companion.sudoku_dfs.board import Status, board_size, parse_board
from companion.sudoku_dfs.rules import analyze, propagate
from companion.sudoku_dfs.solver import State


@dataclass
class BackdoorInfo:
    """What the rules leave of one puzzle and which moves are backdoors."""

    puzzle: tuple
    fixpoint: tuple  # the board after the rules
    status: Status  # SOLVED by rules alone, OPEN (a guess is needed), or CONTRADICTION
    moves: list  # candidate (cell, value) moves at the fixpoint (empty when solved)
    backdoor: np.ndarray  # bool per move

    @property
    def n_empty(self) -> int:
        return sum(1 for v in self.fixpoint if v == 0)

    @property
    def n_backdoors(self) -> int:
        return int(self.backdoor.sum())

    @property
    def needs_guess(self) -> bool:
        return self.status == Status.OPEN

    def oracle_p(self, which: str) -> float:
        """Success probability of one trial of the ``"upper"`` or ``"lower"`` oracle."""
        if which == "upper":
            return self.n_backdoors / self.n_empty if self.n_empty else 1.0
        if which == "lower":
            return self.n_backdoors / len(self.moves) if self.moves else 1.0
        raise ValueError(f"oracle must be 'upper' or 'lower', got {which!r}")


def find_backdoors(puzzles, device=None, chunk: int = 50_000) -> list[BackdoorInfo]:
    """Backdoor sets of many puzzles (strings or sequences of one size), batched."""
    boards = [parse_board(p) for p in puzzles]
    if not boards:
        return []
    n = board_size(boards[0])
    if any(len(b) != n * n for b in boards):
        raise ValueError("all puzzles must have the same size")
    fix, status, _ = propagate(np.array(boards), device=device)
    cand, _, _ = analyze(fix)
    fix_np, status_np, cand_np = (_numpy(x) for x in (fix, status, cand))
    per_puzzle_moves = []
    trial_boards = []
    for i in range(len(boards)):
        if status_np[i] != Status.OPEN:
            per_puzzle_moves.append([])
            continue
        cells, vals = np.nonzero(cand_np[i])
        moves = [(int(c), int(v) + 1) for c, v in zip(cells, vals)]
        per_puzzle_moves.append(moves)
        for c, v in moves:
            b = fix_np[i].copy()
            b[c] = v
            trial_boards.append(b)
    solved_flags = np.zeros(len(trial_boards), dtype=bool)
    for start in range(0, len(trial_boards), chunk):
        batch = np.stack(trial_boards[start : start + chunk])
        _, st, _ = propagate(batch, device=device)
        solved_flags[start : start + chunk] = _numpy(st) == Status.SOLVED
    out = []
    k = 0
    for i, b in enumerate(boards):
        moves = per_puzzle_moves[i]
        flags = solved_flags[k : k + len(moves)]
        k += len(moves)
        out.append(BackdoorInfo(b, tuple(int(x) for x in fix_np[i]), Status(int(status_np[i])), moves, flags.copy()))
    return out


def _numpy(x) -> np.ndarray:
    return x.cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def backdoors_reference(puzzle) -> BackdoorInfo:
    """The same as :func:`find_backdoors` for one puzzle, with the sequential engine (test oracle)."""
    b = parse_board(puzzle)
    st = State.from_board(b)
    status = st.propagate()
    fix = tuple(st.board)
    if status != Status.OPEN:
        return BackdoorInfo(b, fix, status, [], np.zeros(0, dtype=bool))
    moves = []
    for cell, m in enumerate(st.cand):
        if st.board[cell] == 0:
            for v in range(1, st.g.n + 1):
                if m >> (v - 1) & 1:
                    moves.append((cell, v))
    flags = []
    for cell, v in moves:
        child = st.copy()
        child.place(cell, v)
        flags.append(child.propagate() == Status.SOLVED)
    return BackdoorInfo(b, fix, status, moves, np.array(flags, dtype=bool))


def expected_guesses(p_success) -> np.ndarray:
    """Expected number of guesses ``1 / p(S)`` of a one-level guesser with restarts (inf when p = 0)."""
    p = np.asarray(p_success, dtype=float)
    with np.errstate(divide="ignore"):
        return np.where(p > 0, 1.0 / np.maximum(p, 1e-300), np.inf)


def cumulative_guess_curve(expected, grid) -> np.ndarray:
    """Share of puzzles whose expected number of guesses is <= each value of ``grid``."""
    e = np.asarray(expected, dtype=float)
    return np.array([(e <= g).mean() if e.size else np.nan for g in grid])

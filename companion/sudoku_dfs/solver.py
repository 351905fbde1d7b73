"""Sequential rules, the DFS transcript generator and an exact solution counter (paper 06, Section 3).

Paper: Giannoulis, Pantis, Tzamos, NeurIPS 2025 (arXiv 2509.22023), Sections 3.1-3.3 and App. F.

**Rules** (the only deductions the model imitates): naked singles (a cell with one candidate) and
hidden singles (a value with one possible cell in a row, a column or a box).

**DFS transcript** (one sequence per puzzle): the clues in cell order, ``100``; then repeatedly one
forced move (sampled uniformly) while the rules apply; ``0`` when the board is complete; ``102`` on a
contradiction; otherwise ``101``, the level token, and a guess: among the empty cells with the fewest
candidates one cell is sampled and its values are tried in shuffled order, each value opening a
deeper level; after a failed value the board is restored, the level token is repeated and the next
value follows; when no value is left the level itself fails with ``102``.

**Labels** (multi-target): at a rule step the label set is *every* forced move; at a guess node it is
every (cell, value) of every minimum-candidate cell; after a backtrack the next value of the same
cell is the only label; ``0``/``101``/``102``/level tokens are single labels. ``Transcript.choices[i]``
is the label set of ``tokens[i]`` (``None`` for the clues, which are given, not predicted).

Faithfulness to the official C code (``sudoku_tools/src/sudoku_path.c``), rewritten here in Python:
same vocabulary, same order of events, same sampling (a forced move uniformly among all forced moves;
a guess cell uniformly among the minimum-candidate cells, values shuffled), same contradiction
test (an empty cell without candidates, or a value with no possible cell in a unit that lacks it).
Deviation: when one cell is forced to two different values by two rules (a contradictory state the C
code keeps only the last of), both moves are in the label set here; the next step then reports the
contradiction, as in the C code.

Everything is bounded: ``max_steps`` limits the rule/branch steps of every search and raises
:class:`~companion.sudoku_dfs.board.StepLimitExceeded`, so adversarial input cannot hang a notebook.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from companion.core import check_int
from companion.sudoku_dfs.board import (
    DEAD_END,
    GUESS,
    SOLVED,
    START,
    Status,
    StepLimitExceeded,
    SudokuError,
    board_size,
    final_board,
    find_conflict,
    geometry,
    move_token,
    parse_board,
)

_POP = [bin(i).count("1") for i in range(1 << 9)]
_LOWBIT_VALUE = {1 << k: k + 1 for k in range(9)}


def _values(mask: int) -> list[int]:
    out = []
    v = 1
    while mask:
        if mask & 1:
            out.append(v)
        mask >>= 1
        v += 1
    return out


# ------------------------------------------------------------------------------------ state
class State:
    """A board with candidate bitmasks (bit v-1 of ``cand[cell]`` set when v is still possible)."""

    __slots__ = ("g", "board", "cand")

    def __init__(self, g, board, cand):
        self.g, self.board, self.cand = g, board, cand

    @classmethod
    def from_board(cls, board) -> "State":
        """The state of a parsed board; raises SudokuError for contradictory clues."""
        conflict = find_conflict(board)
        if conflict:
            raise SudokuError(f"contradictory clues: {conflict}")
        g = geometry(board_size(board))
        b = list(board)
        cand = [0 if v else g.full for v in b]
        st = cls(g, b, cand)
        for cell, v in enumerate(b):
            if v:
                bit = ~(1 << (v - 1))
                for p in g.peers[cell]:
                    cand[p] &= bit
        return st

    def copy(self) -> "State":
        return State(self.g, self.board[:], self.cand[:])

    def place(self, cell: int, value: int) -> None:
        """Write ``value`` into ``cell`` and remove it from the peers' candidates."""
        self.board[cell] = value
        self.cand[cell] = 0
        bit = ~(1 << (value - 1))
        cand = self.cand
        for p in self.g.peers[cell]:
            cand[p] &= bit

    def analyze(self):
        """``(status, forced)``: a :class:`~companion.sudoku_dfs.board.Status`; forced = sorted (cell, value).

        A contradiction is an empty cell with no candidate or a value that has no possible cell in a
        unit that does not contain it yet. ``forced`` lists every naked and hidden single.
        """
        g, board, cand = self.g, self.board, self.cand
        forced = set()
        any_empty = False
        for cell, m in enumerate(cand):
            if board[cell] == 0:
                any_empty = True
                if m == 0:
                    return Status.CONTRADICTION, []
                if m & (m - 1) == 0:
                    forced.add((cell, _LOWBIT_VALUE[m]))
        if not any_empty:
            return Status.SOLVED, []
        full = g.full
        for unit in g.units:
            once = twice = placed = 0
            for cell in unit:
                v = board[cell]
                if v:
                    placed |= 1 << (v - 1)
                else:
                    m = cand[cell]
                    twice |= once & m
                    once |= m
            if (full & ~placed) & ~once:
                return Status.CONTRADICTION, []
            single = once & ~twice
            if single:
                for cell in unit:
                    hit = cand[cell] & single
                    while hit:
                        low = hit & -hit
                        forced.add((cell, _LOWBIT_VALUE[low]))
                        hit ^= low
        return Status.OPEN, sorted(forced)

    def min_candidate_moves(self) -> list[tuple[int, int]]:
        """Every (cell, value) of the empty cells with the fewest candidates (the guess labels)."""
        best = 99
        cells = []
        for cell, m in enumerate(self.cand):
            if self.board[cell] == 0:
                k = _POP[m]
                if k < best:
                    best, cells = k, [cell]
                elif k == best:
                    cells.append(cell)
        return [(cell, v) for cell in cells for v in _values(self.cand[cell])]

    def propagate(self, max_steps: int = 10_000) -> Status:
        """Apply all singles to a fixpoint (in place); returns the final status (``Status.OPEN`` = stuck)."""
        for _ in range(max_steps):
            status, forced = self.analyze()
            if status != Status.OPEN or not forced:
                return status
            for cell, v in forced:
                if self.board[cell]:
                    if self.board[cell] != v:
                        return Status.CONTRADICTION
                    continue
                if not self.cand[cell] >> (v - 1) & 1:
                    return Status.CONTRADICTION
                self.place(cell, v)
        raise StepLimitExceeded(f"propagation did not reach a fixpoint in {max_steps} steps")


# ------------------------------------------------------------------------------- exact search
class StepBudget:
    """A step counter shared by one search: :meth:`spend` raises StepLimitExceeded past ``limit``."""

    __slots__ = ("left", "limit")

    def __init__(self, limit: int):
        self.left = self.limit = limit

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise StepLimitExceeded(f"the search exceeded its step limit of {self.limit} steps")


def search(st: State, limit: int, budget: StepBudget, rng: random.Random | None, out: list) -> None:
    """Depth-first search from ``st`` (propagation, then branching on a minimum-candidate cell),
    appending solved boards to ``out`` until it holds ``limit``; ``rng`` shuffles the values tried
    (None: ascending). ``st`` is modified; every node spends one step of ``budget``."""
    budget.spend()
    status = st.propagate()
    if status == Status.CONTRADICTION:
        return
    if status == Status.SOLVED:
        out.append(tuple(st.board))
        return
    best, best_cell = 99, -1
    for cell, m in enumerate(st.cand):
        if st.board[cell] == 0:
            k = _POP[m]
            if k < best:
                best, best_cell = k, cell
                if k == 2:
                    break
    vals = _values(st.cand[best_cell])
    if rng is not None:
        rng.shuffle(vals)
    for v in vals:
        child = st.copy()
        child.place(best_cell, v)
        search(child, limit, budget, rng, out)
        if len(out) >= limit:
            return


def solutions(board, limit: int = 2, max_steps: int = 200_000, rng: random.Random | None = None) -> list[tuple]:
    """Up to ``limit`` solutions of ``board`` (a string or sequence), by propagation + MRV branching."""
    b = parse_board(board)
    check_int("limit", limit, lo=1)
    st = State.from_board(b)
    out: list = []
    search(st, limit, StepBudget(max_steps), rng, out)
    return out


def count_solutions(board, limit: int = 2, max_steps: int = 200_000) -> int:
    """The number of solutions, counted up to ``limit``."""
    return len(solutions(board, limit=limit, max_steps=max_steps))


def has_solution(st: State, budget: StepBudget) -> bool:
    """Whether the state ``st`` (modified) has at least one completion."""
    out: list = []
    search(st, 1, budget, None, out)
    return bool(out)


def unique_solution(board, max_steps: int = 200_000) -> tuple:
    """The solution of a puzzle; SudokuError saying "no solution" or "several solutions" otherwise."""
    b = parse_board(board)
    conflict = find_conflict(b)
    if conflict:
        raise SudokuError(f"contradictory clues: {conflict}")
    sols = solutions(b, limit=2, max_steps=max_steps)
    if not sols:
        raise SudokuError("the puzzle has no solution (the clues are consistent, but no completion exists)")
    if len(sols) > 1:
        n = board_size(b)
        diff = [i for i in range(len(b)) if sols[0][i] != sols[1][i]]
        cells = ", ".join(f"r{i // n + 1}c{i % n + 1}" for i in diff[:4])
        raise SudokuError(f"the puzzle has several solutions (at least two, differing at {cells}{', ...' if len(diff) > 4 else ''})")
    return sols[0]


# ---------------------------------------------------------------------------------- transcripts
RULE, GUESS_MOVE, CLUE = "rule", "guess", "clue"


@dataclass
class Transcript:
    """A DFS transcript: tokens, the label set of every token, and what each token is.

    ``kinds[i]`` is one of ``clue, start, rule, guess-marker, level, guess, dead-end, solved``.
    ``choices[i]`` is the set of valid tokens at position i (None for clues and the start token);
    the training target of position t is ``choices[t + 1]``.
    """

    n: int
    puzzle: tuple
    tokens: list = field(default_factory=list)
    choices: list = field(default_factory=list)
    kinds: list = field(default_factory=list)
    solution: tuple | None = None

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def n_clues(self) -> int:
        return sum(1 for v in self.puzzle if v)

    @property
    def n_guesses(self) -> int:
        """Guess moves made (every value tried at a guess node counts)."""
        return sum(1 for k in self.kinds if k == "guess")

    @property
    def n_dead_ends(self) -> int:
        return sum(1 for k in self.kinds if k == "dead-end")

    @property
    def has_guess(self) -> bool:
        return GUESS in self.tokens

    @property
    def solved(self) -> bool:
        return bool(self.tokens) and self.tokens[-1] == SOLVED

    def targets(self) -> list:
        """The label set used as the training target at each position (empty where there is none)."""
        out = [frozenset(c) if c is not None else frozenset() for c in self.choices[1:]]
        return out + [frozenset()]


class _Emitter:
    def __init__(self, t: Transcript, max_tokens: int | None):
        self.t, self.max_tokens = t, max_tokens

    def emit(self, token, kind, choices):
        t = self.t
        t.tokens.append(token)
        t.kinds.append(kind)
        t.choices.append(None if choices is None else frozenset(choices))
        if self.max_tokens is not None and len(t.tokens) > self.max_tokens:
            raise _TooLong()


class _TooLong(Exception):
    pass


def dfs_transcript(
    puzzle,
    seed: int | random.Random | None = 0,
    levels: bool = True,
    max_tokens: int | None = None,
    max_steps: int = 100_000,
    check_unique: bool = True,
) -> Transcript | None:
    """The DFS transcript of ``puzzle`` (string or sequence), sampled with ``seed``.

    ``levels`` emits the guess-level token after ``101`` and after each backtrack (the official
    training default). ``max_tokens`` returns None when the transcript would be longer (the paper
    keeps transcripts of at most 250 tokens). ``check_unique`` first verifies that the puzzle has
    exactly one solution and raises :class:`SudokuError` saying which problem it has otherwise.
    """
    b = parse_board(puzzle)
    n = board_size(b)
    if not isinstance(seed, random.Random) and seed is not None:
        check_int("seed", seed, lo=0)
    rng = seed if isinstance(seed, random.Random) else random.Random(seed)
    solution = unique_solution(b, max_steps=max_steps) if check_unique else None
    st = State.from_board(b)
    t = Transcript(n=n, puzzle=b, solution=solution)
    em = _Emitter(t, max_tokens)
    budget = StepBudget(max_steps)
    try:
        for cell, v in enumerate(b):
            if v:
                em.emit(move_token(cell, v, n), CLUE, None)
        em.emit(START, "start", None)
        ok = _recurse(st, 1, rng, levels, em, budget)
    except _TooLong:
        return None
    if not ok:
        raise SudokuError("the puzzle has no solution (the DFS exhausted every branch)")
    if t.solution is None:
        t.solution = final_board(t.tokens, t.n)
    return t


def _recurse(st: State, level: int, rng: random.Random, levels: bool, em: _Emitter, budget: StepBudget) -> bool:
    n = st.g.n
    while True:
        budget.spend()
        status, forced = st.analyze()
        if status != Status.OPEN or not forced:
            break
        labels = [move_token(c, v, n) for c, v in forced]
        cell, v = forced[rng.randrange(len(forced))]
        st.place(cell, v)
        em.emit(move_token(cell, v, n), RULE, labels)
    if status == Status.SOLVED:
        em.emit(SOLVED, "solved", (SOLVED,))
        return True
    if status == Status.CONTRADICTION:
        em.emit(DEAD_END, "dead-end", (DEAD_END,))
        return False
    em.emit(GUESS, "guess-marker", (GUESS,))
    if levels:
        em.emit(level, "level", (level,))
    options = st.min_candidate_moves()
    labels = [move_token(c, v, n) for c, v in options]
    cell = options[rng.randrange(len(options))][0]
    vals = [v for c, v in options if c == cell]
    rng.shuffle(vals)
    snapshot = st.copy()
    for i, v in enumerate(vals):
        child = snapshot.copy()
        child.place(cell, v)
        tok = move_token(cell, v, n)
        em.emit(tok, GUESS_MOVE, labels if i == 0 else (tok,))
        if _recurse(child, level + 1, rng, levels, em, budget):
            st.board[:], st.cand[:] = child.board, child.cand
            return True
        if levels:
            em.emit(level, "level", (level,))
    em.emit(DEAD_END, "dead-end", (DEAD_END,))
    return False


def rules_fixpoint(puzzle) -> tuple[tuple, Status]:
    """The board after applying singles to a fixpoint, and its status (``Status.OPEN``: a guess is needed)."""
    b = parse_board(puzzle)
    st = State.from_board(b)
    status = st.propagate()
    return tuple(st.board), status


def forced_moves(board) -> list[tuple[int, int]]:
    """Every naked/hidden single of ``board`` as (cell, value); [] at a contradiction or when solved."""
    st = State.from_board(parse_board(board))
    status, forced = st.analyze()
    return forced if status == Status.OPEN else []

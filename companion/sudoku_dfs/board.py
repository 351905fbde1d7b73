"""Boards, the action-token vocabulary and input checks for paper 06 (Sudoku by trial and error).

Paper: Giannoulis, Pantis, Tzamos, *Teaching Transformers to Solve Combinatorial Problems through
Efficient Trial & Error*, NeurIPS 2025 (arXiv 2509.22023), Section 3 "Tokens".

Vocabulary (1001 tokens, exactly the official code's):

=========  ===========================================================
token      meaning
=========  ===========================================================
111..999   a move ``100 r + 10 c + v`` (row r, column c, value v, 1-based)
100        start (after the clue tokens)
101        no rule applies: a guess follows
102        dead end: backtrack
0          solved
1..99      guess level (emitted by default in training)
103        "thinking" token (one-level model only)
1000       padding
=========  ===========================================================

The same vocabulary serves 4x4 Shidoku (2x2 boxes, values 1..4, moves 111..444) and 9x9 Sudoku, so a
model's input and output layers do not depend on the board size.

Cells are numbered ``0 .. n*n-1`` in row-major order; a board is a length ``n*n`` sequence of ints,
0 for an empty cell. Boards given as strings use ``0`` or ``.`` for empty cells.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from functools import lru_cache

import numpy as np

from companion.core import ParameterError

# tokens (the only names for them: no module spells these numbers again)
SOLVED = 0  # the token "board complete"; the *status* of a complete board is Status.SOLVED
LEVEL_MIN, LEVEL_MAX = 1, 99  # guess-level tokens
START = 100
GUESS = 101
DEAD_END = 102
THINK = 103
MOVE_MIN, MOVE_MAX = 111, 999  # move tokens 100 r + 10 c + v span this range
PAD = 1000
VOCAB_SIZE = 1001
SIZES = (4, 9)


class Status(IntEnum):
    """What the rules leave of a board: stuck (no rule applies, board incomplete), complete, or
    contradictory. One set of statuses for the sequential engine (:mod:`~companion.sudoku_dfs.solver`),
    the batched one (:mod:`~companion.sudoku_dfs.rules`, stored as int8) and the backdoor tables."""

    OPEN = 0
    SOLVED = 1
    CONTRADICTION = 2

    def __str__(self) -> str:
        return self.name.lower()


class SudokuError(ValueError):
    """A puzzle that cannot be used: contradictory clues, no solution, several solutions, too hard."""


class StepLimitExceeded(SudokuError):
    """A search ran past its step limit (guards against hangs on adversarial input)."""


@dataclass(frozen=True)
class Geometry:
    """The cells, units and peers of an ``n x n`` board with ``b x b`` boxes (n = b*b)."""

    n: int
    box: int
    cells: int
    units: tuple = field(repr=False)  # 3n tuples of cell indices: rows, then columns, then boxes
    cell_units: tuple = field(repr=False)  # for each cell, its (row, column, box) unit indices
    peers: tuple = field(repr=False)  # for each cell, the sorted cells sharing a unit with it

    @property
    def full(self) -> int:
        """The bitmask of all values (bit v-1 set for value v)."""
        return (1 << self.n) - 1

    @property
    def unit_matrix(self) -> np.ndarray:
        """A ``[3n, n*n]`` 0/1 matrix: entry (u, c) is 1 when cell c lies in unit u."""
        return _unit_matrix(self.n)


@lru_cache(maxsize=None)
def geometry(n: int) -> Geometry:
    """The geometry of a 4x4 or 9x9 board."""
    if isinstance(n, bool) or n not in SIZES:
        raise ParameterError("n", n, "4 (Shidoku) or 9 (Sudoku)")
    b = int(round(n**0.5))
    rows = [tuple(r * n + c for c in range(n)) for r in range(n)]
    cols = [tuple(r * n + c for r in range(n)) for c in range(n)]
    boxes = []
    for br in range(b):
        for bc in range(b):
            boxes.append(tuple((br * b + i) * n + bc * b + j for i in range(b) for j in range(b)))
    units = tuple(rows + cols + boxes)
    cell_units = []
    peers = []
    for cell in range(n * n):
        r, c = divmod(cell, n)
        bx = (r // b) * b + c // b
        cell_units.append((r, n + c, 2 * n + bx))
        ps = set(rows[r]) | set(cols[c]) | set(boxes[bx])
        ps.discard(cell)
        peers.append(tuple(sorted(ps)))
    return Geometry(n, b, n * n, units, tuple(cell_units), tuple(peers))


@lru_cache(maxsize=None)
def _unit_matrix(n: int) -> np.ndarray:
    g = geometry(n)
    m = np.zeros((3 * n, n * n), dtype=np.float32)
    for u, unit in enumerate(g.units):
        m[u, list(unit)] = 1.0
    m.setflags(write=False)
    return m


# ----------------------------------------------------------------------------------------- tokens
def move_token(cell: int, value: int, n: int) -> int:
    """The token ``100 r + 10 c + v`` of placing ``value`` in ``cell`` (1-based r, c)."""
    r, c = divmod(cell, n)
    return 100 * (r + 1) + 10 * (c + 1) + value


def is_level(token: int) -> bool:
    """Whether ``token`` is a guess-level token (1..99)."""
    return LEVEL_MIN <= token <= LEVEL_MAX


def is_move(token: int, n: int = 9) -> bool:
    """Whether ``token`` is a move on an ``n x n`` board."""
    if not MOVE_MIN <= token <= MOVE_MAX:
        return False
    r, c, v = token // 100, (token // 10) % 10, token % 10
    return 1 <= r <= n and 1 <= c <= n and 1 <= v <= n


def decode_move(token: int, n: int) -> tuple[int, int]:
    """``(cell, value)`` of a move token; raises for a token that is not a move."""
    if not is_move(token, n):
        raise ParameterError("token", token, f"a move token 100r+10c+v with r, c, v in 1..{n}")
    r, c, v = token // 100, (token // 10) % 10, token % 10
    return (r - 1) * n + (c - 1), v


def token_name(token: int, n: int = 9) -> str:
    """A short human-readable name of a token (for plots and readouts)."""
    if token == SOLVED:
        return "0 solved"
    if token == START:
        return "100 start"
    if token == GUESS:
        return "101 guess"
    if token == DEAD_END:
        return "102 dead end"
    if token == THINK:
        return "103 think"
    if token == PAD:
        return "pad"
    if is_level(token):
        return f"level {token}"
    if is_move(token, n):
        return f"r{token // 100}c{(token // 10) % 10}={token % 10}"
    return f"{token} (unused)"


def final_board(tokens, n: int) -> tuple:
    """The last value written to each cell by the move tokens of ``tokens`` (0 where none): the board a
    transcript (or a model's output) answers, as in the official evaluation (``edit_preds``)."""
    board = [0] * (n * n)
    for tok in tokens:
        if is_move(int(tok), n):
            cell, v = decode_move(int(tok), n)
            board[cell] = v
    return tuple(board)


# ----------------------------------------------------------------------------------------- parsing
def parse_board(board, n: int | None = None) -> tuple[int, ...]:
    """A board as a tuple of ints (0 = empty), from a string, a sequence or a numpy array.

    Strings hold one character per cell, ``1..n`` for a clue and ``0`` or ``.`` for an empty cell
    (whitespace is ignored); the size is read from the length (16 -> 4x4, 81 -> 9x9) unless ``n`` is
    given. Raises :class:`ParameterError` naming the problem (length, character, value).
    """
    if n is not None:
        geometry(n)
    if isinstance(board, str):
        text = "".join(board.split())
        size = _size_from_length(len(text), n, "board")
        values = []
        for i, ch in enumerate(text):
            if ch in ".0":
                values.append(0)
            elif ch.isdigit() and 1 <= int(ch) <= size:
                values.append(int(ch))
            else:
                raise ParameterError(
                    "board", board, f"characters '1'..'{size}', '0' or '.'; found {ch!r} at position {i}"
                )
        return tuple(values)
    try:
        arr = np.asarray(board)
    except Exception as exc:  # pragma: no cover - defensive
        raise ParameterError("board", board, "a string or a sequence of ints") from exc
    if arr.dtype == object or arr.ndim != 1 or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
        raise ParameterError("board", board, "a string or a flat sequence of ints")
    size = _size_from_length(arr.size, n, "board")
    if arr.size and (arr.min() < 0 or arr.max() > size):
        bad = int(arr[(arr < 0) | (arr > size)][0])
        raise ParameterError("board", board, f"values 0 (empty) or 1..{size}; found {bad}")
    return tuple(int(v) for v in arr)


def _size_from_length(length: int, n: int | None, name: str) -> int:
    if n is not None:
        if length != n * n:
            raise ParameterError(name, f"<{length} cells>", f"{n * n} cells for a {n}x{n} board")
        return n
    if length == 16:
        return 4
    if length == 81:
        return 9
    raise ParameterError(name, f"<{length} cells>", "16 cells (4x4) or 81 cells (9x9)")


def board_size(board) -> int:
    """``n`` of a parsed board (4 or 9)."""
    return _size_from_length(len(board), None, "board")


def format_board(board, empty: str = ".") -> str:
    """The one-line string of a board (``.`` for empty cells)."""
    return "".join(str(v) if v else empty for v in board)


def find_conflict(board) -> str | None:
    """A description of the first repeated value in a unit, or None when the clues are consistent."""
    n = board_size(board)
    g = geometry(n)
    kinds = ["row"] * n + ["column"] * n + ["box"] * n
    for u, unit in enumerate(g.units):
        seen = {}
        for cell in unit:
            v = board[cell]
            if v:
                if v in seen:
                    a, b = (seen[v], cell)
                    return (
                        f"value {v} appears twice in {kinds[u]} {u % n + 1} "
                        f"(r{a // n + 1}c{a % n + 1} and r{b // n + 1}c{b % n + 1})"
                    )
                seen[v] = cell
    return None

"""Replaying a token sequence: the board at every step, the DFS tree, and a transcript verifier.

Paper 06 (arXiv 2509.22023), Section 3: a transcript is a serialised depth-first search. Replaying
it needs no solver: a move right after ``101``/level or after a backtrack is a guess (the board is
first restored to the guess node's board), any other move is a rule move, ``102`` closes the
innermost open level. The board a model "answers" is, as in the official evaluation
(``edit_preds``), the last value written to each cell.

``verify_transcript`` re-derives every label with the sequential rules of
:mod:`companion.sudoku_dfs.solver` (imported one way only: the solver never imports this module) and checks the transcript against them; it is the notebook's check
that "every rule label is forced" and "the transcript replays to the solution".
"""

from __future__ import annotations

from dataclasses import dataclass

from companion.sudoku_dfs.board import (
    DEAD_END,
    GUESS,
    LEVEL_MAX,
    SOLVED,
    START,
    VOCAB_SIZE,
    Status,
    decode_move,
    final_board,
    is_level,
    is_move,
    move_token,
)
from companion.sudoku_dfs.solver import State

__all__ = ["EVENT_COLORS", "Node", "ProtocolState", "Step", "final_board", "guesses_in", "replay", "tree_layout",
           "verify_transcript"]

EVENT_COLORS = {
    "clue": "#222222",
    "rule": "#1f77b4",
    "guess": "#ff7f0e",
    "dead-end": "#d62728",
    "solved": "#2ca02c",
}


@dataclass
class Step:
    """The replay state right after token ``index``."""

    index: int
    token: int
    event: str  # clue, start, rule, guess-marker, level, guess, dead-end, solved, invalid
    board: tuple
    origin: tuple  # per cell: "", "clue", "rule" or "guess"
    node: int  # the DFS-tree node (open level) the step belongs to
    depth: int


@dataclass
class Node:
    """A DFS-tree node: the root, or one value tried at a guess."""

    id: int
    parent: int
    depth: int
    move: int | None  # the guess token that opened it (None for the root)
    first_step: int
    last_step: int
    status: str = "open"  # open, solved, dead-end


def replay(tokens, n: int) -> tuple[list[Step], list[Node]]:
    """Every step's board and the DFS tree of a transcript (or of a model's decoded sequence).

    Tolerant of malformed sequences (a model's output): an impossible token is recorded with event
    ``invalid`` and otherwise ignored.
    """
    tokens = [int(t) for t in tokens]
    board = [0] * (n * n)
    origin = [""] * (n * n)
    steps: list[Step] = []
    nodes = [Node(0, -1, 0, None, 0, 0)]
    stack = [0]  # open nodes, innermost last
    snapshots: dict[int, tuple] = {}  # node id -> (board, origin) at its guess node
    started = False
    expect_guess = False
    for i, tok in enumerate(tokens):
        event = "invalid"
        if not started:
            if tok == START:
                started, event = True, "start"
            elif is_move(tok, n):
                cell, v = decode_move(tok, n)
                board[cell], origin[cell], event = v, "clue", "clue"
        elif tok == GUESS:
            cur = stack[-1]
            snapshots[cur] = (board[:], origin[:])
            expect_guess, event = True, "guess-marker"
        elif is_level(tok):
            event = "level"
        elif is_move(tok, n):
            cell, v = decode_move(tok, n)
            if expect_guess and stack[-1] in snapshots:
                parent = stack[-1]
                b0, o0 = snapshots[parent]
                board[:], origin[:] = b0, o0
                board[cell], origin[cell] = v, "guess"
                node = Node(len(nodes), parent, nodes[parent].depth + 1, tok, i, i)
                nodes.append(node)
                stack.append(node.id)
                event = "guess"
                expect_guess = False
            else:
                board[cell], origin[cell], event = v, "rule", "rule"
        elif tok == DEAD_END:
            event = "dead-end"
            cur = stack[-1]
            nodes[cur].status = "dead-end"
            nodes[cur].last_step = i
            if len(stack) > 1:
                stack.pop()
                parent = stack[-1]
                if parent in snapshots:
                    b0, o0 = snapshots[parent]
                    board[:], origin[:] = b0, o0
                expect_guess = True
        elif tok == SOLVED:
            event = "solved"
            for node_id in stack:
                nodes[node_id].status = "solved"
        node_id = stack[-1]
        nodes[node_id].last_step = max(nodes[node_id].last_step, i)
        steps.append(Step(i, tok, event, tuple(board), tuple(origin), node_id, nodes[node_id].depth))
        if tok == SOLVED and started:
            break
    return steps, nodes


def tree_layout(nodes: list[Node]) -> dict[int, tuple[float, float]]:
    """(x, y) of every node: leaves left to right in DFS order, parents centred, y = -depth."""
    children: dict[int, list[int]] = {node.id: [] for node in nodes}
    for node in nodes[1:]:
        children[node.parent].append(node.id)
    pos: dict[int, tuple[float, float]] = {}
    counter = [0]

    def place(nid):
        kids = children[nid]
        if not kids:
            x = float(counter[0])
            counter[0] += 1
        else:
            xs = [place(k) for k in kids]
            x = sum(xs) / len(xs)
        pos[nid] = (x, -float(nodes[nid].depth))
        return x

    place(0)
    return pos


def guesses_in(tokens, n: int) -> int:
    """The number of guess moves in a token sequence (every value tried at a guess node)."""
    steps, _ = replay(tokens, n)
    return sum(1 for s in steps if s.event == "guess")


def verify_transcript(transcript) -> list[str]:
    """Problems found when re-deriving every label of ``transcript``; an empty list means it is valid.

    Checks: clues in cell order then ``100``; every rule move is in its label set and the label set is
    exactly the forced moves of the board before it; ``101`` only when no rule applies and the board
    is open; guess labels are exactly the minimum-candidate moves; ``102`` exactly at a contradiction
    or after the last value of a guess node; ``0`` only on a complete board; the final board is the
    solution.
    """
    t = transcript
    n = t.n
    problems: list[str] = []
    clue_tokens = [move_token(c, v, n) for c, v in enumerate(t.puzzle) if v]
    k = len(clue_tokens)
    if t.tokens[:k] != clue_tokens or t.tokens[k] != START:
        problems.append("the transcript does not start with the clues in cell order and 100")
        return problems
    steps, _ = replay(t.tokens, n)
    for i in range(k + 1, len(t.tokens)):
        tok, kind, choices = t.tokens[i], t.kinds[i], t.choices[i]
        before = _guess_node_board(steps, i) if kind == "guess" else steps[i - 1].board
        st = State.from_board(before)
        status, forced = st.analyze()
        forced_tokens = {move_token(c, v, n) for c, v in forced}
        if kind == "rule":
            if status != Status.OPEN or not forced:
                problems.append(f"step {i}: a rule move where no rule applies")
            if choices != frozenset(forced_tokens):
                problems.append(f"step {i}: the rule label set is not the set of forced moves")
            if tok not in forced_tokens:
                problems.append(f"step {i}: move {tok} is not forced")
        elif kind == "guess-marker":
            if status != Status.OPEN or forced:
                problems.append(f"step {i}: 101 emitted while the board is {status} with {len(forced)} forced moves")
        elif kind == "guess":
            options = {move_token(c, v, n) for c, v in st.min_candidate_moves()}
            if status != Status.OPEN or forced:
                problems.append(f"step {i}: a guess at a node where rules still apply")
            if tok not in options:
                problems.append(f"step {i}: guess {tok} is not a minimum-candidate move")
            first = t.kinds[i - 1] == "guess-marker" or (t.kinds[i - 1] == "level" and t.kinds[i - 2] == "guess-marker")
            if first and choices != frozenset(options):
                problems.append(f"step {i}: the guess label set is not the minimum-candidate moves")
        elif kind == "dead-end":
            exhausted = t.kinds[i - 1] in ("level", "dead-end")
            if status != Status.CONTRADICTION and not exhausted:
                problems.append(f"step {i}: 102 without a contradiction")
        elif kind == "solved":
            if status != Status.SOLVED:
                problems.append(f"step {i}: 0 emitted on an incomplete board")
    if t.solution is not None and final_board(t.tokens, n) != tuple(t.solution):
        problems.append("the final board is not the solution")
    if t.tokens[-1] != SOLVED:
        problems.append("the transcript does not end with 0")
    return problems


def _guess_node_board(steps: list[Step], i: int) -> tuple:
    """The board at the guess node that guess step ``i`` branches from."""
    depth = steps[i].depth - 1
    for j in range(i - 1, -1, -1):
        if steps[j].event == "guess-marker" and steps[j].depth == depth:
            return steps[j].board
    raise AssertionError("a guess without its guess node")  # pragma: no cover


class ProtocolState:
    """The transcript grammar, token by token: which tokens may come next (used by constrained decoding).

    It tracks only bookkeeping - which cells are empty on the current branch and where the search is
    (open levels) - never the Sudoku rules: a move may write *any* value into an empty cell. Grammar:
    after ``100``, a rule move or a guess: a move into an empty cell, ``101`` or ``102`` (``0`` or ``102``
    once the board is full); after ``101``: the level token; after that level token: a guess (a move into
    an empty cell); after ``102``: the level token of the level it returns to; after that: another guess
    or ``102`` (no value left). ``102`` at the root or ``0`` ends the transcript.
    """

    _MOVES: dict = {}

    def __init__(self, puzzle, n: int):
        import numpy as np

        self.n = n
        self.board = np.array(puzzle, dtype=np.int64)
        self.frames: list = [None]  # one per open level: the board snapshot at its 101 (None before it)
        self.state = "move"
        self.done = False
        if n not in self._MOVES:
            self._MOVES[n] = np.array([[move_token(c, v, n) for v in range(1, n + 1)] for c in range(n * n)])
        self._moves = self._MOVES[n]

    def fill_mask(self, row) -> None:
        """Set ``row[token] = True`` for every allowed next token (``row``: a bool array of the vocabulary)."""
        if self.done:
            return
        level = min(len(self.frames), LEVEL_MAX)
        empty = self.board == 0
        if self.state == "move":
            if not empty.any():
                row[[SOLVED, DEAD_END]] = True
                return
            row[self._moves[empty].ravel()] = True
            row[[GUESS, DEAD_END]] = True
        elif self.state in ("marker", "dead"):
            row[level] = True
        elif self.state == "level-new":
            row[self._moves[empty].ravel()] = True
        elif self.state == "level-back":
            row[self._moves[empty].ravel()] = True
            row[DEAD_END] = True
        else:  # pragma: no cover
            raise AssertionError(self.state)

    def allowed(self) -> list[int]:
        import numpy as np

        row = np.zeros(VOCAB_SIZE, dtype=bool)
        self.fill_mask(row)
        return [int(x) for x in np.flatnonzero(row)]

    def push(self, token: int) -> None:
        token = int(token)
        if self.done:
            return
        if token == SOLVED:
            self.done = True
        elif token == GUESS:
            self.frames[-1] = self.board.copy()
            self.state = "marker"
        elif is_level(token):
            self.state = "level-new" if self.state == "marker" else "level-back"
        elif token == DEAD_END:
            self.frames.pop()
            if not self.frames:
                self.done = True
                return
            snap = self.frames[-1]
            if snap is not None:
                self.board[:] = snap
            self.state = "dead"
        elif is_move(token, self.n):
            cell, v = decode_move(token, self.n)
            if self.state in ("level-new", "level-back"):
                snap = self.frames[-1]
                if snap is not None:
                    self.board[:] = snap
                self.board[cell] = v
                self.frames.append(None)
            else:
                self.board[cell] = v
            self.state = "move"

"""Paper 06 (Sudoku by trial and error): boards, rules, DFS transcripts, generator, backdoors."""

from __future__ import annotations

import random

import numpy as np
import pytest

from companion.core import ParameterError
from companion.sudoku_dfs.backdoors import backdoors_reference, cumulative_guess_curve, expected_guesses, find_backdoors
from companion.sudoku_dfs.board import (
    DEAD_END,
    GUESS,
    SOLVED,
    START,
    StepLimitExceeded,
    SudokuError,
    decode_move,
    format_board,
    geometry,
    is_move,
    move_token,
    parse_board,
)
from companion.sudoku_dfs.generator import (
    apply_symmetry,
    generate_puzzle,
    load_puzzles,
    random_symmetry,
    save_puzzles,
    symmetry_token_map,
)
from companion.sudoku_dfs.replay import final_board, replay, verify_transcript
from companion.sudoku_dfs.board import Status
from companion.sudoku_dfs.rules import analyze, propagate
from companion.sudoku_dfs.solver import (
    State,
    count_solutions,
    dfs_transcript,
    forced_moves,
    rules_fixpoint,
    solutions,
    unique_solution,
)

GRID4 = "1234341221434321"
# A 9x9 puzzle from the committed generator recipe (seed 1, puzzle 0 of generate_puzzles(9, ., seed=1)).
P9_SEED = 1_000_003


@pytest.fixture(scope="module")
def puzzles9():
    return [generate_puzzle(9, P9_SEED + i) for i in range(12)]


# --------------------------------------------------------------------------------- board + tokens
def test_geometry_and_tokens():
    g = geometry(9)
    assert len(g.units) == 27 and all(len(u) == 9 for u in g.units)
    assert all(len(p) == 20 for p in g.peers)
    assert len(geometry(4).peers[0]) == 7
    assert move_token(0, 5, 9) == 115 and move_token(80, 9, 9) == 999
    assert decode_move(357, 9) == (2 * 9 + 4, 7)
    for special in (SOLVED, START, GUESS, DEAD_END, 103, 1000, 5):
        assert not is_move(special, 9)
    assert is_move(444, 4) and not is_move(445, 4) and not is_move(511, 4)
    with pytest.raises(ParameterError, match="n=5"):
        geometry(5)


@pytest.mark.parametrize(
    "bad, match",
    [("123", "16 cells"), ("1" * 80, "81 cells"), ("12x4" + "." * 12, "found 'x' at position 2"), ("5" + "." * 15, "found '5'")],
)
def test_parse_board_errors(bad, match):
    with pytest.raises(ParameterError, match=match):
        parse_board(bad)


def test_parse_board_forms():
    assert parse_board("1.3." + "0" * 12) == (1, 0, 3, 0) + (0,) * 12
    assert parse_board(np.zeros(81, dtype=int)) == (0,) * 81
    with pytest.raises(ParameterError, match="values 0"):
        parse_board([7] + [0] * 15)
    assert format_board(parse_board(GRID4)) == GRID4


# --------------------------------------------------------------------------------- bad puzzles
def test_contradictory_clues_are_named():
    with pytest.raises(SudokuError, match="value 1 appears twice in row 1"):
        dfs_transcript("11" + "." * 14)


def test_no_solution_and_several_solutions_are_named():
    # consistent clues but no completion: r1c1 can be neither 1 (column) nor 2, 3, 4 (row, box)
    no_sol = "." + "234" + "." * 4 + "1" + "." * 7
    with pytest.raises(SudokuError, match="no solution"):
        dfs_transcript(no_sol)
    with pytest.raises(SudokuError, match=r"several solutions \(at least two, differing at r\d+c\d+"):
        dfs_transcript("." * 16)
    # without the uniqueness check the DFS still finds one of the solutions
    t = dfs_transcript("." * 16, check_unique=False)
    assert t.solved and verify_transcript(t) == []


def test_step_limit_stops_hard_search():
    with pytest.raises(StepLimitExceeded, match="step limit of 50 steps"):
        count_solutions("." * 81, limit=10**6, max_steps=50)
    # the DFS transcript generator has its own budget (no uniqueness check, so only the DFS runs)
    with pytest.raises(StepLimitExceeded, match="step limit of 5 steps"):
        dfs_transcript("." * 81, check_unique=False, max_steps=5)
    # ... and the uniqueness check is bounded too
    with pytest.raises(StepLimitExceeded):
        unique_solution("." * 81, max_steps=3)


# --------------------------------------------------------------------------------- rules
def test_sequential_rules_hand_checked():
    # one empty cell: a naked single (and a hidden single in its row, column and box)
    assert forced_moves("." + GRID4[1:]) == [(0, 1)]
    # an empty last row: every cell is a naked single
    assert forced_moves(GRID4[:12] + "....") == [(12, 4), (13, 3), (14, 2), (15, 1)]
    # a hidden single that is not a naked single: 1 has one place in row 1 (r1c1), r1c1 has 2 candidates
    st = State.from_board(parse_board("..3." "...." ".1.." "...1"))
    status, forced = st.analyze()
    assert status == Status.OPEN and (0, 1) in forced
    assert bin(st.cand[0]).count("1") >= 2


def _singles_from_scratch(board, n):
    """(status, sorted naked and hidden singles) of a board, from the rules' definitions alone: a cell's
    candidates are the values absent from its row, column and box; a contradiction is an empty cell
    without one, or a value missing from a unit with no cell left for it."""
    b = int(n ** 0.5)
    rows = [[r * n + c for c in range(n)] for r in range(n)]
    units = rows + [[r * n + c for r in range(n)] for c in range(n)] + [
        [(br + i) * n + bc + j for i in range(b) for j in range(b)] for br in range(0, n, b) for bc in range(0, n, b)]
    cand = {cell: set(range(1, n + 1)) - {board[o] for u in units if cell in u for o in u}
            for cell in range(n * n) if not board[cell]}
    if not cand:
        return Status.SOLVED, []
    forced = {(cell, next(iter(vs))) for cell, vs in cand.items() if len(vs) == 1}
    for u in units:
        for v in set(range(1, n + 1)) - {board[c] for c in u}:
            places = [c for c in u if v in cand.get(c, ())]
            if not places:
                return Status.CONTRADICTION, []
            if len(places) == 1:
                forced.add((places[0], v))
    if any(not vs for vs in cand.values()):
        return Status.CONTRADICTION, []
    return Status.OPEN, sorted(forced)


def test_rule_engine_equals_the_singles_derived_from_scratch(puzzles9):
    """Every board a transcript passes through (9x9 and 4x4, guesses and dead ends included): the
    engine's status and forced moves, which label the transcripts, equal a from-scratch derivation."""
    boards = []
    for i, (p, _) in enumerate(puzzles9[:4]):
        boards += [s.board for s in replay(dfs_transcript(p, seed=i).tokens, 9)[0]]
    for s in range(6):
        p4, _ = generate_puzzle(4, 300 + s)
        boards += [s.board for s in replay(dfs_transcript(p4, seed=s, check_unique=False).tokens, 4)[0]]
    statuses = set()
    for board in boards:
        n = int(len(board) ** 0.5)
        got = State.from_board(board).analyze()
        assert got == _singles_from_scratch(board, n), board
        statuses.add(got[0])
    assert statuses >= {Status.OPEN, Status.SOLVED}, statuses


def test_deadly_rectangle_needs_a_guess_with_the_right_labels():
    # r1c1=1, r1c2=2, r2c1=3, r2c2=4 ... remove the four cells of a swappable 1/2 rectangle
    grid = list("1234" "3412" "2143" "4321")
    holes = (0, 1, 8, 9)  # r1c1=1 r1c2=2 / r3c1=2 r3c2=1: swapping 1<->2 keeps a valid grid
    for i in holes:
        grid[i] = "."
    puzzle = "".join(grid)
    assert count_solutions(puzzle) == 2
    t = dfs_transcript(puzzle, seed=3, check_unique=False)
    k = 12
    assert t.tokens[k] == START and t.tokens[k + 1] == GUESS and t.tokens[k + 2] == 1
    expected = {move_token(c, v, 4) for c in holes for v in (1, 2)}
    assert t.choices[k + 3] == frozenset(expected)
    assert t.kinds[k + 3] == "guess"
    assert t.kinds[k + 4 : -1] == ["rule"] * 3 and t.tokens[-1] == SOLVED
    assert verify_transcript(t) == []


def test_golden_transcript_with_a_dead_end():
    """Hand-checked (see the notes in the test source): after r4c2=1 the rules force r3c4=2 (the only
    place of 2 in column 4) and r3c4=1 (the only place of 1 in the bottom-right box); the DFS samples
    r3c4=2, value 1 then has no place in its box: 102, back to level 1, the other value r4c2=2."""
    t = dfs_transcript("2.3.......4.4..3", seed=0, check_unique=False)
    assert t.tokens == [
        112, 133, 334, 414, 443, 100, 101, 1, 421, 124, 244, 342, 102, 1, 422, 342, 431, 232,
        101, 2, 241, 311, 144, 213, 224, 121, 323, 0,
    ]
    # the board before token 11 is 2 4 3 . / . . . 4 / . . 4 . / 4 1 . 3; worked out by hand:
    # naked r1c4=1, r2c2=3, r3c1=3, r4c3=2; hidden r3c4=2 (column 4), r3c4=1 (box), r2c3=2 (row 2),
    # r2c3=1 (column 3), r2c1=1 (column 1), r3c2=2 (column 2)
    assert t.choices[11] == frozenset({141, 223, 313, 432, 342, 341, 232, 231, 211, 322})
    assert t.kinds[12] == "dead-end" and t.choices[14] == frozenset({422})
    assert verify_transcript(t) == []


def test_golden_one_move_transcript():
    t = dfs_transcript("." + GRID4[1:], seed=0)
    clues = [move_token(c, int(v), 4) for c, v in enumerate(GRID4) if c]
    assert t.tokens == clues + [START, 111, SOLVED]
    assert t.choices[-2] == frozenset({111}) and t.choices[-1] == frozenset({SOLVED})
    assert t.n_guesses == 0 and not t.has_guess


def test_vectorised_rules_match_sequential(puzzles9):
    boards = [p for p, _ in puzzles9]
    cand, forced, status = analyze(np.array(boards))
    for i, b in enumerate(boards):
        st = State.from_board(b)
        s_status, s_forced = st.analyze()
        got = sorted((int(c), int(v) + 1) for c, v in zip(*np.nonzero(forced[i])))
        assert got == s_forced
        assert status[i] == Status.OPEN
        for c in range(81):
            assert set(np.nonzero(cand[i, c])[0] + 1) == {v for v in range(1, 10) if st.cand[c] >> (v - 1) & 1}
    fix, st, _ = propagate(np.array(boards))
    for i, b in enumerate(boards):
        ref_board, ref_status = rules_fixpoint(b)
        assert tuple(fix[i]) == ref_board
        assert Status(int(st[i])) == ref_status


def test_vectorised_contradictions():
    grid = list(GRID4)
    bad = grid[:]
    bad[0], bad[1] = "2", "2"  # duplicate in a row
    empty_cell = list("." + "234" + "." * 4 + "1" + "." * 7)  # r1c1 has no candidate
    _, _, status = analyze(np.array([parse_board("".join(bad)), parse_board("".join(empty_cell)), parse_board(GRID4)]))
    assert list(status) == [Status.CONTRADICTION, Status.CONTRADICTION, Status.SOLVED]


def test_torch_backend_matches_numpy(puzzles9):
    import torch

    boards = np.array([p for p, _ in puzzles9])
    a, s_a, _ = propagate(boards)
    b, s_b, _ = propagate(torch.as_tensor(boards))
    assert (b.numpy() == a).all() and (s_b.numpy() == s_a).all()


# --------------------------------------------------------------------------------- transcripts
def test_transcripts_replay_and_labels_are_forced(puzzles9):
    for i, (p, sol) in enumerate(puzzles9[:8]):
        t = dfs_transcript(p, seed=i)
        assert t.solution == sol
        assert final_board(t.tokens, 9) == sol
        assert verify_transcript(t) == []
        # every rule label is a forced move of the board before it
        steps, _ = replay(t.tokens, 9)
        for j, kind in enumerate(t.kinds):
            if kind == "rule":
                forced = {move_token(c, v, 9) for c, v in forced_moves(steps[j - 1].board)}
                assert t.choices[j] == frozenset(forced)
        # 102 appears exactly when a contradiction (or an exhausted guess node) is reached
        assert t.tokens.count(DEAD_END) == t.n_dead_ends


def test_dead_end_transcripts_backtrack_to_the_same_cell():
    # find a 9x9 transcript with a dead end (deterministic seeds) and check the backtracking protocol
    for s in range(40):
        p, _ = generate_puzzle(9, 7_000 + s)
        t = dfs_transcript(p, seed=s, check_unique=False)
        if t.n_dead_ends:
            break
    else:  # pragma: no cover
        pytest.skip("no dead end among the seeds")
    assert verify_transcript(t) == []
    steps, nodes = replay(t.tokens, 9)
    dead = [n for n in nodes if n.status == "dead-end"]
    assert dead, "a failed value must appear as a dead-end node"
    for node in dead:
        siblings = [m for m in nodes if m.parent == node.parent and m.id != node.id]
        assert all(decode_move(m.move, 9)[0] == decode_move(node.move, 9)[0] for m in siblings)


def test_max_tokens_drops_long_transcripts(puzzles9):
    p, _ = puzzles9[0]
    full = dfs_transcript(p, seed=0)
    assert dfs_transcript(p, seed=0, max_tokens=len(full)) is not None
    assert dfs_transcript(p, seed=0, max_tokens=len(full) - 1) is None


def test_symmetry_maps_transcripts_to_transcripts(puzzles9):
    rng = random.Random(0)
    for p, sol in puzzles9[:4]:
        t = dfs_transcript(p, seed=1)
        sym = random_symmetry(9, rng)
        table = symmetry_token_map(9, sym)
        image = apply_symmetry(p, sym)
        assert apply_symmetry(sol, sym) == unique_solution(image)
        mapped = [int(table[x]) for x in t.tokens]
        k = t.n_clues
        mapped[:k] = sorted(mapped[:k], key=lambda x: decode_move(x, 9)[0])
        t.puzzle, t.solution = image, apply_symmetry(sol, sym)
        t.tokens = mapped
        t.choices = [None if c is None else frozenset(int(table[x]) for x in c) for c in t.choices]
        assert verify_transcript(t) == []


# --------------------------------------------------------------------------------- generator
def test_generated_puzzles_are_unique_and_locally_minimal():
    for seed in range(3):
        p, sol = generate_puzzle(9, seed)
        assert count_solutions(p) == 1 and solutions(p)[0] == sol
        assert all(pv in (0, sv) for pv, sv in zip(p, sol))
        clues = [i for i, v in enumerate(p) if v]
        for i in clues[:6]:  # removing any clue breaks uniqueness
            q = list(p)
            q[i] = 0
            assert count_solutions(q) == 2
    assert generate_puzzle(9, 5) == generate_puzzle(9, 5)


def test_puzzle_file_roundtrip(tmp_path):
    ps = [generate_puzzle(4, s)[0] for s in range(3)]
    path = save_puzzles(tmp_path / "p.txt", ps, header="three\npuzzles")
    assert load_puzzles(path) == ps
    (tmp_path / "bad.txt").write_text("# c\n" + "1" * 15 + "\n")
    with pytest.raises(ParameterError, match="bad.txt line 2"):
        load_puzzles(tmp_path / "bad.txt")


def test_committed_puzzle_file_if_present():
    from companion.core import repo_path

    path = repo_path("data", "sudoku", "puzzles_9x9.txt")
    if not path.exists():
        pytest.skip("data/sudoku/puzzles_9x9.txt not generated yet")
    ps = load_puzzles(path, n=9)
    assert len(ps) >= 100 and len(set(ps)) == len(ps)
    assert ps[0] == generate_puzzle(9, 0)[0]  # the file is what the documented command makes
    assert count_solutions(ps[-1]) == 1


# --------------------------------------------------------------------------------- backdoors
def test_backdoors_vectorised_match_sequential(puzzles9):
    ps = [p for p, _ in puzzles9]
    fast = find_backdoors(ps)
    for info, p, (_, sol) in zip(fast, ps, puzzles9):
        ref = backdoors_reference(p)
        assert info.status == ref.status and info.fixpoint == ref.fixpoint
        assert info.moves == ref.moves and (info.backdoor == ref.backdoor).all()
        for (c, v), good in zip(info.moves, info.backdoor):
            if good:
                assert sol[c] == v  # a backdoor is always a correct value
        if info.needs_guess:
            assert info.oracle_p("lower") <= info.oracle_p("upper") <= 1.0


def test_expected_guesses_and_cumulative_curve():
    e = expected_guesses([0.5, 1.0, 0.0])
    assert list(e) == [2.0, 1.0, np.inf]
    assert cumulative_guess_curve(e, [0.5, 1.0, 2.0, 1e9]).tolist() == [0.0, 1 / 3, 2 / 3, 2 / 3]


# --------------------------------------------------------------------------------- grammar
def test_protocol_grammar_accepts_teacher_transcripts_and_rejects_bookkeeping_errors(puzzles9):
    from companion.sudoku_dfs.replay import ProtocolState

    cases = [(p, dfs_transcript(p, seed=i)) for i, (p, _) in enumerate(puzzles9[:6])]
    cases.append((parse_board("2.3.......4.4..3"), dfs_transcript("2.3.......4.4..3", seed=0, check_unique=False)))
    for p, t in cases:
        st = ProtocolState(p, t.n)
        for tok in t.tokens[t.n_clues + 1 :]:
            assert tok in st.allowed(), (tok, st.state)
            st.push(tok)
        assert st.done and st.allowed() == []
    p = parse_board("." + GRID4[1:])
    st = ProtocolState(p, 4)
    assert SOLVED not in st.allowed()  # the board is not full
    assert move_token(1, 2, 4) not in st.allowed()  # r1c2 is filled
    assert set(st.allowed()) == {111, 112, 113, 114, GUESS, DEAD_END}  # any value: no Sudoku rule is checked
    st.push(113)  # a wrong value is allowed by the grammar ...
    assert st.allowed() == [SOLVED, DEAD_END]  # ... and then the full board may only end or backtrack
    st2 = ProtocolState(p, 4)
    st2.push(GUESS)
    assert st2.allowed() == [1]  # after 101 comes the level token


# --------------------------------------------------------------------------------- symmetry classes, hard boards
def test_symmetry_classes_are_orbits():
    from companion.sudoku_dfs.generator import all_symmetries, symmetry_classes

    syms = all_symmetries(4)
    assert len(syms) == len(set(syms)) == 2 * 8 * 8 * 24
    rng = random.Random(1)
    p = generate_puzzle(4, 3)[0]
    images = [apply_symmetry(p, random_symmetry(4, rng)) for _ in range(20)]
    assert len(set(symmetry_classes([p] + images).tolist())) == 1  # one orbit, one id
    # brute force: the id is the smallest image over all 3072 symmetries, read in base 5
    smallest = min(int("".join(map(str, apply_symmetry(p, s))), 5) for s in syms)
    assert symmetry_classes([p])[0] == smallest
    # puzzles that differ in clue count can never share a class
    q = list(p)
    q[q.index(0)] = unique_solution(p)[q.index(0)]
    assert symmetry_classes([p])[0] != symmetry_classes([tuple(q)])[0]
    with pytest.raises(ParameterError, match="n"):
        all_symmetries(9)


def test_hard_boards_file_has_unique_named_puzzles():
    from companion.core import repo_path
    from companion.sudoku_dfs.generator import load_named_puzzles

    named = load_named_puzzles(repo_path("data", "sudoku", "hard_9x9.txt"), n=9)
    assert [name.split(".")[0] for name, _ in named] == ["1", "2"]
    assert "Inkala" in named[0][0] and "Easter Monster" in named[1][0]
    for _, p in named:
        assert sum(1 for v in p if v) == 21 and count_solutions(p) == 1
    # Inkala's published solution begins 812753649
    assert unique_solution(named[0][1])[:9] == (8, 1, 2, 7, 5, 3, 6, 4, 9)

"""Puzzle generator following the paper's recipe, board symmetries, and the puzzle file format.

Paper 06 (arXiv 2509.22023), Section 5 "Data": a solved grid, then clues removed one at a time in a
random cell order, each removal kept only if the puzzle still has a unique solution; the result is
*locally minimal* (no single clue can be removed). The official generator (SudokuPy / JCZ, in C)
draws the solved grid uniformly from all 6.67e21 grids by unranking a random id.

**Known non-uniformity (deviation).** Here the solved grid comes from a randomised backtracking fill
followed by a random validity-preserving symmetry (digit relabelling, row/column permutations within
bands/stacks, band/stack permutations, transpose). That is *not* uniform over all grids: backtracking
fills favour some essentially-different grids, and symmetries only spread the probability evenly
inside each equivalence class, not across classes. The clue-removal step is exactly the paper's, so
the puzzles are locally minimal and have a unique solution, but their difficulty distribution can
differ slightly from the paper's "Random" set.

Uniqueness after removing the clue v at cell c is decided by one search: the puzzle stays unique iff
the board without that clue has no solution with c != v.

The symmetries are also used for data augmentation: a symmetry maps a puzzle to an equivalent one and
maps its DFS transcript token by token to a valid DFS transcript of the image (rules and minimum-
candidate guesses are equivariant), see :func:`symmetry_token_map`.

File format: one puzzle per line, ``n*n`` characters, ``.`` for empty cells; lines starting with
``#`` are comments. Command line::

    python -m companion.sudoku_dfs.generator --size 9 --count 500 --seed 0 --out data/sudoku/puzzles_9x9.txt
    python -m companion.sudoku_dfs.generator --size 4 --count 3000 --seed 0 --distinct --out data/sudoku/puzzles_4x4.txt
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import numpy as np

from companion.core import ParameterError, check_int
from companion.core.atomic import write_text_atomic
from companion.sudoku_dfs.board import PAD, VOCAB_SIZE, board_size, format_board, geometry, parse_board
from companion.sudoku_dfs.solver import State, StepBudget, has_solution, search

# ------------------------------------------------------------------------------------ symmetries


def random_symmetry(n: int, rng: random.Random) -> tuple:
    """A random validity-preserving symmetry ``(row_perm, col_perm, digit_perm, transpose)``.

    ``row_perm[i]`` is the source row of target row i (band order and order inside bands shuffled);
    the same for columns; ``digit_perm[v]`` (index 1..n) is the new value of v.
    """
    g = geometry(n)
    b = g.box

    def line_perm():
        bands = list(range(b))
        rng.shuffle(bands)
        out = []
        for band in bands:
            inner = list(range(b))
            rng.shuffle(inner)
            out.extend(band * b + i for i in inner)
        return tuple(out)

    digits = list(range(1, n + 1))
    rng.shuffle(digits)
    return line_perm(), line_perm(), tuple([0] + digits), rng.random() < 0.5


def apply_symmetry(board, sym) -> tuple:
    """The image of a board (0 stays empty) under ``sym``."""
    n = board_size(board)
    rows, cols, digits, transpose = sym
    out = [0] * (n * n)
    for r in range(n):
        for c in range(n):
            sr, sc = rows[r], cols[c]
            if transpose:
                sr, sc = sc, sr
            v = board[sr * n + sc]
            out[r * n + c] = digits[v]
    return tuple(out)


def _cell_map(n: int, sym) -> list[int]:
    """target cell of every source cell under ``sym``."""
    rows, cols, _, transpose = sym
    inv_r = [0] * n
    inv_c = [0] * n
    for i in range(n):
        inv_r[rows[i]] = i
        inv_c[cols[i]] = i
    out = [0] * (n * n)
    for sr in range(n):
        for sc in range(n):
            r_src, c_src = (sc, sr) if transpose else (sr, sc)
            out[sr * n + sc] = inv_r[r_src] * n + inv_c[c_src]
    return out


def symmetry_token_map(n: int, sym) -> np.ndarray:
    """A length-``VOCAB_SIZE`` array mapping every token to its image under ``sym`` (non-moves fixed).

    Applied to a transcript of ``p`` (and to its label sets) it yields a valid transcript of
    ``apply_symmetry(p, sym)`` once the clue prefix is re-sorted into cell order.
    """
    table = np.arange(VOCAB_SIZE, dtype=np.int64)
    cmap = _cell_map(n, sym)
    digits = sym[2]
    for cell in range(n * n):
        r, c = divmod(cell, n)
        tr, tc = divmod(cmap[cell], n)
        for v in range(1, n + 1):
            table[100 * (r + 1) + 10 * (c + 1) + v] = 100 * (tr + 1) + 10 * (tc + 1) + digits[v]
    table[PAD] = PAD
    return table


def all_symmetries(n: int) -> list[tuple]:
    """Every validity-preserving symmetry of a 4x4 board: 8 row orders x 8 column orders x 4! digit
    relabellings x transpose = 3072 (9x9 has 2 * 6^8 * 9!, too many to list)."""
    import itertools

    if n != 4:
        raise ParameterError("n", n, "4 (the 9x9 symmetry group is too large to enumerate)")
    lines = _line_orders()
    return [(rows, cols, (0, *digits), transpose)
            for rows in lines for cols in lines for digits in itertools.permutations(range(1, 5)) for transpose in (False, True)]


def _line_orders() -> list[tuple]:
    """The 8 orders of the rows of a 4x4 board that keep its two bands (band order x order in each band)."""
    import itertools

    out = []
    for bands in itertools.permutations(range(2)):
        for first in itertools.permutations(range(2)):
            for second in itertools.permutations(range(2)):
                inner = (first, second)
                out.append(tuple(band * 2 + inner[k][i] for k, band in enumerate(bands) for i in range(2)))
    return out


def symmetry_classes(puzzles) -> np.ndarray:
    """A class id per 4x4 puzzle: the smallest image under :func:`all_symmetries` (read as a base-5
    number). Two puzzles get the same id exactly when a symmetry maps one to the other.

    For each of the 128 cell maps the smallest digit relabelling is the one that numbers the digits in
    order of first appearance, so only the cell maps are enumerated.
    """
    boards = np.array([parse_board(p, 4) for p in puzzles], dtype=np.int64).reshape(-1, 16)
    cell_maps = sorted({tuple(_source_cells(4, (r, c, None, t))) for r, c, _, t in all_symmetries(4)})
    cells = np.array(cell_maps)  # [128, 16]
    weights = 5 ** np.arange(15, -1, -1, dtype=np.int64)
    out = np.empty(len(boards), dtype=np.int64)
    for start in range(0, len(boards), 256):
        moved = boards[start : start + 256][:, cells]  # [P, 128, 16]
        hit = moved[..., None] == np.arange(1, 5)  # [P, 128, 16, 4]
        first = np.where(hit.any(2), hit.argmax(2), 99)  # first cell of each digit
        label = first.argsort(-1).argsort(-1) + 1  # digits in order of first appearance
        lut = np.concatenate([np.zeros((*label.shape[:2], 1), dtype=label.dtype), label], axis=-1)
        out[start : start + len(moved)] = (np.take_along_axis(lut, moved, axis=2) @ weights).min(axis=1)
    return out


def _source_cells(n: int, sym) -> list[int]:
    """For every target cell of :func:`apply_symmetry`, the source cell it reads."""
    rows, cols, _, transpose = sym
    out = []
    for r in range(n):
        for c in range(n):
            sr, sc = rows[r], cols[c]
            if transpose:
                sr, sc = sc, sr
            out.append(sr * n + sc)
    return out


# ------------------------------------------------------------------------------------ generation


def random_grid(n: int, rng: random.Random) -> tuple:
    """A random solved grid: randomised backtracking fill, then a random symmetry (not uniform)."""
    g = geometry(n)
    st = State.from_board((0,) * g.cells)
    out: list = []
    search(st, 1, StepBudget(1_000_000), rng, out)
    return apply_symmetry(out[0], random_symmetry(n, rng))


def minimal_puzzle(solution, rng: random.Random, max_steps: int = 200_000) -> tuple:
    """Remove clues from ``solution`` in a random cell order while the solution stays unique."""
    sol = parse_board(solution)
    n = board_size(sol)
    board = list(sol)
    order = list(range(n * n))
    rng.shuffle(order)
    for cell in order:
        v = board[cell]
        board[cell] = 0
        st = State.from_board(board)
        st.cand[cell] &= ~(1 << (v - 1))
        if has_solution(st, StepBudget(max_steps)):
            board[cell] = v  # another completion exists: keep the clue
    return tuple(board)


def generate_puzzle(n: int, seed: int) -> tuple[tuple, tuple]:
    """``(puzzle, solution)`` for one seed (deterministic)."""
    rng = random.Random(seed)
    sol = random_grid(n, rng)
    return minimal_puzzle(sol, rng), sol


def _gen_worker(args):
    n, seed = args
    return generate_puzzle(n, seed)


def generate_puzzles(n: int, count: int, seed: int = 0, workers: int = 1, distinct: bool = False) -> list[tuple[tuple, tuple]]:
    """``count`` puzzles with their solutions; puzzle i uses seed ``seed * 1_000_003 + i``.

    ``workers > 1`` spreads the work over processes (the same puzzles come out, in the same order).
    ``distinct`` skips repeated puzzles (4x4 repeats often) and keeps going until ``count`` distinct ones.
    """
    geometry(n)
    check_int("count", count, lo=0)
    check_int("seed", seed, lo=0)
    check_int("workers", workers, lo=1)
    out: list = []
    seen: set = set()
    next_index = 0
    while len(out) < count:
        todo = count - len(out) if not distinct else max(16, 2 * (count - len(out)))
        jobs = [(n, seed * 1_000_003 + i) for i in range(next_index, next_index + todo)]
        next_index += todo
        if workers == 1 or len(jobs) < 2:
            made = [_gen_worker(j) for j in jobs]
        else:
            import multiprocessing as mp

            with mp.get_context("fork").Pool(workers) as pool:
                made = pool.map(_gen_worker, jobs, chunksize=max(1, len(jobs) // (8 * workers)))
        for pair in made:
            if distinct and pair[0] in seen:
                continue
            seen.add(pair[0])
            out.append(pair)
            if len(out) == count:
                break
    return out


# ------------------------------------------------------------------------------------ files


def save_puzzles(path, puzzles, header: str | None = None) -> Path:
    """Write puzzles (one line each) atomically; ``header`` lines become ``#`` comments."""
    lines = [f"# {h}" for h in (header or "").splitlines()]
    lines += [format_board(p) for p in puzzles]
    return write_text_atomic(path, "\n".join(lines) + "\n")


def load_puzzles(path, n: int | None = None) -> list[tuple]:
    """The puzzles of a file written by :func:`save_puzzles` (clear error naming a bad line)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"puzzle file {path} does not exist (make it with python -m companion.sudoku_dfs.generator)")
    out = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            out.append(parse_board(line, n))
        except ParameterError as exc:
            raise ParameterError(f"{path.name} line {lineno}", line, exc.allowed) from None
    return out


def load_named_puzzles(path, n: int | None = None) -> list[tuple[str, tuple]]:
    """``(name, puzzle)`` pairs of a puzzle file whose every puzzle line follows a ``#`` comment line
    naming it (as ``data/sudoku/hard_9x9.txt``); the name is that comment without its ``#``."""
    path = Path(path)
    names, out = [], []
    last = None
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line.startswith("#"):
            last = line.lstrip("# ").strip()
        elif line:
            names.append(last or f"puzzle {len(names) + 1}")
            last = None
    for name, puzzle in zip(names, load_puzzles(path, n)):
        out.append((name, puzzle))
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Generate locally minimal Sudoku/Shidoku puzzles (paper 06 recipe).")
    parser.add_argument("--size", type=int, default=9, choices=[4, 9])
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--distinct", action="store_true", help="skip repeated puzzles (useful for 4x4)")
    parser.add_argument("--out", type=str, required=True)
    args = parser.parse_args(argv)
    import time

    t0 = time.perf_counter()
    pairs = generate_puzzles(args.size, args.count, args.seed, args.workers, distinct=args.distinct)
    dt = time.perf_counter() - t0
    cmd = (
        f"python -m companion.sudoku_dfs.generator --size {args.size} --count {args.count} "
        f"--seed {args.seed} --workers {args.workers}{' --distinct' if args.distinct else ''} --out {args.out}"
    )
    header = (
        f"{args.count} {'distinct ' if args.distinct else ''}locally minimal {args.size}x{args.size} puzzles, unique solutions, seed {args.seed}\n"
        f"made by: {cmd}\n"
        f"grid: randomised backtracking fill + random symmetry (not uniform over grids; see companion/sudoku_dfs/generator.py)"
    )
    save_puzzles(args.out, [p for p, _ in pairs], header)
    print(f"wrote {len(pairs)} puzzles to {args.out} in {dt:.1f} s")


if __name__ == "__main__":  # pragma: no cover
    main()

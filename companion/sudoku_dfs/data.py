"""Transcripts as padded tensors with their label sets, and symmetry augmentation (paper 06, Section 3.2).

Paper: Giannoulis, Pantis, Tzamos, NeurIPS 2025 (arXiv 2509.22023). The target of position t is the
label set of token t + 1 (:attr:`companion.sudoku_dfs.solver.Transcript.choices`), padded with -1.

**Data augmentation (deviation).** The paper streams fresh puzzles. Here a pool of transcripts is
mapped through random Sudoku symmetries on the fly (:func:`augment_batch`): the token map of a
symmetry sends a DFS transcript of a puzzle, with its label sets, to a DFS transcript of the image
puzzle (rules and minimum-candidate guesses are equivariant; the clue prefix is re-sorted into cell
order). It multiplies a small pool of 9x9 puzzles by up to 2 * 6^8 * 9! at no cost. At 4x4 there are
only 2 * 8 * 8 * 4! = 3072 symmetries, and the committed locally minimal Shidoku puzzles fall into 36
classes under them, so the augmented training set covers every class a held-out 4x4 puzzle lies in
(the notebook's claims say so).
"""

from __future__ import annotations

from dataclasses import dataclass

import time

import numpy as np
import torch

from companion.core import check_int, gpu_hidden_from_children
from companion.sudoku_dfs.board import PAD, VOCAB_SIZE
from companion.sudoku_dfs.generator import generate_puzzle
from companion.sudoku_dfs.solver import dfs_transcript

__all__ = ["StreamPool", "TranscriptBatch", "TranscriptStream", "augment_batch", "encode_transcripts", "stack_arrays",
           "stream_example", "stream_seed", "symmetry_maps", "transcript_arrays"]


@dataclass
class TranscriptBatch:
    """Padded transcripts: ``tokens [B, T]`` (PAD after the end), ``labels [B, T, K]`` (label set of the
    *next* token at each position, -1 padded), ``n_clues [B]``, ``lengths [B]``; ``n`` the board size."""

    tokens: torch.Tensor
    labels: torch.Tensor
    n_clues: torch.Tensor
    lengths: torch.Tensor
    n: int

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def to(self, device) -> "TranscriptBatch":
        return TranscriptBatch(self.tokens.to(device), self.labels.to(device), self.n_clues.to(device), self.lengths.to(device), self.n)

    def index(self, idx) -> "TranscriptBatch":
        return TranscriptBatch(self.tokens[idx], self.labels[idx], self.n_clues[idx], self.lengths[idx], self.n)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> "TranscriptBatch":
        """``min(batch_size, len(self))`` transcripts drawn uniformly (with replacement), cut to the longest."""
        idx = torch.randint(len(self), (min(batch_size, len(self)),), generator=generator)
        batch = self.index(idx)
        T = int(batch.lengths.max())
        return TranscriptBatch(batch.tokens[:, :T], batch.labels[:, :T], batch.n_clues, batch.lengths, batch.n)


def transcript_arrays(t, max_len: int | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """``(tokens [L] int16, labels [L, K] int16)`` of one transcript (labels = next token's set, -1 padded)."""
    L = len(t)
    if max_len is not None and L > max_len:
        return None
    K = max((len(c) for c in t.choices if c is not None), default=1)
    labels = np.full((L, K), -1, dtype=np.int16)
    for pos in range(L - 1):
        c = t.choices[pos + 1]
        if c:
            labels[pos, : len(c)] = sorted(c)
    return np.asarray(t.tokens, dtype=np.int16), labels


def stack_arrays(items, n: int, max_len: int | None = None) -> TranscriptBatch:
    """A :class:`TranscriptBatch` from ``(tokens, labels, n_clues)`` triples (see :func:`transcript_arrays`)."""
    if not items:
        raise ValueError("no transcripts to encode")
    T = max_len or max(len(tk) for tk, _, _ in items)
    K = max(lb.shape[1] for _, lb, _ in items)
    tokens = np.full((len(items), T), PAD, dtype=np.int64)
    labels = np.full((len(items), T, K), -1, dtype=np.int16)
    n_clues = np.zeros(len(items), dtype=np.int64)
    lengths = np.zeros(len(items), dtype=np.int64)
    for i, (tk, lb, nc) in enumerate(items):
        if len(tk) > T:
            raise ValueError(f"a transcript of {len(tk)} tokens is longer than max_len={T}")
        tokens[i, : len(tk)] = tk
        labels[i, : len(tk), : lb.shape[1]] = lb
        n_clues[i], lengths[i] = nc, len(tk)
    return TranscriptBatch(torch.from_numpy(tokens), torch.from_numpy(labels), torch.from_numpy(n_clues), torch.from_numpy(lengths), n)


def encode_transcripts(transcripts, max_len: int | None = None) -> TranscriptBatch:
    """Pad transcripts into tensors; the target of position t is ``transcript.choices[t + 1]``."""
    if not transcripts:
        raise ValueError("no transcripts to encode")
    n = transcripts[0].n
    if any(t.n != n for t in transcripts):
        raise ValueError("all transcripts must have the same board size")
    items = []
    for t in transcripts:
        tk, lb = transcript_arrays(t)
        items.append((tk, lb, t.n_clues))
    return stack_arrays(items, n, max_len)


def symmetry_maps(n: int, count: int, gen: torch.Generator | None = None, device="cpu") -> torch.Tensor:
    """``count`` random symmetry token maps ``[count, VOCAB_SIZE]`` (vectorised; same law as
    :func:`companion.sudoku_dfs.generator.random_symmetry` and :func:`symmetry_token_map`). The random draws
    (``[count, n]`` permutations, from ``gen`` on the CPU) decide the maps; the table is built on ``device``, so
    the same ``gen`` gives the same maps on every device, and a training step on a GPU builds its ``count × 1001``
    table there instead of on its host threads."""
    b = 2 if n == 4 else 3
    B = count
    bands = torch.rand(B, b, generator=gen).argsort(1)
    inner = torch.rand(B, b, b, generator=gen).argsort(2)
    rows = (bands[:, :, None] * b + inner).reshape(B, n)  # rows[j] = source row of target row j
    bands = torch.rand(B, b, generator=gen).argsort(1)
    inner = torch.rand(B, b, b, generator=gen).argsort(2)
    cols = (bands[:, :, None] * b + inner).reshape(B, n)
    digits = torch.cat([torch.zeros(B, 1, dtype=torch.long), torch.rand(B, n, generator=gen).argsort(1) + 1], 1)
    transpose = torch.rand(B, generator=gen) < 0.5
    inv_r, inv_c, digits, transpose = (t.to(device) for t in (rows.argsort(1), cols.argsort(1), digits, transpose))
    cells = torch.arange(n, device=device)
    r, c, v = torch.meshgrid(cells, cells, cells + 1, indexing="ij")
    r, c, v = r.reshape(-1), c.reshape(-1), v.reshape(-1)
    src_tok = 100 * (r + 1) + 10 * (c + 1) + v
    x = torch.where(transpose[:, None], c[None], r[None])
    y = torch.where(transpose[:, None], r[None], c[None])
    tr = inv_r.gather(1, x)
    tc = inv_c.gather(1, y)
    tv = digits.gather(1, v[None].expand(B, -1))
    table = torch.arange(VOCAB_SIZE, device=device).repeat(B, 1)
    table[:, src_tok] = 100 * (tr + 1) + 10 * (tc + 1) + tv
    return table


def augment_batch(batch: TranscriptBatch, maps: torch.Tensor) -> TranscriptBatch:
    """Apply one token map per transcript to tokens and labels, then re-sort the clues by cell."""
    maps = maps.to(batch.tokens.device)
    B, T = batch.tokens.shape
    n = batch.n
    tok = maps.gather(1, batch.tokens)
    lab = batch.labels.long()
    flat = lab.clamp(min=0).view(B, -1)
    mapped = maps.gather(1, flat).view_as(lab)
    lab = torch.where(lab >= 0, mapped, lab).to(batch.labels.dtype)
    pos = torch.arange(T, device=tok.device).expand(B, T)
    cell = (tok // 100 - 1) * n + (tok // 10 % 10 - 1)
    key = torch.where(pos < batch.n_clues[:, None], cell, T * T + pos)
    order = key.argsort(dim=1)
    tok = tok.gather(1, order)
    return TranscriptBatch(tok, lab, batch.n_clues, batch.lengths, n)


# ------------------------------------------------------------------------------------ streamed 9x9 data
#
# The paper streams fresh "Random" puzzles. :class:`TranscriptStream` does so on CPU worker processes: worker w of
# shard s makes puzzle i from the seed of ``(seed, s * workers + w, i)`` alone, so a stream is reproducible and two
# shards (ranks of a distributed run) never share a puzzle seed. :class:`StreamPool` keeps what arrived and samples
# training batches from it without waiting (a step re-uses earlier transcripts, under a fresh random symmetry,
# while the workers make new ones).

BUCKET = 64  # sampled batches are padded to a multiple of this many tokens (few distinct shapes for torch.compile)


def stream_seed(seed: int, worker: int, index: int) -> int:
    """The puzzle seed of item ``index`` of global ``worker`` in the stream of ``seed`` (numpy's SeedSequence)."""
    return int(np.random.SeedSequence([seed, worker, index]).generate_state(1, np.uint64)[0] >> 1)


def stream_example(seed: int, worker: int, index: int, per_puzzle: int, max_len: int):
    """``(puzzle, solution, items)``: one locally minimal 9x9 puzzle (the paper's recipe) and up to ``per_puzzle``
    DFS transcripts of it as :func:`transcript_arrays` triples, kept as the paper keeps them (a guess, ends with
    ``0``, at most ``max_len`` tokens). Deterministic in ``(seed, worker, index)``."""
    pseed = stream_seed(seed, worker, index)
    puzzle, solution = generate_puzzle(9, pseed)
    items = []
    for k in range(per_puzzle):
        t = dfs_transcript(puzzle, seed=pseed + k, check_unique=False, max_tokens=max_len)
        if t is not None and t.has_guess and t.solved:
            items.append((*transcript_arrays(t), t.n_clues))
    return puzzle, solution, items


def _stream_worker(seed, worker, per_puzzle, max_len, out, stop):
    """A stream worker process: examples 0, 1, 2, ... of ``worker`` into its bounded queue until ``stop``."""
    import queue

    torch.set_num_threads(1)
    out.cancel_join_thread()  # at stop, exit without waiting to flush examples nobody will read
    index = 0
    while not stop.is_set():
        example = (index, *stream_example(seed, worker, index, per_puzzle, max_len))
        while not stop.is_set():
            try:
                out.put(example, timeout=0.2)
                break
            except queue.Full:
                continue
        index += 1


class TranscriptStream:
    """Puzzles and their DFS transcripts made by ``workers`` processes (spawn context, no CUDA), each feeding a
    bounded queue of ``queue_size`` examples; read round-robin, so the sequence is the same on every run of one
    ``seed`` and ``shard``. Iterating blocks for the next example; :meth:`poll` returns only what has arrived.
    Use it as a context manager (or call :meth:`start` and :meth:`close`)."""

    def __init__(self, seed: int, workers: int, *, shard: int = 0, per_puzzle: int = 4, max_len: int = 250,
                 queue_size: int = 64):
        check_int("seed", seed, lo=0)
        check_int("workers", workers, lo=1)
        check_int("shard", shard, lo=0)
        check_int("per_puzzle", per_puzzle, lo=1)
        check_int("queue_size", queue_size, lo=1)
        self.seed, self.workers, self.shard = seed, workers, shard
        self.per_puzzle, self.max_len, self.queue_size = per_puzzle, max_len, queue_size
        self._procs: list = []
        self._next = 0  # the worker whose example comes next

    def start(self) -> "TranscriptStream":
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self._stop = ctx.Event()
        self._queues = [ctx.Queue(self.queue_size) for _ in range(self.workers)]
        with gpu_hidden_from_children():  # a data worker never touches the GPU
            for w, q in enumerate(self._queues):
                p = ctx.Process(target=_stream_worker, daemon=True,
                                args=(self.seed, self.shard * self.workers + w, self.per_puzzle, self.max_len, q,
                                      self._stop))
                p.start()
                self._procs.append(p)
        return self

    def _get(self, block: bool):
        import queue

        q, p = self._queues[self._next], self._procs[self._next]
        while True:
            try:
                item = q.get(timeout=1.0) if block else q.get_nowait()
                break
            except queue.Empty:
                if not p.is_alive():
                    raise RuntimeError(f"stream worker {self._next} exited with code {p.exitcode}") from None
                if not block:
                    return None
        self._next = (self._next + 1) % self.workers
        return item

    def __iter__(self):
        """``(index, puzzle, solution, items)`` in round-robin worker order, waiting for each."""
        if not self._procs:
            raise RuntimeError("the stream is not started (use it in a with block or call start())")
        while True:
            yield self._get(block=True)

    def poll(self) -> list:
        """The examples that have arrived, in stream order, without waiting."""
        out = []
        while (item := self._get(block=False)) is not None:
            out.append(item)
        return out

    def close(self) -> None:
        if not self._procs:
            return
        self._stop.set()
        until = time.monotonic() + 2.0  # one grace period for all the workers, then terminate
        for p in self._procs:
            p.join(timeout=max(0.0, until - time.monotonic()))
        for p in self._procs:
            if p.is_alive():
                p.terminate()
                p.join()
        for q in self._queues:
            q.cancel_join_thread()
            q.close()
        self._procs = []

    def __enter__(self) -> "TranscriptStream":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


class StreamPool:
    """The transcripts a :class:`TranscriptStream` has delivered (at most ``capacity``; the oldest are replaced),
    sampled uniformly for training. Puzzles in ``exclude`` (held-out ones) are dropped; the first ``keep_puzzles``
    kept puzzles are stored with their solutions in :attr:`puzzles`."""

    def __init__(self, stream: TranscriptStream, *, capacity: int = 2_000_000, exclude=(), keep_puzzles: int = 0,
                 pad_to: int | None = None):
        if pad_to is not None:
            check_int("pad_to", pad_to, lo=stream.max_len if stream is not None else 1)
        self.stream, self.capacity, self.pad_to = stream, capacity, pad_to
        self.exclude, self.keep_puzzles = frozenset(exclude), keep_puzzles
        self.items: list = []
        self.puzzles: list = []
        self.n_puzzles = self.n_transcripts = 0

    def _add(self, examples) -> None:
        for _, puzzle, solution, items in examples:
            if puzzle in self.exclude:
                continue
            self.n_puzzles += 1
            if len(self.puzzles) < self.keep_puzzles:
                self.puzzles.append((puzzle, solution))
            for item in items:
                if len(self.items) < self.capacity:
                    self.items.append(item)
                else:
                    self.items[self.n_transcripts % self.capacity] = item
                self.n_transcripts += 1

    def fill(self, at_least: int = 0) -> int:
        """Take what has arrived; wait for the stream while fewer than ``at_least`` transcripts are held."""
        self._add(self.stream.poll())
        examples = iter(self.stream)
        while len(self.items) < at_least:
            self._add([next(examples)])
        return len(self.items)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> TranscriptBatch:
        """``batch_size`` transcripts drawn uniformly (with replacement) from the pool after taking new arrivals,
        padded to ``pad_to`` tokens (one shape: one ``torch.compile`` graph), else to a multiple of :data:`BUCKET`."""
        self.fill(1)
        idx = torch.randint(len(self.items), (batch_size,), generator=generator).tolist()
        items = [self.items[i] for i in idx]
        T = self.pad_to or -(-max(len(tk) for tk, _, _ in items) // BUCKET) * BUCKET
        return stack_arrays(items, 9, T)

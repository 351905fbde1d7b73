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

import numpy as np
import torch

from companion.sudoku_dfs.board import PAD, VOCAB_SIZE

__all__ = ["TranscriptBatch", "augment_batch", "encode_transcripts", "stack_arrays", "symmetry_maps", "transcript_arrays"]


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
    :func:`companion.sudoku_dfs.generator.random_symmetry` and :func:`symmetry_token_map`)."""
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
    inv_r, inv_c = rows.argsort(1), cols.argsort(1)
    r, c, v = torch.meshgrid(torch.arange(n), torch.arange(n), torch.arange(1, n + 1), indexing="ij")
    r, c, v = r.reshape(-1), c.reshape(-1), v.reshape(-1)
    src_tok = 100 * (r + 1) + 10 * (c + 1) + v
    x = torch.where(transpose[:, None], c[None], r[None])
    y = torch.where(transpose[:, None], r[None], c[None])
    tr = inv_r.gather(1, x)
    tc = inv_c.gather(1, y)
    tv = digits.gather(1, v[None].expand(B, -1))
    table = torch.arange(VOCAB_SIZE).repeat(B, 1)
    table[:, src_tok] = 100 * (tr + 1) + 10 * (tc + 1) + tv
    return table.to(device)


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

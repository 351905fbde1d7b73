"""Greedy decoding, teacher-forced accuracy and board accuracy (paper 06, Section 3.2 and 5).

Paper: Giannoulis, Pantis, Tzamos, NeurIPS 2025 (arXiv 2509.22023).

**Decoding.** Greedy, capped (the paper: 500 tokens), with a KV cache and left padding so many
puzzles decode at once; the answer is the last value written to each cell (the official
``edit_preds``, :func:`companion.sudoku_dfs.board.final_board`). ``protocol=True`` (an addition,
reported beside the paper's plain greedy decoding) restricts the argmax to tokens the transcript
grammar allows (:class:`companion.sudoku_dfs.replay.ProtocolState`) - moves only into empty cells of
the current branch, ``0`` only on a full board, the right level tokens - without any Sudoku rule, so
the values stay the model's; small models mostly fail at exactly this bookkeeping.
"""

from __future__ import annotations

import numpy as np
import torch

from companion.core import check_int
from companion.sudoku_dfs.board import (
    DEAD_END,
    GUESS,
    LEVEL_MAX,
    LEVEL_MIN,
    MOVE_MAX,
    MOVE_MIN,
    PAD,
    SOLVED,
    START,
    VOCAB_SIZE,
    board_size,
    final_board,
    find_conflict,
    move_token,
    parse_board,
)
from companion.sudoku_dfs.data import TranscriptBatch
from companion.sudoku_dfs.replay import ProtocolState, guesses_in

__all__ = ["evaluate_model", "greedy_decode", "is_valid_completion", "label_accuracy", "next_token_probs", "prompt_tokens"]


def prompt_tokens(puzzle) -> list[int]:
    """The clues in cell order followed by the start token."""
    b = parse_board(puzzle)
    n = board_size(b)
    return [move_token(c, v, n) for c, v in enumerate(b) if v] + [START]


@torch.no_grad()
def label_accuracy(model, data: TranscriptBatch, batch_size: int = 256) -> dict:
    """Teacher-forced accuracy: the share of labelled positions whose argmax is in the label set, split
    by what the label is (a rule move, a guess, ``101``, ``102``, ``0``, a level) - the paper's "cell
    accuracy" per token type."""
    model.eval()
    device = next(model.parameters()).device
    hits: dict = {}
    for start in range(0, len(data), batch_size):
        b = data.index(slice(start, start + batch_size)).to(device)
        T = int(b.lengths.max())
        logits = model(input_ids=b.tokens[:, :T]).logits
        pred = logits.argmax(-1)
        lab = b.labels[:, :T].long()
        has = (lab >= 0).any(-1)
        ok = (lab == pred[..., None]).any(-1)
        first = lab[..., 0]
        kinds = {
            "move": (first >= MOVE_MIN) & (first <= MOVE_MAX),
            "101": first == GUESS,
            "102": first == DEAD_END,
            "0": first == SOLVED,
            "level": (first >= LEVEL_MIN) & (first <= LEVEL_MAX),
        }
        for name, m in {"all": has, **kinds}.items():
            m = m & has
            a, c = hits.get(name, (0, 0))
            hits[name] = (a + int((ok & m).sum()), c + int(m.sum()))
    return {k: (a / c if c else float("nan")) for k, (a, c) in hits.items()}


def _cache_keyword(model) -> str:
    """``cache`` (transformers >= 5.2x) or ``past_key_values`` (older): the KV-cache argument name."""
    import inspect

    return "cache" if "cache" in inspect.signature(type(model).forward).parameters else "past_key_values"


def _cache_of(res):
    cache = getattr(res, "cache", None)
    return cache if cache is not None else getattr(res, "past_key_values", None)


@torch.no_grad()
def greedy_decode(
    model, puzzles, max_total: int = 500, batch_size: int = 256, device=None, protocol: bool = False
) -> list[list[int]]:
    """Greedy transcripts (prompt included) for many puzzles at once, stopping at ``0`` or ``max_total``.

    ``protocol=False`` is the paper's evaluation: plain argmax. ``protocol=True`` takes the argmax
    among the tokens the transcript grammar allows (:class:`companion.sudoku_dfs.replay.ProtocolState`:
    moves only into empty cells of the current branch, ``0`` only on a full board, the right level
    tokens); it never checks the Sudoku rules, so the values are still the model's.
    """
    check_int("max_total", max_total, lo=2)
    device = torch.device(device) if device is not None else next(model.parameters()).device
    model.eval()
    boards = [parse_board(p) for p in puzzles]
    prompts = [prompt_tokens(b) for b in boards]
    limit = min(max_total, model.config.n_positions)
    cache_kw = _cache_keyword(model)
    out: list[list[int]] = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start : start + batch_size]
        B = len(chunk)
        L = max(len(p) for p in chunk)
        ids = torch.full((B, L), PAD, dtype=torch.long)
        attn = torch.zeros((B, L), dtype=torch.long)
        for i, p in enumerate(chunk):
            ids[i, L - len(p) :] = torch.tensor(p)
            attn[i, L - len(p) :] = 1
        ids, attn = ids.to(device), attn.to(device)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        states = None
        if protocol:
            states = [ProtocolState(b, board_size(b)) for b in boards[start : start + B]]

        def pick(logits, done_list):
            if states is None:
                return logits.argmax(-1)
            mask = np.zeros((B, VOCAB_SIZE), dtype=bool)
            for i, st in enumerate(states):
                if not done_list[i]:
                    st.fill_mask(mask[i])
                if not mask[i].any():
                    mask[i, SOLVED] = True
            m = torch.from_numpy(mask).to(logits.device)
            return logits.float().masked_fill(~m, float("-inf")).argmax(-1)

        res = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True)
        past = _cache_of(res)
        done_list = [False] * B
        nxt = pick(res.logits[:, -1], done_list)
        cur = pos[:, -1].clone()
        seqs = [list(p) for p in chunk]
        while True:
            nxt_cpu = nxt.tolist()
            for i in range(B):
                if done_list[i]:
                    continue
                seqs[i].append(nxt_cpu[i])
                if states is not None:
                    states[i].push(nxt_cpu[i])
                if nxt_cpu[i] == SOLVED or len(seqs[i]) >= limit or (states is not None and states[i].done):
                    done_list[i] = True
            if all(done_list):
                break
            done = torch.tensor(done_list, device=device)
            attn = torch.cat([attn, torch.ones((B, 1), dtype=attn.dtype, device=device)], dim=1)
            cur = torch.where(done, cur, cur + 1)
            kw = {cache_kw: past}
            res = model(input_ids=nxt[:, None], attention_mask=attn, position_ids=cur[:, None], use_cache=True, **kw)
            past = _cache_of(res)
            nxt = pick(res.logits[:, -1], done_list)
        out.extend(seqs)
    return out


def is_valid_completion(puzzle, board) -> bool:
    """Whether ``board`` is a complete valid grid that keeps every clue of ``puzzle``."""
    p = parse_board(puzzle)
    if len(board) != len(p) or 0 in board:
        return False
    if any(pv and pv != bv for pv, bv in zip(p, board)):
        return False
    return find_conflict(tuple(board)) is None


def evaluate_model(
    model, puzzles, solutions=None, max_total: int = 500, batch_size: int = 256, device=None, protocol: bool = False
) -> dict:
    """Board accuracy (the last value per cell equals the solution; a valid completion where no
    solution is given), the share that ends with ``0``, and the guesses per puzzle."""
    seqs = greedy_decode(model, puzzles, max_total=max_total, batch_size=batch_size, device=device, protocol=protocol)
    n = board_size(parse_board(puzzles[0]))
    correct, ended, guesses = [], [], []
    for i, (p, s) in enumerate(zip(puzzles, seqs)):
        board = final_board(s, n)
        if solutions is not None and solutions[i] is not None:
            correct.append(tuple(board) == tuple(solutions[i]))
        else:
            correct.append(is_valid_completion(p, board))
        ended.append(s[-1] == SOLVED)
        guesses.append(guesses_in(s, n))
    correct_a = np.array(correct, dtype=bool)
    return {
        "board_accuracy": float(correct_a.mean()) if len(correct_a) else float("nan"),
        "ended": float(np.mean(ended)) if ended else float("nan"),
        "correct": correct_a,
        "guesses": np.array(guesses),
        "sequences": seqs,
    }


@torch.no_grad()
def next_token_probs(model, tokens) -> torch.Tensor:
    """Teacher-forced next-token distributions at every position of one sequence: ``[T, VOCAB]``."""
    model.eval()
    device = next(model.parameters()).device
    ids = torch.tensor([list(tokens)], dtype=torch.long, device=device)[:, : model.config.n_positions]
    return torch.softmax(model(input_ids=ids).logits[0].float(), -1).cpu()

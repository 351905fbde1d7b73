"""A tiny character language model's data and training loop, shared by the weight-normalisation study, the
depth-width runs, the explorer's cached runs and the search's fitness.

Text: the Python standard library's docstrings (``companion.models.stdlib_texts``, offline), characters mapped
to a compact vocabulary, the last 10% held out. Adam without weight decay (the paper's optimiser [secondary]),
linear warm-up, constant learning rate: short runs are proxies, not converged models.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from companion.core import check_float, check_int
from companion.models import stdlib_texts
from companion.nemotron_flash.weightnorm import WeightNorm


@functools.lru_cache(maxsize=1)
def char_data(val_fraction: float = 0.1):
    """``(train, val, vocab_size)``: long tensors of character ids."""
    text = "\n".join(stdlib_texts())
    chars = sorted(set(text))
    lut = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([lut[c] for c in text], dtype=torch.long)
    n_val = int(len(ids) * val_fraction)
    return ids[:-n_val], ids[-n_val:], len(chars)


def batches(data: torch.Tensor, batch: int, seq_len: int, seed: int):
    """An endless stream of ``[batch, seq_len + 1]`` windows at random offsets (seeded)."""
    gen = torch.Generator().manual_seed(seed)
    while True:
        starts = torch.randint(0, len(data) - seq_len - 1, (batch,), generator=gen)
        yield data[starts[:, None] + torch.arange(seq_len + 1)[None]]


@torch.no_grad()
def evaluate(model, data, *, batch=16, seq_len=64, n_batches=4, seed=12345) -> float:
    model.eval()
    it = batches(data, batch, seq_len, seed)
    out = float(np.mean([model.loss(next(it)).item() for _ in range(n_batches)]))
    model.train()
    return out


def train_lm(model, *, steps: int, batch: int = 16, seq_len: int = 64, lr: float = 3e-3, seed: int = 0,
             weight_norm: str | None = None, exempt: str = "embedding", warmup: int = 10, eval_every: int = 0,
             record_norm_error: bool = False, eval_batches: int = 4) -> dict:
    """Adam (no weight decay) for ``steps`` steps on the character data.

    ``weight_norm``: ``None`` (plain), ``"after_step"`` or ``"before_step"`` (:class:`WeightNorm`). Returns the
    training losses, the validation loss at the end (and every ``eval_every`` steps) and, with
    ``record_norm_error``, the largest deviation of a normalised row/column norm from 1 after each step."""
    check_int("steps", steps, lo=1)
    check_float("lr", lr, lo=0, lo_open=True)
    train, val, _ = char_data()
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.95))
    wn = None if weight_norm is None else WeightNorm(model, placement=weight_norm, exempt=exempt)
    it = batches(train, batch, seq_len, seed)
    losses, norm_err, evals = [], [], []
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr * min(1.0, (step + 1) / warmup)
        loss = model.loss(next(it))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if wn is None:
            opt.step()
        else:
            wn.step(opt)
            if record_norm_error:
                norm_err.append(wn.error())
        losses.append(loss.item())
        if eval_every and (step + 1) % eval_every == 0:
            evals.append((step + 1, evaluate(model, val, seq_len=seq_len)))
    return {"loss": losses, "val_loss": evaluate(model, val, seq_len=seq_len, n_batches=eval_batches), "evals": evals,
            "norm_error": norm_err, "tokens_per_step": batch * seq_len}

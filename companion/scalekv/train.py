"""Training loop of the tiny VAR (teacher forcing, block-causal mask, cross-entropy on every map).

Paper 03 evaluates a pretrained Infinity; offline we train a small next-scale model on the digits'
multi-scale token maps (``data.py``). AdamW with linear warm-up and cosine decay; no tricks.

:func:`train_tiny_var` is what the notebook does when it trains; ``python -m companion.scalekv.make_checkpoint``
runs the same function and writes a checkpoint (:mod:`companion.scalekv.checkpoint`) that the notebook
loads instead of training.
"""

from __future__ import annotations

import math
import time

import torch

from companion.core import check_float, check_int
from companion.scalekv.model import TinyVAR, VARConfig

__all__ = ["train_var", "train_tiny_var", "notebook_config"]


def train_var(model: TinyVAR, tokens: torch.Tensor, labels: torch.Tensor, *, steps: int = 300, batch_size: int = 64,
              lr: float = 3e-3, weight_decay: float = 0.01, seed: int = 0, label_dropout: float = 0.1,
              log_every: int = 0) -> list[float]:
    """Train in place; returns the loss of every step (nats per token).

    ``label_dropout``: share of labels replaced by the null class, so that the model can also run
    unconditionally and be sampled with classifier-free guidance (as Infinity is).
    """
    check_int("steps", steps, lo=1)
    check_int("batch_size", batch_size, lo=1)
    check_float("lr", lr, lo=0.0, lo_open=True)
    check_float("label_dropout", label_dropout, lo=0.0, hi=1.0, hi_open=True)
    device = model.pos.device
    tokens, labels = tokens.to(device), labels.to(device)
    g = torch.Generator().manual_seed(int(seed))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, betas=(0.9, 0.98))
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    model.train()
    losses = []
    for step in range(steps):
        idx = torch.randint(0, tokens.shape[0], (batch_size,), generator=g).to(device)
        lab = labels[idx]
        if label_dropout > 0:
            drop = (torch.rand(batch_size, generator=g) < label_dropout).to(device)
            lab = torch.where(drop, torch.full_like(lab, model.config.num_classes), lab)
        loss = model.loss(tokens[idx], lab)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if log_every and (step % log_every == 0 or step == steps - 1):
            print(f"step {step:5d}  loss {loss.item():.4f}")
    model.eval()
    return losses


def train_tiny_var(config: VARConfig, recipe, data=None, device="cpu", *, log_every: int = 0) -> tuple[TinyVAR, list[float], float]:
    """``(model, losses, seconds)``: the model of ``config`` initialised from ``recipe.seed`` and trained
    with ``recipe`` (:class:`~companion.scalekv.checkpoint.Recipe`) on the digits' token maps (``data``:
    :func:`~companion.scalekv.data.load_digit_tokens` of ``config.sides``; loaded when None)."""
    from companion.scalekv.data import load_digit_tokens

    if config.vocab != recipe.levels:
        raise ValueError(f"the model's vocab ({config.vocab}) must equal the recipe's grey levels ({recipe.levels})")
    if data is None:
        data = load_digit_tokens(config.sides, levels=recipe.levels)
    if tuple(data.sides) != tuple(config.sides) or data.levels != recipe.levels:
        raise ValueError(f"the token maps (sides {data.sides}, {data.levels} levels) do not fit the model "
                         f"(sides {config.sides}, {recipe.levels} levels)")
    torch.manual_seed(recipe.seed)
    model = TinyVAR(config).to(device)
    t0 = time.perf_counter()
    losses = train_var(model, data.tokens, data.labels, steps=recipe.steps, batch_size=recipe.batch_size, lr=recipe.lr,
                       weight_decay=recipe.weight_decay, seed=recipe.seed, label_dropout=recipe.label_dropout, log_every=log_every)
    return model, losses, time.perf_counter() - t0


def notebook_config(sides=(1, 2, 3, 4, 6, 8, 12), layers: int = 4, dim: int = 48, levels: int = 8) -> VARConfig:
    """The notebook's model: 4 heads, MLP ratio 2, ``levels`` tokens."""
    return VARConfig(sides=tuple(sides), vocab=levels, layers=layers, dim=dim, heads=4, mlp_ratio=2)

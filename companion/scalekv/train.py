"""Training loop of the tiny VAR (teacher forcing, block-causal mask, cross-entropy on every map).

Paper 03 evaluates a pretrained Infinity; offline we train a small next-scale model on the digits'
multi-scale token maps (``data.py``). AdamW with linear warm-up and cosine decay; no tricks.
"""

from __future__ import annotations

import math

import torch

from companion.core import check_float, check_int
from companion.scalekv.model import TinyVAR

__all__ = ["train_var"]


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

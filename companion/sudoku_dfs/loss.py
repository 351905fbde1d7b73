"""The multi-target losses of paper 06 (Section 3.2 and Section 4).

Paper: Giannoulis, Pantis, Tzamos, NeurIPS 2025 (arXiv 2509.22023).

**Multi-target loss (L2 in the paper's naming, Sec. 3.2).** At position t the label set S_t holds every
valid next token; ``L = -sum_{i in S_t} log p_i``. The official code averages over all (position,
target) pairs (``loss = -z[Y].mean()``); :func:`multi_target_loss` does the same.
**L1 ("expected trials", Sec. 4).** ``-log sum_{i in S_t} p_i`` per position, averaged over
positions: the log of the expected number of trials of a guesser sampling from p.
"""

from __future__ import annotations

import torch

from companion.core import check_choice

__all__ = ["LOSS_KINDS", "multi_target_loss"]

LOSS_KINDS = ("l2", "l2-position", "l1")


def multi_target_loss(logits: torch.Tensor, labels: torch.Tensor, kind: str = "l2") -> torch.Tensor:
    """Multi-target loss over label sets ``labels [B, T, K]`` (-1 padded) for ``logits [B, T, V]``.

    ``"l2"``: ``-mean over (position, target) pairs of log p`` (the official ``-z[Y].mean()``);
    ``"l2-position"``: the same with every position weighted equally (an ablation);
    ``"l1"``: ``-mean over positions of log sum_{i in S} p_i``. ``labels`` may also be ``[N, K]``
    with ``logits [N, V]`` (positions already selected).
    """
    check_choice("kind", kind, LOSS_KINDS)
    logp = torch.log_softmax(logits.float(), dim=-1)
    lab = labels.long()
    mask = lab >= 0
    g = logp.gather(-1, lab.clamp(min=0))
    if kind == "l2":
        return -(g * mask).sum() / mask.sum().clamp(min=1)
    if kind == "l2-position":
        per = (g * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        has = mask.any(-1)
        return -(per[has]).mean()
    has = mask.any(-1)
    lse = torch.logsumexp(g.masked_fill(~mask, float("-inf")), dim=-1)
    return -(lse[has]).mean()

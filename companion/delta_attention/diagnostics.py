"""Diagnostics of the distribution shift (paper 09, Δ Attention, Sec. 3 and Fig. 3/9).

* `cosine_rows(a, b)`: cosine similarity of matching vectors (per position), the paper's "cosine
  between sparse and dense attention outputs".
* `spearman_rows(p, q)`: Spearman rank correlation of matching attention rows (average ranks for
  ties, as `scipy.stats.spearmanr`), the paper's comparison of the last queries' attention rows with
  the dense model's. The rows are computed *densely* from each run's own Q and K: a decode step after
  a sparse prefill attends densely, and the question is whether it still ranks the keys as the dense
  model does.
* `mean_pool_cosine`: the final sentence-embedding similarity (MiniLM's mean pooling).
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.stats import rankdata


def cosine_rows(a: torch.Tensor, b: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Cosine similarity along the last axis: [..., D] x [..., D] -> [...] (float64)."""
    a, b = a.double(), b.double()
    return (a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1)).clamp_min(eps)


def centred_ranks(p: torch.Tensor) -> np.ndarray:
    """Average ranks along the last axis (ties share their mean rank, as ``scipy.stats.rankdata``), minus their
    row mean: what :func:`spearman_rows` correlates, so a reference used against many runs is ranked once."""
    r = rankdata(p.detach().double().cpu().numpy(), axis=-1)
    return r - r.mean(-1, keepdims=True)


def spearman_rows(p: torch.Tensor, q: torch.Tensor | None = None, *, q_ranks: np.ndarray | None = None) -> torch.Tensor:
    """Spearman correlation of matching rows: [..., N] x [..., N] -> [...] (float64). ``q_ranks``:
    :func:`centred_ranks` of ``q``, given instead of ``q`` where one reference is compared with many rows."""
    if (q is None) == (q_ranks is None):
        raise ValueError("spearman_rows needs exactly one of q and q_ranks")
    rq = centred_ranks(q) if q_ranks is None else q_ranks
    if tuple(p.shape) != tuple(rq.shape):
        raise ValueError(f"spearman_rows needs equal shapes, got {tuple(p.shape)} and {tuple(rq.shape)}")
    rp = centred_ranks(p)
    num = (rp * rq).sum(-1)
    den = np.sqrt((rp ** 2).sum(-1) * (rq ** 2).sum(-1))
    return torch.from_numpy(np.where(den > 0, num / np.where(den > 0, den, 1.0), 1.0))


def mean_pool_cosine(h_a: torch.Tensor, h_b: torch.Tensor) -> torch.Tensor:
    """Cosine of the mean-pooled sequence embeddings [B, N, C] -> [B] (sentence-transformers pooling)."""
    return cosine_rows(h_a.mean(dim=1), h_b.mean(dim=1))

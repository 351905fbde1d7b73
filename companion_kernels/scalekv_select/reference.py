"""Plain-PyTorch oracle of ScaleKV's token selection inside one layer (paper 03, Sec. 3.4).

Paper: Li et al., *Memory-Efficient Visual Autoregressive Modeling with Scale-Aware KV Cache
Compression*, NeurIPS 2025 (arXiv 2505.19602). Official code: ``scale_kv.py::ScaleKVCluster.update_kv``
(StargazerX0/ScaleKV @ eb0615a). Given the observation-window queries ``q_w`` (the 16 patch centroids
of the current token map), the layer's cached keys/values and a capacity ``C``:

1. scores   ``s_i = sum_{w in W} q_w . k_i / sqrt(d)`` for every key ``i`` not in the window
   (window keys get ``-inf``). This is what the official code does: it sums the *scaled logits*,
   with no softmax, although the paper writes ``softmax``. ``score="softmax"`` gives the paper's
   text instead: ``s_i = sum_w softmax_i(q_w . k / sqrt(d))`` with the softmax over non-window keys.
2. pooling  ``max_pool1d(s, kernel_size, stride=1, padding=kernel_size // 2)`` along the sequence
   (the code's default ``pooling='maxpool'``; the paper says average pooling).
3. top-k    the ``C - |W|`` largest pooled scores among non-window keys, plus the window keys.
4. order    the kept indices sorted by position, then K and V gathered at them.

Deviation: ``torch.topk`` (used by the official code) breaks ties in an unspecified order, and max
pooling creates exact ties (plateaus of equal values). The oracle breaks ties by position (lower
index first, via a stable descending sort) so that the Triton kernel can be checked exactly.
Scores are computed in float32 (float64 for float64 inputs).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["scalekv_select_reference", "window_scores_reference", "pooled_scores_reference"]


def _cdtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def window_scores_reference(q_window: torch.Tensor, keys: torch.Tensor, window_idx: torch.Tensor, score: str = "logits") -> torch.Tensor:
    """Step 1: per-key window scores ``[B, H, N]`` (window keys are ``-inf``)."""
    dt = _cdtype(keys)
    d = q_window.shape[-1]
    logits = torch.einsum("bhwd,bhnd->bhwn", q_window.to(dt), keys.to(dt)) / math.sqrt(d)
    logits[..., window_idx] = float("-inf")
    if score == "softmax":
        scores = torch.softmax(logits, dim=-1).sum(dim=2)
        scores[..., window_idx] = float("-inf")
    else:
        scores = logits.sum(dim=2)
    return scores


def pooled_scores_reference(scores: torch.Tensor, window_idx: torch.Tensor, kernel_size: int = 5) -> torch.Tensor:
    """Step 2: ``max_pool1d`` along the sequence, then window keys set to ``-inf`` again."""
    b, h, n = scores.shape
    pooled = F.max_pool1d(scores.reshape(b * h, 1, n), kernel_size, stride=1, padding=kernel_size // 2).reshape(b, h, n)
    pooled = pooled.clone()
    pooled[..., window_idx] = float("-inf")
    return pooled


def scalekv_select_reference(
    q_window: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    window_idx: torch.Tensor,
    capacity: int,
    *,
    kernel_size: int = 5,
    score: str = "logits",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Keep ``capacity`` keys per (batch, head): the window plus the top pooled scores, by position.

    Shapes: ``q_window [B, H, W, D]``, ``keys [B, H, N, D]``, ``values [B, H, N, Dv]``,
    ``window_idx [W]`` (distinct positions in ``[0, N)``, shared by all heads). Returns
    ``(keys_kept [B, H, C, D], values_kept [B, H, C, Dv], index [B, H, C] int64)``.
    """
    b, h, n, _ = keys.shape
    w = window_idx.numel()
    keep = capacity - w
    window_idx = window_idx.to(device=keys.device, dtype=torch.long)
    if keep > 0:
        pooled = pooled_scores_reference(window_scores_reference(q_window, keys, window_idx, score), window_idx, kernel_size)
        order = torch.sort(pooled, dim=-1, descending=True, stable=True).indices[..., :keep]
        index = torch.cat([order, window_idx.expand(b, h, w)], dim=-1)
    else:
        index = window_idx.expand(b, h, w).clone()
    index = torch.sort(index, dim=-1).values
    kept_k = torch.gather(keys, 2, index.unsqueeze(-1).expand(-1, -1, -1, keys.shape[-1]))
    kept_v = torch.gather(values, 2, index.unsqueeze(-1).expand(-1, -1, -1, values.shape[-1]))
    return kept_k, kept_v, index

"""Capture per-layer queries, keys and attention probabilities from a Hugging Face model.

Built on the project's one attention interception (:func:`companion.models.attention.attention_session`):
every self-attention layer's Q and K are recorded as the projections produce them, split into heads,
``[B, H, N, D]`` and ``[B, H_kv, N, D]`` (for RoPE models that is *before* the rotary embedding, which
is what a SeerAttention-style gate pools), and the attention probabilities the layer computes,
``softmax(q k^T * scaling [+ causal mask])`` with Q/K after RoPE, ``[B, H, N, N]``. The layer's output
is ``probs @ v``, so the model runs exactly as with eager attention (no dropout: call it in eval mode).
The inputs must be unpadded (``attention_mask`` of all ones or none), as for every session.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from companion.models.attention import attention_session

__all__ = ["AttentionCapture", "capture_attention"]


@dataclass
class AttentionCapture:
    q: list = field(default_factory=list)
    k: list = field(default_factory=list)
    probs: list = field(default_factory=list)

    @property
    def num_layers(self) -> int:
        return len(self.q)


def attention_probs(q: torch.Tensor, k: torch.Tensor, causal: bool, scaling: float) -> torch.Tensor:
    """``softmax(q k^T * scaling)`` with keys after the query masked when ``causal``; float32 math."""
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scaling
    if causal:
        n, m = scores.shape[-2:]
        keep = torch.ones(n, m, dtype=torch.bool, device=scores.device).tril(m - n)
        scores = scores.masked_fill(~keep, float("-inf"))
    return torch.softmax(scores, dim=-1)


@contextmanager
def capture_attention(model):
    """``with capture_attention(model) as cap: model(**inputs)`` fills ``cap.q/k/probs`` per layer.

    Raises :class:`companion.models.attention.AttentionCaptureError` (a ``ValueError``) when the model's
    attention cannot be intercepted.
    """
    cap = AttentionCapture()

    def handler(*, layer, q_pre, k_pre, q, k, v, causal, scaling, **_):
        probs = attention_probs(q, k, causal, scaling)
        cap.q.append(q_pre.detach())
        cap.k.append(k_pre.detach())
        cap.probs.append(probs.detach().to(q.dtype))
        return torch.matmul(probs, v.float()).to(v.dtype)

    with attention_session(model, handler):
        yield cap

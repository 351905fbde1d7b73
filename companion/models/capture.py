"""Capture per-layer queries, keys and attention probabilities from a Hugging Face model.

Works on models whose attention has separate query and key projections (BERT: ``query``/``key``;
Llama-style: ``q_proj``/``k_proj``) and an attention module that returns ``(output, weights)`` with
eager attention. Q and K are captured as the projections produce them, split into heads:
``[B, H, N, D]`` (for RoPE models that is *before* the rotary embedding, which is what a
SeerAttention-style gate pools). Attention probabilities are ``[B, H, N, N]``.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

_QK_NAMES = (("query", "key"), ("q_proj", "k_proj"))


@dataclass
class AttentionCapture:
    q: list = field(default_factory=list)
    k: list = field(default_factory=list)
    probs: list = field(default_factory=list)

    @property
    def num_layers(self) -> int:
        return len(self.q)


def _attention_modules(model):
    found = []
    for name, module in model.named_modules():
        for q_name, k_name in _QK_NAMES:
            if isinstance(getattr(module, q_name, None), torch.nn.Linear) and isinstance(getattr(module, k_name, None), torch.nn.Linear):
                found.append((name, module, q_name, k_name))
    return found


def _heads(module, config) -> tuple[int, int, int]:
    heads = getattr(config, "num_attention_heads")
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return heads, kv_heads, head_dim


@contextmanager
def capture_attention(model):
    """``with capture_attention(model) as cap: model(**inputs)`` fills ``cap.q/k/probs`` per layer."""
    modules = _attention_modules(model)
    if not modules:
        raise ValueError(
            f"cannot capture attention of {type(model).__name__}: no attention module with separate "
            "query/key (or q_proj/k_proj) linear projections was found"
        )
    if getattr(model.config, "_attn_implementation", "eager") != "eager":
        raise ValueError("attention probabilities are only returned with eager attention; load with attn_implementation='eager'")
    heads, kv_heads, head_dim = _heads(model, model.config)
    cap = AttentionCapture()
    handles = []

    def split(x, h):
        b, n, _ = x.shape
        return x.detach().view(b, n, h, head_dim).transpose(1, 2)

    for _, module, q_name, k_name in modules:
        handles.append(getattr(module, q_name).register_forward_hook(lambda m, i, o: cap.q.append(split(o, heads))))
        handles.append(getattr(module, k_name).register_forward_hook(lambda m, i, o: cap.k.append(split(o, kv_heads))))
        handles.append(module.register_forward_hook(lambda m, i, o: cap.probs.append(o[1].detach() if isinstance(o, tuple) and len(o) > 1 and torch.is_tensor(o[1]) else None)))
    try:
        yield cap
    finally:
        for h in handles:
            h.remove()

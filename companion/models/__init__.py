"""Shared model pieces: the offline MiniLM loader, Q/K/attention capture, tiny decoders, offline text, RoPE."""

from companion.models.capture import AttentionCapture, capture_attention
from companion.models.loading import ModelUnavailableError, load_minilm, load_model
from companion.models.rope import apply_rope, rope_cos_sin, rotate_half
from companion.models.texts import stdlib_texts
from companion.models.tiny import tiny_gpt2, tiny_llama

__all__ = [
    "AttentionCapture",
    "ModelUnavailableError",
    "capture_attention",
    "load_minilm",
    "load_model",
    "apply_rope",
    "rope_cos_sin",
    "rotate_half",
    "stdlib_texts",
    "tiny_gpt2",
    "tiny_llama",
]

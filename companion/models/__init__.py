"""Shared model pieces: the offline MiniLM loader, attention interception and capture, tiny decoders and a tiny ViT,
offline text, RoPE."""

from companion.models.attention import (
    AttentionCaptureError,
    AttentionLayout,
    attention_layout,
    attention_session,
    dense_attention,
)
from companion.models.capture import AttentionCapture, attention_probs, capture_attention
from companion.models.loading import ModelUnavailableError, load_minilm, load_model
from companion.models.rope import apply_rope, rope_cos_sin, rotate_half
from companion.models.texts import stdlib_source_bytes, stdlib_source_files, stdlib_texts
from companion.models.tiny import TinyCausalLM, TinyViT, tiny_gpt2, tiny_llama

__all__ = [
    "AttentionCapture",
    "AttentionCaptureError",
    "AttentionLayout",
    "attention_layout",
    "attention_probs",
    "attention_session",
    "dense_attention",
    "ModelUnavailableError",
    "capture_attention",
    "load_minilm",
    "load_model",
    "apply_rope",
    "rope_cos_sin",
    "rotate_half",
    "stdlib_source_bytes",
    "stdlib_source_files",
    "stdlib_texts",
    "TinyCausalLM",
    "TinyViT",
    "tiny_gpt2",
    "tiny_llama",
]

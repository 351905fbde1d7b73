"""Tiny randomly initialised decoders built from a transformers config (no weights downloaded)."""

from __future__ import annotations

import torch


def tiny_llama(
    vocab_size: int = 256,
    hidden_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int | None = None,
    intermediate_size: int | None = None,
    max_position: int = 4096,
    rope_theta: float = 10000.0,
    seed: int = 0,
):
    """A Llama-style causal LM (RoPE, RMSNorm, SwiGLU, optional GQA) with eager attention."""
    from transformers import LlamaConfig, LlamaForCausalLM

    if hidden_size % num_heads:
        raise ValueError(f"hidden_size={hidden_size} must be a multiple of num_heads={num_heads}")
    num_kv_heads = num_kv_heads or num_heads
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads={num_heads} must be a multiple of num_kv_heads={num_kv_heads}")
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 4 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position,
        rope_theta=rope_theta,
        attn_implementation="eager",
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()


def tiny_gpt2(
    vocab_size: int = 256,
    n_embd: int = 128,
    n_layer: int = 2,
    n_head: int = 4,
    n_positions: int = 1024,
    seed: int = 0,
):
    """A GPT-2 causal LM (learned absolute positions) from a config."""
    from transformers import GPT2Config, GPT2LMHeadModel

    if n_embd % n_head:
        raise ValueError(f"n_embd={n_embd} must be a multiple of n_head={n_head}")
    config = GPT2Config(
        vocab_size=vocab_size, n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_positions=n_positions,
        bos_token_id=None, eos_token_id=None, attn_implementation="eager",
    )
    torch.manual_seed(seed)
    return GPT2LMHeadModel(config).eval()

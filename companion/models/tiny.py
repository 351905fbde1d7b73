"""Tiny randomly initialised models (no weights downloaded).

* :func:`tiny_llama`, :func:`tiny_gpt2` -- decoders built from a transformers config;
* :class:`TinyCausalLM` -- a plain Qwen-shaped decoder in PyTorch (pre-RMSNorm, SwiGLU, learned positions) with
  a key/value cache, for models small enough to train in a notebook;
* :class:`TinyViT` -- a plain pre-LN ViT (CLS token, learned positions) whose attention uses CLIP's fused
  in-projection; a paper that changes the attention passes its own :class:`SelfAttention` subclass.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from companion.core.validation import ParameterError, check_int


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


# ------------------------------------------------------------------------------------- TinyCausalLM

class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention (``{q,k,v,o}_proj``, no bias) with a key/value cache."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(d, d, bias=False) for _ in range(4))

    def forward(self, x, cache=None):
        B, T, D = x.shape
        h = self.heads

        def split(t):
            return t.view(B, T, h, D // h).transpose(1, 2)

        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        if cache is not None and cache[0] is not None:
            k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
        # with a cache, T = 1 new token that attends to everything before it
        y = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, D)), (k, v)


class SwiGLU(nn.Module):
    """``down_proj(silu(gate_proj(x)) * up_proj(x))``."""

    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(d, hidden, bias=False)
        self.up_proj = nn.Linear(d, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderBlock(nn.Module):
    """Pre-RMSNorm block: ``x + self_attn(input_layernorm(x))``, then ``x + mlp(post_attention_layernorm(x))``."""

    def __init__(self, d: int, heads: int, hidden: int):
        super().__init__()
        self.input_layernorm = nn.RMSNorm(d)
        self.self_attn = CausalSelfAttention(d, heads)
        self.post_attention_layernorm = nn.RMSNorm(d)
        self.mlp = SwiGLU(d, hidden)

    def forward(self, x, cache=None):
        a, kv = self.self_attn(self.input_layernorm(x), cache)
        x = x + a
        return x + self.mlp(self.post_attention_layernorm(x)), kv


class TinyCausalLM(nn.Module):
    """A causal LM over ``vocab_size`` tokens with Qwen2's module names (``embed_tokens``, ``layers.<i>.self_attn
    .{q,k,v,o}_proj``, ``layers.<i>.mlp.{gate,up,down}_proj``, ``norm``, ``lm_head``), so hooks written for Qwen
    find the same points; learned absolute positions (``embed_positions``, ``max_len`` of them) instead of RoPE.
    Init: N(0, 0.02), the residual outputs (``o_proj``, ``down_proj``) scaled by 1/sqrt(2 · layers) as in GPT-2.
    ``config`` holds the constructor's arguments (``TinyCausalLM(**model.config)`` builds a twin)."""

    def __init__(self, vocab_size: int, d: int = 64, layers: int = 2, heads: int = 4, max_len: int = 32,
                 mlp_ratio: int = 2):
        super().__init__()
        check_int("vocab_size", vocab_size, lo=1)
        check_int("d", d, lo=8)
        check_int("layers", layers, lo=1)
        check_int("heads", heads, lo=1)
        check_int("max_len", max_len, lo=1)
        check_int("mlp_ratio", mlp_ratio, lo=1)
        if d % heads:
            raise ParameterError("heads", heads, f"a divisor of d={d}")
        self.config = {"vocab_size": vocab_size, "d": d, "layers": layers, "heads": heads, "max_len": max_len,
                       "mlp_ratio": mlp_ratio}
        self.embed_tokens = nn.Embedding(vocab_size, d)
        self.embed_positions = nn.Embedding(max_len, d)
        self.layers = nn.ModuleList(DecoderBlock(d, heads, mlp_ratio * d) for _ in range(layers))
        self.norm = nn.RMSNorm(d)
        self.lm_head = nn.Linear(d, vocab_size, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
        for blk in self.layers:
            for lin in (blk.self_attn.o_proj, blk.mlp.down_proj):
                nn.init.normal_(lin.weight, std=0.02 / math.sqrt(2 * layers))

    def forward(self, ids: torch.Tensor, cache: list | None = None, start: int = 0, return_cache: bool = False):
        """Logits ``[B, T, V]``; with ``cache`` (one ``(k, v)`` per layer) ``ids`` continue a sequence at
        position ``start``; ``return_cache=True`` also returns the new cache."""
        T = ids.shape[1]
        if start + T > self.config["max_len"]:
            raise ValueError(f"sequence length {start + T} exceeds max_len={self.config['max_len']}")
        x = self.embed_tokens(ids) + self.embed_positions(torch.arange(start, start + T, device=ids.device))
        new = []
        for i, blk in enumerate(self.layers):
            x, kv = blk(x, None if cache is None else cache[i])
            new.append(kv)
        logits = self.lm_head(self.norm(x))
        return (logits, new) if return_cache else logits


# ------------------------------------------------------------------------------------------- TinyViT

class SelfAttention(nn.Module):
    """Multi-head self-attention with CLIP's fused in-projection (``in_proj_weight`` [3d, d] and ``in_proj_bias``,
    as ``nn.MultiheadAttention`` stores them; Xavier-uniform init) and ``out_proj``. A subclass re-parametrises
    the projection by overriding :meth:`effective_weight`."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.in_proj_weight = nn.Parameter(torch.empty(3 * dim, dim))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * dim))
        nn.init.xavier_uniform_(self.in_proj_weight)
        self.out_proj = nn.Linear(dim, dim)

    def effective_weight(self) -> torch.Tensor:
        """The ``[3d, d]`` q/k/v projection the forward pass uses."""
        return self.in_proj_weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        qkv = F.linear(x, self.effective_weight(), self.in_proj_bias)
        q, k, v = qkv.view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.out_proj(y.transpose(1, 2).reshape(b, n, d))


class ViTBlock(nn.Module):
    """Pre-LN block: ``x + attn(ln_1(x))``, then ``x + mlp(ln_2(x))`` (a GELU MLP ``mlp_ratio`` times wider)."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int, attention: type[SelfAttention] = SelfAttention):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = attention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(), nn.Linear(mlp_ratio * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TinyViT(nn.Module):
    """Pre-LN ViT: patchify → linear embed → [CLS] + learned positions → ``depth`` :class:`ViTBlock` → LN.

    ``forward(x)`` returns the CLS feature after the final LayerNorm ([B, dim]); ``tokens(x)`` returns the
    residual-stream tokens before it ([B, 1 + patches, dim]). ``attention`` is the blocks' attention class
    (:class:`SelfAttention` or a subclass)."""

    def __init__(self, image_shape=(1, 8, 8), patch: int = 2, dim: int = 64, depth: int = 2, heads: int = 4,
                 mlp_ratio: int = 2, attention: type[SelfAttention] = SelfAttention):
        super().__init__()
        ch, h, w = image_shape
        check_int("patch", patch, lo=1)
        if h % patch or w % patch:
            raise ParameterError("patch", patch, f"a divisor of the image size {h}×{w}")
        if dim % heads:
            raise ParameterError("heads", heads, f"a divisor of dim={dim}")
        self.patch, self.dim = patch, dim
        n_tokens = (h // patch) * (w // patch)
        self.embed = nn.Linear(ch * patch * patch, dim)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, n_tokens + 1, dim) * 0.02)
        self.blocks = nn.ModuleList([ViTBlock(dim, heads, mlp_ratio, attention) for _ in range(depth)])
        self.ln = nn.LayerNorm(dim)

    def tokens(self, x: torch.Tensor) -> torch.Tensor:
        p = self.patch
        patches = F.unfold(x, kernel_size=p, stride=p).transpose(1, 2)  # [B, L, C·p·p]
        t = self.embed(patches)
        t = torch.cat([self.cls.expand(len(t), -1, -1), t], dim=1) + self.pos
        for block in self.blocks:
            t = block(t)
        return t

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(self.tokens(x)[:, 0])

"""A hybrid decoder configured like the released Nemotron-Flash code, with a decoding state cache.

``HybridConfig.layer_types`` lists one operator per layer, as ``config.layer_types`` does in the released
``modeling_nemotron_flash.py`` [code]: ``"deltanet"`` (DeltaNet), ``"gdn"`` (Gated DeltaNet: this project's
name, the released 1B/3B models use DeltaNet), ``"m2"`` (a Mamba2-style SSM; ``"m"`` is accepted as the
released alias), ``"a"`` (attention, sliding window of ``window`` tokens unless the layer index is in
``global_attn_idx``) and ``"f"`` (a feed-forward layer). Every layer is pre-norm residual:
``x ← x + op(RMSNorm(x))``. ``attn_hidden_size``, ``kq_head_dim``, ``v_head_dim`` and ``kq_norm`` (an RMSNorm
over each query/key head, as in Qwen3) follow the released config's names.

**Meta tokens** [code]: ``num_memory_tokens`` learnable vectors are prepended to the embedded sequence
(position 0 .. M-1) and stripped after the final norm, so the logits have the input's length. With a cache they
are prepended once, at prefill.

**Logit normalisation** [code]: with ``logits_norm`` the logits are divided by the LM head's row norms,
``logits = logits / ||W_head[i, :]||`` (what the released inference code does; it goes with weight
normalisation, :mod:`~companion.nemotron_flash.weightnorm`).

Details the paper text does not confirm, marked [inferred]: the FFN is SwiGLU; DeltaNet and Mamba2 layers
carry a depthwise causal short convolution of width ``conv_size`` (fla's and mamba-ssm's defaults), q/k of
DeltaNet are SiLU + L2-normalised (fla's default), its output is RMS-normalised per head; Mamba2 uses one
B/C group and a gated RMSNorm before its output projection (mamba-ssm's ``Mamba2`` defaults). mamba-ssm's
CUDA kernels are not used anywhere (see :mod:`~companion.nemotron_flash.operators`).

**Cache** (:meth:`HybridLM.init_cache`): static buffers, so a decode step can be captured in a CUDA graph:
attention layers keep ``[B, max_len, H_kv, D]`` K/V buffers and mask unwritten slots, DeltaNet/Mamba2 layers
keep their ``[B, H, K, V]`` state and the last ``conv_size - 1`` conv inputs; ``cache.pos`` is a 0-d tensor
holding the number of positions written. Cached decoding equals the full forward (tested).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from companion.core import ParameterError, check_bool, check_int
from companion.models.rope import rope_cos_sin, rotate_half
from companion.nemotron_flash.operators import (
    attention,
    delta_rule,
    delta_rule_step,
    scalar_decay_chunked,
    scalar_decay_step,
)

LAYER_TYPES = ("deltanet", "gdn", "m2", "a", "f")
ALIASES = {"m": "m2"}
OPERATOR_NAMES = {"deltanet": "DeltaNet", "gdn": "Gated DeltaNet", "m2": "Mamba2", "a": "Attention", "f": "FFN"}


def canonical_layer_type(t: str) -> str:
    """``"m"`` → ``"m2"``; an unknown type raises :class:`ParameterError` listing the known ones."""
    t = ALIASES.get(t, t)
    if t not in LAYER_TYPES:
        raise ParameterError("layer_types", t, "one of " + ", ".join(repr(x) for x in LAYER_TYPES + tuple(ALIASES)))
    return t


@dataclass
class HybridConfig:
    """The decoder's shape; names follow the released ``configuration_nemotron_flash.py`` where it has one."""

    vocab_size: int = 256
    hidden_size: int = 64
    layer_types: tuple = ("deltanet", "f", "m2", "f", "a", "f", "m2", "f")
    attn_hidden_size: int | None = None   # None: hidden_size
    kq_head_dim: int = 16
    v_head_dim: int = 16
    num_kv_heads: int | None = None       # attention only; None: as many as query heads
    kq_norm: bool = False
    window: int | None = None             # sliding window of attention layers (None: global)
    global_attn_idx: tuple = ()           # attention layers that stay global when window is set
    ffn_hidden_size: int | None = None    # None: 4 * hidden_size rounded to 8 (SwiGLU keeps ~8 d^2 params at 8/3 ratio)
    num_memory_tokens: int = 0
    mamba_d_state: int = 16
    mamba_headdim: int = 16
    mamba_expand: int = 2
    conv_size: int = 4
    logits_norm: bool = False
    tie_embeddings: bool = False
    rope_base: float = 10000.0
    max_position: int = 4096
    chunk_size: int = 64
    linear_impl: str = "auto"             # delta rule: "auto" (fla on CUDA, ours elsewhere) | "chunked" | "recurrent" | "fla"
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        check_int("vocab_size", self.vocab_size, lo=2)
        check_int("hidden_size", self.hidden_size, lo=2)
        if isinstance(self.layer_types, str) or not self.layer_types:
            raise ParameterError("layer_types", self.layer_types, "a non-empty list of layer types")
        self.layer_types = tuple(canonical_layer_type(t) for t in self.layer_types)
        if self.attn_hidden_size is None:
            self.attn_hidden_size = self.hidden_size
        check_int("attn_hidden_size", self.attn_hidden_size, lo=1)
        check_int("kq_head_dim", self.kq_head_dim, lo=2)
        check_int("v_head_dim", self.v_head_dim, lo=1)
        if self.attn_hidden_size % self.kq_head_dim:
            raise ParameterError("kq_head_dim", self.kq_head_dim,
                                 f"a divisor of attn_hidden_size = {self.attn_hidden_size}")
        if "a" in self.layer_types and self.kq_head_dim % 2:
            raise ParameterError("kq_head_dim", self.kq_head_dim, "an even number (RoPE rotates pairs)")
        if self.num_kv_heads is None:
            self.num_kv_heads = self.num_heads
        check_int("num_kv_heads", self.num_kv_heads, lo=1)
        if self.num_heads % self.num_kv_heads:
            raise ParameterError("num_kv_heads", self.num_kv_heads, f"a divisor of the {self.num_heads} query heads")
        if self.window is not None:
            check_int("window", self.window, lo=1)
        check_int("num_memory_tokens", self.num_memory_tokens, lo=0)
        check_int("mamba_d_state", self.mamba_d_state, lo=1)
        check_int("mamba_headdim", self.mamba_headdim, lo=1)
        check_int("mamba_expand", self.mamba_expand, lo=1)
        if "m2" in self.layer_types and (self.mamba_expand * self.hidden_size) % self.mamba_headdim:
            raise ParameterError("mamba_headdim", self.mamba_headdim,
                                 f"a divisor of mamba_expand * hidden_size = {self.mamba_expand * self.hidden_size}")
        check_int("conv_size", self.conv_size, lo=1)
        check_int("chunk_size", self.chunk_size, lo=1)
        check_int("max_position", self.max_position, lo=1)
        if self.ffn_hidden_size is None:
            self.ffn_hidden_size = max(8, int(round(8 * self.hidden_size / 3 / 8)) * 8)
        check_int("ffn_hidden_size", self.ffn_hidden_size, lo=1)
        check_bool("kq_norm", self.kq_norm)
        check_bool("logits_norm", self.logits_norm)

    @property
    def num_heads(self) -> int:
        return self.attn_hidden_size // self.kq_head_dim


# ------------------------------------------------------------------------------------------------ blocks
class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


class ShortConv(nn.Module):
    """Depthwise causal convolution of width W; its cache is the last W - 1 inputs ``[B, C, W - 1]``."""

    def __init__(self, channels, width):
        super().__init__()
        self.width = width
        self.weight = nn.Parameter(torch.randn(channels, 1, width) / width ** 0.5)

    def forward(self, x, state=None):  # x [B, T, C]
        xt = x.transpose(1, 2)
        B, C, T = xt.shape
        prev = xt.new_zeros(B, C, self.width - 1) if state is None else state.to(xt.dtype)
        full = torch.cat([prev, xt], dim=-1)
        if state is not None and self.width > 1:
            state.copy_(full[..., -(self.width - 1):])
        return F.conv1d(full, self.weight, groups=C).transpose(1, 2)


class FFN(nn.Module):
    """SwiGLU: ``W_down (silu(W_gate x) ⊙ W_up x)`` [inferred]."""

    def __init__(self, cfg: HybridConfig):
        super().__init__()
        self.gate = nn.Linear(cfg.hidden_size, cfg.ffn_hidden_size, bias=False)
        self.up = nn.Linear(cfg.hidden_size, cfg.ffn_hidden_size, bias=False)
        self.down = nn.Linear(cfg.ffn_hidden_size, cfg.hidden_size, bias=False)

    def forward(self, x, cache=None, layer_state=None):
        return self.down(F.silu(self.gate(x)) * self.up(x))

    def init_state(self, batch, max_len, device, dtype):
        return {}


class Attention(nn.Module):
    """Softmax attention with RoPE, grouped KV heads, optional per-head q/k RMSNorm and sliding window."""

    def __init__(self, cfg: HybridConfig, window=None):
        super().__init__()
        self.cfg, self.window = cfg, window
        H, Hk, D, Dv = cfg.num_heads, cfg.num_kv_heads, cfg.kq_head_dim, cfg.v_head_dim
        self.q = nn.Linear(cfg.hidden_size, H * D, bias=False)
        self.k = nn.Linear(cfg.hidden_size, Hk * D, bias=False)
        self.v = nn.Linear(cfg.hidden_size, Hk * Dv, bias=False)
        self.o = nn.Linear(H * Dv, cfg.hidden_size, bias=False)
        self.q_norm = RMSNorm(D) if cfg.kq_norm else nn.Identity()
        self.k_norm = RMSNorm(D) if cfg.kq_norm else nn.Identity()

    def init_state(self, batch, max_len, device, dtype):
        c = self.cfg
        return {"k": torch.zeros(batch, max_len, c.num_kv_heads, c.kq_head_dim, device=device, dtype=dtype),
                "v": torch.zeros(batch, max_len, c.num_kv_heads, c.v_head_dim, device=device, dtype=dtype)}

    def forward(self, x, cache=None, layer_state=None):
        c = self.cfg
        B, T, _ = x.shape
        q = self.q_norm(self.q(x).view(B, T, c.num_heads, c.kq_head_dim))
        k = self.k_norm(self.k(x).view(B, T, c.num_kv_heads, c.kq_head_dim))
        v = self.v(x).view(B, T, c.num_kv_heads, c.v_head_dim)
        pos0 = 0 if cache is None else cache.pos
        idx = torch.arange(T, device=x.device) + pos0
        if cache is None:
            cos, sin = rope_cos_sin(T, c.kq_head_dim, base=c.rope_base, device=x.device)
        else:
            cos, sin = cache.rope[0][idx], cache.rope[1][idx]
        cos, sin = cos[:, None].to(q.dtype), sin[:, None].to(q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if cache is None:
            o = attention(q, k, v, window=self.window)
        else:
            layer_state["k"].index_copy_(1, idx, k)
            layer_state["v"].index_copy_(1, idx, v)
            kk, vv = layer_state["k"], layer_state["v"]
            valid = torch.arange(kk.shape[1], device=x.device) < pos0 + T
            o = attention(q, kk, vv, window=self.window, offset=pos0, valid=valid)
        return self.o(o.reshape(B, T, -1))


def _rope(cfg, device):
    return rope_cos_sin(cfg.max_position, cfg.kq_head_dim, base=cfg.rope_base, device=device)


class DeltaNet(nn.Module):
    """DeltaNet (``gated=False``) or Gated DeltaNet: q, k, v projections + short conv + SiLU, L2-normalised q/k,
    β = σ(W_β x), for the gated form α = exp(-exp(A_log) softplus(W_a x + dt_bias)) and a SiLU output gate."""

    def __init__(self, cfg: HybridConfig, gated=False):
        super().__init__()
        self.cfg, self.gated = cfg, gated
        H, D, Dv, d = cfg.num_heads, cfg.kq_head_dim, cfg.v_head_dim, cfg.hidden_size
        self.q = nn.Linear(d, H * D, bias=False)
        self.k = nn.Linear(d, H * D, bias=False)
        self.v = nn.Linear(d, H * Dv, bias=False)
        self.b = nn.Linear(d, H, bias=False)
        self.conv = ShortConv(H * (2 * D + Dv), cfg.conv_size)
        self.norm = RMSNorm(Dv)
        self.o = nn.Linear(H * Dv, d, bias=False)
        if gated:
            self.a = nn.Linear(d, H, bias=False)
            self.g_out = nn.Linear(d, H * Dv, bias=False)
            self.A_log = nn.Parameter(torch.log(torch.empty(H).uniform_(1, 16)))
            self.dt_bias = nn.Parameter(torch.log(torch.expm1(torch.empty(H).uniform_(1e-3, 1e-1))))

    def init_state(self, batch, max_len, device, dtype):
        c = self.cfg
        return {"S": torch.zeros(batch, c.num_heads, c.kq_head_dim, c.v_head_dim, device=device, dtype=torch.float32),
                "conv": torch.zeros(batch, self.conv.weight.shape[0], c.conv_size - 1, device=device, dtype=dtype)}

    def forward(self, x, cache=None, layer_state=None):
        c = self.cfg
        B, T, _ = x.shape
        H, D, Dv = c.num_heads, c.kq_head_dim, c.v_head_dim
        qkv = F.silu(self.conv(torch.cat([self.q(x), self.k(x), self.v(x)], -1),
                               None if layer_state is None else layer_state["conv"]))
        q, k, v = qkv.split([H * D, H * D, H * Dv], -1)
        q = F.normalize(q.view(B, T, H, D).float(), dim=-1)
        k = F.normalize(k.view(B, T, H, D).float(), dim=-1)
        v = v.view(B, T, H, Dv)
        beta = torch.sigmoid(self.b(x)).float()
        g = -self.A_log.float().exp() * F.softplus(self.a(x).float() + self.dt_bias.float()) if self.gated else None
        S0 = None if layer_state is None else layer_state["S"]
        if layer_state is not None and T == 1:
            S = delta_rule_step(S0, k[:, 0], v[:, 0].float(), beta[:, 0], None if g is None else g[:, 0])
            o = (D ** -0.5) * torch.einsum("bhk,bhkv->bhv", q[:, 0], S)[:, None]
        else:
            o, S = delta_rule(q.to(v.dtype) if q.is_cuda else q, k.to(v.dtype) if k.is_cuda else k,
                              v if v.is_cuda else v.float(), beta, g, initial_state=S0,
                              chunk_size=c.chunk_size, impl=c.linear_impl)
        if layer_state is not None:
            layer_state["S"].copy_(S)
        o = self.norm(o.to(x.dtype))
        if self.gated:
            o = o * F.silu(self.g_out(x).view(B, T, H, Dv))
        return self.o(o.reshape(B, T, H * Dv))


class Mamba2(nn.Module):
    """Mamba2-style SSM in PyTorch (one B/C group): in_proj → (z, x, B, C, Δ), short conv + SiLU on (x, B, C),
    ``h_t = exp(Δ_t A) h_{t-1} + Δ_t B_t x_tᵀ``, ``y = hᵀ C + D x``, gated RMSNorm with z, out_proj."""

    def __init__(self, cfg: HybridConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.hidden_size
        self.d_inner = cfg.mamba_expand * d
        self.nheads = self.d_inner // cfg.mamba_headdim
        N = cfg.mamba_d_state
        self.in_proj = nn.Linear(d, 2 * self.d_inner + 2 * N + self.nheads, bias=False)
        self.conv = ShortConv(self.d_inner + 2 * N, cfg.conv_size)
        self.A_log = nn.Parameter(torch.log(torch.empty(self.nheads).uniform_(1, 16)))
        self.dt_bias = nn.Parameter(torch.log(torch.expm1(torch.empty(self.nheads).uniform_(1e-3, 1e-1))))
        self.D = nn.Parameter(torch.ones(self.nheads))
        self.norm = RMSNorm(self.d_inner)
        self.out_proj = nn.Linear(self.d_inner, d, bias=False)

    def init_state(self, batch, max_len, device, dtype):
        c = self.cfg
        return {"S": torch.zeros(batch, self.nheads, c.mamba_d_state, c.mamba_headdim, device=device, dtype=torch.float32),
                "conv": torch.zeros(batch, self.conv.weight.shape[0], c.conv_size - 1, device=device, dtype=dtype)}

    def forward(self, x, cache=None, layer_state=None):
        c = self.cfg
        B, T, _ = x.shape
        N, P, H = c.mamba_d_state, c.mamba_headdim, self.nheads
        z, xbc, dt = self.in_proj(x).split([self.d_inner, self.d_inner + 2 * N, H], -1)
        xbc = F.silu(self.conv(xbc, None if layer_state is None else layer_state["conv"]))
        xs, Bm, Cm = xbc.split([self.d_inner, N, N], -1)
        dt = F.softplus(dt.float() + self.dt_bias.float())                      # [B, T, H]
        g = dt * -self.A_log.float().exp()                              # log decay Δ A
        xh = xs.view(B, T, H, P).float()
        q = Cm.float()[:, :, None].expand(B, T, H, N)
        k = Bm.float()[:, :, None] * dt[..., None]                      # Δ B
        S0 = None if layer_state is None else layer_state["S"]
        if layer_state is not None and T == 1:
            S = scalar_decay_step(S0, k[:, 0], xh[:, 0], g[:, 0])
            y = torch.einsum("bhn,bhnp->bhp", q[:, 0], S)[:, None]
        else:
            y, S = scalar_decay_chunked(q, k, xh, g, scale=1.0, initial_state=S0, chunk_size=c.chunk_size)
        if layer_state is not None:
            layer_state["S"].copy_(S)
        y = y + self.D.float()[:, None] * xh
        y = self.norm((y.reshape(B, T, self.d_inner) * F.silu(z.float())).to(x.dtype))
        return self.out_proj(y)


def build_operator(cfg: HybridConfig, layer_type: str, index: int) -> nn.Module:
    t = canonical_layer_type(layer_type)
    if t == "f":
        return FFN(cfg)
    if t == "a":
        return Attention(cfg, window=None if index in cfg.global_attn_idx else cfg.window)
    if t in ("deltanet", "gdn"):
        return DeltaNet(cfg, gated=t == "gdn")
    return Mamba2(cfg)


class Block(nn.Module):
    def __init__(self, cfg, layer_type, index):
        super().__init__()
        self.layer_type = canonical_layer_type(layer_type)
        self.norm = RMSNorm(cfg.hidden_size)
        self.op = build_operator(cfg, layer_type, index)

    def forward(self, x, cache=None, layer_state=None):
        return x + self.op(self.norm(x), cache, layer_state)


class DecodeCache:
    """Per-layer static state plus ``pos`` (0-d long tensor: positions written, memory tokens included)."""

    def __init__(self, model: "HybridLM", batch: int, max_len: int, device, dtype):
        self.batch, self.max_len = batch, max_len
        self.pos = torch.zeros((), dtype=torch.long, device=device)
        self.layers = [b.op.init_state(batch, max_len, device, dtype) for b in model.layers]
        self.rope = _rope(model.cfg, device)
        self.prefilled = False

    def advance(self, n: int):
        self.pos += n


class HybridLM(nn.Module):
    """Embedding → [meta tokens] → layers → RMSNorm → strip meta tokens → LM head (→ / row norms)."""

    def __init__(self, cfg: HybridConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.memory_tokens = (nn.Parameter(torch.randn(cfg.num_memory_tokens, cfg.hidden_size) * 0.02)
                              if cfg.num_memory_tokens else None)
        self.layers = nn.ModuleList(Block(cfg, t, i) for i, t in enumerate(cfg.layer_types))
        self.norm = RMSNorm(cfg.hidden_size)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed.weight
        self.apply(_init)

    def init_cache(self, batch: int, max_len: int, device=None, dtype=None) -> DecodeCache:
        """A static cache for ``max_len`` positions (the prompt, the meta tokens and every decoded token)."""
        check_int("batch", batch, lo=1)
        check_int("max_len", max_len, lo=1)
        p = next(self.parameters())
        if max_len > self.cfg.max_position:
            raise ParameterError("max_len", max_len, f"at most max_position = {self.cfg.max_position}")
        return DecodeCache(self, batch, max_len, device or p.device, dtype or p.dtype)

    def forward(self, ids: torch.Tensor, cache: DecodeCache | None = None) -> torch.Tensor:
        B, T = ids.shape
        h = self.embed(ids)
        M = 0
        if self.memory_tokens is not None and (cache is None or not cache.prefilled):
            M = self.memory_tokens.shape[0]
            h = torch.cat([self.memory_tokens.to(h.dtype)[None].expand(B, -1, -1), h], 1)
        if cache is not None and cache.batch != B:
            raise ValueError(f"cache was made for batch {cache.batch}, got ids of batch {B}")
        for i, layer in enumerate(self.layers):
            h = layer(h, cache, None if cache is None else cache.layers[i])
        if cache is not None:
            cache.advance(M + T)
            cache.prefilled = True
        h = self.norm(h)[:, M:]
        logits = self.lm_head(h)
        if self.cfg.logits_norm:
            logits = logits / self.lm_head.weight.norm(dim=1)
        return logits

    def loss(self, ids: torch.Tensor) -> torch.Tensor:
        """Next-token cross-entropy on ``ids [B, T + 1]``."""
        logits = self(ids[:, :-1])
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def _init(m):
    if isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, std=0.02)
    elif isinstance(m, nn.Embedding):
        nn.init.normal_(m.weight, std=0.02)


def n_parameters(model: nn.Module, non_embedding: bool = False) -> int:
    """Parameter count (shared tensors once); ``non_embedding`` drops the embedding and an untied LM head."""
    seen, n = set(), 0
    for name, p in model.named_parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        if non_embedding and (name.startswith("embed") or name.startswith("lm_head")):
            continue
        n += p.numel()
    return n


def load_released(name_or_path: str = "nvidia/Nemotron-Flash-1B", *, dtype=None, device=None):
    """A released Nemotron-Flash model by Hugging Face id (already in the local cache) or local folder, through
    ``transformers`` with ``trust_remote_code=True`` and ``local_files_only=True`` (nothing is downloaded).

    The released modeling code imports mamba-ssm, causal-conv1d and flash-linear-attention and pins
    ``transformers<=4.56.2`` [code]; where those are missing, or the weights are not on disk, this raises
    :class:`companion.models.loading.ModelUnavailableError` saying what is missing. The returned model works with
    HF ``generate`` (``companion.nemotron_flash.scale.hf_generate_ms`` times it), not with this project's cache.
    Weights are cc-by-nc-4.0 (non-commercial)."""
    import os

    from companion.models.loading import ModelUnavailableError

    if not isinstance(name_or_path, str) or not name_or_path:
        raise ParameterError("name_or_path", name_or_path, "a Hugging Face id or a local folder")
    source = os.path.expanduser(name_or_path)
    if source.startswith((os.sep, ".")) and not os.path.isdir(source):
        raise ModelUnavailableError(f"model folder {source!r} does not exist")
    try:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(source, trust_remote_code=True, local_files_only=True,
                                                     dtype=dtype)
    except (OSError, ImportError, ValueError) as exc:
        raise ModelUnavailableError(
            f"Nemotron-Flash model {name_or_path!r} could not be loaded offline ({type(exc).__name__}: {exc}). It needs "
            "its files on disk (config, weights, modeling_nemotron_flash.py) and, for its remote code, mamba-ssm, "
            "causal-conv1d and flash-linear-attention; nothing is downloaded here") from exc
    return model.eval() if device is None else model.to(device).eval()

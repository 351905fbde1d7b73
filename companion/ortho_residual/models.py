"""Networks built on :class:`~companion.ortho_residual.residual.OrthogonalResidual` (paper 10).

Every block applies the chosen rule at **both** residual adds (after attention and after the MLP, or
after the conv branch), on the raw stream ``x``, with the branch seeing ``LN(x)`` (pre-norm), as in
the official ``ortho_models.py`` / ``modeling_ortho_llama.py``:

* :class:`TinyViT` -- the paper's pre-LN ViT: LayerNorm **without affine**, GELU(tanh), MLP ratio 4,
  learned position embeddings. Deviation: mean pooling instead of a class token (fewer moving parts at
  16 tokens);
* :class:`PreActBlock` -- a ResNetV2 (pre-activation) basic block, projecting onto the shortcut
  output (identity or a 1x1 conv), feature axis = channels (``dim=1``);
* :class:`LlamaDecoder` -- a LLaMA-shaped decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU);
  :data:`SMOLLM_135M` is SmolLM-135M's shape (the official ``scripts/gen_preset.py`` preset);
* :func:`wrap_timm_block` / :class:`OrthoTimmBlock` -- timm's ViT ``Block`` with its two adds replaced.

``methods`` (one rule per block, see :func:`~companion.ortho_residual.residual.block_methods`) picks
the block pattern and update probability.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from companion.core import ParameterError, check_choice, check_int
from companion.models.rope import apply_rope, rope_cos_sin
from companion.ortho_residual.residual import COEF_DTYPES, EPS, MODES, OrthogonalResidual


def _methods(methods, depth: int) -> list[str]:
    if isinstance(methods, str):
        check_choice("mode", methods, MODES)
        return [methods] * depth
    methods = list(methods)
    if len(methods) != depth:
        raise ParameterError("methods", methods, f"one rule per block ({depth} blocks)")
    for m in methods:
        check_choice("methods[i]", m, MODES)
    return methods


def connections(model: nn.Module) -> list[OrthogonalResidual]:
    """Every residual add of ``model``, in forward order (block 0 attention, block 0 MLP, ...)."""
    return [m for m in model.modules() if isinstance(m, OrthogonalResidual)]


@contextlib.contextmanager
def recording(model: nn.Module, keep_inputs: bool = False):
    """Inside the block every residual add records its statistics (and its ``(x, f)`` when
    ``keep_inputs``); yields the list of connections."""
    conns = connections(model)
    for c in conns:
        c.stats.clear()
        c.inputs.clear()
        c.record, c.keep_inputs = True, keep_inputs
    try:
        yield conns
    finally:
        for c in conns:
            c.record = c.keep_inputs = False


def set_coef_dtype(model: nn.Module, coef_dtype: str) -> None:
    """Switch the projection precision of every add (``COEF_DTYPES``)."""
    check_choice("coef_dtype", coef_dtype, COEF_DTYPES)
    for c in connections(model):
        c.coef_dtype = coef_dtype


# --------------------------------------------------------------------------------------------- ViT
class Attention(nn.Module):
    """Multi-head self-attention (bidirectional) through ``scaled_dot_product_attention``."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        if d % heads:
            raise ParameterError("heads", heads, f"a divisor of the width d={d}")
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v)
        return self.proj(o.transpose(1, 2).reshape(B, T, D))


class ViTBlock(nn.Module):
    """Pre-LN block: ``x = add1(x, attn(LN(x)))``, ``x = add2(x, mlp(LN(x)))``."""

    def __init__(self, d: int, heads: int, mode: str = "feature", *, mlp_ratio: int = 4, eps: float = EPS,
                 coef_dtype: str = "float32"):
        super().__init__()
        self.norm1 = nn.LayerNorm(d, elementwise_affine=False)
        self.attn = Attention(d, heads)
        self.norm2 = nn.LayerNorm(d, elementwise_affine=False)
        self.mlp = nn.Sequential(nn.Linear(d, mlp_ratio * d), nn.GELU(approximate="tanh"), nn.Linear(mlp_ratio * d, d))
        self.add_attn = OrthogonalResidual(mode, dim=-1, eps=eps, coef_dtype=coef_dtype)
        self.add_mlp = OrthogonalResidual(mode, dim=-1, eps=eps, coef_dtype=coef_dtype)

    def forward(self, x):
        x = self.add_attn(x, self.attn(self.norm1(x)))
        return self.add_mlp(x, self.mlp(self.norm2(x)))


class TinyViT(nn.Module):
    """A small pre-LN ViT classifier for ``[B, C, H, W]`` images (patches of ``patch`` pixels)."""

    def __init__(self, *, image_size: int = 8, patch: int = 2, channels: int = 1, n_classes: int = 10, d: int = 64,
                 depth: int = 6, heads: int = 4, methods="feature", eps: float = EPS, coef_dtype: str = "float32"):
        super().__init__()
        check_int("depth", depth, lo=1)
        check_int("patch", patch, lo=1)
        if image_size % patch:
            raise ParameterError("patch", patch, f"a divisor of image_size={image_size}")
        self.patch, self.methods = patch, _methods(methods, depth)
        n_tokens = (image_size // patch) ** 2
        self.embed = nn.Linear(channels * patch * patch, d)
        self.pos = nn.Parameter(torch.randn(1, n_tokens, d) * 0.02)
        self.blocks = nn.ModuleList(ViTBlock(d, heads, m, eps=eps, coef_dtype=coef_dtype) for m in self.methods)
        self.norm = nn.LayerNorm(d, elementwise_affine=False)
        self.head = nn.Linear(d, n_classes)

    def tokens(self, images: torch.Tensor) -> torch.Tensor:
        B, C, H, W = images.shape
        p = self.patch
        x = images.unfold(2, p, p).unfold(3, p, p)  # B, C, H/p, W/p, p, p
        return x.permute(0, 2, 3, 1, 4, 5).reshape(B, (H // p) * (W // p), C * p * p)

    def forward(self, images):
        x = self.embed(self.tokens(images)) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x).mean(1))


# ------------------------------------------------------------------------------------------ ResNetV2
class PreActBlock(nn.Module):
    """ResNetV2 basic block: ``out = add(shortcut(x'), conv(relu(bn(conv(x')))))`` with ``x' = relu(bn(x))``;
    the projection is onto the shortcut output (identity, or a 1x1 conv when the shape changes)."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1, mode: str = "feature", *, eps: float = EPS,
                 coef_dtype: str = "float32"):
        super().__init__()
        self.bn1, self.bn2 = nn.BatchNorm2d(c_in), nn.BatchNorm2d(c_out)
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.shortcut = nn.Conv2d(c_in, c_out, 1, stride, bias=False) if stride != 1 or c_in != c_out else None
        self.add = OrthogonalResidual(mode, dim=1, eps=eps, coef_dtype=coef_dtype)

    def forward(self, x):
        pre = F.relu(self.bn1(x))
        short = self.shortcut(pre) if self.shortcut is not None else x
        f = self.conv2(F.relu(self.bn2(self.conv1(pre))))
        return self.add(short, f)


# --------------------------------------------------------------------------------------------- LLaMA
@dataclass(frozen=True)
class LlamaConfig:
    """A LLaMA-shaped decoder; ``vocab`` 256 means bytes."""

    vocab: int = 256
    d: int = 64
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 4
    ffn: int = 172
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5
    max_len: int = 512
    tie_embeddings: bool = True

    def __post_init__(self):
        for name in ("vocab", "d", "n_layers", "n_heads", "n_kv_heads", "ffn", "max_len"):
            check_int(name, getattr(self, name), lo=1)
        if self.d % self.n_heads or (self.d // self.n_heads) % 2:
            raise ParameterError("n_heads", self.n_heads, f"a divisor of d={self.d} giving an even head width")
        if self.n_heads % self.n_kv_heads:
            raise ParameterError("n_kv_heads", self.n_kv_heads, f"a divisor of n_heads={self.n_heads}")

    def as_dict(self) -> dict:
        return asdict(self)


#: SmolLM-135M (HuggingFaceTB/SmolLM-135M config.json): 30 layers, d 576, 9 heads, 3 KV heads, FFN 1536,
#: vocabulary 49152, tied embeddings. :func:`byte_config` swaps in a byte vocabulary for local text.
SMOLLM_135M = LlamaConfig(vocab=49152, d=576, n_layers=30, n_heads=9, n_kv_heads=3, ffn=1536, rope_theta=10000.0,
                          rms_eps=1e-5, max_len=2048, tie_embeddings=True)


def byte_config(config: LlamaConfig, max_len: int | None = None) -> LlamaConfig:
    """The same shape with a 256-symbol byte vocabulary."""
    return replace(config, vocab=256, max_len=max_len or config.max_len)


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(d))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


class LlamaAttention(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.h, self.kv, self.hd = c.n_heads, c.n_kv_heads, c.d // c.n_heads
        self.q = nn.Linear(c.d, c.d, bias=False)
        self.k = nn.Linear(c.d, self.kv * self.hd, bias=False)
        self.v = nn.Linear(c.d, self.kv * self.hd, bias=False)
        self.o = nn.Linear(c.d, c.d, bias=False)

    def forward(self, x, cos, sin):
        B, T, D = x.shape
        q = self.q(x).view(B, T, self.h, self.hd).transpose(1, 2)
        k = self.k(x).view(B, T, self.kv, self.hd).transpose(1, 2)
        v = self.v(x).view(B, T, self.kv, self.hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.kv != self.h:
            k = k.repeat_interleave(self.h // self.kv, dim=1)
            v = v.repeat_interleave(self.h // self.kv, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(o.transpose(1, 2).reshape(B, T, D))


class LlamaMLP(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.gate = nn.Linear(c.d, c.ffn, bias=False)
        self.up = nn.Linear(c.d, c.ffn, bias=False)
        self.down = nn.Linear(c.ffn, c.d, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class LlamaBlock(nn.Module):
    def __init__(self, c: LlamaConfig, mode: str, eps: float, coef_dtype: str, stream_dtype: torch.dtype | None = None):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(c.d, c.rms_eps), RMSNorm(c.d, c.rms_eps)
        self.attn, self.mlp = LlamaAttention(c), LlamaMLP(c)
        self.add_attn = OrthogonalResidual(mode, dim=-1, eps=eps, coef_dtype=coef_dtype)
        self.add_mlp = OrthogonalResidual(mode, dim=-1, eps=eps, coef_dtype=coef_dtype)
        self.stream_dtype = stream_dtype

    def _branch(self, f):
        return f if self.stream_dtype is None else f.to(self.stream_dtype)

    def forward(self, x, cos, sin):
        x = self.add_attn(x, self._branch(self.attn(self.norm1(x), cos, sin)))
        return self.add_mlp(x, self._branch(self.mlp(self.norm2(x))))


STREAM_DTYPES = ("float32", "bfloat16")


class LlamaDecoder(nn.Module):
    """Causal LM; ``forward(ids) -> logits``; ``loss(ids)`` is next-token cross-entropy.

    ``stream_dtype``: the dtype of the residual stream. ``"float32"`` (default): the embedding's fp32 output
    is the stream, and under bf16 autocast it stays fp32 (an fp32 stream plus a bf16 branch output promotes
    to fp32), so ``coef_dtype="input"`` computes an fp32 coefficient there. ``"bfloat16"``: the embedding
    output and every branch output are cast to bf16 before the adds, as in a model held in bf16, so the
    stream is bf16 and ``coef_dtype="input"`` is the official bf16 coefficient."""

    def __init__(self, config: LlamaConfig, methods="feature", *, eps: float = EPS, coef_dtype: str = "float32",
                 stream_dtype: str = "float32"):
        super().__init__()
        check_choice("stream_dtype", stream_dtype, STREAM_DTYPES)
        self.config, self.methods = config, _methods(methods, config.n_layers)
        self.stream_dtype = stream_dtype
        sd = None if stream_dtype == "float32" else getattr(torch, stream_dtype)
        self.embed = nn.Embedding(config.vocab, config.d)
        self.blocks = nn.ModuleList(LlamaBlock(config, m, eps, coef_dtype, sd) for m in self.methods)
        self.norm = RMSNorm(config.d, config.rms_eps)
        self.lm_head = nn.Linear(config.d, config.vocab, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.embed.weight
        self.apply(self._init)
        cos, sin = rope_cos_sin(config.max_len, config.d // config.n_heads, base=config.rope_theta)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, ids):
        T = ids.shape[1]
        if T > self.config.max_len:
            raise ParameterError("sequence length", T, f"at most max_len={self.config.max_len}")
        x = self.embed(ids)
        cos, sin = self.cos[:T].to(x.dtype), self.sin[:T].to(x.dtype)  # RoPE tables in the embedding's dtype
        if self.stream_dtype != "float32":
            x = x.to(getattr(torch, self.stream_dtype))
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.lm_head(self.norm(x))

    def loss(self, ids):
        logits = self(ids[:, :-1])
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def n_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


# ---------------------------------------------------------------------------------------------- timm
class OrthoTimmBlock(nn.Module):
    """A timm ``vision_transformer.Block`` with both residual adds replaced by ``OrthogonalResidual``.

    timm computes ``x = x + drop_path1(ls1(attn(norm1(x))))`` then the same with ``mlp``/``norm2``; here the
    branch outputs are the same and only the adds change. ``mode="linear"`` reproduces the block exactly.
    """

    _PARTS = ("norm1", "attn", "ls1", "drop_path1", "norm2", "mlp", "ls2", "drop_path2")

    def __init__(self, block: nn.Module, mode: str = "feature", *, eps: float = EPS, coef_dtype: str = "float32"):
        super().__init__()
        missing = [p for p in self._PARTS if not hasattr(block, p)]
        if missing:
            raise ParameterError("block", type(block).__name__, f"a timm ViT Block (with {', '.join(self._PARTS)}); lacks {missing}")
        self.block = block
        self.add_attn = OrthogonalResidual(mode, dim=-1, eps=eps, coef_dtype=coef_dtype)
        self.add_mlp = OrthogonalResidual(mode, dim=-1, eps=eps, coef_dtype=coef_dtype)

    def forward(self, x, *args, **kwargs):
        b = self.block
        x = self.add_attn(x, b.drop_path1(b.ls1(b.attn(b.norm1(x), *args, **kwargs))))
        return self.add_mlp(x, b.drop_path2(b.ls2(b.mlp(b.norm2(x)))))


def wrap_timm_block(block: nn.Module, mode: str = "feature", **kw) -> OrthoTimmBlock:
    """Wrap one timm ViT ``Block``."""
    return OrthoTimmBlock(block, mode, **kw)


def wrap_timm_vit(model: nn.Module, methods="feature", **kw) -> nn.Module:
    """Replace every block of a timm ``VisionTransformer`` (``model.blocks``) in place; returns ``model``."""
    blocks = getattr(model, "blocks", None)
    if blocks is None:
        raise ParameterError("model", type(model).__name__, "a timm VisionTransformer with .blocks")
    methods = _methods(methods, len(blocks))
    for i, m in enumerate(methods):
        blocks[i] = OrthoTimmBlock(blocks[i], m, **kw)
    return model


__all__ = [
    "SMOLLM_135M",
    "STREAM_DTYPES",
    "Attention",
    "LlamaConfig",
    "LlamaDecoder",
    "OrthoTimmBlock",
    "PreActBlock",
    "TinyViT",
    "ViTBlock",
    "byte_config",
    "connections",
    "n_parameters",
    "recording",
    "set_coef_dtype",
    "wrap_timm_block",
    "wrap_timm_vit",
]

"""A tiny CLIP-style ViT whose attention q/v projections take weight adapters (HyperET placement).

The official code wraps each CLIP ``ResidualAttentionBlock``: the fused ``in_proj_weight`` [3d, d] is
split into q, k, v; q and v are re-parametrised by HRA and k is left untouched (``Adapter_qv``). This
module reproduces that placement on a small pre-LN ViT (CLS token, learned positions, fused in-proj,
``F.scaled_dot_product_attention``) so the same adapters can be compared:

* ``hra``   — :class:`companion.hyperet.hra.HRA` (hyperbolic) on q and v,
* ``euclid`` — the Euclidean twin ``W0 W_sᵀ`` with the same structure and init,
* ``lora``  — ``W0 + B A`` with rank r (B = 0 at init, scale 1), the usual low-rank baseline,
* ``full``  — every encoder weight trains (no adapter),
* ``none``  — frozen encoder (projector only).

Not from the paper: the encoder size (CPU scale) and the LoRA baseline, which the paper compares
against only in text ("equal Euclidean parameters give no gain").
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from companion.core.validation import ParameterError, check_choice, check_int
from companion.hyperet.hra import HRA, STRUCTURES

METHODS = ("none", "hra", "euclid", "lora", "full")

__all__ = ["METHODS", "LoRAWeight", "QVAdapter", "TinyViT", "attach_adapters", "encoder_param_count", "trainable_params"]


class LoRAWeight(nn.Module):
    """``W0 ↦ W0 + B A`` with A [r, n_in] ~ N(0, 1/n_in), B [n_out, r] = 0 (so it starts at W0)."""

    def __init__(self, n_out: int, n_in: int, rank: int = 1):
        super().__init__()
        self.rank = check_int("rank", rank, lo=1, hi=min(n_out, n_in))
        self.lora_a = nn.Parameter(torch.randn(rank, n_in) / math.sqrt(n_in))
        self.lora_b = nn.Parameter(torch.zeros(n_out, rank))

    def forward(self, w0: torch.Tensor) -> torch.Tensor:
        return w0.detach() + (self.lora_b @ self.lora_a).to(w0.dtype)


class QVAdapter(nn.Module):
    """Re-parametrise the q and v thirds of a fused ``in_proj_weight`` [3d, d]; k stays as it is."""

    def __init__(self, adapter_q: nn.Module, adapter_v: nn.Module):
        super().__init__()
        self.adapter_q, self.adapter_v = adapter_q, adapter_v

    def forward(self, in_proj_weight: torch.Tensor) -> torch.Tensor:
        q, k, v = in_proj_weight.chunk(3, dim=0)
        return torch.cat([self.adapter_q(q), k, self.adapter_v(v)], dim=0)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.in_proj_weight = nn.Parameter(torch.empty(3 * dim, dim))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * dim))
        nn.init.xavier_uniform_(self.in_proj_weight)
        self.out_proj = nn.Linear(dim, dim)
        self.qv_adapter: QVAdapter | None = None

    def effective_weight(self) -> torch.Tensor:
        w = self.in_proj_weight
        return self.qv_adapter(w) if self.qv_adapter is not None else w

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        qkv = F.linear(x, self.effective_weight(), self.in_proj_bias)
        q, k, v = qkv.view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.out_proj(y.transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: int):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(), nn.Linear(mlp_ratio * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TinyViT(nn.Module):
    """Pre-LN ViT: patchify → linear embed → [CLS] + learned positions → blocks → LN.

    ``forward(x)`` returns the CLS feature after the final LayerNorm ([B, dim]);
    ``tokens(x)`` returns the residual-stream tokens before it ([B, 1 + patches, dim]).
    """

    def __init__(self, image_shape=(1, 8, 8), patch: int = 2, dim: int = 64, depth: int = 2, heads: int = 4, mlp_ratio: int = 2):
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
        self.blocks = nn.ModuleList([Block(dim, heads, mlp_ratio) for _ in range(depth)])
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


def encoder_param_count(model: nn.Module) -> int:
    """Parameters of the encoder proper (adapters excluded)."""
    return sum(p.numel() for name, p in model.named_parameters() if ".qv_adapter." not in name)


def trainable_params(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def attach_adapters(
    model: TinyViT,
    method: str,
    *,
    structure: str = "diagonal",
    block_size: int = 4,
    bandwidth: int = 2,
    rank: int = 1,
    c: float = 0.01,
    impl: str = "eager",
) -> int:
    """Freeze ``model`` and attach q/v adapters in place; return the number of trainable parameters.

    ``method``: one of :data:`METHODS`. ``structure``, ``block_size``, ``bandwidth``, ``c`` and ``impl``
    configure ``hra``/``euclid``; ``rank`` configures ``lora``.
    """
    check_choice("method", method, METHODS)
    check_choice("structure", structure, STRUCTURES)
    for p in model.parameters():
        p.requires_grad_(method == "full")
    for block in model.blocks:
        attn = block.attn
        attn.qv_adapter = None
        if method in ("hra", "euclid"):
            geometry = "hyperbolic" if method == "hra" else "euclidean"
            make = lambda: HRA(model.dim, structure, c=c, block_size=block_size, bandwidth=bandwidth, geometry=geometry, impl=impl)  # noqa: E731
            attn.qv_adapter = QVAdapter(make(), make())
        elif method == "lora":
            attn.qv_adapter = QVAdapter(LoRAWeight(model.dim, model.dim, rank), LoRAWeight(model.dim, model.dim, rank))
        if attn.qv_adapter is not None:
            attn.qv_adapter.to(attn.in_proj_weight.device)
    return sum(p.numel() for p in trainable_params(model))

"""HyperET's placement of weight adapters on a tiny CLIP-style ViT: the attention q/v projections.

The official code wraps each CLIP ``ResidualAttentionBlock``: the fused ``in_proj_weight`` [3d, d] is
split into q, k, v; q and v are re-parametrised by HRA and k is left untouched (``Adapter_qv``). This
module reproduces that placement on the shared pre-LN :class:`~companion.models.tiny.TinyViT` (CLS token,
learned positions, fused in-proj, ``F.scaled_dot_product_attention``) built with :class:`QVAttention`, so the
same adapters can be compared:

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
from torch import nn

from companion.core.validation import ParameterError, check_choice, check_int
from companion.hyperet.hra import HRA, STRUCTURES
from companion.models.tiny import SelfAttention, TinyViT

METHODS = ("none", "hra", "euclid", "lora", "full")

__all__ = ["METHODS", "LoRAWeight", "QVAdapter", "QVAttention", "adaptable_vit", "attach_adapters", "encoder_param_count",
           "trainable_params", "vit_l_adapter_params"]


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


class QVAttention(SelfAttention):
    """The shared :class:`~companion.models.tiny.SelfAttention` whose projection goes through ``qv_adapter`` (a
    :class:`QVAdapter`) when :func:`attach_adapters` sets one."""

    def __init__(self, dim: int, heads: int):
        super().__init__(dim, heads)
        self.qv_adapter: QVAdapter | None = None

    def effective_weight(self) -> torch.Tensor:
        w = self.in_proj_weight
        return self.qv_adapter(w) if self.qv_adapter is not None else w


def adaptable_vit(image_shape=(1, 8, 8), patch: int = 2, dim: int = 64, depth: int = 2, heads: int = 4,
                  mlp_ratio: int = 2) -> TinyViT:
    """The shared pre-LN :class:`~companion.models.tiny.TinyViT` with :class:`QVAttention` in every block."""
    return TinyViT(image_shape, patch, dim, depth, heads, mlp_ratio, attention=QVAttention)


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
    if not all(isinstance(block.attn, QVAttention) for block in model.blocks):
        raise ParameterError("model", type(model).__name__, "a TinyViT with QVAttention blocks (adaptable_vit)")
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


def vit_l_adapter_params(method: str = "hra", **kwargs) -> tuple[int, int]:
    """``(adapter parameters, encoder parameters)`` of :func:`attach_adapters` on an encoder of CLIP ViT-L/14's shape
    (224² images in 14² patches, width 1024, 24 blocks, 16 heads, MLP ratio 4), built on the meta device (no memory,
    no weights): the count of the placement itself, not a formula."""
    with torch.device("meta"):
        model = adaptable_vit((3, 224, 224), 14, 1024, 24, 16, 4)
    return attach_adapters(model, method, **kwargs), encoder_param_count(model)

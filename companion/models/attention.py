"""Intercept a Hugging Face model's attention: see each layer's Q/K/V, or replace its attention.

The one mechanism of the project for getting inside a transformer's attention (papers 01
SeerAttention and 09 Δ Attention, and :func:`companion.models.capture.capture_attention`). A paper
needs up to three views of every layer: Q and K *before* RoPE (SeerAttention's gate pools them and
applies its own block RoPE), Q, K, V *after* RoPE (the attention the model really computes), and the
power to return a different attention output (block-sparse, Δ-corrected). This module provides them
for any Hugging Face transformer whose attention layers call ``ALL_ATTENTION_FUNCTIONS``
(transformers >= 4.48: BERT, Llama, Qwen, Mistral, GPT-NeoX, ...):

* forward hooks on the query/key projections (``q_proj``/``k_proj`` or ``query``/``key``, or a
  ``q_norm``/``k_norm`` after them) give Q and K before RoPE;
* a registered attention function (``"companion_attention"``, through ``transformers.AttentionInterface``) receives Q, K (after RoPE), V and the layer,
  and hands them to a *handler* which returns the attention output.

The model's own attention mask must be empty (no padding): the block-sparse op and the pooled
attention map have no padding mask. Sequences are packed to full length instead; a padded batch
raises a clear error. A model whose attention cannot be captured this way raises
:class:`AttentionCaptureError` naming what was missing.
"""

from __future__ import annotations

__all__ = [
    "ATTN_NAME",
    "AttentionCaptureError",
    "AttentionLayout",
    "attention_layout",
    "attention_modules",
    "attention_session",
    "dense_attention",
]

import contextlib
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

ATTN_NAME = "companion_attention"
_PROJ_NAMES = (("q_proj", "k_proj"), ("query", "key"))
_NORM_NAMES = ("q_norm", "k_norm")


class AttentionCaptureError(ValueError):
    """The model's attention layers cannot be intercepted (unknown layout or no attention interface)."""


@dataclass(frozen=True)
class AttentionLayout:
    """What the gate needs to know about a model's attention."""

    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    causal: bool
    rope_theta: float | None  # None: the model has no RoPE (e.g. BERT's absolute positions)
    model_type: str


def _config_get(config, *names, default=None):
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    return default


def attention_modules(model: nn.Module) -> list[nn.Module]:
    """The self-attention modules of ``model`` in layer order (cross-attention excluded)."""
    found = []
    for name, module in model.named_modules():
        if "crossattention" in name.replace("_", "").lower():
            continue
        for qn, kn in _PROJ_NAMES:
            q, k = getattr(module, qn, None), getattr(module, kn, None)
            if isinstance(q, nn.Linear) and isinstance(k, nn.Linear):
                found.append(module)
                break
    return found


def attention_layout(model: nn.Module) -> AttentionLayout:
    """Read heads, head size, causality and RoPE base from the model; raise if it cannot be hooked."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "_attn_implementation"):
        raise AttentionCaptureError(
            f"cannot capture the attention of a {type(model).__name__}: the attention hooks need a Hugging Face "
            "transformers model (one with a config and a pluggable attention implementation)"
        )
    mods = attention_modules(model)
    if not mods:
        raise AttentionCaptureError(
            f"cannot capture the attention of a {type(model).__name__}: no attention module has query/key "
            f"projections named {' or '.join('/'.join(p) for p in _PROJ_NAMES)} as nn.Linear layers"
        )
    heads = _config_get(config, "num_attention_heads", "n_head", "num_heads")
    if heads is None:
        raise AttentionCaptureError(f"cannot find the number of attention heads in the config of {type(model).__name__}")
    kv_heads = _config_get(config, "num_key_value_heads", default=heads)
    head_dim = _config_get(config, "head_dim", default=None) or config.hidden_size // heads
    causal = bool(getattr(mods[0], "is_causal", False) or getattr(config, "is_decoder", False))
    rope = None
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict) and params.get("rope_theta") is not None:
        rope = float(params["rope_theta"])
    elif getattr(config, "rope_theta", None) is not None:
        rope = float(config.rope_theta)
    if getattr(config, "position_embedding_type", None) == "absolute":
        rope = None
    return AttentionLayout(len(mods), int(heads), int(kv_heads), int(head_dim), causal, rope, str(getattr(config, "model_type", "?")))


# -- the registered attention function -------------------------------------------------------------
_ACTIVE: list = []  # a stack of active sessions (innermost last)


def dense_attention(q, k, v, causal: bool, scaling: float) -> torch.Tensor:
    """The plain attention a handler falls back to: ``softmax(q k^T * scaling [+ causal mask]) v``
    (``torch.nn.functional.scaled_dot_product_attention``; q/k/v ``[B, H, N, d]``, K/V already repeated)."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scaling)


def _attention_function(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    rep = query.shape[1] // key.shape[1]
    if rep > 1:
        key, value = key.repeat_interleave(rep, dim=1), value.repeat_interleave(rep, dim=1)
    if attention_mask is not None:
        m = attention_mask
        if m.dtype == torch.bool:
            full = bool(m.all())
        else:
            full = bool((m == 0).all())
        if not full:
            causal_ok = False
            N = query.shape[2]
            if m.shape[-1] == N and m.shape[-2] == N:
                tri = torch.ones(N, N, dtype=torch.bool, device=m.device).tril()
                keep = m if m.dtype == torch.bool else (m == 0)
                causal_ok = bool((keep == tri).all())
            if not causal_ok:
                raise ValueError(
                    "the attention hooks do not support padding masks: pack the inputs to full length "
                    "(pass no attention_mask, or one of all ones)"
                )
    session = _ACTIVE[-1] if _ACTIVE else None
    causal = bool(getattr(module, "is_causal", False))
    if session is None or id(module) not in session.layer_of:
        out = dense_attention(query, key, value, causal, scaling)
    else:
        pos = kwargs.get("position_ids")
        offset = int(pos.reshape(-1)[0]) if isinstance(pos, torch.Tensor) and pos.numel() else 0
        layer = session.layer_of[id(module)]
        q_pre, k_pre = session.pre.pop(layer, (None, None))
        out = session.handler(
            layer=layer, q_pre=q_pre, k_pre=k_pre, q=query, k=key, v=value, causal=causal, scaling=float(scaling),
            position_offset=offset,
        )
    return out.transpose(1, 2).contiguous(), None


def _register() -> None:
    try:
        from transformers import AttentionInterface
    except ImportError as err:  # transformers < 4.48
        raise AttentionCaptureError(
            "the attention hooks need transformers >= 4.48 (the pluggable AttentionInterface); "
            "upgrade transformers"
        ) from err

    AttentionInterface.register(ATTN_NAME, _attention_function)
    try:  # let transformers build masks for our implementation the way it does for SDPA
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

        ALL_MASK_ATTENTION_FUNCTIONS.register(ATTN_NAME, sdpa_mask)
    except Exception:  # pragma: no cover - older transformers
        pass


class _Session:
    def __init__(self, model, handler, heads: int, kv_heads: int, head_dim: int):
        self.handler = handler
        self.mods = attention_modules(model)
        self.layer_of = {id(m): i for i, m in enumerate(self.mods)}
        self.pre: dict[int, tuple[torch.Tensor | None, torch.Tensor | None]] = {}
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.handles = []
        for i, mod in enumerate(self.mods):
            for side in (0, 1):
                src = None
                norm = getattr(mod, _NORM_NAMES[side], None)
                if isinstance(norm, nn.Module):
                    src = norm
                else:
                    for names in _PROJ_NAMES:
                        cand = getattr(mod, names[side], None)
                        if isinstance(cand, nn.Linear):
                            src = cand
                            break
                self.handles.append(src.register_forward_hook(self._hook(i, side)))

    def _hook(self, layer: int, side: int):
        nh = self.heads if side == 0 else self.kv_heads

        def hook(_mod, _inp, out):
            x = out
            if x.dim() == 3:  # [B, N, H*d] from a projection
                B, N, _ = x.shape
                x = x.view(B, N, nh, self.head_dim)
            x = x.transpose(1, 2)  # [B, H, N, d]
            q, k = self.pre.get(layer, (None, None))
            self.pre[layer] = (x, k) if side == 0 else (q, x)

        return hook

    def close(self):
        for h in self.handles:
            h.remove()


@contextlib.contextmanager
def attention_session(model: nn.Module, handler: Callable[..., torch.Tensor]):
    """Within the block, every self-attention layer of ``model`` calls ``handler(**view)``.

    ``view`` holds ``layer``, ``q_pre``/``k_pre`` (``[B, H, N, d]`` / ``[B, H_kv, N, d]``, before
    RoPE), ``q``/``k``/``v`` (``[B, H, N, d]`` after RoPE, K/V repeated to the query heads),
    ``causal``, ``scaling`` and ``position_offset``; the handler returns the attention output
    ``[B, H, N, d]``. The model's attention implementation is restored afterwards.
    """
    layout = attention_layout(model)
    _register()
    previous = model.config._attn_implementation
    session = _Session(model, handler, layout.num_heads, layout.num_kv_heads, layout.head_dim)
    try:
        _set_implementation(model, ATTN_NAME)
    except Exception as err:
        session.close()
        raise AttentionCaptureError(
            f"cannot capture the attention of a {type(model).__name__}: it does not accept a custom attention "
            f"implementation ({err})"
        ) from err
    _ACTIVE.append(session)
    try:
        yield session
    finally:
        _ACTIVE.remove(session)
        session.close()
        _set_implementation(model, previous)


def _set_implementation(model: nn.Module, name: str) -> None:
    """``model.set_attn_implementation`` where it exists (transformers >= 4.56), else the config field
    that attention layers read at every forward (older versions)."""
    setter = getattr(model, "set_attn_implementation", None)
    if setter is not None:
        try:
            setter(name)
        except (ValueError, AttributeError, NotImplementedError):
            model.config._attn_implementation = name
    else:
        model.config._attn_implementation = name
    if model.config._attn_implementation != name:
        raise AttentionCaptureError(f"could not switch the attention implementation of {type(model).__name__} to {name!r}")

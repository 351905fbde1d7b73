"""The ZeroS attention layer (and ZeroS-SM), as ``torch.nn.Module``.

Paper: Lu et al., *ZeroS: Zero-Sum Linear Attention for Efficient Transformers*, NeurIPS 2025,
Sec. 3 (reweighted zero-sum weights, linear-time logits, radial-angular decoupling). Our own
implementation; the structure follows the official ``ZeroSAttention`` (LJC-FVNR/SequenceLab,
``src/sequencelab/layers/zeros.py``): projections q, k, v, u: D -> D, gate D -> 3H (sigma1, sigmah,
sigma0), per-head LayerNorm without affine, output projection D -> D, priors ``mu`` (H x d) and
``log tau`` (H), both initialised at 0; optional GPT-2 init (std 0.02, out_proj 0.02/sqrt(2 L)).

Forward, per head (``x`` ``[B, T, D]``)::

    s_i      = -(u_i . u_bar_i) / sqrt(d)                       deviation logits, key step only
    q^, k^   = normalise(RoPE(q)), normalise(RoPE(k))            RoPE *before* normalising
    sigma1_t = sigmoid(x_t W_g)[0], sigmah_t = sigmoid(x_t W_g)[1] (sigma0_t = tanh(.)[2], layer 1)
    o_t      = sum_{i<=t} r_{t,i} (q^_t . k^_i) v_i                (companion.zeros_attention.functional)
    y        = out_proj(LayerNorm_head(o))

``variant="zeros_sm"`` (ZeroS-SM) uses the logits ``q_t . k_i / sqrt(d)`` of the RoPE-rotated,
unnormalised q, k instead of ``s_i`` and no angular factor; it is quadratic.

Deviations (see ``functional`` for details): standard half-split RoPE by default
(``rope="official"`` reproduces the repository's mismatched tables); ``impl="chunked"`` (default)
and the Triton kernel use a running max instead of the repository's global detached max
(``impl="scan"`` is the repository's path, global max included).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from companion.core.validation import check_choice
from companion.zeros_attention import functional as Fz

__all__ = ["ZeroSAttention", "ZEROS_IMPLS", "ROPE_LAYOUTS", "VARIANTS"]

ZEROS_IMPLS = ("chunked", "quadratic", "scan", "explicit", "kernel")
ROPE_LAYOUTS = ("standard", "official", "none")
VARIANTS = ("zeros", "zeros_sm")


def _choice(name, value, allowed):
    """``value`` if it is one of ``allowed``, else :class:`~companion.core.ParameterError` naming ``name``."""
    return check_choice(name, value, allowed)


class ZeroSAttention(nn.Module):
    """Zero-sum (linear) attention over ``[B, T, D]`` inputs.

    Parameters mirror the official layer: ``d_model``, ``n_heads``, ``causal``, ``use_norm``,
    ``is_first_layer`` (adds the tanh-gated zero-order term ``sigma0/t``), ``bias``,
    ``gpt2_init`` / ``n_layers_init``; plus ``variant`` ("zeros" | "zeros_sm"), ``impl``
    ("chunked" | "quadratic" | "scan" | "explicit" | "kernel"; all compute the same function:
    ``chunked`` streams with O(d^2) state, ``quadratic`` is the fastest for short T on a CPU,
    ``scan`` is the official path, ``explicit`` the Taylor-split oracle, ``kernel`` the Triton op), ``logits`` (see ``functional.LOGIT_TYPES``),
    ``rope`` ("standard" | "official" | "none"), ``rope_base``, ``chunk_size``.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        causal: bool = True,
        variant: str = "zeros",
        impl: str = "chunked",
        logits: str = "deviation",
        rope: str = "standard",
        rope_base: float = 10000.0,
        use_norm: bool = True,
        is_first_layer: bool = False,
        bias: bool = True,
        chunk_size: int = 64,
        gpt2_init: bool = False,
        n_layers_init: int = 12,
        dropout: float = 0.0,
    ):
        super().__init__()
        if not isinstance(d_model, int) or not isinstance(n_heads, int) or d_model < 1 or n_heads < 1:
            raise ValueError(f"d_model and n_heads must be positive integers, got {d_model!r}, {n_heads!r}")
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        self.variant = _choice("variant", variant, VARIANTS)
        self.impl = _choice("impl", impl, ZEROS_IMPLS)
        self.logit_kind = _choice("logits", logits, Fz.LOGIT_TYPES)
        self.rope = _choice("rope", rope, ROPE_LAYOUTS)
        self.D, self.H = d_model, n_heads
        self.d = d_model // n_heads
        if self.rope != "none" and self.d % 2 != 0:
            raise ValueError(
                f"RoPE needs an even head dimension, got d_model/n_heads = {d_model}/{n_heads} = {self.d}; "
                "choose an even head size or rope='none'"
            )
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.causal, self.use_norm, self.is_first_layer = bool(causal), bool(use_norm), bool(is_first_layer)
        self.rope_base, self.chunk_size = float(rope_base), int(chunk_size)

        self.q = nn.Linear(d_model, d_model, bias=bias)
        self.k = nn.Linear(d_model, d_model, bias=bias)
        self.v = nn.Linear(d_model, d_model, bias=bias)
        self.u = nn.Linear(d_model, d_model, bias=bias)
        self.gate = nn.Linear(d_model, 3 * n_heads, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.prior_mu = nn.Parameter(torch.zeros(n_heads, self.d))
        self.prior_log_tau = nn.Parameter(torch.zeros(n_heads))
        if gpt2_init:
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    nn.init.normal_(m.weight, mean=0.0, std=0.02)
                    if m.bias is not None:
                        nn.init.zeros_(m.bias)
            nn.init.normal_(self.out_proj.weight, mean=0.0, std=0.02 / math.sqrt(2 * n_layers_init))

    # ------------------------------------------------------------------------------------------
    def _check_input(self, x: torch.Tensor) -> None:
        if not isinstance(x, torch.Tensor) or x.dim() != 3:
            raise ValueError(f"x must be a [B, T, D] tensor, got {getattr(x, 'shape', type(x).__name__)}")
        if x.shape[1] == 0:
            raise ValueError("sequence length T must be >= 1, got T=0")
        if x.shape[2] != self.D:
            raise ValueError(f"x has feature size {x.shape[2]}, the layer expects d_model={self.D}")

    def features(self, x: torch.Tensor) -> dict:
        """Everything the mixer consumes: ``q, k`` (unit, rotated), ``v``, ``s``, gates.

        For ``variant="zeros_sm"`` ``q, k`` are rotated but not normalised.
        """
        self._check_input(x)
        B, T, _ = x.shape
        H, d = self.H, self.d
        q = self.q(x).view(B, T, H, d)
        k = self.k(x).view(B, T, H, d)
        v = self.v(x).view(B, T, H, d)
        g = self.gate(x).view(B, T, H, 3)
        if self.rope != "none":
            cos, sin = Fz.rope_cos_sin(T, d, base=self.rope_base, layout=self.rope, device=x.device, dtype=x.dtype)
            q, k = Fz.apply_rope(q, cos, sin), Fz.apply_rope(k, cos, sin)
        out = {
            "v": v,
            "sigma1": torch.sigmoid(g[..., 0]),
            "sigmah": torch.sigmoid(g[..., 1]),
            "sigma0": torch.tanh(g[..., 2]) if self.is_first_layer else None,
        }
        if self.variant == "zeros":
            u = self.u(x).view(B, T, H, d)
            out["s"] = Fz.step_logits(u, kind=self.logit_kind, causal=self.causal, mu=self.prior_mu,
                                      log_tau=self.prior_log_tau)
            q, k = F.normalize(q, p=2, dim=-1), F.normalize(k, p=2, dim=-1)
        out["q"], out["k"] = q, k
        return out

    def mix(self, f: dict) -> torch.Tensor:
        """The token mixer on :meth:`features`' output -> ``[B, T, H, d]`` (before LayerNorm)."""
        if self.variant == "zeros_sm":
            return Fz.zeros_sm(f["q"], f["k"], f["v"], f["sigma1"], f["sigmah"], causal=self.causal, sigma0=f["sigma0"])
        args = (f["q"], f["k"], f["v"], f["s"], f["sigma1"], f["sigmah"])
        kw = {"causal": self.causal, "sigma0": f["sigma0"]}
        if self.impl == "explicit":
            return Fz.zeros_explicit(*args, **kw)
        if self.impl == "quadratic":
            return Fz.zeros_quadratic(*args, **kw)
        if self.impl == "scan":
            return Fz.zeros_scan(*args, **kw)
        if self.impl == "chunked":
            return Fz.zeros_chunked(*args, chunk_size=self.chunk_size, **kw)
        from companion_kernels.zeros_linear import zeros_linear

        return zeros_linear(*args, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.features(x)
        o = self.mix(f)
        if self.use_norm:
            o = F.layer_norm(o, (self.d,), eps=1e-5)
        B, T, _ = x.shape
        return self.dropout(self.out_proj(o.reshape(B, T, self.D)))

    @torch.no_grad()
    def attention_weights(self, x: torch.Tensor) -> torch.Tensor:
        """The signed mixing weights ``[B, H, T, T]``: ``r_{t,i} cos(theta_{t,i})`` (ZeroS) or ``r`` (ZeroS-SM)."""
        f = self.features(x)
        if self.variant == "zeros_sm":
            return Fz.zeros_sm_weights(f["q"], f["k"], f["sigma1"], f["sigmah"], causal=self.causal, sigma0=f["sigma0"])
        r = Fz.zeros_weights(f["s"], f["sigma1"], f["sigmah"], causal=self.causal, sigma0=f["sigma0"])
        return r * torch.einsum("bthd,bihd->bhti", f["q"], f["k"])

    def extra_repr(self) -> str:
        return (f"d_model={self.D}, n_heads={self.H}, variant={self.variant}, impl={self.impl}, "
                f"causal={self.causal}, rope={self.rope}, use_norm={self.use_norm}")

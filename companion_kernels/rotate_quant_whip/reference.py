"""Plain-PyTorch oracle of the fused rotate-quantize-Whip op (DartQuant, Shao et al., NeurIPS 2025).

For activations ``X`` ``[T, n]`` (one token a row) and a rotation ``R`` ``[n, n]`` of X's dtype:

* ``Y = X R`` — PyTorch's matmul in X's dtype (fp32 accumulation, rounded to X's dtype, as eager code
  computes it);
* ``Q(Y)`` — per-token asymmetric b-bit fake quantization with clip ratio ``clip`` (the activation quantizer
  of ``companion.dartquant.quant.quantize_activations``, QuaRot's lineage), evaluated in fp32 on the rounded Y:
  ``y_max = clip·max(max_j y_j, 0)``, ``y_min = clip·min(min_j y_j, 0)`` (an all-zero token uses ±1),
  ``s = (y_max − y_min)/(2^b − 1)``, ``z = round(−y_min/s)``,
  ``Q(y) = s·(clamp(round(y/s) + z, 0, 2^b − 1) − z)`` (``round``: half to even), returned in X's dtype;
* ``whip`` — ``Σ_j exp(−|y_j|)`` per token in fp32 (Eq. 4 before the mean over tokens; the official loss
  is ``whip.mean()``), on the unquantized (rounded) Y.

Written from the definitions, independently of ``triton.py``; runs on any device and dtype (float64 too).
"""

from __future__ import annotations

import torch

__all__ = ["rotate_quant_whip_reference", "fake_quant_rows", "whip_rows"]


def fake_quant_rows(y: torch.Tensor, bits: int, clip: float = 0.9) -> torch.Tensor:
    """Per-row asymmetric b-bit fake quantization of ``y`` (computed in fp32, or fp64 for fp64 input)."""
    wd = torch.float64 if y.dtype == torch.float64 else torch.float32
    yf = y.to(wd)
    maxq = 2 ** bits - 1
    ymax = yf.amax(dim=-1, keepdim=True).clamp(min=0) * clip
    ymin = yf.amin(dim=-1, keepdim=True).clamp(max=0) * clip
    both0 = (ymax == 0) & (ymin == 0)
    ymax = torch.where(both0, torch.ones_like(ymax), ymax)
    ymin = torch.where(both0, -torch.ones_like(ymin), ymin)
    scale = (ymax - ymin) / maxq
    zero = torch.round(-ymin / scale)
    q = torch.clamp(torch.round(yf / scale) + zero, 0, maxq)
    return (scale * (q - zero)).to(y.dtype)


def whip_rows(y: torch.Tensor) -> torch.Tensor:
    """``Σ_j exp(−|y_j|)`` per row, in fp32 (fp64 for fp64 input)."""
    wd = torch.float64 if y.dtype == torch.float64 else torch.float32
    return torch.exp(-y.to(wd).abs()).sum(dim=-1)


def rotate_quant_whip_reference(x: torch.Tensor, r: torch.Tensor, bits: int = 4, clip: float = 0.9):
    """``(Q(X R), whip)``: the fake-quantized rotated activations in X's dtype and the per-token Whip sums."""
    y = x @ r
    return fake_quant_rows(y, bits, clip), whip_rows(y)

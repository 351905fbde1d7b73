"""Fake quantizers of the DartQuant/QuaRot pipeline (paper Sec. 4.1; ``fake_quant/quant_utils.py`` lineage).

* **Activations**: per-token (optionally per-group) **asymmetric** b-bit with clip ratio 0.9:
  x_max = 0.9·max(max_i x_i, 0), x_min = 0.9·min(min_i x_i, 0), s = (x_max − x_min)/(2^b − 1),
  z = round(−x_min / s), Q(x) = s·(clamp(round(x/s) + z, 0, 2^b − 1) − z). K/V use the same with groups of
  ``head_dim``.
* **Weights, RTN**: per output channel (or per group of ``group`` input columns) **symmetric** b-bit,
  s = α·max|w| / (2^{b−1} − 1), q = clamp(round(w/s), −2^{b−1}, 2^{b−1} − 1), with the MSE clip search
  (α on a grid of 100 down to 0.2, error Σ|q − w|^2.4, as QuaRot's ``find_params(mse=True)``).
* **Weights, GPTQ** (Frantar et al.): columns quantized left to right with the error spread onto the
  remaining columns through the Cholesky factor of (H + λI)⁻¹, H = 2XᵀX/N, λ = 0.1·mean(diag H)
  (``percdamp 0.1``), lazy-batch blocks of 128, group scales found when a group starts, on the group's
  columns as column-by-column GPTQ has updated them (so the result does not depend on the block size; the
  reference code finds them on the columns before the current block's updates).

Each returns the de-quantized tensor (fake quantization) in the input's dtype.
"""

from __future__ import annotations

import torch

from companion.core import ParameterError, check_float, check_int
from companion_kernels.rotate_quant_whip.reference import fake_quant_rows

MSE_GRID, MSE_MAXSHRINK, MSE_NORM = 100, 0.8, 2.4


def check_bits(bits) -> int:
    """Bit widths 2..8 (16 means 'not quantized' and is handled by the callers)."""
    return check_int("bits", bits, lo=2, hi=8)


def _groups(x: torch.Tensor, group: int | None) -> torch.Tensor:
    n = x.shape[-1]
    if group is None or group == n:
        return x
    check_int("group", group, lo=1)
    if n % group:
        raise ParameterError("group", group, f"a divisor of the width {n} (or None for one group per row)")
    return x.reshape(*x.shape[:-1], n // group, group)


def quantize_activations(x: torch.Tensor, bits: int = 4, clip: float = 0.9, group: int | None = None) -> torch.Tensor:
    """Per-token (per-group) asymmetric fake quantization with clip ratio ``clip``: the kernel's oracle
    (:func:`companion_kernels.rotate_quant_whip.reference.fake_quant_rows`) on each row or group of ``group``
    channels, in fp32 (fp64 for fp64 input)."""
    check_bits(bits)
    check_float("clip", clip, lo=0.0, hi=1.0, lo_open=True)
    return fake_quant_rows(_groups(x, group), bits, clip).reshape(x.shape)


def act_grid(row: torch.Tensor, bits: int = 4, clip: float = 0.9) -> torch.Tensor:
    """The 2^b de-quantized levels the per-token quantizer uses for one token ``row`` (for plots)."""
    check_bits(bits)
    maxq = 2 ** bits - 1
    xmax = float(row.max().clamp(min=0)) * clip
    xmin = float(row.min().clamp(max=0)) * clip
    if xmax == 0 and xmin == 0:
        xmax, xmin = 1.0, -1.0
    scale = (xmax - xmin) / maxq
    zero = round(-xmin / scale)
    return scale * (torch.arange(maxq + 1, dtype=torch.float32) - zero)


def _sym_quant(w: torch.Tensor, scale: torch.Tensor, bits: int) -> torch.Tensor:
    maxq = 2 ** (bits - 1) - 1
    return torch.clamp(torch.round(w / scale), -(maxq + 1), maxq) * scale


def weight_scales(w: torch.Tensor, bits: int = 4, mse: bool = True) -> torch.Tensor:
    """Symmetric per-row scales of ``w`` [rows, cols] (a column of shape [rows, 1]), MSE-clipped."""
    check_bits(bits)
    maxq = 2 ** (bits - 1) - 1
    wmax = w.abs().amax(dim=-1, keepdim=True).clamp(min=1e-8)
    best = wmax / maxq
    if not mse:
        return best
    best_err = torch.full_like(wmax, float("inf"))
    for i in range(int(MSE_MAXSHRINK * MSE_GRID)):
        s = (1 - i / MSE_GRID) * wmax / maxq
        err = (_sym_quant(w, s, bits) - w).abs().pow(MSE_NORM).sum(dim=-1, keepdim=True)
        better = err < best_err
        best_err = torch.where(better, err, best_err)
        best = torch.where(better, s, best)
    return best


def quantize_weight_rtn(w: torch.Tensor, bits: int = 4, group: int | None = 128, mse: bool = True) -> torch.Tensor:
    """Round-to-nearest symmetric fake quantization of a weight [out, in] per row / per group of columns."""
    check_bits(bits)
    if group is not None and w.shape[-1] % group:
        group = None if w.shape[-1] < group else group  # a narrow layer gets one group per row
    wg = _groups(w.float(), group)
    flat = wg.reshape(-1, wg.shape[-1])
    return _sym_quant(flat, weight_scales(flat, bits, mse), bits).reshape(w.shape).to(w.dtype)


def gptq_quantize(w: torch.Tensor, x: torch.Tensor, bits: int = 4, group: int | None = 128, percdamp: float = 0.1,
                  blocksize: int = 128, mse: bool = True) -> torch.Tensor:
    """GPTQ fake quantization of ``w`` [out, in] given calibration inputs ``x`` [tokens, in]."""
    check_bits(bits)
    check_float("percdamp", percdamp, lo=0.0)
    W = w.detach().double().clone()
    cols = W.shape[1]
    if x.shape[-1] != cols:
        raise ParameterError("x", tuple(x.shape), f"calibration inputs of width {cols} (the weight's input width)")
    if group is not None and cols % group:
        if cols < group:
            group = None
        else:
            raise ParameterError("group", group, f"a divisor of the input width {cols}")
    X = x.reshape(-1, cols).double()
    H = 2.0 * X.T @ X / X.shape[0]
    dead = torch.diagonal(H) == 0
    H[dead, dead] = 1.0
    W[:, dead] = 0.0
    H += percdamp * torch.diagonal(H).mean() * torch.eye(cols, dtype=H.dtype)
    Hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(H)), upper=True)
    Q = torch.zeros_like(W)
    scale = None if group is not None else weight_scales(W, bits, mse)
    for i1 in range(0, cols, blocksize):
        i2 = min(i1 + blocksize, cols)
        W1 = W[:, i1:i2].clone()
        Err1 = torch.zeros_like(W1)
        Hinv1 = Hinv[i1:i2, i1:i2]
        for i in range(i2 - i1):
            c = i1 + i
            if group is not None and c % group == 0:
                # the group's columns as column-by-column GPTQ sees them: those beyond this block have not yet
                # received this block's errors (the lazy batch applies them at its end), so add them here
                ahead = min(c + group, cols) - i2
                cur = W1[:, i:i + group]
                if ahead > 0:
                    cur = torch.cat([cur, W[:, i2:i2 + ahead] - Err1[:, :i] @ Hinv[i1:c, i2:i2 + ahead]], dim=1)
                scale = weight_scales(cur, bits, mse)
            wcol = W1[:, i]
            q = _sym_quant(wcol[:, None], scale, bits)[:, 0]
            Q[:, c] = q
            err = (wcol - q) / Hinv1[i, i]
            W1[:, i:] -= err[:, None] @ Hinv1[i, i:][None, :]
            Err1[:, i] = err
        W[:, i2:] -= Err1 @ Hinv[i1:i2, i2:]
    return Q.to(w.dtype)

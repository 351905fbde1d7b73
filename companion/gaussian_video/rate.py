"""Simulated quantisation and the two differentiable rate models of the entropy-optimised training
(paper Sec. 3.3).

* :func:`noisy` — x̃ = x + u, u ~ U(−q/2, q/2) (the paper does not state q).
* :func:`kde_rate` — keyframes: an FFT-accelerated Gaussian kernel density estimate of one attribute
  channel with Silverman's bandwidth h = 0.9 · min(σ̂, IQR/1.34) · n^(−1/5); the samples are binned on a
  grid of step q/``oversample`` (at most ``MAX_BINS`` bins), the histogram is convolved with the Gaussian kernel by FFT, the CDF is the
  running sum, and R = −Σ log₂ P(x̃), P(x̃) = CDF(x̃ + q/2) − CDF(x̃ − q/2). [reconstructed: the text
  version of this equation is garbled]. The density is built from the detached values; the gradient
  flows through the evaluation points x̃ (CDF interpolated linearly between grid edges).
* :func:`gaussian_rate` — residuals: P(x̃) = Φ((x̃ + q/2 − m)/s) − Φ((x̃ − q/2 − m)/s) with m, s the
  residuals' (detached) mean and standard deviation.
* :func:`empirical_entropy` — the entropy of quantised symbols, for checks.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from companion.core import check_float, check_int

MAX_BINS = 2048  # the KDE grid is coarsened beyond this (16-bit positions); P is then pdf · q
P_FLOOR = 1e-9  # probability floor inside log₂ (a bin the density gives ~0 would cost ~30 bits)


def noisy(x: torch.Tensor, q, generator: torch.Generator | None = None) -> torch.Tensor:
    """x + U(−q/2, q/2); ``q`` a positive number or a tensor broadcastable to x (one step per channel)."""
    if not torch.is_tensor(q):
        q = check_float("q", q, lo=0.0, lo_open=True)
    elif bool((q <= 0).any()):
        raise ValueError("q: every quantisation step must be > 0")
    u = torch.rand(x.shape, generator=generator, dtype=x.dtype, device=x.device) - 0.5
    return x + u * q


def silverman_bandwidth(x: torch.Tensor) -> float:
    """h = 0.9 · min(σ̂, IQR / 1.34) · n^(−1/5) (Silverman's rule of thumb); a tiny floor for constants."""
    x = x.detach().reshape(-1).double()
    n = x.numel()
    sd = float(x.std()) if n > 1 else 0.0
    iqr = float(torch.quantile(x, 0.75) - torch.quantile(x, 0.25)) if n > 1 else 0.0
    spread = min(sd, iqr / 1.34) if iqr > 0 else sd
    return max(0.9 * spread * n ** (-0.2), 1e-6)


def kde_cdf(x: torch.Tensor, q: float, oversample: int = 4):
    """(edges, cdf) of the FFT Gaussian KDE of the values ``x`` on a grid of step q/oversample."""
    x = x.detach().reshape(-1).double()
    h = silverman_bandwidth(x)
    lo = float(x.min()) - 4 * h - q
    step = max(q / oversample, (float(x.max()) + 4 * h + q - lo) / MAX_BINS)
    hi = float(x.max()) + 4 * h + q
    n_bins = int(math.ceil((hi - lo) / step)) + 1
    n_fft = 1 << (2 * n_bins - 1).bit_length()
    idx = ((x - lo) / step).floor().long().clamp(0, n_bins - 1)
    hist = torch.zeros(n_bins, dtype=torch.float64).index_add_(0, idx, torch.ones_like(x))
    k_half = int(math.ceil(5 * h / step))
    kx = torch.arange(-k_half, k_half + 1, dtype=torch.float64) * step
    kern = torch.exp(-0.5 * (kx / h) ** 2)
    kern = kern / kern.sum()
    dens = torch.fft.irfft(torch.fft.rfft(hist, n_fft) * torch.fft.rfft(kern, n_fft), n_fft)
    dens = dens[k_half:k_half + n_bins].clamp(min=0)  # mass per bin, the kernel re-centred
    dens = dens / dens.sum()
    cdf = torch.cat([torch.zeros(1, dtype=torch.float64), torch.cumsum(dens, 0)])
    edges = lo + step * torch.arange(n_bins + 1, dtype=torch.float64)
    return edges, cdf


def _interp(xq: torch.Tensor, edges: torch.Tensor, cdf: torch.Tensor) -> torch.Tensor:
    step = float(edges[1] - edges[0])
    pos = ((xq.double() - float(edges[0])) / step).clamp(0, len(edges) - 1 - 1e-9)
    i = pos.detach().floor().long()
    frac = pos - i
    return cdf[i] + frac * (cdf[i + 1] - cdf[i])


def kde_bits(x_tilde: torch.Tensor, q: float, reference: torch.Tensor | None = None, oversample: int = 4) -> torch.Tensor:
    """Bits per value −log₂ P(x̃) under the KDE of ``reference`` (default: x̃ itself, detached)."""
    q = check_float("q", q, lo=0.0, lo_open=True)
    check_int("oversample", oversample, lo=1)
    edges, cdf = kde_cdf(x_tilde if reference is None else reference, q, oversample)
    p = _interp(x_tilde + q / 2, edges, cdf) - _interp(x_tilde - q / 2, edges, cdf)
    return (-torch.log2(p.clamp(min=P_FLOOR))).to(x_tilde.dtype)


def kde_rate(x_tilde: torch.Tensor, q: float, reference: torch.Tensor | None = None) -> torch.Tensor:
    """R = −Σ log₂ P(x̃) (bits) under the FFT Gaussian KDE (see :func:`kde_bits`)."""
    return kde_bits(x_tilde, q, reference).sum()


def gaussian_bits(x_tilde: torch.Tensor, q: float, mean=None, std=None) -> torch.Tensor:
    """Bits per value under a Gaussian with the values' own (detached) mean and std."""
    q = check_float("q", q, lo=0.0, lo_open=True)
    m = x_tilde.detach().mean() if mean is None else torch.as_tensor(mean, dtype=x_tilde.dtype)
    s = x_tilde.detach().std() if (std is None and x_tilde.numel() > 1) else torch.as_tensor(std if std is not None else q, dtype=x_tilde.dtype)
    s = torch.clamp(s, min=q / 4)
    z = lambda v: 0.5 * (1 + torch.erf((v - m) / (s * math.sqrt(2))))  # noqa: E731
    p = z(x_tilde + q / 2) - z(x_tilde - q / 2)
    return -torch.log2(p.clamp(min=P_FLOOR))


def gaussian_rate(x_tilde: torch.Tensor, q: float, mean=None, std=None) -> torch.Tensor:
    """R = −Σ log₂ P(x̃) under the residuals' Gaussian (bits)."""
    return gaussian_bits(x_tilde, q, mean, std).sum()


def empirical_entropy(symbols) -> float:
    """H = −Σ p log₂ p over the symbol frequencies (bits per symbol)."""
    _, counts = np.unique(np.asarray(symbols).reshape(-1), return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log2(p)).sum())

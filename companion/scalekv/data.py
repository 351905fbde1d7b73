"""Multi-scale token maps from scikit-learn's digits: the offline stand-in for a VQ tokenizer.

Paper 03 (ScaleKV) compresses the KV cache of Infinity, whose images are tokenised by a multi-scale
*residual* bitwise VQ-VAE. No such tokenizer (or its weights) is available offline, so here
**quantisation stands in for it**: each 8x8 digit of ``sklearn.datasets.load_digits`` (real
handwritten digits, shipped with scikit-learn) is upsampled bilinearly to ``side x side``, each scale
``k`` is the area-downsampled image at ``s_k x s_k``, and its grey values are quantised to
``levels`` tokens. Map ``k`` is therefore a coarse image, not a residual; the coarse-to-fine,
block-causal structure that makes the KV cache grow with every scale is the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from companion.core import check_int
from companion.scalekv.schedule import check_schedule

__all__ = ["DigitTokens", "load_digit_tokens", "quantise", "dequantise", "image_to_tokens"]


@dataclass
class DigitTokens:
    """Token maps of every scale, concatenated coarse to fine: ``tokens [n, N_K]``, ``labels [n]``."""

    tokens: torch.Tensor
    labels: torch.Tensor
    images: torch.Tensor  # [n, side, side] in [0, 1], the full-resolution source
    sides: tuple[int, ...]
    levels: int


def quantise(x: torch.Tensor, levels: int) -> torch.Tensor:
    """Grey values in [0, 1] -> integer tokens ``round(x * (levels - 1))``."""
    return torch.round(x.clamp(0, 1) * (levels - 1)).long()


def dequantise(tokens: torch.Tensor, levels: int) -> torch.Tensor:
    """Tokens -> grey values in [0, 1]."""
    return tokens.float() / (levels - 1)


def image_to_tokens(images: torch.Tensor, sides: Sequence[int], levels: int) -> torch.Tensor:
    """``images [n, H, W]`` -> concatenated token maps ``[n, sum s_k^2]`` (area downsampling + quantisation)."""
    x = images.unsqueeze(1).float()
    maps = [quantise(F.adaptive_avg_pool2d(x, (s, s)), levels).flatten(1) for s in sides]
    return torch.cat(maps, dim=1)


def load_digit_tokens(sides: Sequence[int] = (1, 2, 3, 4, 6, 8, 12, 16), levels: int = 8) -> DigitTokens:
    """All 1,797 digits as multi-scale token maps; the last side is the image resolution."""
    from sklearn.datasets import load_digits

    sides = check_schedule(sides)
    check_int("levels", levels, lo=2, hi=256)
    digits = load_digits()
    img = torch.tensor(np.asarray(digits.images), dtype=torch.float32) / 16.0
    img = F.interpolate(img.unsqueeze(1), size=(sides[-1], sides[-1]), mode="bilinear", align_corners=False).squeeze(1).clamp(0, 1)
    return DigitTokens(
        tokens=image_to_tokens(img, sides, levels),
        labels=torch.tensor(digits.target, dtype=torch.long),
        images=img,
        sides=sides,
        levels=levels,
    )

"""Rotary position embedding (RoPE, Su et al. 2021), written once for every paper.

The half-split form used by Llama and Hugging Face: coordinate ``j`` pairs with ``j + d/2``, both
rotated by the angle ``pos * base^(-2j/d)``; ``apply_rope(x) = x * cos + rotate_half(x) * sin``.
``layout="interleaved_tables"`` builds the tables with ``repeat_interleave`` instead of ``cat``: used
together with the half-split ``rotate_half`` it is *not* a rotation by one angle per pair. Some
official code ships it (ZeroS's SequenceLab); it is kept only to reproduce that behaviour.
"""

from __future__ import annotations

import torch

LAYOUTS = ("standard", "interleaved_tables")


def rope_cos_sin(positions, dim: int, *, base: float = 10000.0, layout: str = "standard",
                 device=None, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables ``[len(positions), dim]`` for integer ``positions`` (a tensor, a range or an int
    ``T`` meaning ``0..T-1``), computed in float64 and cast to ``dtype``."""
    if dim % 2 != 0 or dim < 2:
        raise ValueError(f"RoPE needs an even head dimension >= 2, got dim={dim}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if isinstance(positions, int):
        positions = torch.arange(positions, device=device)
    elif not isinstance(positions, torch.Tensor):
        positions = torch.as_tensor(list(positions), device=device)
    device = positions.device if device is None else device
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, device=device, dtype=torch.float64) / dim))
    ang = positions.to(device=device, dtype=torch.float64)[:, None] * inv[None, :]  # [n, dim/2]
    if layout == "standard":
        ang = torch.cat([ang, ang], dim=-1)
    else:
        ang = ang.repeat_interleave(2, dim=-1)
    return ang.cos().to(dtype), ang.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[x1, x2] -> [-x2, x1]`` over the last dimension."""
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin``; ``cos``/``sin`` broadcast against ``x`` (``[n, d]`` for a
    ``[..., n, d]`` input; reshape them for other layouts)."""
    return x * cos.to(x.dtype) + rotate_half(x) * sin.to(x.dtype)

"""The CPU scene and the 2-D Gaussian model.

**Data** (:func:`make_frames`): a crop of scikit-learn's bundled ``china.jpg`` (no download), resized to
``size × size`` and warped over ``n_frames`` frames by a slow global rigid motion (translation plus a small
rotation), a local non-rigid bump that travels across the frame, and one large translation jump in the
middle of the sequence, so that motion-aware grouping has something to detect.

**Model** (:class:`Gaussians2D`): the 2-D analogue of a 3DGS Gaussian: centre μ (pixels), log-scales
(log a, log b), angle θ, opacity logit, RGB colour and a depth scalar that fixes the compositing order.
Area S = π a b plays the part of the volume (4/3)π a b c in Ψ (Eq. significance).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import numpy as np
import torch
import torch.nn.functional as F

from companion.core import ParameterError, check_float, check_int
from companion.gaussian_video.splat import conics, covariance_2d, splat

#: attribute name → number of channels, in bitstream order
ATTRIBUTES = {"mu": 2, "log_scale": 2, "theta": 1, "opacity": 1, "color": 3, "depth": 1}


@dataclass
class Gaussians2D:
    """N anisotropic 2-D Gaussians (all tensors have N rows). ``opacity`` holds the logit."""

    mu: torch.Tensor         # [N, 2] centre (x, y) in pixels
    log_scale: torch.Tensor  # [N, 2] log of the two standard deviations
    theta: torch.Tensor      # [N, 1] rotation angle (rad)
    opacity: torch.Tensor    # [N, 1] opacity logit: α = sigmoid(opacity)
    color: torch.Tensor      # [N, 3] RGB
    depth: torch.Tensor      # [N, 1] compositing order (smaller is in front)

    def __len__(self) -> int:
        return self.mu.shape[0]

    def tensors(self) -> dict[str, torch.Tensor]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def map(self, fn) -> "Gaussians2D":
        return Gaussians2D(**{k: fn(v) for k, v in self.tensors().items()})

    def detach(self) -> "Gaussians2D":
        return self.map(lambda t: t.detach().clone())

    def subset(self, idx) -> "Gaussians2D":
        return self.map(lambda t: t[idx])

    def alpha(self) -> torch.Tensor:
        return torch.sigmoid(self.opacity[:, 0])

    def scales(self) -> torch.Tensor:
        return torch.exp(self.log_scale)

    def render(self, height: int, width: int, masks: torch.Tensor | None = None) -> torch.Tensor:
        """``[H, W, 3]`` (or ``[M, H, W, 3]`` with ``masks`` ``[M, N]``); black background."""
        cov = covariance_2d(self.log_scale, self.theta[:, 0])
        return splat(self.mu, conics(cov), self.alpha(), self.color, self.depth[:, 0], height, width, masks=masks)

    def with_(self, **kw) -> "Gaussians2D":
        return replace(self, **kw)


def _china() -> np.ndarray:
    """scikit-learn's bundled ``china.jpg`` as uint8 ``[427, 640, 3]``: read with Pillow from the installed
    package's folder (importing ``sklearn.datasets`` costs seconds), else through ``load_sample_image``."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("sklearn")
    if spec is not None and spec.submodule_search_locations:
        path = Path(list(spec.submodule_search_locations)[0]) / "datasets" / "images" / "china.jpg"
        if path.exists():
            from PIL import Image

            with Image.open(path) as im:
                return np.asarray(im.convert("RGB"))
    from sklearn.datasets import load_sample_image

    return load_sample_image("china.jpg")


def china_crop(size: int, crop: int = 160, top: int = 140, left: int = 300) -> torch.Tensor:
    """A ``crop × crop`` patch of ``china.jpg`` (the temple roof) as a float ``[1, 3, crop, crop]`` in [0, 1]."""
    img = _china()[top:top + crop, left:left + crop].astype(np.float32) / 255.0
    return torch.from_numpy(img).permute(2, 0, 1)[None]


def make_frames(size: int = 32, n_frames: int = 8, jump_at: int | None = None, jump: float = 0.12,
                drift: float = 0.01, bump: float = 0.03, seed: int = 0) -> torch.Tensor:
    """``[T, size, size, 3]`` frames in [0, 1].

    Frame t samples the source at x' = R(φ_t) x + s_t + b_t(x): s_t a drift of ``drift``·size pixels per
    frame (plus ``jump``·size from frame ``jump_at`` on; default the middle frame), φ_t = 0.01 t rad, and
    b_t a Gaussian bump of amplitude ``bump``·size whose centre moves across the frame (non-rigid).
    ``seed`` sets the drift direction.
    """
    check_int("size", size, lo=8, hi=128)
    check_int("n_frames", n_frames, lo=2, hi=64)
    jump_at = n_frames // 2 if jump_at is None else check_int("jump_at", jump_at, lo=1, hi=n_frames - 1)
    src = china_crop(size)
    rng = np.random.default_rng(seed)
    ang = rng.uniform(0, 2 * math.pi)
    direction = torch.tensor([math.cos(ang), math.sin(ang)], dtype=torch.float32)
    ys, xs = torch.meshgrid(torch.linspace(-1, 1, size), torch.linspace(-1, 1, size), indexing="ij")
    base = torch.stack([xs, ys], -1) * 0.5  # the centre half of the source
    frames = []
    for t in range(n_frames):
        phi = 0.01 * t
        rot = torch.tensor([[math.cos(phi), -math.sin(phi)], [math.sin(phi), math.cos(phi)]])
        shift = direction * (2 * drift * t) + (torch.tensor([2 * jump, 0.0]) if t >= jump_at else 0.0)
        centre = torch.tensor([-0.5 + t / max(1, n_frames - 1), 0.0]) * 0.5
        r2 = ((base - centre) ** 2).sum(-1, keepdim=True)
        bump_field = 2 * bump * torch.exp(-r2 / (2 * 0.15 ** 2)) * torch.tensor([0.0, 1.0])
        grid = base @ rot.T + shift * 0.5 + bump_field * 0.5
        frames.append(F.grid_sample(src, grid[None], mode="bilinear", align_corners=False, padding_mode="reflection")[0])
    return torch.stack(frames).permute(0, 2, 3, 1).clamp(0, 1).contiguous()


def check_frames(frames) -> torch.Tensor:
    """Frames must be one ``[T, H, W, 3]`` tensor, or a list of ``[H, W, 3]`` tensors of one shape."""
    if isinstance(frames, (list, tuple)):
        shapes = {tuple(f.shape) for f in frames}
        if len(shapes) != 1:
            raise ParameterError("frames", f"shapes {sorted(shapes)}", "frames of one shape [H, W, 3]")
        frames = torch.stack(list(frames))
    if not isinstance(frames, torch.Tensor) or frames.dim() != 4 or frames.shape[-1] != 3:
        raise ParameterError("frames", getattr(frames, "shape", frames), "a [T, H, W, 3] tensor")
    return frames


def init_gaussians(frame: torch.Tensor, n: int, seed: int = 0) -> Gaussians2D:
    """N Gaussians at random positions, isotropic with a scale that tiles the frame, colour sampled from
    the frame, opacity 0.5, random depth."""
    check_int("n", n, lo=1)
    H, W, _ = frame.shape
    g = torch.Generator().manual_seed(seed)
    mu = torch.rand(n, 2, generator=g) * torch.tensor([W, H], dtype=torch.float32)
    r = math.sqrt(H * W / n) * 0.6
    ij = mu.long().clamp(min=0)
    col = frame[ij[:, 1].clamp(max=H - 1), ij[:, 0].clamp(max=W - 1)]
    return Gaussians2D(mu=mu, log_scale=torch.full((n, 2), math.log(r)) + 0.1 * torch.randn(n, 2, generator=g),
                       theta=torch.rand(n, 1, generator=g) * math.pi, opacity=torch.zeros(n, 1),
                       color=col.clone(), depth=torch.rand(n, 1, generator=g))


def l1(img: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return (img - target).abs().mean()


def psnr(img: torch.Tensor, target: torch.Tensor) -> float:
    """PSNR in dB for images in [0, 1] (renders clamped to [0, 1] first)."""
    mse = float(((img.clamp(0, 1) - target) ** 2).mean())
    return 10 * math.log10(1.0 / max(mse, 1e-12))


TRAINABLE = ("mu", "log_scale", "theta", "opacity", "color")


def fit(g: Gaussians2D, frame: torch.Tensor, steps: int, lr: float = 0.05) -> Gaussians2D:
    """Plain 3DGS-style fit of one frame: Adam on L1 (pretraining; the paper adds λ_ssim·D-SSIM with
    λ_ssim = 0.2, left out here for time). Depth is not trained (it only sets the order)."""
    check_int("steps", steps, lo=0)
    check_float("lr", lr, lo=0, lo_open=True)
    H, W, _ = frame.shape
    p = g.detach()
    params = [getattr(p, k).requires_grad_(True) for k in TRAINABLE]
    lrs = {"mu": lr * 10, "log_scale": lr, "theta": lr, "opacity": lr, "color": lr}
    opt = torch.optim.Adam([{"params": [getattr(p, k)], "lr": lrs[k]} for k in TRAINABLE])
    for _ in range(steps):
        loss = l1(p.render(H, W), frame)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    del params
    return p.detach()


def prune(g: Gaussians2D, fraction: float) -> Gaussians2D:
    """Drop the ``fraction`` of Gaussians with the lowest opacity (the paper prunes 40%)."""
    check_float("fraction", fraction, lo=0.0, hi=1.0, hi_open=True)
    keep = len(g) - int(round(fraction * len(g)))
    idx = torch.argsort(g.opacity[:, 0], descending=True, stable=True)[:keep]
    return g.subset(torch.sort(idx).values)

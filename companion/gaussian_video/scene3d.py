"""The synthetic 3-D scene of the GPU studies: Gaussians in articulated parts over frames, and cameras on a ring.

:func:`make_scene` is the ground truth of both GPU studies (the decode study codes it as it is; the 3-D
training study fits a model to its renders, :mod:`companion.gaussian_video.train3d`); :func:`cameras` the
views both render. Nothing here is trained or downloaded.
"""

from __future__ import annotations

import math

import torch

from companion.core import ParameterError, check_choice

__all__ = ["LAYOUTS", "cameras", "make_scene"]


LAYOUTS = ("overlapping", "separated")
PART_GAP = 0.6  # "separated": the least distance between two part centres (scene units)
PART_BOX = 0.8  # "separated": part centres lie in [-PART_BOX, PART_BOX]^3


def _centres_apart(n_parts: int, g: torch.Generator, tries: int = 10_000) -> torch.Tensor:
    """``n_parts`` centres drawn uniformly in the box, each kept only if it is ``PART_GAP`` from those before."""
    out: list = []
    for _ in range(tries):
        c = (torch.rand(3, generator=g) * 2 - 1) * PART_BOX
        if all(float((c - o).norm()) >= PART_GAP for o in out):
            out.append(c)
            if len(out) == n_parts:
                return torch.stack(out)
    raise ParameterError("n_parts", n_parts, f"at most the {len(out)} parts that fit {PART_GAP} apart in the "
                         f"layout 'separated' (or layout 'overlapping')")


def make_scene(n: int, n_parts: int, n_frames: int, seed: int = 0, layout: str = "overlapping") -> dict:
    """``n`` Gaussians in ``n_parts`` parts; each part rotates rigidly about its centre and drifts, plus a small
    non-rigid wobble. Per frame the means and quaternions (``[T, N, 3]``, ``[T, N, 4]``, (w, x, y, z)); scales
    (linear), opacities and colours are static; ``part`` is each Gaussian's part.

    ``layout``: ``"overlapping"`` puts the part centres anywhere in a 1.2-unit box with spreads of 0.05–0.2, so
    parts interpenetrate (at 12 parts, 11–27 % of the Gaussians have their nearest neighbour in another part, which
    moves differently: no motion field looked up by position, a grid or a hash grid, can follow both);
    ``"separated"`` keeps the centres ``PART_GAP`` apart with spreads of 0.025–0.06, so that motion is a function
    of position, as in a captured scene (no Gaussian's nearest neighbour is in another part, first frame to last,
    at 12 parts and 16 frames)."""
    layout = check_choice("layout", layout, LAYOUTS)
    g = torch.Generator().manual_seed(seed)
    part = torch.randint(0, n_parts, (n,), generator=g)
    if layout == "separated":
        centres = _centres_apart(n_parts, g)
        spread = 0.025 + 0.035 * torch.rand(n_parts, 3, generator=g)
    else:
        centres = (torch.rand(n_parts, 3, generator=g) - 0.5) * 1.2
        spread = 0.05 + 0.15 * torch.rand(n_parts, 3, generator=g)
    local = torch.randn(n, 3, generator=g) * spread[part]
    scales = torch.exp(torch.randn(n, 3, generator=g) * 0.4) * 0.008
    quats = torch.randn(n, 4, generator=g)
    quats = quats / quats.norm(dim=1, keepdim=True)
    opac = 0.1 + 0.89 * torch.rand(n, generator=g)
    colors = (torch.rand(n_parts, 3, generator=g)[part] + 0.15 * torch.randn(n, 3, generator=g)).clamp(0, 1)
    speed = (torch.rand(n_parts, generator=g) - 0.5) * 0.3
    drift = (torch.rand(n_parts, 3, generator=g) - 0.5) * 0.02
    means, qs = [], []
    for t in range(n_frames):
        ang = speed * t
        c, s = torch.cos(ang)[part], torch.sin(ang)[part]
        x = torch.stack([c * local[:, 0] - s * local[:, 1], s * local[:, 0] + c * local[:, 1], local[:, 2]], 1)
        wob = 0.01 * torch.sin(3 * local[:, :1] * 10 + 0.7 * t)
        means.append(centres[part] + drift[part] * t + x + wob)
        half = ang[part] / 2
        rq = torch.stack([torch.cos(half), torch.zeros_like(half), torch.zeros_like(half), torch.sin(half)], 1)
        w1, x1, y1, z1 = rq.unbind(1)
        w2, x2, y2, z2 = quats.unbind(1)
        qs.append(torch.stack([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                               w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2], 1))
    return {"means": torch.stack(means), "quats": torch.stack(qs), "scales": scales, "opacities": opac,
            "colors": colors, "part": part}


def cameras(n: int, width: int, radius: float = 3.0, fov_deg: float = 40.0):
    """``n`` cameras on a ring looking at the origin: (world-to-camera viewmats ``[n, 4, 4]``, pinhole K ``[3, 3]``)."""
    f = 0.5 * width / math.tan(math.radians(fov_deg) / 2)
    K = torch.tensor([[f, 0, width / 2], [0, f, width / 2], [0, 0, 1.0]])
    views = []
    for i in range(n):
        a = 2 * math.pi * i / n
        eye = torch.tensor([radius * math.cos(a), 0.4 * math.sin(3 * a), radius * math.sin(a)])
        fwd = -eye / eye.norm()
        right = torch.linalg.cross(fwd, torch.tensor([0.0, 1.0, 0.0]))
        right = right / right.norm()
        up = torch.linalg.cross(fwd, right)
        R = torch.stack([right, up, fwd])
        V = torch.eye(4)
        V[:3, :3] = R
        V[:3, 3] = -R @ eye
        views.append(V)
    return torch.stack(views), K

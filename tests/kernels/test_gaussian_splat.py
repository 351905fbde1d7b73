"""Gaussian tile rasteriser (paper 05, 4DGCPro): Triton kernel vs the dense PyTorch oracle and the
per-tile PyTorch version, on random scenes with odd sizes; bad input. On the CPU the kernel runs in the
Triton interpreter (TRITON_INTERPRET=1, fp32); outputs are pre-filled with NaN so unwritten pixels show."""

import math
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton.jit decorates the kernels

from companion_kernels.gaussian_splat import bin_gaussians, rasterize, rasterize_dense, rasterize_tiles_torch  # noqa: E402
from companion_kernels.gaussian_splat import triton as gs_triton  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def scene(n, h, w, seed=0):
    g = torch.Generator().manual_seed(seed)
    means = torch.rand(n, 2, generator=g) * torch.tensor([w + 6.0, h + 6.0]) - 3.0  # some off-screen
    s = torch.exp(torch.randn(n, 2, generator=g) * 0.4) * 1.8
    th = torch.rand(n, generator=g) * math.pi
    c, si = torch.cos(th), torch.sin(th)
    A = c * c * s[:, 0] ** 2 + si * si * s[:, 1] ** 2
    B = c * si * (s[:, 0] ** 2 - s[:, 1] ** 2)
    C = si * si * s[:, 0] ** 2 + c * c * s[:, 1] ** 2
    det = A * C - B * B
    conics = torch.stack([C / det, -B / det, A / det], -1)
    op = torch.rand(n, generator=g) * 0.98
    op[0] = 0.001  # below alpha_min everywhere
    col = torch.rand(n, 3, generator=g)
    depth = torch.rand(n, generator=g)
    return [t.to(DEV) for t in (means, conics, op, col, depth)]


@pytest.mark.parametrize("n,h,w", [(1, 16, 16), (37, 19, 23), (120, 33, 17)])
@pytest.mark.parametrize("block_g", [16, 32])
def test_triton_matches_dense_oracle(n, h, w, block_g):
    m, c, o, col, d = scene(n, h, w, seed=n)
    offsets, ids = bin_gaussians(m, c, o, d, h, w)
    out = torch.full((h, w, 3), float("nan"), device=DEV)
    gs_triton.rasterize_triton(m, c, o, col, offsets, ids, h, w, background=0.25, block_g=block_g, out=out)
    ref = rasterize_dense(m.double(), c.double(), o.double(), col.double(), d.double(), h, w, background=0.25)
    assert torch.isfinite(out).all()
    assert (out.double() - ref).abs().max() < 2e-5


def test_tiled_torch_matches_dense_and_api():
    m, c, o, col, d = scene(80, 35, 29, seed=3)
    offsets, ids = bin_gaussians(m, c, o, d, 35, 29)
    ref = rasterize_dense(m, c, o, col, d, 35, 29)
    tiles = rasterize_tiles_torch(m, c, o, col, offsets, ids, 35, 29, tiles_per_chunk=2)
    assert (tiles - ref).abs().max() < 1e-5
    assert (rasterize(m, c, o, col, d, 35, 29, impl="reference") - ref).abs().max() < 1e-5
    assert (rasterize(m, c, o, col, d, 35, 29, impl="triton") - ref).abs().max() < 2e-5


def test_binning_is_conservative():
    """Every (pixel, Gaussian) pair with α' ≥ 1/255 lies in a tile whose list holds that Gaussian."""
    m, c, o, col, d = scene(40, 20, 36, seed=5)
    offsets, ids = bin_gaussians(m, c, o, d, 20, 36)
    for t in range(len(offsets) - 1):
        ty, tx = divmod(t, 3)
        listed = set(ids[offsets[t]:offsets[t + 1]].tolist())
        ys, xs = torch.meshgrid(torch.arange(ty * 16, min(20, ty * 16 + 16)) + 0.5,
                                torch.arange(tx * 16, min(36, tx * 16 + 16)) + 0.5, indexing="ij")
        for i in range(40):
            dx, dy = xs - m[i, 0].cpu(), ys - m[i, 1].cpu()
            cc = c[i].cpu()
            a = o[i].cpu() * torch.exp((-0.5 * (cc[0] * dx * dx + cc[2] * dy * dy) - cc[1] * dx * dy).clamp(max=0))
            if (a >= 1 / 255).any():
                assert i in listed
        depths = [float(d[j]) for j in ids[offsets[t]:offsets[t + 1]].tolist()]
        assert depths == sorted(depths)


def test_bad_input():
    m, c, o, col, d = scene(5, 8, 8)
    with pytest.raises(ValueError):
        rasterize(m, c[:, :2], o, col, d, 8, 8)
    with pytest.raises(TypeError):
        rasterize(m.double(), c, o, col, d, 8, 8)
    with pytest.raises(ValueError):
        rasterize(m, c, o, col, d, 0, 8)
    with pytest.raises(ValueError):
        rasterize(m, c, o, col, d, 8, 8, impl="fast")
    with pytest.raises(ValueError):
        rasterize(m, c, o, col, d, 8, 8, block_g=24)


@pytest.mark.gpu
def test_gpu_projected_scene_matches_per_tile_torch():
    """A 3-D scene projected with EWA (the benchmark's path) at 256²: Triton vs the per-tile PyTorch splatter."""
    from companion.gaussian_video.scale import cameras, make_scene, project

    sc = make_scene(20000, 6, 1)
    views, K = cameras(2, 256)
    g = {"means": sc["means"][0].cuda(), "quats": sc["quats"][0].cuda(), "scales": sc["scales"].cuda(),
         "opacities": sc["opacities"].cuda(), "colors": sc["colors"].cuda()}
    args = project(g, views[0].cuda(), K.cuda())
    a = rasterize(*args, 256, 256, impl="triton")
    b = rasterize(*args, 256, 256, impl="reference")
    assert (a - b).abs().mean() < 1e-5 and (a - b).abs().max() < 1e-3

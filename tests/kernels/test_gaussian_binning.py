"""Projection and tile binning of Gaussians in Triton (paper 05, 4DGCPro): the kernels' tile lists are identical
to the PyTorch binning's (off-screen, transparent, non-invertible and huge Gaussians, equal, signed and NaN
depths, no Gaussians, odd image sizes); the Triton projection equals the PyTorch oracle to float32 rounding with
the same Gaussians culled (behind the camera, at the near plane, at the Jacobian clamp), and the oracle equals
the differentiable EWA projection of ``companion.gaussian_video.splat``; projection + binning in one call; bad
input. On the CPU the kernels run in the Triton interpreter (TRITON_INTERPRET=1)."""

import math
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton.jit decorates the kernels

from companion_kernels.gaussian_splat import rasterize_binned, rasterize_dense  # noqa: E402
from companion_kernels.gaussian_splat.binning import bin_gaussians  # noqa: E402
from companion_kernels.gaussian_splat.project import (  # noqa: E402
    project_and_bin, project_gaussians, project_torch)

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def projected(n, h, w, seed):
    """Projected Gaussians with the hard cases: a third off-screen, every 7th transparent, depths on a coarse
    grid (ties) with negative ones; #1 huge (covers every tile), #2 not invertible, #3 at NaN, #4/#5 at depth
    −0 / +0 on one spot, #6 at NaN depth."""
    g = torch.Generator().manual_seed(seed)
    means = torch.rand(n, 2, generator=g) * torch.tensor([w + 40.0, h + 40.0]) - 20.0
    s = torch.exp(torch.randn(n, 2, generator=g) * 0.6) * 2.0
    th = torch.rand(n, generator=g) * math.pi
    c, si = torch.cos(th), torch.sin(th)
    A, C = c * c * s[:, 0] ** 2 + si * si * s[:, 1] ** 2, si * si * s[:, 0] ** 2 + c * c * s[:, 1] ** 2
    B = c * si * (s[:, 0] ** 2 - s[:, 1] ** 2)
    det = A * C - B * B
    conics = torch.stack([C / det, -B / det, A / det], -1)
    op = torch.rand(n, generator=g)
    op[::7] = 0.0
    depth = torch.randint(-2, 6, (n,), generator=g).float()
    conics[1], op[1], means[1] = torch.tensor([1e-6, 0.0, 1e-6]), 0.9, torch.tensor([w / 2, h / 2])
    conics[2] = torch.tensor([1.0, 1.0, 1.0])
    means[3, 0] = float("nan")
    means[4:6], op[4:6], depth[4], depth[5] = torch.tensor([w / 3, h / 3]), 0.5, -0.0, 0.0
    depth[6] = float("nan")
    return [t.to(DEV) for t in (means, conics, op, depth)]


@pytest.mark.parametrize("n,h,w,seed", [(7, 16, 16, 0), (60, 19, 37, 1), (150, 47, 33, 2), (90, 1, 70, 3),
                                         (60, 120, 250, 5)])
def test_triton_binning_is_identical_to_torch(n, h, w, seed):
    """The last case has 8 × 16 = 128 tiles: offsets[128] (the total) falls in a second block of the ranges
    kernel's BLOCK = 128 tiles a program."""
    m, c, o, d = projected(n, h, w, seed)
    ref = bin_gaussians(m, c, o, d, h, w, impl="reference")
    got = bin_gaussians(m, c, o, d, h, w, impl="triton")
    assert got[0].dtype == got[1].dtype == torch.int32
    assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])
    assert ref[1].numel() > 0
    n_tiles = math.ceil(h / 16) * math.ceil(w / 16)
    huge = [int((ref[1][ref[0][t]:ref[0][t + 1]] == 1).sum()) for t in range(n_tiles)]
    assert huge == [1] * n_tiles  # the huge one is listed once in every tile
    for i in (0, 2, 3, 7):  # transparent, not invertible, NaN
        assert not (ref[1] == i).any()


def test_depth_order_ties_by_index():
    """−0 and +0 are one depth (ties by index, as torch.argsort); NaN depth sorts last whatever its sign bit (x86
    makes inf − inf a negative NaN), the NaNs by index; equal depths by index."""
    n = 9
    m = torch.full((n, 2), 8.0, device=DEV)
    c = torch.tensor([[0.5, 0.0, 0.5]] * n, device=DEV)
    o = torch.full((n,), 0.5, device=DEV)
    d = torch.tensor([float("nan"), 0.0, -0.0, -1.0, 2.0, -1.0, float("inf"), -float("inf"), -float("nan")],
                     device=DEV)
    assert d[8].view(torch.int32) < 0  # the sign bit of the last NaN is set
    for impl in ("reference", "triton"):
        offsets, ids = bin_gaussians(m, c, o, d, 16, 16, impl=impl)
        assert offsets.tolist() == [0, n] and ids.tolist() == [7, 3, 5, 1, 2, 4, 6, 0, 8], impl


@pytest.mark.parametrize("n", [0, 5])
def test_no_pairs_gives_empty_lists(n):
    m, c, o, d = projected(max(n, 7), 21, 35, 4)
    o = torch.zeros_like(o)  # nobody visible
    for impl in ("reference", "triton"):
        offsets, ids = bin_gaussians(m[:n], c[:n], o[:n], d[:n], 21, 35, impl=impl)
        assert offsets.tolist() == [0] * 7 and ids.shape == (0,) and ids.dtype == torch.int32


def camera(seed, h, w):
    """A random rotation and translation (world→camera) and a pinhole K with an off-centre principal point."""
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(3, 3, generator=g, dtype=torch.float64))
    view = torch.eye(4, dtype=torch.float64)
    view[:3, :3], view[:3, 3] = q * torch.sign(torch.det(q)), torch.randn(3, generator=g, dtype=torch.float64) * 0.3
    f = 0.5 * w / math.tan(math.radians(25.0)) * (1 + 0.1 * float(torch.rand(1, generator=g)))
    K = torch.tensor([[f, 0, 0.45 * w], [0, 1.1 * f, 0.55 * h], [0, 0, 1]], dtype=torch.float64)
    return view, K


def scene3d(n, view, seed):
    """Gaussians in front of and behind the camera, some just either side of the near plane and some far
    outside the field of view (where the Jacobian is clamped), as camera-space points mapped back to the world."""
    g = torch.Generator().manual_seed(seed)
    cam = torch.randn(n, 3, generator=g, dtype=torch.float64) * torch.tensor([1.0, 1.0, 1.5], dtype=torch.float64)
    cam[:, 2] += 2.0  # about a tenth behind the camera
    cam[: n // 8, 2] = 0.01 + torch.tensor([-1e-4, 1e-4], dtype=torch.float64).repeat(n)[: n // 8]
    cam[n // 8: n // 4, 0] = 6 * cam[n // 8: n // 4, 2].abs() * torch.sign(cam[n // 8: n // 4, 0])  # outside the view
    means = (cam - view[:3, 3]) @ view[:3, :3]  # W⁻¹ (t − w)
    quats = torch.randn(n, 4, generator=g, dtype=torch.float64)
    scales = torch.exp(torch.randn(n, 3, generator=g, dtype=torch.float64) * 0.5) * 0.05
    return means, quats, scales


@pytest.mark.parametrize("seed,h,w", [(0, 33, 47), (1, 64, 64), (2, 17, 90)])
def test_triton_projection_matches_torch(seed, h, w):
    view, K = camera(seed, h, w)
    means, quats, scales = scene3d(160, view, seed)
    ref = project_torch(means, quats, scales, view, K, h, w)  # float64
    args = [t.float().to(DEV) for t in (means, quats, scales, view, K)]
    got = project_gaussians(*args, h, w, impl="triton")
    assert torch.equal(got[3].cpu(), ref[3])
    vis = ref[3]
    assert 0 < int(vis.sum()) < 160 and (ref[2] < 0).any() and (ref[2][vis] < 0.0101).any()
    for name, x, y in zip(("means2d", "conics", "depths"), got[:3], ref[:3]):
        x, y = x.cpu().double(), y
        scale = y.abs().amax(dim=-1, keepdim=True) if y.dim() == 2 else y.abs()
        assert ((x - y).abs() <= 2e-5 * scale + 1e-6).all(), name
    assert (got[0][~got[3]] == 0).all() and (got[1][~got[3]] == 0).all()


@pytest.mark.parametrize("impl", ["reference", "triton"])
def test_near_plane_is_inclusive(impl):
    """gsplat culls depth < near_plane: a Gaussian exactly at the near plane stays."""
    means = torch.tensor([[0.0, 0.0, 0.005], [0.0, 0.0, 0.01], [0.0, 0.0, 0.02]], device=DEV)
    quats, scales = torch.tensor([[1.0, 0, 0, 0]] * 3, device=DEV), torch.full((3, 3), 0.01, device=DEV)
    K = torch.tensor([[50.0, 0, 8], [0, 50.0, 8], [0, 0, 1]], device=DEV)
    got = project_gaussians(means, quats, scales, torch.eye(4, device=DEV), K, 16, 16, near_plane=0.01, impl=impl)
    assert got[3].tolist() == [False, True, True]


def test_projection_oracle_is_the_differentiable_ewa():
    """:func:`project_torch` gives what ``companion.gaussian_video.splat`` gives (the training path) with the
    Jacobian clamped to the image, in float64, on the Gaussians it keeps."""
    from companion.gaussian_video.splat import conics, covariance_3d, project_ewa

    view, K = camera(5, 40, 56)
    means, quats, scales = scene3d(64, view, 5)
    m2, cov2, depth = project_ewa(means, covariance_3d(quats, scales), view, K, image_size=(56, 40))
    got = project_torch(means, quats, scales, view, K, 40, 56)
    vis = got[3]
    assert torch.equal(vis, depth >= 0.01)
    assert torch.allclose(got[0][vis], m2[vis]) and torch.allclose(got[1][vis], conics(cov2[vis]))
    assert torch.equal(got[2], depth)


def test_project_and_bin():
    """The lists of the fused call are ``bin_gaussians`` of its own outputs; culled Gaussians are in none; a
    render from them equals the dense render of the visible Gaussians."""
    h, w = 37, 29
    view, K = camera(3, h, w)
    means, quats, scales = scene3d(120, view, 3)
    g = torch.Generator().manual_seed(3)
    op, col = torch.rand(120, generator=g), torch.rand(120, 3, generator=g)
    args = [t.float().to(DEV) for t in (means, quats, scales, op, view, K)]
    op, col = args[3], col.to(DEV)
    for impl in ("triton", "reference"):
        m2, con, depth, offsets, ids = project_and_bin(*args, h, w, impl=impl)
        want = bin_gaussians(m2, con, op, depth, h, w, impl="reference")
        assert torch.equal(offsets, want[0]) and torch.equal(ids, want[1]) and ids.numel() > 0, impl
        vis = project_gaussians(*args[:3], *args[4:], h, w, impl=impl)[3]
        assert vis[ids.long()].all() and not vis.all()
        img = rasterize_binned(m2, con, op, col, offsets, ids, h, w, impl="reference")
        ref = rasterize_dense(m2[vis], con[vis], op[vis], col[vis], depth[vis], h, w)
        assert (img - ref).abs().max() < 1e-5


def test_bad_input(monkeypatch):
    m, c, o, d = projected(7, 16, 16, 0)
    with pytest.raises(ValueError, match="conics must have shape"):
        bin_gaussians(m, c[:, :2], o, d, 16, 16)
    with pytest.raises(ValueError, match="means2d must be"):
        bin_gaussians(m[:, :1], c, o, d, 16, 16)
    with pytest.raises(TypeError, match="depths must be a floating"):
        bin_gaussians(m, c, o, d.long(), 16, 16)
    with pytest.raises(ValueError, match="float32"):
        bin_gaussians(m, c, o, d.double(), 16, 16, impl="triton")
    with pytest.raises(ValueError, match="impl='fast'"):
        bin_gaussians(m, c, o, d, 16, 16, impl="fast")
    with pytest.raises(ValueError, match="tile=0"):
        bin_gaussians(m, c, o, d, 16, 16, tile=0)
    with pytest.raises(ValueError, match="alpha_min"):
        bin_gaussians(m, c, o, d, 16, 16, alpha_min=0.0)
    with pytest.raises(ValueError, match="depths is on meta"):
        bin_gaussians(m, c, o, d.to("meta"), 16, 16)
    view, K = camera(0, 16, 16)
    means, quats, scales = (t.float().to(DEV) for t in scene3d(8, view, 0))
    view, K = view.float().to(DEV), K.float().to(DEV)
    with pytest.raises(ValueError, match=r"viewmat must have shape \(4, 4\)"):
        project_gaussians(means, quats, scales, view[:3], K, 16, 16)
    with pytest.raises(ValueError, match="quats must have shape"):
        project_and_bin(means, quats[:, :3], scales, o[:1].expand(8), view, K, 16, 16)
    with pytest.raises(ValueError, match="opacities must have shape"):
        project_and_bin(means, quats, scales, o, view, K, 16, 16)
    with pytest.raises(TypeError, match="K.dtype"):
        project_gaussians(means, quats, scales, view, K.double(), 16, 16)
    with pytest.raises(ValueError, match="blur"):
        project_gaussians(means, quats, scales, view, K, 16, 16, blur=-0.3)
    with pytest.raises(ValueError, match="near_plane"):
        project_gaussians(means, quats, scales, view, K, 16, 16, near_plane=0.0)
    with pytest.raises(ValueError, match="width=0"):
        project_gaussians(means, quats, scales, view, K, 16, 0)
    with pytest.raises(ValueError, match="float32"):
        project_gaussians(means.double(), quats.double(), scales.double(), view.double(), K.double(), 16, 16,
                          impl="triton")
    if DEV == "cpu":
        monkeypatch.setenv("TRITON_INTERPRET", "0")
        with pytest.raises(ValueError, match="needs CUDA"):
            project_gaussians(means, quats, scales, view, K, 16, 16, impl="triton")


@pytest.mark.gpu
def test_gpu_lists_identical_at_scale():
    """The decode study's scene (20k Gaussians, 256²) on the GPU, where Triton's and PyTorch's float32 maths
    differ most: the fused lists equal ``bin_gaussians`` of the fused outputs, and the Triton binning of the
    PyTorch projection equals its PyTorch binning."""
    from companion.gaussian_video.scene3d import cameras, make_scene

    sc = make_scene(20000, 6, 1)
    views, K = cameras(2, 256)
    args = [t.cuda() for t in (sc["means"][0], sc["quats"][0], sc["scales"], sc["opacities"], views[0], K)]
    m2, con, depth, offsets, ids = project_and_bin(*args, 256, 256)
    want = bin_gaussians(m2, con, args[3], depth, 256, 256, impl="reference")
    assert torch.equal(offsets, want[0]) and torch.equal(ids, want[1])
    m2, con, depth, _ = project_gaussians(*args[:3], *args[4:], 256, 256, impl="reference")
    got = bin_gaussians(m2, con, args[3], depth, 256, 256, impl="triton")
    want = bin_gaussians(m2, con, args[3], depth, 256, 256, impl="reference")
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])

"""EWA projection of 3-D Gaussians to the image, and projection + tile binning in one call (paper 05, 4DGCPro).

A Gaussian with centre μ, rotation q (unit quaternion (w, x, y, z)) and scales s has Σ = R(q) S Sᵀ R(q)ᵀ
(3DGS); with the world→camera ``viewmat`` [W | w] and the pinhole K, its camera-space centre is t = W μ + w,
its depth t_z, its mean in pixels (f_x t_x/t_z + c_x, f_y t_y/t_z + c_y) and its image covariance the EWA
approximation Σ' = J W Σ Wᵀ Jᵀ + blur·I (3DGS Eq. 5), J the Jacobian of the perspective map at t. The
returned conic is Σ'⁻¹ = (a, b, c) with Σ'⁻¹ = [[a, b], [b, c]].

gsplat 1.5.3's conventions (``ProjectionEWA3DGSFused``, its ``rasterization`` defaults): blur = 0.3 px
(``eps2d``) without opacity compensation; J taken at t_x/t_z and t_y/t_z clamped to the field of view plus
30 % of its half-width (``persp_proj``); a Gaussian is culled when its depth is below ``near_plane`` (0.01) or
Σ' is not invertible (det ≤ 0). Culled rows hold zeros in means2d and conics, touch no tile, and are flagged
in ``visible``; depths hold t_z for every Gaussian. K's skew is ignored, as gsplat does.

* :func:`project_torch` — the PyTorch oracle (any float dtype, any device);
* :func:`project_gaussians` — the validated entry point (Triton on CUDA, :mod:`.triton_binning`);
* :func:`project_and_bin` — projection and the tile lists of :func:`.binning.bin_gaussians` in one call,
  for the rasteriser's end-to-end path: one fused projection + counting kernel, a cumsum, the emit kernel,
  one sort and the ranges kernel, with one host sync (the number of (tile, Gaussian) pairs).
"""

from __future__ import annotations

import math

import torch

from ..dispatch import check_impl, check_int, check_same, check_scale, check_tensor, resolve_impl
from .binning import bin_torch

NEAR_PLANE = 0.01  # gsplat's default: Gaussians nearer the camera than this are culled
BLUR = 0.3  # gsplat's eps2d, in pixels², added to Σ'
_OP = "project_gaussians"


def project_torch(means, quats, scales, viewmat, K, height: int, width: int, near_plane: float = NEAR_PLANE,
                  blur: float = BLUR):
    """``(means2d [N, 2], conics [N, 3], depths [N], visible [N] bool)`` (module docstring), in batched
    matrix form: the forward pass of ``companion.gaussian_video.splat.project_ewa`` (the differentiable
    projection the 3-D training uses) with the image's Jacobian clamp, plus the culling; a test keeps the
    two equal."""
    w, x, y, z = (quats / quats.norm(dim=-1, keepdim=True)).unbind(-1)
    R = torch.stack([
        1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
    ], -1).reshape(-1, 3, 3)
    M = R * scales[:, None, :]
    cov = M @ M.transpose(1, 2)
    W = viewmat[:3, :3]
    t = means @ W.T + viewmat[:3, 3]
    depths = t[:, 2]
    tz = depths.clamp(min=1e-6)  # only for the division: Gaussians below the near plane are culled
    fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
    jx = torch.minimum(torch.maximum(t[:, 0] / tz, -(cx / fx + 0.15 * width / fx)),
                       (width - cx) / fx + 0.15 * width / fx)
    jy = torch.minimum(torch.maximum(t[:, 1] / tz, -(cy / fy + 0.15 * height / fy)),
                       (height - cy) / fy + 0.15 * height / fy)
    zeros = torch.zeros_like(tz)
    J = torch.stack([torch.stack([fx / tz, zeros, -fx * jx / tz], -1),
                     torch.stack([zeros, fy / tz, -fy * jy / tz], -1)], -2)
    JW = J @ W
    cov2 = JW @ cov @ JW.transpose(1, 2) + blur * torch.eye(2, dtype=cov.dtype, device=cov.device)
    A, B, C = cov2[:, 0, 0], cov2[:, 0, 1], cov2[:, 1, 1]
    det = A * C - B * B
    visible = (depths >= near_plane) & (det > 0)
    conics = torch.stack([C / det, -B / det, A / det], -1)
    means2d = torch.stack([fx * t[:, 0] / tz + cx, fy * t[:, 1] / tz + cy], -1)
    return (torch.where(visible[:, None], means2d, 0.0), torch.where(visible[:, None], conics, 0.0), depths,
            visible)


def _check(means, quats, scales, opacities, viewmat, K, height, width, near_plane, blur, impl) -> str:
    """Validate the scene and camera; returns the implementation to run."""
    check_impl(impl, op=_OP)
    check_int("height", height, op=_OP, low=1)
    check_int("width", width, op=_OP, low=1)
    check_scale("near_plane", near_plane, op=_OP, allow_none=False)
    if isinstance(blur, bool) or not isinstance(blur, (int, float)) or not 0 <= blur < math.inf:
        raise ValueError(f"{_OP}: blur={blur!r} is not allowed: expected a finite number >= 0 (pixels²)")
    check_tensor("means", means, op=_OP, dim=2, layout="[N, 3]", floating=True)
    n = means.shape[0]
    if means.shape[1] != 3:
        raise ValueError(f"{_OP}: means must be [N, 3], got {tuple(means.shape)}")
    others = {"quats": (quats, (n, 4), f" for N={n} Gaussians"), "scales": (scales, (n, 3), f" for N={n} Gaussians"),
              "viewmat": (viewmat, (4, 4), " (world to camera)"), "K": (K, (3, 3), " (pinhole intrinsics)")}
    if opacities is not None:
        others["opacities"] = (opacities, (n,), f" for N={n} Gaussians")
    for name, (t, shape, what) in others.items():
        check_tensor(name, t, op=_OP)
        if tuple(t.shape) != shape:
            raise ValueError(f"{_OP}: {name} must have shape {shape}{what}, got {tuple(t.shape)}")
    check_same("means", means, {name: t for name, (t, _, _) in others.items()}, op=_OP)
    unsupported = None if means.dtype == torch.float32 else \
        f"the Triton projection takes float32 inputs, got {str(means.dtype).replace('torch.', '')}"
    return resolve_impl(impl, means.device, op=_OP, unsupported=unsupported)


def project_gaussians(means: torch.Tensor, quats: torch.Tensor, scales: torch.Tensor, viewmat: torch.Tensor,
                      K: torch.Tensor, height: int, width: int, *, near_plane: float = NEAR_PLANE, blur: float = BLUR,
                      impl: str = "auto"):
    """``(means2d [N, 2], conics [N, 3], depths [N], visible [N] bool)`` of N Gaussians (means ``[N, 3]``, quats
    ``[N, 4]`` as (w, x, y, z), scales ``[N, 3]``) seen by ``viewmat`` ``[4, 4]`` (world→camera) and ``K``
    ``[3, 3]`` at ``height`` × ``width`` (module docstring); all one dtype and device. ``impl`` as in
    ``companion_kernels.dispatch``: the Triton kernel takes float32 and agrees with :func:`project_torch`
    to float32 rounding, with the same Gaussians culled."""
    if _check(means, quats, scales, None, viewmat, K, height, width, near_plane, blur, impl) == "reference":
        return project_torch(means, quats, scales, viewmat, K, height, width, near_plane, blur)
    from .triton_binning import project_triton

    return project_triton(means.contiguous(), quats.contiguous(), scales.contiguous(), viewmat.contiguous(),
                          K.contiguous(), height, width, near_plane, blur)


def project_and_bin(means: torch.Tensor, quats: torch.Tensor, scales: torch.Tensor, opacities: torch.Tensor,
                    viewmat: torch.Tensor, K: torch.Tensor, height: int, width: int, *, tile: int = 16,
                    near_plane: float = NEAR_PLANE, blur: float = BLUR, alpha_min: float = 1.0 / 255.0,
                    impl: str = "auto"):
    """``(means2d, conics, depths, offsets, ids)``: :func:`project_gaussians`, then the tile lists of
    :func:`.binning.bin_gaussians` over all N rows (a culled one is in no list), so the N-row opacities and
    colours go to ``rasterize_binned`` as they are. The lists equal ``bin_gaussians`` of the returned means2d,
    conics, depths and ``opacities``."""
    check_int("tile", tile, op=_OP, low=1)
    check_scale("alpha_min", alpha_min, op=_OP, allow_none=False)
    impl = _check(means, quats, scales, opacities, viewmat, K, height, width, near_plane, blur, impl)
    if impl == "reference":
        means2d, conics, depths, _ = project_torch(means, quats, scales, viewmat, K, height, width, near_plane, blur)
        return (means2d, conics, depths) + bin_torch(means2d, conics, opacities, depths, height, width, tile, alpha_min)
    from .triton_binning import project_triton

    return project_triton(means.contiguous(), quats.contiguous(), scales.contiguous(), viewmat.contiguous(),
                          K.contiguous(), height, width, near_plane, blur, opacities.contiguous(), tile, alpha_min)

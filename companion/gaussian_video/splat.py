"""Differentiable Gaussian splatting in plain PyTorch (CPU or CUDA): the 2-D splatter of the CPU
reproduction and the EWA projection of 3-D Gaussians used on the GPU.

The paper renders 3DGS Gaussians (Sec. 3): a Gaussian i has centre μ_i, covariance Σ_i = R s sᵀ Rᵀ,
opacity α_i and colour c_i, and a pixel is composited front to back over the depth-sorted Gaussians

    c = Σ_i c_i α'_i Π_{j<i} (1 − α'_j),        α'_i(p) = α_i · exp(−½ (p − μ'_i)ᵀ Σ'_i⁻¹ (p − μ'_i)),

with μ'_i, Σ'_i the 2-D projection. The transmittance Π_{j<i}(1 − α'_j) is computed as
``exp(exclusive_cumsum(log1p(−α')))``. As in 3DGS, α' is clamped to ``ALPHA_MAX`` = 0.99 and contributions
below ``ALPHA_MIN`` = 1/255 are dropped. Deviation: 3DGS also stops a pixel once its transmittance falls
below 1e-4; this differentiable splatter never stops early, so its render is exact and smooth in the
parameters. The Triton tile rasteriser of the GPU study (``companion_kernels/gaussian_splat``) follows gsplat
instead (α' ≤ 0.999, the 1e-4 stop), so that it can be checked against gsplat pixel for pixel.

* :func:`conics` — the inverse 2-D covariance (a, b, c) of Σ' = [[A, B], [B, C]];
* :func:`splat` — the dense differentiable render of projected Gaussians, optionally with several
  visibility masks at once (the progressive renders c^l of Eq. (progressive) in one pass);
* :func:`splat_loop` — a per-pixel reference loop (tests only);
* :func:`project_ewa` — 3-D to 2-D: μ' = K(W μ + t), Σ' = J W Σ Wᵀ Jᵀ (the EWA approximation).

The 2-D CPU analogue parametrises a Gaussian by its centre (pixels), log-scales (a, b), angle θ,
opacity logit, RGB colour and a depth scalar that fixes the compositing order (see
:mod:`companion.gaussian_video.scene`).
"""

from __future__ import annotations

import torch

ALPHA_MAX = 0.99
ALPHA_MIN = 1.0 / 255.0


def covariance_2d(log_scale: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """Σ = R(θ) diag(a², b²) R(θ)ᵀ for 2-D Gaussians, ``[N, 2, 2]`` (Sec. 3, Σ = R s sᵀ Rᵀ in 2-D)."""
    s2 = torch.exp(2 * log_scale)
    c, s = torch.cos(theta), torch.sin(theta)
    a = c * c * s2[:, 0] + s * s * s2[:, 1]
    b = c * s * (s2[:, 0] - s2[:, 1])
    d = s * s * s2[:, 0] + c * c * s2[:, 1]
    return torch.stack([torch.stack([a, b], -1), torch.stack([b, d], -1)], -2)


def conics(cov: torch.Tensor) -> torch.Tensor:
    """The inverse of each 2×2 covariance as (a, b, c) with Σ⁻¹ = [[a, b], [b, c]], ``[N, 3]``."""
    A, B, C = cov[:, 0, 0], cov[:, 0, 1], cov[:, 1, 1]
    det = A * C - B * B
    return torch.stack([C / det, -B / det, A / det], -1)


def pixel_grid(height: int, width: int, device=None, dtype=torch.float32) -> torch.Tensor:
    """Pixel centres ``[H*W, 2]`` as (x, y) = (column + 0.5, row + 0.5), row-major."""
    ys, xs = torch.meshgrid(torch.arange(height, device=device, dtype=dtype) + 0.5,
                            torch.arange(width, device=device, dtype=dtype) + 0.5, indexing="ij")
    return torch.stack([xs.reshape(-1), ys.reshape(-1)], -1)


def alphas(means: torch.Tensor, conic: torch.Tensor, opacity: torch.Tensor, pix: torch.Tensor,
           alpha_min: float = ALPHA_MIN) -> torch.Tensor:
    """α'_i(p) ``[P, N]`` (pixels × Gaussians): opacity · exp(−½ dᵀ Σ⁻¹ d), clamped to ALPHA_MAX, zero
    below ``alpha_min``."""
    dx = pix[:, 0, None] - means[None, :, 0]
    dy = pix[:, 1, None] - means[None, :, 1]
    power = -0.5 * (conic[None, :, 0] * dx * dx + conic[None, :, 2] * dy * dy) - conic[None, :, 1] * dx * dy
    a = (opacity[None, :] * torch.exp(power.clamp(max=0.0))).clamp(max=ALPHA_MAX)
    return torch.where(a < alpha_min, torch.zeros_like(a), a)


def splat(means: torch.Tensor, conic: torch.Tensor, opacity: torch.Tensor, colors: torch.Tensor,
          depth: torch.Tensor, height: int, width: int, *, masks: torch.Tensor | None = None,
          background: float = 0.0, alpha_min: float = ALPHA_MIN) -> torch.Tensor:
    """Front-to-back compositing of depth-sorted Gaussians; returns ``[H, W, 3]``, or ``[M, H, W, 3]``
    when ``masks`` ``[M, N]`` (0/1) is given: render m uses only the Gaussians with ``masks[m] = 1``,
    exactly as if the others were absent (their α' is 0, so log1p(−α') = 0 leaves the transmittance).

    Transmittance T_i = exp(Σ_{j<i} log1p(−α'_j)); colour Σ_i c_i α'_i T_i + T_final · background.
    """
    order = torch.argsort(depth, stable=True)
    pix = pixel_grid(height, width, means.device, means.dtype)
    a = alphas(means[order], conic[order], opacity[order], pix, alpha_min)  # [P, N]
    col = colors[order]
    if masks is not None:
        a = a[None] * masks[:, order].to(a.dtype)[:, None, :]  # [M, P, N]
    log1m = torch.log1p(-a)
    log_t = torch.cumsum(log1m, dim=-1)
    w = a * torch.exp(log_t - log1m)  # α'_i · Π_{j<i} (1 − α'_j)
    img = w @ col
    img = img + background * torch.exp(log_t[..., -1])[..., None]
    return img.reshape(*img.shape[:-2], height, width, 3)


def splat_loop(means, conic, opacity, colors, depth, height, width, background=0.0, alpha_min=ALPHA_MIN):
    """Per-pixel reference: for each pixel, walk the Gaussians in depth order with a running T (tests)."""
    order = sorted(range(len(depth)), key=lambda i: (float(depth[i]), i))
    out = torch.zeros(height, width, 3, dtype=torch.float64)
    for r in range(height):
        for q in range(width):
            x, y, t, acc = q + 0.5, r + 0.5, 1.0, [0.0, 0.0, 0.0]
            for i in order:
                dx, dy = x - float(means[i, 0]), y - float(means[i, 1])
                a_, b_, c_ = (float(v) for v in conic[i])
                power = min(0.0, -0.5 * (a_ * dx * dx + c_ * dy * dy) - b_ * dx * dy)
                al = min(ALPHA_MAX, float(opacity[i]) * float(torch.exp(torch.tensor(power, dtype=torch.float64))))
                if al < alpha_min:
                    continue
                for k in range(3):
                    acc[k] += float(colors[i, k]) * al * t
                t *= 1.0 - al
            out[r, q] = torch.tensor([acc[k] + background * t for k in range(3)], dtype=torch.float64)
    return out


def quat_to_rotmat(quats: torch.Tensor) -> torch.Tensor:
    """Unit quaternions (w, x, y, z) ``[N, 4]`` to rotation matrices ``[N, 3, 3]``."""
    q = quats / quats.norm(dim=-1, keepdim=True)
    w, x, y, z = q.unbind(-1)
    return torch.stack([
        1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
    ], -1).reshape(-1, 3, 3)


def covariance_3d(quats: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """Σ = R s sᵀ Rᵀ ``[N, 3, 3]`` (3DGS)."""
    m = quat_to_rotmat(quats) * scales[:, None, :]
    return m @ m.transpose(1, 2)


def project_ewa(means: torch.Tensor, cov3d: torch.Tensor, viewmat: torch.Tensor, K: torch.Tensor,
                blur: float = 0.3, image_size: tuple[int, int] | None = None):
    """EWA splatting (Zwicker et al.; 3DGS Eq. 5): camera-space t = W μ + w, μ' = (f_x t_x/t_z + c_x,
    f_y t_y/t_z + c_y), Σ' = J W Σ Wᵀ Jᵀ + blur·I with J the Jacobian of the perspective map at t.

    ``viewmat`` ``[4, 4]`` world→camera, ``K`` ``[3, 3]``. Returns (means2d ``[N, 2]``, cov2d ``[N, 2, 2]``,
    depths ``[N]``). The 0.3-pixel blur is 3DGS's anti-aliasing dilation (gsplat's ``eps2d``, no opacity
    compensation). With ``image_size`` = (width, height), J is taken at t_x/t_z and t_y/t_z clamped to the
    image's field of view plus 30 % of its half-width, as 3DGS and gsplat (``persp_proj``) do, which keeps
    Gaussians far outside the view from smearing into it.
    """
    W, w = viewmat[:3, :3], viewmat[:3, 3]
    t = means @ W.T + w
    tz = t[:, 2].clamp(min=1e-6)
    fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
    m2 = torch.stack([fx * t[:, 0] / tz + cx, fy * t[:, 1] / tz + cy], -1)
    jx, jy = t[:, 0] / tz, t[:, 1] / tz
    if image_size is not None:
        width, height = image_size
        jx = torch.minimum(torch.maximum(jx, -(cx / fx + 0.15 * width / fx)), (width - cx) / fx + 0.15 * width / fx)
        jy = torch.minimum(torch.maximum(jy, -(cy / fy + 0.15 * height / fy)), (height - cy) / fy + 0.15 * height / fy)
    zeros = torch.zeros_like(tz)
    J = torch.stack([torch.stack([fx / tz, zeros, -fx * jx / tz], -1),
                     torch.stack([zeros, fy / tz, -fy * jy / tz], -1)], -2)  # [N, 2, 3]
    JW = J @ W
    cov2 = JW @ cov3d @ JW.transpose(1, 2)
    cov2 = cov2 + blur * torch.eye(2, dtype=cov2.dtype, device=cov2.device)
    return m2, cov2, t[:, 2]

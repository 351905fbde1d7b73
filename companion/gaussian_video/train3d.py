"""The 3-D 4DGCPro training pipeline (paper Sec. 3.1–3.4) on a synthetic multi-view dynamic scene:
keyframe fit with layer-wise RD supervision, Ψ layering, inter-frames (rigid motion, then residuals),
motion-aware grouping, an exact bitstream per layer and frame, decoding and evaluation per layer.

It mirrors :mod:`companion.gaussian_video.pipeline` (the 2-D CPU version) and reuses its pieces:
Ψ and the layer split (:mod:`.significance`), uniform-noise quantisation and the KDE / Gaussian rate
models (:mod:`.rate`), the quantiser and constriction's ANS coder under the KDE ``Categorical`` and
``QuantizedGaussian`` tables (:mod:`.bitstream`), the grouping rule (:func:`.pipeline.motion_groups`),
the EWA projection and the differentiable splatter (:mod:`.splat`), the scene and cameras (:mod:`.scene3d`).
The GPU study :mod:`companion.gaussian_video.scale_train3d` runs it in three stages (the bodies at the end).

**Renderer** (:func:`render`): one signature, three backends. ``"gsplat"`` (CUDA) calls
``gsplat.rasterization`` (forward and backward in CUDA, 16 × 16 tiles, classic mode, black background,
``eps2d`` = 0.3 px blur, near plane 0.01); ``"torch"`` (CPU or CUDA, tiny sizes only: it is dense in pixels ×
Gaussians) projects with :func:`~.splat.project_ewa` (the same 0.3 px blur) and composites with
:func:`~.splat.splat`. Where they differ: gsplat clamps α' to 0.999, the torch path to 0.99
(:data:`~.splat.ALPHA_MAX`); gsplat stops a pixel once its transmittance falls below 1e-4 (the torch path
never stops early); gsplat bounds each Gaussian by the screen radius where α' falls to 1/255
(at most 3.33σ) and bins it into tiles, the torch path evaluates every pixel and drops α' < 1/255 (the same
cut-off); gsplat clamps the camera-space position used in the EWA Jacobian to 1.3× the field of view and
culls outside the image, the torch path only culls depth ≤ 0.01. Both take quaternions (w, x, y, z),
linear scales, opacities in [0, 1], world-to-camera view matrices and pinhole K, and return
``[C, H, W, 3]``. They agree to within those cut-offs (:func:`backend_agreement`, run by the study and a
``gpu`` test on CUDA; not here: gsplat has no CPU path). ``"tiles"`` is this project's own tile renderer with
gsplat's conventions: ``companion_kernels.gaussian_splat.project_torch`` (the EWA projection with the Jacobian
clamp and gsplat's culling, the oracle of the Triton projection; autograd), 16 × 16 tile binning, and
``companion_kernels.gaussian_splat.rasterize_binned`` (the Triton kernels forward and backward on CUDA, the
per-tile PyTorch version elsewhere); it differs from gsplat only in the binning bound (every tile where
α' ≥ 1/255, against gsplat's 3.33σ cap) and in float rounding.

**Scene** (:func:`make_dataset`): the ground-truth Gaussians of :func:`.scene3d.make_scene` (articulated parts,
rigid rotation + drift + a non-rigid wobble) plus a global jump of ``jump`` scene units from frame
``jump_at`` on (added here, as in the 2-D scene, so that motion-aware grouping has something to detect);
ground-truth images from the same renderer for every camera of :func:`.scene3d.cameras` and frame; every
``test_every``-th camera is held out for evaluation.

**Model**: initialised per keyframe from an SfM-like point cloud — a random ``init_fraction`` of the
ground-truth centres of that frame plus Gaussian noise of std ``init_noise`` (a stand-in for COLMAP /
the paper's NeuS2 mesh; no ground-truth colour, scale, rotation or opacity is used): random colours,
opacity 0.1, identity rotations, isotropic scales = the mean distance to the 3 nearest neighbours.

**Keyframe** (:func:`fit_keyframe`): Adam on all attributes with the layer-wise loss

    L_key = Σ_l λ_l (L1(c^l, I) + λ_rate_key · R^{≤l}),     λ_l = 0.5/l (l < L), λ_L = 1,

over ``cams_per_step`` random training cameras per step; c^l the render of the Gaussians of layers ≤ l
(Ψ = α + λ_Ψ·(4/3)π a b c, recomputed every ``relayer_every`` steps); the rate term (KDE bits of layers
≤ l per training pixel, every channel under uniform noise at its bitstream step) is on for the last
``rd_steps`` steps only (the paper: 12,000 colour steps, then 1,500 RD steps). Then Gaussians with
α < ``prune_alpha`` are pruned, the final Ψ layering is computed and the Gaussians are sorted by layer.
The fit records its training curve (the top layer's PSNR on each step's training cameras, averaged per
``curve_every`` steps) and may end its colour steps early once that curve is flat (``stop_db``; training views
only: the held-out cameras never steer the fit).

**Inter-frames**: the rigid stage (:func:`fit_rigid`) learns a multi-resolution dense motion grid
(levels ``motion_levels``, e.g. 4³ + 8³ + 16³, 6 channels: Δμ and a rotation vector v) trilinearly
interpolated at μ_{t−1} and summed over levels: μ_t = μ_{t−1} + Δμ, R_t = ΔR·R_{t−1} with
ΔR = normalise(1, v/2) — trained on L1 of the full render under uniform noise at step ``q_motion``. The grid spans
the keyframe's padded box (:func:`grid_box`, ~3.5 units for the study's scene), so its finest cell sets how much
of the motion it can follow: the scene's parts interpenetrate and wobble on a ~0.2-unit wavelength, and a 16³
finest level (0.25-unit cells) leaves much of a frame's ~0.02-unit motion unexplained however long it trains.
Finer dense levels follow it better but every cell is coded (a 128³ level is 12.6 M symbols per frame). The
residual stage (:func:`fit_residual`) learns additive Δs (log-scale), Δα (logit), Δf (RGB) with

    L_inter = Σ_l λ_l (L1(c^l, I) + λ_rate_inter · R^{≤l}_Gauss) + λ_reg ‖Δ_t − Δ_{t−1}‖².

Both are closed loop: the grid and residuals are quantised (steps ``q_motion`` and ``q``) and applied to the
*decoded* previous frame on the CPU (:func:`apply_inter`), exactly as the decoder does. A frame starts a
new group (a fresh keyframe) when the rigid stage's mean‖Δμ_t‖ > τ_μ (scene units).

**Bitstream** (:func:`encode_key`, :func:`encode_inter`; the format of :mod:`.bitstream`): keyframe channels
quantised per channel (positions 16 bits, the rest 8; the KDE ``Categorical`` of each channel in the header),
chunk l = the raw low bytes of layer l's positions, then one ANS stream (constriction) of every channel's
symbols of layer l; inter-frames: every grid level's and residual channel's ``QuantizedGaussian`` in the
header, then the whole motion grid as one ANS stream, and chunk l = one ANS stream of layer l's residual
symbols. Bytes of layers ≤ l = header + chunks 1..l, so sizes add over layers exactly; decoding is bit-exact.

**Deviations from the paper, and why**: a dense multi-resolution grid emitting Δμ and ΔR directly instead
of a hash grid + two MLPs (no tiny-cuda-nn here; the grid is the 3-D form of the 2-D pipeline's grid and is
coded in the header, so its bytes count); D-SSIM (``lambda_dssim``) in the keyframe loss only (the inter stages
use L1); RGB colours (SH degree 0); 3DGS's adaptive density control (``densify``: clone / split on the mean
view-space gradient, prune α < ``prune_alpha`` and, after the first opacity reset, max scale > 0.1 × the scene
extent but not 3DGS's screen-size rule; opacity reset; :func:`densify_and_prune`) with its schedule scaled to the
run (:func:`schedule_3dgs`) and, where ``max_gaussians`` is set, a cap on the count that 3DGS does not have, then
one prune of α < ``prune_alpha`` rather than the paper's lowest 40 %; a fresh fit per keyframe from that frame's
point cloud (or ``init = "random"``: uniform in its bounding box); per step a random subset of training cameras;
ANS instead of H.264; the rate in bits per training pixel with the unstated λ_rate_key, q and q_motion chosen here;
training steps far below the paper's (12,000 + 1,500 key, 800 + 2,000 inter) for time.
"""

from __future__ import annotations

import math
import struct
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from companion.core import ParameterError, check_choice, check_float, check_int, time_ms
from companion.core.stages import StageContext
from companion.gaussian_video.bitstream import (
    KDE_LEVELS, EncodedFrame, _assemble, _by_attribute, _read_varint, _split, _varint, ans_decode, ans_encode,
    decode_key_channels, encode_key_channels, gaussian_column, key_step, read_gaussian_column, read_key_header)
from companion.gaussian_video.gsplat_peer import load_gsplat
from companion.gaussian_video.pipeline import motion_groups
from companion.gaussian_video.rate import gaussian_bits, kde_bits
from companion.gaussian_video.scene import psnr
from companion.gaussian_video.scene3d import cameras, make_scene
from companion.gaussian_video.significance import layer_weights, significance, split_layers
from companion.gaussian_video.splat import conics, covariance_3d, project_ewa, quat_to_rotmat, splat

#: model attribute → channels, in bitstream order (quats raw w, x, y, z; log-scales; opacity logit; RGB)
ATTRIBUTES = {"means": 3, "quats": 4, "log_scales": 3, "opacity": 1, "colors": 3}
KEY_BITS = {"means": 16}  # everything else 8 bits (paper Sec. 3.4)
RESIDUAL = ("log_scales", "opacity", "colors")
MOTION_CHANNELS = 6  # Δμ (3) and the rotation vector v (3)
BACKENDS = ("gsplat", "torch", "tiles")
INITS = ("points", "random")
NEAR = 0.01
SSIM_WINDOW, SSIM_SIGMA = 11, 1.5  # 3DGS's SSIM: an 11 × 11 Gaussian window of σ 1.5, zero padding
GS_STEPS = 30_000      # 3DGS's training length, the unit of its densification schedule
RESET_OPACITY = 0.01   # 3DGS's opacity reset value
BIG_SCALE = 0.1        # 3DGS prunes Gaussians with max scale > this × scene extent (after the first reset)
SPLIT_N, SPLIT_SHRINK = 2, 1.6  # 3DGS splits into 2 with scales / (0.8 · 2)


@dataclass(frozen=True)
class Config:
    """Every knob of the 3-D pipeline; the unstated ones (q, q_motion, λ_rate_key, the split) are marked."""

    init_fraction: float = 0.6   # model Gaussians = this fraction of the ground-truth centres (SfM-like)
    init_noise: float = 0.01     # std of the point-cloud noise (scene units)
    L: int = 6                   # layers (paper: 6)
    lambda_psi: float = 1e5      # Ψ = α + λ_Ψ·S (paper: 1e5)
    key_steps: int = 900         # keyframe steps in all (paper: 12,000 + 1,500)
    rd_steps: int = 150          # of which the last ones carry the rate term (paper: 1,500)
    relayer_every: int = 50      # Ψ layering recomputed every this many steps
    rigid_steps: int = 40        # (paper: 800)
    residual_steps: int = 40     # (paper: 2,000)
    cams_per_step: int = 3       # random training cameras per step
    lambda_rate_key: float = 0.01    # [unstated] per bit per training pixel
    lambda_rate_inter: float = 0.01  # per bit per training pixel (paper 1e-4 in its own units)
    lambda_reg: float = 1e-3         # paper 1e-3
    q: float = 1 / 64            # [unstated] residual step (log-scale, logit, RGB)
    q_motion: float = 5e-4       # [unstated] motion-grid step (scene units, rad)
    motion_levels: tuple = (4, 8, 16)  # dense grid resolutions (paper: a 32³-128³ hash grid + MLPs)
    tau_mu: float = 0.03         # new group when mean‖Δμ_t‖ > τ_μ (scene units; paper 0.001-0.01)
    prune_alpha: float = 0.005   # prune α below this after the keyframe fit
    lr_means: float = 1e-3
    lr_quats: float = 1e-3
    lr_scales: float = 5e-3
    lr_opacity: float = 5e-2
    lr_colors: float = 1e-2
    lr_motion: float = 2e-3
    lr_residual: float = 1e-2
    init: str = "points"         # "points": the SfM-like cloud; "random": init_count uniform in the centres' box
    init_count: int = 100_000    # Gaussians of the "random" start (3DGS's random start: 100k)
    lambda_dssim: float = 0.0    # keyframe L_color = (1 − λ)·L1 + λ·D-SSIM (3DGS and the paper: 0.2; 0: L1 only)
    densify: bool = False        # 3DGS adaptive density control in the keyframe fit (the defaults below are 3DGS's)
    densify_from: int = 500      # densify after this step ...
    densify_every: int = 100     # ... every this many steps ...
    densify_until: int = 15000   # ... before this step (also the last step that gathers gradient statistics)
    opacity_reset: int = 3000    # opacities clamped to RESET_OPACITY every this many steps (before densify_until)
    grad_threshold: float = 2e-4  # mean view-space (NDC) positional gradient above which a Gaussian densifies
    percent_dense: float = 0.01  # clone if max scale <= this × scene extent, else split
    max_gaussians: int | None = None  # densification adds no Gaussian beyond this count (None: no cap; not 3DGS)
    curve_every: int = 50        # keyframe training curve: top-layer training-view PSNR averaged over this many steps
    stop_db: float = 0.0         # colour steps stop early at a curve gain < this (dB) over stop_windows points (0: off)
    stop_windows: int = 4        # ... the curve point compared with the one this many points earlier
    seed: int = 0

    def __post_init__(self):
        check_float("init_fraction", self.init_fraction, lo=0.0, hi=1.0, lo_open=True)
        check_float("init_noise", self.init_noise, lo=0.0)
        check_int("L", self.L, lo=1)
        check_float("lambda_psi", self.lambda_psi, lo=0.0)
        for k in ("key_steps", "rd_steps", "rigid_steps", "residual_steps"):
            check_int(k, getattr(self, k), lo=0)
        if self.rd_steps > self.key_steps:
            raise ParameterError("rd_steps", self.rd_steps, f"an integer in [0, key_steps = {self.key_steps}]")
        check_int("relayer_every", self.relayer_every, lo=1)
        check_int("cams_per_step", self.cams_per_step, lo=1)
        for k in ("lambda_rate_key", "lambda_rate_inter", "lambda_reg", "prune_alpha"):
            check_float(k, getattr(self, k), lo=0.0)
        for k in ("q", "q_motion", "lr_means", "lr_quats", "lr_scales", "lr_opacity", "lr_colors", "lr_motion",
                  "lr_residual"):
            check_float(k, getattr(self, k), lo=0.0, lo_open=True)
        if (not isinstance(self.motion_levels, tuple) or not self.motion_levels
                or any(isinstance(r, bool) or not isinstance(r, int) or not 2 <= r <= 128 for r in self.motion_levels)):
            raise ParameterError("motion_levels", self.motion_levels, "a non-empty tuple of integers in [2, 128]")
        if not (isinstance(self.tau_mu, (int, float)) and not isinstance(self.tau_mu, bool) and self.tau_mu > 0):
            raise ParameterError("tau_mu", self.tau_mu, "a number > 0 (math.inf: one group)")
        check_choice("init", self.init, INITS)
        check_int("init_count", self.init_count, lo=1)
        check_float("lambda_dssim", self.lambda_dssim, lo=0.0, hi=1.0)
        if not isinstance(self.densify, bool):
            raise ParameterError("densify", self.densify, "True or False")
        for k in ("densify_from", "densify_until"):
            check_int(k, getattr(self, k), lo=0)
        for k in ("densify_every", "opacity_reset"):
            check_int(k, getattr(self, k), lo=1)
        check_float("grad_threshold", self.grad_threshold, lo=0.0, lo_open=True)
        check_float("percent_dense", self.percent_dense, lo=0.0, hi=1.0, lo_open=True)
        if self.max_gaussians is not None:
            check_int("max_gaussians", self.max_gaussians, lo=1)
        check_int("curve_every", self.curve_every, lo=1)
        check_float("stop_db", self.stop_db, lo=0.0)
        check_int("stop_windows", self.stop_windows, lo=1)

    def replace(self, **kw) -> "Config":
        return Config(**{**asdict(self), **kw})

    @classmethod
    def from_profile(cls, profile: dict) -> "Config":
        """The configuration of a study profile: its ``train`` knobs (``motion_levels`` a list in JSON) and ``seed``."""
        train = profile["train"]
        return cls(**{**train, "motion_levels": tuple(train["motion_levels"]), "seed": profile["seed"]})


# --- rendering -----------------------------------------------------------------------------------

def activated(p: dict) -> tuple:
    """(means, unit quats, scales, opacities [N], colours) from the stored parameters."""
    return (p["means"], F.normalize(p["quats"], dim=-1), torch.exp(p["log_scales"]),
            torch.sigmoid(p["opacity"][:, 0]), p["colors"])


def render(means, quats, scales, opacities, colors, viewmats, K, width: int, height: int,
           backend: str = "gsplat", info: dict | None = None) -> torch.Tensor:
    """``[C, H, W, 3]`` renders of N Gaussians for C cameras (``viewmats`` ``[C, 4, 4]``, ``K`` ``[3, 3]``);
    see the module docstring for the two backends and where they differ. With ``info`` (a dict) it also
    stores the projected 2-D means (pixels, gradients retained; read them after ``backward`` with
    :func:`screen_grads`) and ``"visible"`` ``[C, N]`` (gsplat: radius > 0; torch: depth > the near plane)."""
    check_choice("backend", backend, BACKENDS)
    if viewmats.dim() != 3 or viewmats.shape[1:] != (4, 4):
        raise ParameterError("viewmats", tuple(viewmats.shape), "a [C, 4, 4] tensor of world-to-camera matrices")
    if backend == "gsplat":
        gsplat = load_gsplat()
        Ks = K[None].expand(viewmats.shape[0], 3, 3).contiguous()
        img, _, meta = gsplat.rasterization(means, quats, scales, opacities, colors, viewmats, Ks, width, height,
                                            near_plane=NEAR, eps2d=0.3, packed=False)
        if info is not None and means.requires_grad:
            meta["means2d"].retain_grad()
            radii = meta["radii"]
            info.update(means2d=[meta["means2d"]], visible=(radii > 0).all(-1) if radii.dim() == 3 else radii > 0)
        return img
    if backend == "tiles":
        return _render_tiles(means, quats, scales, opacities, colors, viewmats, K, width, height, info)
    cov = covariance_3d(quats, scales)
    out, m2s, vis = [], [], []
    for view in viewmats:
        m2, cov2, depth = project_ewa(means, cov, view, K)
        keep = depth > NEAR
        if info is not None and m2.requires_grad:
            m2.retain_grad()
            m2s.append(m2)
            vis.append(keep)
        out.append(splat(m2[keep], conics(cov2[keep]), opacities[keep], colors[keep], depth[keep], height, width))
    if m2s:
        info.update(means2d=m2s, visible=torch.stack(vis))
    return torch.stack(out)


def _render_tiles(means, quats, scales, opacities, colors, viewmats, K, width: int, height: int, info) -> torch.Tensor:
    """The ``"tiles"`` backend of :func:`render` (module docstring): per camera, the EWA projection of all N
    Gaussians (``companion_kernels.gaussian_splat.project_torch``, differentiable; a culled one, depth < NEAR, has
    a zero conic and is binned into no tile, so the 2-D means keep their N rows), tile lists from the detached
    projection, and the differentiable tile rasteriser."""
    from companion_kernels.gaussian_splat import bin_gaussians, project_torch, rasterize_binned

    out, m2s, vis = [], [], []
    for view in viewmats:
        m2, con, depth, visible = project_torch(means, quats, scales, view, K, height, width, near_plane=NEAR)
        offsets, ids = bin_gaussians(m2.detach(), con.detach(), opacities.detach(), depth.detach(), height, width)
        if info is not None and m2.requires_grad:
            m2.retain_grad()
            m2s.append(m2)
            vis.append(visible)
        out.append(rasterize_binned(m2, con, opacities.contiguous(), colors.contiguous(), offsets, ids, height, width))
    if m2s:
        info.update(means2d=m2s, visible=torch.stack(vis))
    return torch.stack(out)


def screen_grads(info: dict, n: int) -> torch.Tensor:
    """``[C, N, 2]``: dL/d(2-D mean) in pixels per camera from a :func:`render` ``info`` after ``backward``
    (zeros where the loss did not reach a mean)."""
    return torch.cat([(m.grad if m.grad is not None else torch.zeros_like(m)).reshape(-1, n, 2)
                      for m in info["means2d"]])


def backend_agreement(points: torch.Tensor, viewmats, K, width: int, seed: int = 0) -> dict:
    """Mean and max |gsplat − torch| over the renders of Gaussians at ``points`` (random colours, scales,
    rotations, opacities) — the check of the two backends' conventions (needs CUDA and gsplat)."""
    g = torch.Generator().manual_seed(seed)
    n, dev = points.shape[0], points.device
    args = (points, F.normalize(torch.randn(n, 4, generator=g), dim=-1).to(dev),
            (0.01 * torch.exp(0.3 * torch.randn(n, 3, generator=g))).to(dev), torch.rand(n, generator=g).to(dev),
            torch.rand(n, 3, generator=g).to(dev), viewmats, K, width, width)
    with torch.no_grad():
        a, b = render(*args, backend="gsplat"), render(*args, backend="torch")
    return {"mean_abs_diff": float((a - b).abs().mean()), "max_abs_diff": float((a - b).abs().max()),
            "n_gaussians": n, "width": width, "n_cameras": int(viewmats.shape[0])}


def render_layers(p: dict, layer: torch.Tensor, L: int, viewmats, K, width, height, backend, upto=None,
                  infos: list | None = None) -> list:
    """c^l for l = 1..upto (default L): renders of the Gaussians of layers ≤ l (Eq. progressive). With
    ``infos`` (a list) each render's (selection, :func:`render` info) is appended to it."""
    out = []
    for l in range(1, (upto or L) + 1):
        sel = layer <= l
        info = None if infos is None else {}
        out.append(render(*(t[sel] for t in activated(p)), viewmats, K, width, height, backend, info))
        if infos is not None:
            infos.append((sel, info))
    return out


# --- the scene -----------------------------------------------------------------------------------

def make_dataset(n_gt: int, n_parts: int, n_frames: int, n_cameras: int, width: int, test_every: int,
                 jump_at: int | None, jump: float, backend: str, device, seed: int = 0,
                 layout: str = "overlapping") -> dict:
    """Ground-truth Gaussians per frame, cameras, and images ``[T, C, H, W, 3]`` (module docstring; ``layout`` of
    the parts: :func:`.scene3d.make_scene`)."""
    check_int("n_gt", n_gt, lo=8)
    check_int("n_parts", n_parts, lo=1)
    check_int("n_frames", n_frames, lo=1)
    check_int("n_cameras", n_cameras, lo=2)
    check_int("width", width, lo=8)
    check_int("test_every", test_every, lo=2, hi=n_cameras)
    if jump_at is not None:
        check_int("jump_at", jump_at, lo=1)
    check_float("jump", jump, lo=0.0)
    gt = make_scene(n_gt, n_parts, n_frames, seed=seed, layout=layout)
    means = gt["means"].clone()
    if jump_at is not None and jump_at < n_frames:
        means[jump_at:] += torch.tensor([jump, 0.0, 0.0])
    views, K = cameras(n_cameras, width)
    dev = torch.device(device)
    views, K = views.to(dev), K.to(dev)
    static = [gt[k].to(dev) for k in ("scales", "opacities", "colors")]
    with torch.no_grad():
        images = torch.stack([render(means[t].to(dev), gt["quats"][t].to(dev), *static, views, K, width, width,
                                     backend) for t in range(n_frames)])
    test = [c for c in range(n_cameras) if c % test_every == test_every - 1]
    train = [c for c in range(n_cameras) if c not in test]
    return {"means": means, "images": images, "viewmats": views, "K": K, "train": train, "test": test,
            "width": width, "gt_mean_motion": [0.0] + [float((means[t] - means[t - 1]).norm(dim=1).mean())
                                                        for t in range(1, n_frames)]}


def check_views(images: torch.Tensor, viewmats: torch.Tensor) -> None:
    """``images`` ``[C, H, W, 3]`` must have one image per camera of ``viewmats`` ``[C, 4, 4]``."""
    if images.dim() != 4 or images.shape[-1] != 3:
        raise ParameterError("images", tuple(images.shape), "a [C, H, W, 3] tensor (one frame)")
    if viewmats.dim() != 3 or viewmats.shape[0] != images.shape[0]:
        raise ParameterError("viewmats", tuple(viewmats.shape),
                             f"[C, 4, 4] with C = {images.shape[0]} (one camera per image)")


def check_sequence(images: torch.Tensor, viewmats: torch.Tensor) -> None:
    """``images`` ``[T, C, H, W, 3]`` against ``viewmats`` ``[C, 4, 4]``."""
    if images.dim() != 5:
        raise ParameterError("images", tuple(images.shape), "a [T, C, H, W, 3] tensor (frames × cameras)")
    check_views(images[0], viewmats)


# --- the model -----------------------------------------------------------------------------------

def init_model(points: torch.Tensor, cfg: Config, generator: torch.Generator) -> dict:
    """The start of a keyframe fit (module docstring) from the frame's ground-truth centres ``points`` ``[N, 3]``:
    ``cfg.init = "points"`` the SfM-like cloud (a noisy subset of them), ``"random"`` ``cfg.init_count`` centres
    uniform in their axis-aligned bounding box (only its six numbers are used)."""
    if cfg.init == "random":
        n = max(cfg.L, cfg.init_count)
        lo, hi = points.min(0).values, points.max(0).values
        means = lo + (hi - lo) * torch.rand(n, 3, generator=generator).to(points.device)
    else:
        n = min(points.shape[0], max(cfg.L, int(round(cfg.init_fraction * points.shape[0]))))
        idx = torch.randperm(points.shape[0], generator=generator)[:n].to(points.device)
        means = points[idx] + cfg.init_noise * torch.randn(n, 3, generator=generator).to(points.device)
    knn = torch.cat([torch.cdist(means[i:i + 4096], means).topk(min(4, n), largest=False).values[:, 1:].mean(1)
                     for i in range(0, n, 4096)]) if n > 1 else torch.ones(1, device=points.device)
    dev = points.device
    return {"means": means, "quats": torch.tensor([1.0, 0, 0, 0], device=dev).repeat(n, 1),
            "log_scales": torch.log(knn.clamp(min=1e-4))[:, None].repeat(1, 3),
            "opacity": torch.full((n, 1), math.log(0.1 / 0.9), device=dev),
            "colors": torch.rand(n, 3, generator=generator).to(dev)}


def layering(p: dict, L: int, lambda_psi: float) -> torch.Tensor:
    """Layer index per Gaussian from Ψ = α + λ_Ψ·(4/3)π a b c (:mod:`.significance`)."""
    _, _, scales, alpha, _ = activated({k: v.detach() for k, v in p.items()})
    return split_layers(significance(alpha, scales, lambda_psi), L)


def _l1(img, target):
    return (img - target).abs().mean()


def ssim(img: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean SSIM of ``[..., H, W, 3]`` images as 3DGS computes it: per channel, local statistics under an
    11 × 11 Gaussian window (σ 1.5, zero padding), SSIM = (2μ_xμ_y + C1)(2σ_xy + C2) /
    ((μ_x² + μ_y² + C1)(σ_x² + σ_y² + C2)), C1 = 0.01², C2 = 0.03², averaged over every pixel and channel."""
    if img.shape != target.shape or img.dim() < 3 or img.shape[-1] != 3:
        raise ParameterError("img", tuple(img.shape), f"[..., H, W, 3] images of the target's shape {tuple(target.shape)}")
    H, W = img.shape[-3:-1]
    x, y = (t.reshape(-1, H, W, 3).permute(0, 3, 1, 2) for t in (img, target))
    r = torch.arange(SSIM_WINDOW, device=img.device, dtype=img.dtype) - SSIM_WINDOW // 2
    g = torch.exp(-r ** 2 / (2 * SSIM_SIGMA ** 2))
    g = g / g.sum()
    w = (g[:, None] * g[None, :]).expand(3, 1, SSIM_WINDOW, SSIM_WINDOW)
    blur = lambda z: F.conv2d(z, w, padding=SSIM_WINDOW // 2, groups=3)  # noqa: E731
    mx, my = blur(x), blur(y)
    sxx, syy, sxy = blur(x * x) - mx * mx, blur(y * y) - my * my, blur(x * y) - mx * my
    c1, c2 = 0.01 ** 2, 0.03 ** 2
    return (((2 * mx * my + c1) * (2 * sxy + c2)) / ((mx * mx + my * my + c1) * (sxx + syy + c2))).mean()


def photometric(img, target, lambda_dssim: float = 0.0):
    """L_color = (1 − λ)·L1 + λ·(1 − SSIM) (3DGS Eq. 7; the paper's keyframe pre-training loss, λ = 0.2)."""
    if lambda_dssim == 0:
        return _l1(img, target)
    return (1 - lambda_dssim) * _l1(img, target) + lambda_dssim * (1 - ssim(img, target))


def _layer_loss(imgs, target, rates, L, lambda_dssim=0.0):
    lam = layer_weights(L)
    return sum(lam[i] * (photometric(imgs[i], target, lambda_dssim) + rates[i]) for i in range(L))


def _prefix_rates(bits: torch.Tensor, layer: torch.Tensor, L: int, pixels: int) -> list:
    return [bits[layer <= l].sum() / pixels for l in range(1, L + 1)]


def _key_bits(p: dict, noisy: dict) -> torch.Tensor:
    """KDE bits per Gaussian of every channel under uniform noise at its bitstream step (on the CPU)."""
    bits = 0
    for k in ATTRIBUTES:
        for c in range(ATTRIBUTES[k]):
            step = key_step(p[k][:, c].detach().cpu(), KEY_BITS.get(k, 8))
            bits = bits + kde_bits(noisy[k][:, c].cpu(), step).to(noisy[k].device)
    return bits


# --- adaptive density control (3DGS Sec. 5.2) ------------------------------------------------------

def schedule_3dgs(steps: int) -> dict:
    """3DGS's densification schedule (from 500 to 15,000 every 100 steps, opacity reset every 3,000, of 30,000
    steps) scaled to a fit of ``steps`` steps (each count at least 1)."""
    check_int("steps", steps, lo=1)
    r = steps / GS_STEPS
    return {"densify_from": max(1, round(500 * r)), "densify_every": max(1, round(100 * r)),
            "densify_until": max(1, round(15_000 * r)), "opacity_reset": max(1, round(3_000 * r))}


def scene_extent(viewmats: torch.Tensor) -> float:
    """3DGS's scene extent: 1.1 × the largest distance of a camera centre (−Rᵀt) from their mean."""
    centres = -(viewmats[:, :3, :3].transpose(1, 2) @ viewmats[:, :3, 3:])[..., 0]
    return 1.1 * float((centres - centres.mean(0)).norm(dim=1).max())


def edit_rows(p: dict, opt: torch.optim.Adam, keep: torch.Tensor, new: dict | None = None) -> None:
    """Keep the Gaussians ``keep`` (bool ``[N]``) of ``p`` and append the rows ``new`` (per attribute), in place:
    every parameter becomes a fresh leaf in its Adam group (one group per attribute, in ATTRIBUTES order) and
    its Adam moments follow it (kept rows keep theirs, new rows start at zero), as 3DGS does."""
    for group, k in zip(opt.param_groups, ATTRIBUTES):
        old = group["params"][0]
        extra = new[k] if new is not None else old.detach()[:0]
        param = torch.cat([old.detach()[keep], extra]).requires_grad_(True)
        state = opt.state.pop(old, None)
        if state:
            for m in ("exp_avg", "exp_avg_sq"):
                state[m] = torch.cat([state[m][keep], torch.zeros_like(extra)])
            opt.state[param] = state
        group["params"][0] = p[k] = param


def _keep_at_least(keep: torch.Tensor, opacity: torch.Tensor, n: int) -> torch.Tensor:
    """``keep``, or the ``n`` most opaque Gaussians where it keeps fewer (the L layers need n = L)."""
    if int(keep.sum()) >= n:
        return keep
    return torch.zeros_like(keep).scatter(0, opacity.topk(min(n, len(opacity))).indices, True)


def densify_and_prune(p: dict, opt: torch.optim.Adam, grad: torch.Tensor, extent: float, cfg: Config,
                      generator: torch.Generator, prune_big: bool) -> dict:
    """3DGS's densify-and-prune step, in place on ``p`` and ``opt`` (:func:`edit_rows`). ``grad`` ``[N]``: the
    mean view-space positional gradient norm. Gaussians with ``grad`` > ``cfg.grad_threshold`` are cloned
    (a copy) if their max scale ≤ ``percent_dense`` × ``extent``, else split: replaced by SPLIT_N = 2 Gaussians
    at positions drawn from N(μ, R diag(s²) Rᵀ) with scales s / 1.6, the other attributes copied. Then the
    Gaussians (new ones included) with opacity < ``prune_alpha`` are pruned, and with ``prune_big`` those of
    max scale > BIG_SCALE × ``extent``. Each clone or split adds one Gaussian; with ``cfg.max_gaussians`` only the
    largest gradients above the threshold densify, as many as the cap leaves room for. Returns the counts cloned,
    split and pruned."""
    with torch.no_grad():
        d = {k: v.detach() for k, v in p.items()}
        smax = torch.exp(d["log_scales"]).max(1).values
        hot = grad > cfg.grad_threshold
        room = len(grad) if cfg.max_gaussians is None else max(0, cfg.max_gaussians - len(grad))
        if int(hot.sum()) > room:
            hot = torch.zeros_like(hot).scatter(0, torch.where(hot, grad, -1.0).topk(room).indices, True)
        clone, split = hot & (smax <= cfg.percent_dense * extent), hot & (smax > cfg.percent_dense * extent)
        s = torch.exp(d["log_scales"][split]).repeat(SPLIT_N, 1)
        R = quat_to_rotmat(d["quats"][split]).repeat(SPLIT_N, 1, 1)
        offset = (R @ (s * torch.randn(s.shape, generator=generator).to(s.device))[..., None])[..., 0]
        children = {k: v[split].repeat(SPLIT_N, 1) for k, v in d.items()}
        children["means"] = children["means"] + offset
        children["log_scales"] = torch.log(s / SPLIT_SHRINK)
        edit_rows(p, opt, ~split, {k: torch.cat([d[k][clone], children[k]]) for k in ATTRIBUTES})
        alpha = torch.sigmoid(p["opacity"].detach()[:, 0])
        drop = alpha < cfg.prune_alpha
        if prune_big:
            drop |= torch.exp(p["log_scales"].detach()).max(1).values > BIG_SCALE * extent
        keep = _keep_at_least(~drop, alpha, cfg.L)
        edit_rows(p, opt, keep)
    return {"cloned": int(clone.sum()), "split": int(split.sum()), "pruned": int((~keep).sum())}


def reset_opacity(p: dict, opt: torch.optim.Adam) -> None:
    """3DGS's opacity reset, in place: α ← min(α, RESET_OPACITY), the opacity's Adam moments zeroed."""
    k = list(ATTRIBUTES).index("opacity")
    old = opt.param_groups[k]["params"][0]
    param = torch.minimum(old.detach(), torch.full_like(old, math.log(RESET_OPACITY / (1 - RESET_OPACITY))))
    param.requires_grad_(True)
    state = opt.state.pop(old, None)
    if state:
        for m in ("exp_avg", "exp_avg_sq"):
            state[m] = torch.zeros_like(state[m])
        opt.state[param] = state
    opt.param_groups[k]["params"][0] = p["opacity"] = param


def view_grad_norms(infos: list, n: int, width: int, height: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(Σ over cameras of ‖dL/dμ'‖ in NDC units, number of cameras that saw it), ``[N]`` each, from the
    :func:`render_layers` infos of one step: a Gaussian's 2-D mean gradient is summed over the progressive
    renders that contain it, scaled from pixels to NDC (× W/2, H/2) and by the number of cameras C (the loss
    is a mean over them), as gsplat's default strategy does; visibility is that of the full render."""
    g = None
    for sel, info in infos:
        part = screen_grads(info, int(sel.sum()))
        if g is None:
            g = torch.zeros(part.shape[0], n, 2, device=part.device)
        g[:, sel] += part
    C = g.shape[0]
    g = g * torch.tensor([width / 2 * C, height / 2 * C], device=g.device)
    vis = torch.zeros(C, n, dtype=torch.bool, device=g.device)
    vis[:, infos[-1][0]] = infos[-1][1]["visible"]
    return (g.norm(dim=-1) * vis).sum(0), vis.sum(0)


def plateaued(curve: list, windows: int, db: float) -> bool:
    """Whether a training curve (PSNR in dB per point) gained less than ``db`` over its last ``windows`` points."""
    return len(curve) > windows and curve[-1] - curve[-1 - windows] < db


def fit_keyframe(points: torch.Tensor, images: torch.Tensor, viewmats: torch.Tensor, K: torch.Tensor, cfg: Config,
                 backend: str, log=None) -> tuple[dict, torch.Tensor, list, dict]:
    """Fit, prune, layer and sort one keyframe (module docstring) on the training views ``images``
    ``[C, H, W, 3]``. Returns (parameters in layer order, layer index per Gaussian, loss per step, training curve).

    The training curve: per ``curve_every`` steps (and the last, shorter window) the mean PSNR of the top-layer
    render c^L of each step's training cameras against their images (under the rate noise in the RD steps), at
    ``"step"`` (the steps done). It sees training views only. With ``stop_db`` > 0 the colour steps end early
    once the curve has gained less than ``stop_db`` dB over ``stop_windows`` points (:func:`plateaued`; checked
    from ``densify_until`` on when densifying, whose opacity resets dip it); the ``rd_steps`` RD steps follow,
    and ``"stopped_at"`` is that step (None: the full ``key_steps``)."""
    check_views(images, viewmats)
    C, H, W, _ = images.shape
    gen = torch.Generator().manual_seed(cfg.seed)
    p = {k: v.requires_grad_(True) for k, v in init_model(points, cfg, gen).items()}
    lrs = {"means": cfg.lr_means, "quats": cfg.lr_quats, "log_scales": cfg.lr_scales, "opacity": cfg.lr_opacity,
           "colors": cfg.lr_colors}
    opt = torch.optim.Adam([{"params": [p[k]], "lr": lrs[k]} for k in ATTRIBUTES], eps=1e-15)
    extent = scene_extent(viewmats)
    losses, layer, stats, window = [], None, None, []
    curve = {"every": cfg.curve_every, "step": [], "train_psnr": [], "stopped_at": None}
    rd_from, end, it = cfg.key_steps - cfg.rd_steps, cfg.key_steps, 0
    while it < end:
        step = it + 1  # 3DGS counts steps from 1
        gather = cfg.densify and step < cfg.densify_until
        if stats is None and gather:
            stats = torch.zeros(2, len(p["means"]), device=images.device)
        if it % cfg.relayer_every == 0 or layer is None or len(layer) != len(p["means"]):
            layer = layering(p, cfg.L, cfg.lambda_psi)
        cams = torch.randperm(C, generator=gen)[:cfg.cams_per_step].to(images.device)
        rd = it >= rd_from and cfg.lambda_rate_key > 0
        x = p
        rates = [0.0] * cfg.L
        if rd:
            x = {k: v + (torch.rand(v.shape, generator=gen).to(v.device) - 0.5)
                 * torch.tensor([key_step(v[:, c].detach().cpu(), KEY_BITS.get(k, 8)) for c in range(v.shape[1])],
                                device=v.device) for k, v in p.items()}
            bits = _key_bits(p, x)
            rates = [cfg.lambda_rate_key * r for r in _prefix_rates(bits, layer, cfg.L, C * H * W)]
        infos = [] if gather else None
        imgs = render_layers(x, layer, cfg.L, viewmats[cams], K, W, H, backend, infos=infos)
        loss = _layer_loss(imgs, images[cams], rates, cfg.L, cfg.lambda_dssim)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        window.append(psnr(imgs[-1].detach(), images[cams]))
        it = step
        if it % cfg.curve_every == 0 or it == end:
            curve["step"].append(it)
            curve["train_psnr"].append(float(np.mean(window)))
            window = []
            if (cfg.stop_db > 0 and it < rd_from and (not cfg.densify or it >= cfg.densify_until)
                    and plateaued(curve["train_psnr"], cfg.stop_windows, cfg.stop_db)):
                rd_from, end, curve["stopped_at"] = it, it + cfg.rd_steps, it
                if log:
                    log(f"keyframe: training curve flat at step {it}, {cfg.rd_steps} RD steps follow")
        if not gather:
            continue
        norms, seen = view_grad_norms(infos, len(p["means"]), W, H)
        stats += torch.stack([norms, seen.float()])
        if step > cfg.densify_from and step % cfg.densify_every == 0:
            n = densify_and_prune(p, opt, stats[0] / stats[1].clamp(min=1), extent, cfg, gen,
                                  prune_big=step > cfg.opacity_reset)
            stats = None
            if log:
                log(f"step {step}: {n['cloned']} cloned, {n['split']} split, {n['pruned']} pruned → {len(p['means'])}")
        if step % cfg.opacity_reset == 0:
            reset_opacity(p, opt)
    p = {k: v.detach() for k, v in p.items()}
    alpha = torch.sigmoid(p["opacity"][:, 0])
    keep = _keep_at_least(alpha >= cfg.prune_alpha, alpha, cfg.L)
    p = {k: v[keep] for k, v in p.items()}
    layer = layering(p, cfg.L, cfg.lambda_psi)
    order = torch.argsort(layer, stable=True)
    if log:
        log(f"keyframe: {len(order)} Gaussians after pruning, loss {losses[0] if losses else float('nan'):.4f} → "
            f"{losses[-1] if losses else float('nan'):.4f}")
    return {k: v[order].contiguous() for k, v in p.items()}, layer[order], losses, curve


# --- inter-frames --------------------------------------------------------------------------------

def quat_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Hamilton product a ⊗ b of (w, x, y, z) quaternions ``[N, 4]``."""
    w1, x1, y1, z1 = a.unbind(-1)
    w2, x2, y2, z2 = b.unbind(-1)
    return torch.stack([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                        w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2], -1)


def grid_box(enc: EncodedFrame) -> tuple[list, torch.Tensor]:
    """(Gaussians per layer, the motion grid's box ``[2, 3]``) from a keyframe's header: the box is the
    quantiser's min/max of the centres, padded by 25 % per side, so a client holding any layers has it."""
    header, _, counts, _, pos = read_key_header(enc)
    lohi = torch.tensor([struct.unpack_from("<ff", header, pos + (8 + KDE_LEVELS) * c) for c in range(3)]).T  # [2, 3]
    pad = 0.25 * (lohi[1] - lohi[0]).clamp(min=1e-3)
    return counts, torch.stack([lohi[0] - pad, lohi[1] + pad])


def grid_motion(means: torch.Tensor, grids: list, box: torch.Tensor) -> torch.Tensor:
    """``[N, 6]`` (Δμ, v): each level ``[6, R, R, R]`` trilinearly interpolated at μ_{t−1}, summed over levels
    (the dense stand-in for h_t = interp(μ_{t−1}, H_t) and the two MLPs)."""
    pts = ((means - box[0]) / (box[1] - box[0]) * 2 - 1)[None, None, None]  # [1, 1, 1, N, 3] as (x, y, z)
    return sum(F.grid_sample(g[None], pts, mode="bilinear", padding_mode="border", align_corners=True)[0, :, 0, 0].T
               for g in grids)


def move(p: dict, m: torch.Tensor) -> dict:
    """μ_t = μ_{t−1} + Δμ, R_t = ΔR ⊗ R_{t−1}, ΔR = normalise(1, v/2)."""
    dq = F.normalize(torch.cat([torch.ones_like(m[:, :1]), m[:, 3:] / 2], 1), dim=-1)
    return {**p, "means": p["means"] + m[:, :3], "quats": quat_mul(dq, F.normalize(p["quats"], dim=-1))}


def fit_rigid(prev: dict, box: torch.Tensor, images, viewmats, K, cfg: Config, backend: str, generator):
    """The rigid stage against the decoded previous frame ``prev`` (on the training device). Returns
    (integer grid symbols per level, mean‖Δμ_t‖ of the quantised motion, loss per step)."""
    C, H, W, _ = images.shape
    dev = images.device
    grids = [torch.zeros(MOTION_CHANNELS, r, r, r, device=dev, requires_grad=True) for r in cfg.motion_levels]
    opt = torch.optim.Adam(grids, lr=cfg.lr_motion)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1 - i / max(1, cfg.rigid_steps))
    losses = []
    for _ in range(cfg.rigid_steps):
        cams = torch.randperm(C, generator=generator)[:cfg.cams_per_step].to(dev)
        noisy = [g + (torch.rand(g.shape, generator=generator).to(dev) - 0.5) * cfg.q_motion for g in grids]
        moved = move(prev, grid_motion(prev["means"], noisy, box))
        loss = _l1(render(*activated(moved), viewmats[cams], K, W, H, backend), images[cams])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    sym = [torch.round(g.detach() / cfg.q_motion).long().cpu() for g in grids]
    m = grid_motion(prev["means"].cpu(), [s.float() * cfg.q_motion for s in sym], box.cpu())
    return sym, float(m[:, :3].double().norm(dim=1).mean()), losses


def fit_residual(base: dict, layer: torch.Tensor, images, viewmats, K, cfg: Config, backend: str, generator,
                 prev_residual: dict | None = None):
    """The residual stage on the moved frame ``base``: additive Δs, Δα, Δf (module docstring). Returns
    (integer residual symbols on the CPU, loss per step)."""
    C, H, W, _ = images.shape
    dev = images.device
    r = {k: torch.zeros_like(base[k], requires_grad=True) for k in RESIDUAL}
    prev_residual = prev_residual or {k: torch.zeros_like(base[k]) for k in RESIDUAL}
    opt = torch.optim.Adam(list(r.values()), lr=cfg.lr_residual)
    losses = []
    for _ in range(cfg.residual_steps):
        cams = torch.randperm(C, generator=generator)[:cfg.cams_per_step].to(dev)
        noisy = {k: r[k] + (torch.rand(r[k].shape, generator=generator).to(dev) - 0.5) * cfg.q for k in RESIDUAL}
        g = {**base, **{k: base[k] + noisy[k] for k in RESIDUAL}}
        rates = [0.0] * cfg.L
        if cfg.lambda_rate_inter > 0:
            bits = sum(gaussian_bits(noisy[k][:, c], cfg.q) for k in RESIDUAL for c in range(ATTRIBUTES[k]))
            rates = [cfg.lambda_rate_inter * x for x in _prefix_rates(bits, layer, cfg.L, C * H * W)]
        reg = cfg.lambda_reg * sum(((r[k] - prev_residual[k]) ** 2).sum(1).mean() for k in RESIDUAL)
        loss = _layer_loss(render_layers(g, layer, cfg.L, viewmats[cams], K, W, H, backend), images[cams], rates,
                           cfg.L) + reg
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return {k: torch.round(r[k].detach() / cfg.q).long().cpu() for k in RESIDUAL}, losses


def apply_inter(prev: dict, box: torch.Tensor, grid_sym: list, res_sym: dict, q: float, q_motion: float) -> dict:
    """What the decoder computes (on the CPU, float32): move by the dequantised grid, add q·residuals."""
    out = move(prev, grid_motion(prev["means"], [s.float() * q_motion for s in grid_sym], box))
    for k in RESIDUAL:
        out[k] = prev[k] + res_sym[k].float() * q
    return out


# --- the bitstream -------------------------------------------------------------------------------

def _bounds(layer: torch.Tensor, L: int) -> list[int]:
    counts = torch.bincount(layer.cpu(), minlength=L + 1)[1:].tolist()
    return [0] + np.cumsum(counts).tolist()


def encode_key(p: dict, layer: torch.Tensor, L: int) -> tuple[EncodedFrame, dict]:
    """Code a keyframe in layer order (``layer`` sorted); returns the frame and the dequantised parameters
    (CPU float32), which the decoder reproduces bit for bit."""
    check_int("L", L, lo=1)
    b = _bounds(layer, L)
    if b[-1] != len(layer) or bool((layer[1:] < layer[:-1]).any()):
        raise ParameterError("layer", "unsorted", "layer indices 1..L in non-decreasing order")
    header = bytearray(b"K") + _varint(L) + b"".join(_varint(b[l + 1] - b[l]) for l in range(L))
    names = [(name, c) for name, ch in ATTRIBUTES.items() for c in range(ch)]
    tables, chunks, dec = encode_key_channels(
        [(p[n][:, c].detach().float().cpu(), KEY_BITS.get(n, 8)) for n, c in names],
        [slice(b[l], b[l + 1]) for l in range(L)])
    return _assemble(bytes(header) + tables, chunks, "key"), _by_attribute(names, dec)


def decode_key(frame: EncodedFrame | bytes, upto: int | None = None) -> tuple[dict, torch.Tensor]:
    """(parameters of layers ≤ upto, their layer index) from a keyframe's bytes."""
    header, chunks, counts, upto, pos = read_key_header(frame, upto)
    names = [(name, c) for name, ch in ATTRIBUTES.items() for c in range(ch)]
    cols = decode_key_channels(header, pos, chunks[:upto], counts[:upto], [KEY_BITS.get(n, 8) for n, _ in names])
    layer = torch.repeat_interleave(torch.arange(1, upto + 1), torch.tensor(counts[:upto]))
    return _by_attribute(names, cols), layer


def encode_inter(grid_sym: list, res_sym: dict, layer: torch.Tensor, L: int, q: float) -> EncodedFrame:
    """Code one inter-frame: the motion-grid symbols (every level, in the header: every layer needs the
    motion) and the residual symbols ``[N, ch]`` of Δs, Δα, Δf, one chunk per layer."""
    q = check_float("q", q, lo=0.0, lo_open=True)
    b = _bounds(layer, L)
    header = bytearray(b"P") + _varint(len(grid_sym))
    grid_parts, res = [], []
    for g in grid_sym:
        header += _varint(g.shape[1])
        for c in range(MOTION_CHANNELS):
            col = g[c].reshape(-1).long().cpu()
            head, model, lo = gaussian_column(col, q)
            header += head
            grid_parts.append(((col - lo).numpy(), model))
    for name in RESIDUAL:
        for c in range(ATTRIBUTES[name]):
            col = res_sym[name][:, c].long().cpu()
            head, model, lo = gaussian_column(col, q)
            header += head
            res.append(((col - lo).numpy(), model))
    stream = ans_encode(grid_parts)
    header += _varint(len(stream)) + stream
    chunks = [ans_encode([(col[b[l]:b[l + 1]], model) for col, model in res]) for l in range(L)]
    return _assemble(bytes(header), chunks, "inter")


def decode_inter(frame: EncodedFrame | bytes, counts: list, upto: int | None = None):
    """(grid symbols per level, residual symbols of the Gaussians of layers ≤ upto) from an inter-frame;
    ``counts`` are the Gaussians per layer of the group's keyframe."""
    data = frame.data if isinstance(frame, EncodedFrame) else frame
    header, chunks = _split(data)
    if header[:1] != b"P":
        raise ValueError("not an inter-frame")
    L = len(counts)
    upto = L if upto is None else upto
    if not 1 <= upto <= L:
        raise ParameterError("l", upto, f"a layer index in 1..{L}")
    n_levels, pos = _read_varint(header, 1)
    grid_meta, res_meta = [], []
    for _ in range(n_levels):
        R, pos = _read_varint(header, pos)
        for _ in range(MOTION_CHANNELS):
            model, lo, pos = read_gaussian_column(header, pos)
            grid_meta.append((R, model, lo))
    for name in RESIDUAL:
        for _ in range(ATTRIBUTES[name]):
            model, lo, pos = read_gaussian_column(header, pos)
            res_meta.append((model, lo))
    n_bytes, pos = _read_varint(header, pos)
    vals = ans_decode(header[pos:pos + n_bytes], [(m, R ** 3) for R, m, _ in grid_meta])
    grids = []
    for i in range(n_levels):
        R = grid_meta[i * MOTION_CHANNELS][0]
        grids.append(torch.stack([torch.from_numpy(vals[i * MOTION_CHANNELS + c]).reshape(R, R, R)
                                  + grid_meta[i * MOTION_CHANNELS + c][2] for c in range(MOTION_CHANNELS)]))
    layers = [ans_decode(chunks[l], [(m, counts[l]) for m, _ in res_meta]) for l in range(upto)]
    cols = [torch.from_numpy(np.concatenate([v[k] for v in layers])) + lo for k, (_, lo) in enumerate(res_meta)]
    res, k = {}, 0
    for name in RESIDUAL:
        res[name] = torch.stack(cols[k:k + ATTRIBUTES[name]], 1)
        k += ATTRIBUTES[name]
    return grids, res


# --- the sequence --------------------------------------------------------------------------------

@dataclass
class Sequence3D:
    """The coded sequence: per frame its record (kind, bytes per layer ≤ l, PSNR per layer, timings),
    the encoded frames, the encoder's decoded state (CPU) and the group starts."""

    cfg: Config
    frames: list = field(default_factory=list)
    encoded: list = field(default_factory=list)
    states: list = field(default_factory=list)  # (params on the CPU, layer) per frame
    groups: list = field(default_factory=list)
    losses: dict = field(default_factory=dict)  # "key@t" / "rigid@t" / "residual@t" → loss per step


def evaluate(p: dict, layer: torch.Tensor, L: int, images: torch.Tensor, viewmats, K, backend: str) -> list[float]:
    """PSNR (dB) of c^l against ``images`` ``[C, H, W, 3]`` for l = 1..L (all pixels of all given cameras)."""
    check_views(images, viewmats)
    dev = images.device
    pd = {k: v.to(dev) for k, v in p.items()}
    with torch.no_grad():
        imgs = render_layers(pd, layer.to(dev), L, viewmats, K, images.shape[2], images.shape[1], backend)
    return [psnr(img, images) for img in imgs]


def encode_sequence3d(data: dict, cfg: Config, backend: str, *, deadline_s: float | None = None,
                      log=None) -> Sequence3D:
    """Train and code the sequence of ``data`` (:func:`make_dataset`) frame by frame (module docstring).
    Stops adding frames once ``deadline_s`` seconds have passed (the frames done stay valid)."""
    images, views, K = data["images"], data["viewmats"], data["K"]
    check_sequence(images, views)
    tr, te = data["train"], data["test"]
    dev = images.device
    t0 = time.perf_counter()
    res = Sequence3D(cfg)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    state = layer = box = prev_res = None
    for t in range(images.shape[0]):
        if deadline_s is not None and t > 0 and time.perf_counter() - t0 > deadline_s:
            if log:
                log(f"deadline: stopped after {t} frames")
            break
        t_frame = time.perf_counter()
        target = images[t, tr]
        kind, mean_dmu = "key", None  # frame 0 has no motion estimate
        if t > 0:
            prev = {k: v.to(dev) for k, v in state.items()}
            grid_sym, mean_dmu, lr_ = fit_rigid(prev, box.to(dev), target, views[tr], K, cfg, backend, gen)
            res.losses[f"rigid@{t}"] = lr_
            if t not in motion_groups([0.0] * t + [mean_dmu], cfg.tau_mu):
                kind = "inter"
        if kind == "key":
            p, layer, lk, curve = fit_keyframe(data["means"][t].to(dev), target, views[tr], K, cfg, backend, log)
            res.losses[f"key@{t}"] = lk
            t_code = time.perf_counter()
            enc, state = encode_key(p, layer.cpu(), cfg.L)
            layer, (_, box), prev_res = layer.cpu(), grid_box(enc), None
            res.groups.append(t)
        else:
            base = apply_inter(state, box, grid_sym, {k: torch.zeros_like(state[k], dtype=torch.long) for k in RESIDUAL},
                               cfg.q, cfg.q_motion)
            res_sym, lres = fit_residual({k: v.to(dev) for k, v in base.items()}, layer.to(dev), target, views[tr], K,
                                         cfg, backend, gen, None if prev_res is None else
                                         {k: v.to(dev) for k, v in prev_res.items()})
            res.losses[f"residual@{t}"] = lres
            t_code = time.perf_counter()
            enc = encode_inter(grid_sym, res_sym, layer, cfg.L, cfg.q)
            state = apply_inter(state, box, grid_sym, res_sym, cfg.q, cfg.q_motion)
            prev_res = {k: res_sym[k].float() * cfg.q for k in RESIDUAL}
        t_eval = time.perf_counter()
        rec = {"t": t, "kind": kind, "mean_dmu": mean_dmu, "n_gaussians": len(layer),
               "train_s": round(t_code - t_frame, 3), "code_s": round(t_eval - t_code, 3),
               "bytes": [enc.bytes_upto(l) for l in range(1, cfg.L + 1)],
               "psnr_test": evaluate(state, layer, cfg.L, images[t, te], views[te], K, backend)}
        if kind == "key":
            rec["curve"] = curve
        rec["eval_s"] = round(time.perf_counter() - t_eval, 3)
        res.frames.append(rec)
        res.encoded.append(enc)
        res.states.append((state, layer))
        if log:
            dmu = "-" if mean_dmu is None else f"{mean_dmu:.4f}"
            log(f"frame {t}: {kind}, mean|Δμ| {dmu}, {rec['bytes'][-1] / 1e6:.3f} MB, "
                f"PSNR {rec['psnr_test'][0]:.2f}..{rec['psnr_test'][-1]:.2f} dB, train {rec['train_s']:.1f} s")
    return res


def decode_sequence3d(encoded: list, cfg: Config, upto: int | None = None) -> list:
    """The client: (parameters of layers ≤ upto, their layer index) per frame from the bytes alone."""
    out, state, layer, counts, box = [], None, None, None, None
    for enc in encoded:
        if enc.kind == "key":
            counts, box = grid_box(enc)
            state, layer = decode_key(enc, upto)
        else:
            if state is None:
                raise ValueError("the stream must start with a keyframe")
            grid_sym, res_sym = decode_inter(enc, counts, upto)
            state = apply_inter(state, box, grid_sym, res_sym, cfg.q, cfg.q_motion)
        out.append((state, layer))
    return out


# --- the study's stages (companion.gaussian_video.scale_train3d.STAGES) ---------------------------------

def results(seq: Sequence3D, data: dict) -> dict:
    """The ``sequence`` stage's result: per layer l the held-out PSNR (mean over frames), MB per frame (keyframes,
    inter-frames, mean), Gaussians; the groups; training minutes per frame; the per-frame records (a keyframe's
    with its training curve, :func:`fit_keyframe`, beside its held-out ``psnr_test``)."""
    L, fr = seq.cfg.L, seq.frames
    keys = [f for f in fr if f["kind"] == "key"]
    inters = [f for f in fr if f["kind"] == "inter"]
    mean = lambda xs: float(np.mean(xs)) if xs else None  # noqa: E731
    per_layer = []
    for l in range(L):
        counts = [int((layer <= l + 1).sum()) for _, layer in seq.states]
        per_layer.append({"l": l + 1, "psnr_test": mean([f["psnr_test"][l] for f in fr]),
                          "mb_per_frame": mean([f["bytes"][l] / 1e6 for f in fr]),
                          "mb_keyframe": mean([f["bytes"][l] / 1e6 for f in keys]),
                          "mb_inter": mean([f["bytes"][l] / 1e6 for f in inters]),
                          "n_gaussians": mean(counts)})
    return {"per_layer": per_layer, "groups": seq.groups, "n_frames_done": len(fr),
            "n_frames_planned": int(data["images"].shape[0]), "train_cameras": data["train"], "test_cameras": data["test"],
            "train_min_per_frame": mean([f["train_s"] / 60 for f in fr]),
            "train_min_per_keyframe": mean([f["train_s"] / 60 for f in keys]),
            "train_min_per_inter": mean([f["train_s"] / 60 for f in inters]),
            "code_s_per_frame": mean([f["code_s"] for f in fr]),
            "psnr_monotone_in_l": all(a["psnr_test"] <= b["psnr_test"] + 1e-9 for a, b in zip(per_layer, per_layer[1:])),
            "gt_mean_motion": data["gt_mean_motion"][:len(fr)], "frames": fr,
            "size_accounting": "bytes of layers <= l = frame header (counts, per-channel min/max and KDE tables; "
                               "for inter-frames the Gaussian tables and the whole motion grid) + chunks 1..l; "
                               "no network weights (the motion model is the coded grid)",
            "eval_protocol": "PSNR over all pixels of the held-out cameras (every test_every-th), renders of the "
                             "decoded Gaussians of layers <= l clamped to [0, 1] vs the ground-truth renders, "
                             "mean over frames"}


def _dataset(ctx: StageContext) -> dict:
    """The profile's scene and its ground-truth renders (:func:`make_dataset`), built once per call."""
    if "dataset" not in ctx.shared:
        P = ctx.profile
        ctx.shared["dataset"] = make_dataset(**P["scene"], backend=P["backend"], device=ctx.device, seed=ctx.seed)
    return ctx.shared["dataset"]


def backend_fit_check(cfg: Config, backends, device, *, n_gt: int = 4000, width: int = 128, n_cameras: int = 16,
                      steps: int = 300, seed: int = 0) -> dict:
    """One keyframe fitted on the same small scene (``n_gt`` Gaussians at ``width``², every 4th of ``n_cameras``
    held out) with each renderer of ``backends``: ``cfg`` with L = 1, ``steps`` steps, no rate term and no density
    control. Per backend the last training-curve PSNR and the held-out PSNR: equal numbers say the renderer (its
    gradients included) does not set the study's held-out PSNR."""
    small = cfg.replace(L=1, key_steps=steps, rd_steps=0, densify=False, stop_db=0.0, curve_every=min(50, steps))
    out = {"scene": {"n_gt": n_gt, "width": width, "n_cameras": n_cameras, "steps": steps}}
    for backend in backends:
        data = make_dataset(n_gt, 2, 1, n_cameras, width, 4, None, 0.0, backend, device, seed=seed)
        tr, te = data["train"], data["test"]
        p, layer, _, curve = fit_keyframe(data["means"][0].to(device), data["images"][0, tr], data["viewmats"][tr],
                                          data["K"], small, backend)
        psnr_test = evaluate(p, layer, 1, data["images"][0, te], data["viewmats"][te], data["K"], backend)[0]
        out[backend] = {"train_psnr": round(curve["train_psnr"][-1], 2), "psnr_test": round(psnr_test, 2)}
    return out


def renderer_stage(ctx: StageContext) -> dict:
    """The renderer before any training: gsplat's load time (it compiles its CUDA extension on first import
    unless ``COMPANION_GSPLAT_SO`` points at a prebuilt one), the ground-truth renders of every camera and frame,
    forward + backward of the L progressive renders c^1..c^L of one training camera (median ms) and, with
    gsplat, its agreement with the torch backend on 4000 Gaussians at 128² (:func:`backend_agreement`) and the
    same small keyframe fitted with each (:func:`backend_fit_check`)."""
    P, cfg, dev = ctx.profile, Config.from_profile(ctx.profile), torch.device(ctx.device)
    backend = check_choice("backend", P["backend"], BACKENDS)
    out = {}
    if backend == "gsplat":
        t0 = time.perf_counter()
        load_gsplat()
        out["gsplat_load_s"] = round(time.perf_counter() - t0, 1)
    t0 = time.perf_counter()
    data = _dataset(ctx)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    out["gt_render_s"] = round(time.perf_counter() - t0, 2)
    p = {k: v.requires_grad_(True)
         for k, v in init_model(data["means"][0].to(dev), cfg, torch.Generator().manual_seed(ctx.seed)).items()}
    layer = layering(p, cfg.L, cfg.lambda_psi)
    cam, W = data["train"][:1], data["width"]

    def step(renderer):
        imgs = render_layers(p, layer, cfg.L, data["viewmats"][cam], data["K"], W, W, renderer)
        sum(img.sum() for img in imgs).backward()

    out["render_layers_fwd_bwd_ms"] = round(time_ms(lambda: step(backend), dev, warmup=3, rep=10), 3)
    out["render_note"] = (f"forward + backward of the {cfg.L} progressive renders c^1..c^L of one camera, "
                          f"{len(layer)} Gaussians at {W}², {backend}")
    if backend == "gsplat":  # the same training step with this project's tile renderer (Triton forward and backward)
        out["tiles_render_layers_fwd_bwd_ms"] = round(time_ms(lambda: step("tiles"), dev, warmup=3, rep=10), 3)
    out["agreement"] = None
    if backend == "gsplat":  # the two backends' conventions on a 128² pair of cameras (the torch path is dense)
        views, K = cameras(2, 128)
        out["agreement"] = backend_agreement(data["means"][0][:4000].to(dev), views.to(dev), K.to(dev), 128)
        out["fit_check"] = backend_fit_check(cfg, ("gsplat", "torch"), dev, seed=ctx.seed)
    ctx.log(f"[renderer] {out}")
    return out


def sequence_stage(ctx: StageContext) -> dict:
    """Train and code the sequence frame by frame (:func:`encode_sequence3d`), adding no frame once
    ``ctx.left()`` has run out (the frames done stay valid: ``n_frames_done`` of ``n_frames_planned``), then
    its results per layer (:func:`results`)."""
    P = ctx.profile
    data = _dataset(ctx)
    seq = encode_sequence3d(data, Config.from_profile(P), P["backend"], deadline_s=ctx.left(),
                            log=ctx.log)
    ctx.shared["sequence"] = seq
    return results(seq, data)


def decode_stage(ctx: StageContext) -> dict:
    """The client: every coded frame decoded from its bytes alone (:func:`decode_sequence3d`), the seconds it
    took and whether every frame equals the encoder's state bit for bit."""
    seq = ctx.shared.get("sequence")
    if seq is None:
        raise RuntimeError("decode needs the coded frames of this call's sequence stage (they are not saved): "
                           "run the stages sequence,decode together")
    t0 = time.perf_counter()
    decoded = decode_sequence3d(seq.encoded, seq.cfg)
    return {"decode_all_s": round(time.perf_counter() - t0, 2),
            "decode_check": all(torch.equal(a[k], b[k]) and torch.equal(la, lb)
                                for (a, la), (b, lb) in zip(decoded, seq.states) for k in a)}

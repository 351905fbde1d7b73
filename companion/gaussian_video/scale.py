"""The one-GPU (H100 or H200) study of paper 05 (4DGCPro): progressive decode + render, and the reader of its committed
results. No plotly import.

A synthetic, untrained scene of ``n_gaussians`` 3-D Gaussians in articulated parts over ``n_frames`` frames,
Ψ-layered into L layers (Eq. significance) and coded two ways; the stage bodies and the conventions are in
:mod:`companion.gaussian_video.decode`. Stage by stage:

1. ``zlib``: the zlib bitstream (keyframe + int8 deltas per layer): encode seconds, bytes per layer;
2. ``h264``: the paper's codec, one x264 attribute video per layer (PyAV), at qp ``h264_qp`` and lossless;
3. ``gsplat``: gsplat (the strongest peer, first) against our Triton rasteriser at l = L, on the same projected
   inputs and tile lists and end to end (off with ``gsplat`` false: gsplat has no CPU path);
4. ``rasterizer``: the per-tile PyTorch splatter against the Triton path on the same inputs;
5. ``raster_sweep``: the Triton rasteriser's launch variants (schedule, list entries a step, warps), forward and
   backward;
6. ``per_layer``: decode + dequantise + render per frame for l = 1..L (zlib, and H.264 when its stage is done),
   PSNR against the unquantised render. Issue targets: High (l = L) under 33 ms per frame, Low (l = 1) at most
   0.5× High.

Not reproduced: the paper decodes H.264 in hardware (here FFmpeg on the host CPU) and streams a trained scene
(the trained 3-D pipeline is the other study, :mod:`companion.gaussian_video.scale_train3d`). Run it with
``python -m companion.bench gaussian_video`` (``--smoke``: a tiny CPU run, the kernel in the Triton interpreter);
``COMPANION_GSPLAT_SO`` points at a prebuilt gsplat extension (:mod:`companion.gaussian_video.gsplat_peer`).
"""

from __future__ import annotations

from companion.core.stages import Stage, study_functions
from companion.gaussian_video import decode as E

RESULTS_NAME = "gaussian_video_decode"
DEADLINE_S = 200
GPU_PROFILE = {
    "n_gaussians": 100_000,
    "n_parts": 12,
    "n_frames": 8,
    "n_cameras": 16,
    "width": 512,
    "L": 6,
    "lambda_psi": 1e5,
    "q_inter": 1e-3,  # int8 deltas reach ±0.127 per frame: the parts move up to 0.114 per frame
    "h264_qp": 20,
    "gsplat": True,   # time gsplat (CUDA only)
    "seed": 0,
}
SMOKE_PROFILE = {**GPU_PROFILE, "n_gaussians": 120, "n_parts": 3, "n_frames": 2, "n_cameras": 2, "width": 32, "L": 2,
                 "gsplat": False}
STAGES = (
    Stage("zlib", E.zlib_stage, needs_s=5),
    Stage("h264", E.h264_stage, needs_s=15),
    Stage("gsplat", E.gsplat_stage, needs_s=90),  # gsplat compiles its extension on first import (about 80 s)
    Stage("rasterizer", E.rasterizer_stage, needs_s=10),
    Stage("raster_sweep", E.raster_sweep_stage, needs_s=15),
    Stage("per_layer", E.per_layer_stage, needs_s=30),
)
TRITON_MIN_SPEED = 0.5        # this project's target: the Triton rasteriser at least half gsplat's throughput
GSPLAT_MAX_MEAN_ABS_DIFF = 1e-3  # this project's target: the Triton rasteriser matches gsplat within this mean |Δ| per pixel


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)


def rasterizer_summary(gpu: dict) -> dict | None:
    """The rasteriser comparison of a run (its ``gsplat`` and ``rasterizer`` stages), for the notebook's Checks:
    these test this project's Triton kernel against gsplat (or the PyTorch splatter), not a claim of the paper.

    Returns None when the run timed no rasteriser, else ``{"peer", "speed", "mean_abs_diff", "text"}``:
    ``speed`` = peer ms / Triton ms on the same inputs (gsplat's projected inputs and tile lists when gsplat
    ran), ``mean_abs_diff`` = the mean |Δ| per pixel against gsplat on those inputs (None without gsplat)."""
    gs, ras = gpu.get("gsplat") or {}, gpu.get("rasterizer") or {}
    if gs.get("triton_on_gsplat_lists_ms"):
        speed = gs["gsplat_rasterize_to_pixels_ms"] / gs["triton_on_gsplat_lists_ms"]
        e2e = gs["gsplat_rasterization_ms"] / gs["triton_end_to_end_ms"]
        parts = [f"on gsplat's projected inputs and tile lists: Triton {gs['triton_on_gsplat_lists_ms']:.2f} ms vs "
                 f"{gs['gsplat']} rasterize_to_pixels {gs['gsplat_rasterize_to_pixels_ms']:.2f} ms: {speed:.2f}× "
                 f"(target ≥ {TRITON_MIN_SPEED}×: {'met' if speed >= TRITON_MIN_SPEED else 'not met'})",
                 f"end to end {gs['triton_end_to_end_ms']:.2f} vs {gs['gsplat_rasterization_ms']:.2f} ms: {e2e:.2f}×"]
        if gs.get("triton_project_and_bin_ms"):
            parts[-1] += (f" (projection + binning {gs['triton_project_and_bin_ms']:.2f} ms, rasteriser on those "
                          f"lists {gs['triton_on_own_lists_ms']:.2f} ms)")
        parts.append(f"mean |Δ| {gs['kernel_mean_abs_diff']:.2g} (max {gs['kernel_max_abs_diff']:.2g}; target < "
                     f"{GSPLAT_MAX_MEAN_ABS_DIFF:g}), end to end mean {gs['end_to_end_mean_abs_diff']:.2g}")
        if gs.get("triton_fwd_bwd_on_gsplat_lists_ms"):
            kern, gs_kern = gs["triton_fwd_bwd_on_gsplat_lists_ms"], gs["gsplat_rasterize_to_pixels_fwd_bwd_ms"]
            full, gs_full = gs["tiles_end_to_end_fwd_bwd_ms"], gs["gsplat_rasterization_fwd_bwd_ms"]
            grads = max(v for k, v in gs.items() if k.startswith("grad_") and k.endswith("_rel_max_abs_diff"))
            parts.append(f"forward + backward: kernels {kern:.2f} vs {gs_kern:.2f} ms ({gs_kern / kern:.2f}×), end to "
                         f"end {full:.2f} vs {gs_full:.2f} ms ({gs_full / full:.2f}×), gradients within {grads:.2g} of "
                         f"gsplat's (relative max |Δ|)")
        text = "; ".join(parts)
        return {"peer": gs["gsplat"], "speed": speed, "mean_abs_diff": gs["kernel_mean_abs_diff"], "text": text}
    if not (ras.get("triton_ms") and ras.get("peer_ms")):
        return None
    speed = ras["peer_ms"] / ras["triton_ms"]
    why = gs.get("gsplat") or (gpu.get("stages") or {}).get("gsplat", {}).get("error", "not run")
    text = (f"Triton {ras['triton_ms']:.2f} ms vs {ras['peer']} {ras['peer_ms']:.2f} ms: {speed:.2f}×; gsplat: {why}; "
            f"max |Δ| vs the PyTorch splatter {ras['max_abs_diff']:.2g}")
    return {"peer": ras["peer"], "speed": speed, "mean_abs_diff": None, "text": text}

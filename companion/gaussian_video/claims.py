"""Claim rows for paper 05 (4DGCPro), built from this run's results.

Inputs: ``key`` — :class:`~companion.gaussian_video.experiments.KeyframeStudy` (the keyframe ablations),
``groups`` — :func:`~companion.gaussian_video.experiments.grouping_study` (sequence RD curves), ``gpu`` — the
recorded GPU benchmark (:func:`companion.gaussian_video.scale.recorded`) or None. Every comparison is one
seed, so each verdict needs a stated margin.
"""

from __future__ import annotations

import math

import numpy as np

from companion.core import Claim
from companion.gaussian_video.experiments import bd_against

PSNR_MONOTONE_TOL_DB = 0.05   # PSNR counts as non-decreasing in l when no step drops by more than this
MAX_LOW_BYTE_RATIO = 0.6      # the base layer's bytes at most this fraction of all layers' (paper: 0.33/1.31)
MAX_LOW_GAP_DB = 3.0          # and its PSNR within this many dB of all layers' (paper: 1.78 dB)
PSI_MARGIN_DB = 0.1           # full Ψ must beat an ablated Ψ's base-layer PSNR by this (one seed)
HIER_MARGIN_DB = 0.5          # layer-wise supervision must lift the base layer by this (one seed)
RATE_TERM_MIN_BDRATE = 1.0    # dropping the rate term must cost at least this BD-rate (%)
GROUP1_MIN_BDRATE = 10.0      # groups of one frame must cost at least this BD-rate (%) against motion-aware
REALTIME_MS = 33.0            # paper: decode + render of High under one 30 fps frame
LOW_HIGH_RATIO = 0.5          # paper: Low decode at most half of High's (12 vs 29 ms)
TRITON_MIN_SPEED = 0.5        # the Triton rasteriser at least half the strongest peer's throughput


def _db(v: float) -> str:
    return f"{v:+.2f} dB" if math.isfinite(v) else "BD-PSNR n/a: no common rate range"


def _scale(key) -> str:
    c = key.cfg
    return (f"2-D keyframe, {c.n_kept} Gaussians ({c.n_gaussians} before pruning), L = {c.L}, "
            f"{c.key_steps}+{c.rd_steps} steps, one seed, CPU")


def progressive_row(groups) -> Claim:
    res = groups["motion-aware"]
    c = res.rd_curve()
    L = len(c["psnr"])
    mono = bool(np.all(np.diff(c["psnr"]) >= -PSNR_MONOTONE_TOL_DB))
    ratio = c["bytes"][0] / c["bytes"][-1]
    gap = c["psnr"][-1] - c["psnr"][0]
    mid = (L + 1) // 2
    if mono and ratio <= MAX_LOW_BYTE_RATIO and gap <= MAX_LOW_GAP_DB:
        verdict = "reproduced"
    elif mono:
        verdict = "partly reproduced"
    else:
        verdict = "not reproduced"
    return Claim(
        claim="one bitstream, any layer prefix decodes: quality and bytes rise together with l",
        paper="own set High/Mid/Low 29.47/28.68/27.69 dB at 1.31/0.66/0.33 MB per frame",
        measured=(f"l = {L}/{mid}/1: {c['psnr'][-1]:.2f}/{c['psnr'][mid - 1]:.2f}/{c['psnr'][0]:.2f} dB at "
                  f"{c['bytes'][-1]:.0f}/{c['bytes'][mid - 1]:.0f}/{c['bytes'][0]:.0f} B per frame; PSNR "
                  f"{'non-decreasing' if mono else 'not monotone'} in l (tol {PSNR_MONOTONE_TOL_DB} dB); base layer "
                  f"{ratio:.2f}× the bytes (needs ≤ {MAX_LOW_BYTE_RATIO}) and {gap:.2f} dB below (needs ≤ {MAX_LOW_GAP_DB})"),
        scale=f"{len(res.frames)} frames, {res.cfg.n_kept} Gaussians, L = {L}, one seed, CPU",
        verdict=verdict,
    )


def psi_row(key) -> Claim:
    low = {k: v["psnr"][0] for k, v in key.curves.items()}
    full, op, vol = low["full"], low["opacity-only Ψ"], low["volume-only Ψ"]
    wins = (full - op >= PSI_MARGIN_DB) + (full - vol >= PSI_MARGIN_DB)
    verdict = {2: "reproduced", 1: "partly reproduced", 0: "not reproduced"}[int(wins)]
    return Claim(
        claim="Ψ = α + λ_Ψ·S orders Gaussians better than opacity or volume alone (base-layer PSNR)",
        paper="Low layer 27.69 dB (Ψ) vs 26.71 (opacity only) vs 25.83 (volume only)",
        measured=(f"base layer {full:.2f} dB (Ψ, λ_Ψ = {key.cfg.lambda_psi:g}) vs {op:.2f} (opacity only) vs "
                  f"{vol:.2f} (volume only); margin {PSI_MARGIN_DB} dB"),
        scale=_scale(key), verdict=verdict)


def hierarchy_row(key) -> Claim:
    full, flat = key.curves["full"]["psnr"], key.curves["no hierarchy"]["psnr"]
    L = len(full)
    mid = (L + 1) // 2
    gain = full[0] - flat[0]
    verdict = "reproduced" if gain >= HIER_MARGIN_DB else ("partly reproduced" if gain > 0 else "not reproduced")
    return Claim(
        claim="layer-wise supervision Σ_l λ_l L^l keeps the lower layers usable",
        paper="Mid/Low 28.68/27.69 dB with it, 26.49/24.98 without",
        measured=(f"l = {mid}/1: {full[mid - 1]:.2f}/{full[0]:.2f} dB with it, {flat[mid - 1]:.2f}/{flat[0]:.2f} "
                  f"without (all layers {full[-1]:.2f} vs {flat[-1]:.2f}); needs +{HIER_MARGIN_DB} dB at l = 1"),
        scale=_scale(key), verdict=verdict)


def rate_row(key) -> Claim:
    bd = bd_against(key.curves, "full")["no rate term"]
    r, p = bd["bd_rate"], bd["bd_psnr"]
    full_b, free_b = key.curves["full"]["bytes"][-1], key.curves["no rate term"]["bytes"][-1]
    if not (math.isfinite(r) and math.isfinite(p)):
        verdict = "not reproduced"
    elif r >= RATE_TERM_MIN_BDRATE and p <= 0:
        verdict = "reproduced"
    elif r > 0 or p < 0:  # one of the two metrics (or a BD-rate below the bar) sides with the paper
        verdict = "partly reproduced"
    else:
        verdict = "not reproduced"
    return Claim(
        claim="the entropy (rate) term in training saves bytes",
        paper="no rate term: +32.73 % BD-rate",
        measured=(f"no rate term: {r:+.2f} % BD-rate and {p:+.3f} dB BD-PSNR against the full keyframe (needs ≥ "
                  f"+{RATE_TERM_MIN_BDRATE} % and ≤ 0 dB; the two disagree when the PSNR curve is flat across "
                  f"layers); all layers {free_b} B without vs {full_b} B with it"),
        scale=_scale(key) + " (keyframe only)", verdict=verdict)


def grouping_row(groups) -> Claim:
    curves = {k: v.rd_curve() for k, v in groups.items()}
    bd = bd_against(curves, "motion-aware")
    r1, r5 = bd["fixed group of 1"]["bd_rate"], bd["fixed group of 5"]["bd_rate"]
    verdict = ("reproduced" if r1 >= GROUP1_MIN_BDRATE else "partly reproduced" if r1 > 0 else "not reproduced")
    res = groups["motion-aware"]
    return Claim(
        claim="motion-aware grouping (new keyframe when mean‖Δμ_t‖ > τ_μ) beats fixed groups",
        paper="group size 1: +48.37 % BD-rate",
        measured=(f"against motion-aware (groups at frames {res.groups}): size 1 {r1:+.1f} % BD-rate "
                  f"({_db(bd['fixed group of 1']['bd_psnr'])}), size 5 {r5:+.1f} % "
                  f"({_db(bd['fixed group of 5']['bd_psnr'])}); size 1 needs ≥ +{GROUP1_MIN_BDRATE} %"),
        scale=f"{len(res.frames)} frames, τ_μ = {res.cfg.tau_mu:g} px, {res.cfg.n_kept} Gaussians, one seed, CPU",
        verdict=verdict if math.isfinite(r1) else "not reproduced")


def gpu_rows(gpu) -> list[Claim]:
    if gpu is None:
        return [Claim(claim="real-time decode + render, Low at most half of High; Triton rasteriser vs peers",
                      paper="decode 29/19/12 ms + render 3.1/2.5/2.2 ms (High/Mid/Low)",
                      measured="no GPU run recorded yet (benchmarks/gaussian_video_decode.py)", scale="—",
                      verdict="not run here")]
    rows = []
    per = gpu.get("per_layer") or []
    scale = f"{gpu.get('scene', {}).get('n_gaussians', '?')} Gaussians, {gpu.get('scene', {}).get('width', '?')}², {gpu['device']}, {gpu['date']}"
    if per:
        hi, lo = per[-1], per[0]
        ok = hi["total_ms"] < REALTIME_MS and lo["total_ms"] <= LOW_HIGH_RATIO * hi["total_ms"]
        rows.append(Claim(
            claim="real-time decode + render per frame; Low at most half of High",
            paper="decode 29/19/12 ms + render 3.1/2.5/2.2 ms (High/Mid/Low), phone decode 35/27/19 ms",
            measured=(f"High {hi['total_ms']:.1f} ms (decode {hi['decode_ms']:.1f} + render {hi['render_ms']:.1f}), "
                      f"Low {lo['total_ms']:.1f} ms; targets < {REALTIME_MS} ms and ≤ {LOW_HIGH_RATIO}× "
                      f"({'met' if ok else 'not met'})"),
            scale=scale, verdict="recorded on GPU"))
    sp = gpu.get("rasterizer") or {}
    if sp.get("triton_ms") and sp.get("peer_ms"):
        if sp.get("gsplat_ms"):  # the strongest peer when it ran
            sp = {**sp, "peer": "gsplat", "peer_ms": sp["gsplat_ms"]}
        speed = sp["peer_ms"] / sp["triton_ms"]
        rows.append(Claim(
            claim="Triton tile rasteriser throughput against the strongest available peer",
            paper="(no paper number; target ≥ 0.5× gsplat)",
            measured=(f"Triton {sp['triton_ms']:.2f} ms vs {sp['peer']} {sp['peer_ms']:.2f} ms: {speed:.2f}× "
                      f"(target ≥ {TRITON_MIN_SPEED}×); gsplat: {sp.get('gsplat', 'not installed')}; max |Δ| "
                      f"{sp.get('max_abs_diff', float('nan')):.2g}"),
            scale=scale, verdict="recorded on GPU"))
    return rows or [Claim(claim="GPU decode benchmark", paper="decode 29/19/12 ms", measured="recorded file has no timings",
                          scale=scale, verdict="not run here")]


def claim_rows(key, groups, gpu=None) -> list[Claim]:
    """The Reproduce table's rows."""
    return [progressive_row(groups), psi_row(key), hierarchy_row(key), rate_row(key), grouping_row(groups),
            *gpu_rows(gpu)]

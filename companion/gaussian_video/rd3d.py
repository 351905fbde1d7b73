"""The stage bodies of the 3-D rate–distortion study (:mod:`companion.gaussian_video.scale_rd3d`): the three
comparisons the 2-D CPU pipeline makes (:mod:`companion.gaussian_video.experiments`: no rate term against the full
keyframe, the progressive curve of one model, motion-aware against fixed groups), run on the trained 3-D pipeline
(:mod:`companion.gaussian_video.train3d`) with one result per seed.

Every RD curve has one point per layer count l = 1..L: the bytes of layers ≤ l (header + chunks 1..l of
:func:`~companion.gaussian_video.train3d.encode_key` / ``encode_inter``) and the held-out PSNR of c^l rendered from
the decoded model (:func:`~companion.gaussian_video.train3d.evaluate`); a sequence's curve is the mean over its
frames (as :meth:`companion.gaussian_video.pipeline.SequenceResult.rd_curve`). BD numbers are taken on the monotone
envelopes (:func:`companion.gaussian_video.experiments.bd_against`). Seed s is both the scene's seed
(:func:`~companion.gaussian_video.train3d.make_dataset`) and the model's (``Config.seed``: the initial point cloud,
the camera draws).

Every model is trained and coded by :func:`~companion.gaussian_video.train3d.encode_sequence3d`: a keyframe alone is
a one-frame sequence; fixed groups of g frames are the segments [a, a + g) coded one after the other, each with
τ_μ = ∞ (one group: a keyframe, then inter-frames). A keyframe depends only on its frame, the keyframe settings and
the seed, so a fixed group of one frame reuses the keyframe already coded at that frame by another grouping (as the
2-D study shares its keyframe fits); ``reused_keyframes`` lists them.

Each stage loops over the profile's ``seeds`` and starts a seed only while ``ctx.left()`` still holds the longest
seed so far (the first always starts); the seeds finished are kept, ``seeds_planned`` says how many were asked for.
A stage rerun under ``--resume`` keeps the seeds the resumed file finished (``ctx.earlier``) and runs the others, so
a study longer than one call is finished by calls of ``--stages grouping --resume <its JSON>``.
"""

from __future__ import annotations

import math
import time

import numpy as np

from companion.core.stages import StageContext
from companion.gaussian_video.experiments import GROUP_VARIANTS, bd_against
from companion.gaussian_video.gsplat_peer import load_gsplat
from companion.gaussian_video.train3d import Config, encode_sequence3d, make_dataset

RATE_VARIANTS = {"full": {}, "no rate term": {"lambda_rate_key": 0.0}}


def _config(profile: dict, seed: int, **overrides) -> Config:
    return Config.from_profile({**profile, "seed": seed}).replace(**overrides)


def _dataset(ctx: StageContext, seed: int) -> dict:
    """The profile's scene of ``seed`` and its ground-truth renders, built once per call and seed."""
    cache = ctx.shared.setdefault("datasets", {})
    if seed not in cache:
        P = ctx.profile
        cache[seed] = make_dataset(**P["scene"], backend=P["backend"], device=ctx.device, seed=seed)
    return cache[seed]


def frames_of(data: dict, a: int, b: int) -> dict:
    """The frames ``a .. b - 1`` of a dataset (:func:`make_dataset`), same cameras."""
    return {**data, "images": data["images"][a:b], "means": data["means"][a:b],
            "gt_mean_motion": data["gt_mean_motion"][a:b]}


def _finite(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None  # JSON has no NaN: None where a BD number is undefined


def _bd(curves: dict, reference: str) -> dict:
    """:func:`bd_against` as JSON: per curve ``bd_rate`` (%), ``bd_psnr`` (dB; None where undefined), ``dropped``."""
    return {name: {"bd_rate": _finite(b["bd_rate"]), "bd_psnr": _finite(b["bd_psnr"]),
                   "dropped": [list(d) for d in b["dropped"]]}
            for name, b in bd_against(curves, reference).items()}


def _frame(rec: dict, offset: int = 0) -> dict:
    """A frame record of :func:`encode_sequence3d` without its training curve, at its frame index in the sequence."""
    return {**{k: v for k, v in rec.items() if k != "curve"}, "t": rec["t"] + offset}


def rd_curve(frames: list[dict]) -> dict:
    """Mean bytes per frame and mean held-out PSNR over ``frames`` for l = 1..L."""
    L = len(frames[0]["bytes"])
    return {"bytes": [float(np.mean([f["bytes"][l] for f in frames])) for l in range(L)],
            "psnr": [float(np.mean([f["psnr_test"][l] for f in frames])) for l in range(L)]}


def _per_seed(ctx: StageContext, run_seed) -> dict:
    """``run_seed(seed)`` for every seed of the profile that fits in ``ctx.left()``, after the seeds kept from the
    resumed file (module docstring)."""
    seeds = list(ctx.profile["seeds"])
    done = [r for r in (ctx.earlier or {}).get("seeds", []) if r["seed"] in seeds]
    longest = max((r.get("seconds", 0.0) for r in done), default=0.0)
    if done:
        ctx.log(f"kept seeds {[r['seed'] for r in done]} of the resumed run")
    for s in seeds:
        if any(r["seed"] == s for r in done):
            continue
        if done and ctx.left() < longest:
            ctx.log(f"deadline: {ctx.left():.0f} s left, a seed took up to {longest:.0f} s; stopped after {len(done)} seeds")
            break
        t0 = time.perf_counter()
        out = run_seed(s)
        out["seconds"] = round(time.perf_counter() - t0, 1)
        longest = max(longest, out["seconds"])
        done.append(out)
    return {"seeds": sorted(done, key=lambda r: seeds.index(r["seed"])), "seeds_planned": seeds}


def keyframe_rd(data: dict, cfg: Config, backend: str, log=None) -> dict:
    """One keyframe of frame 0 trained and coded (a one-frame :func:`encode_sequence3d`): its RD curve, Gaussians
    and training seconds."""
    rec = encode_sequence3d(frames_of(data, 0, 1), cfg, backend, log=log).frames[0]
    return {"bytes": rec["bytes"], "psnr": rec["psnr_test"], "n_gaussians": rec["n_gaussians"], "train_s": rec["train_s"]}


def rate_term_stage(ctx: StageContext) -> dict:
    """Per seed one keyframe of frame 0 with the full recipe and one without the rate term (λ_rate_key = 0, paper
    Eq. L_key): their RD curves and the BD-rate / BD-PSNR of "no rate term" against "full" (> 0 % BD-rate: without
    the rate term the same PSNR costs more bytes). gsplat is loaded first (it compiles its CUDA extension on first
    import), so that the seeds' times, which decide whether one more seed fits, leave out its ``gsplat_load_s``."""
    P, load_s = ctx.profile, None
    if P["backend"] == "gsplat":
        t0 = time.perf_counter()
        load_gsplat()
        load_s = round(time.perf_counter() - t0, 1)

    def run(s):
        data = _dataset(ctx, s)
        curves = {name: keyframe_rd(data, _config(P, s, **kw), P["backend"], ctx.log) for name, kw in RATE_VARIANTS.items()}
        bd = _bd(curves, "full")["no rate term"]
        ctx.log(f"[rate_term] seed {s}: no rate term {bd['bd_rate']} % BD-rate against full")
        return {"seed": s, "curves": curves, "bd": bd}

    return {**_per_seed(ctx, run), "gsplat_load_s": load_s}


def progressive_stage(ctx: StageContext) -> dict:
    """From the full keyframes of the ``rate_term`` stage, per seed: the worst step in l of the held-out PSNR (≥ 0:
    PSNR never falls as layers arrive), the bytes of layer 1 over those of all layers, and the PSNR gap from layer 1
    to all layers, beside the curve (the three numbers :func:`companion.gaussian_video.claims.progressive_rows` judges)."""
    rate = ctx.results.get("rate_term")
    if not rate or not rate["seeds"]:
        raise RuntimeError("progressive needs the full keyframes of the rate_term stage: run rate_term first")
    out = []
    for r in rate["seeds"]:
        psnr, size = np.asarray(r["curves"]["full"]["psnr"]), np.asarray(r["curves"]["full"]["bytes"])
        out.append({"seed": r["seed"], "curve": r["curves"]["full"], "worst_step_db": float(np.diff(psnr).min()),
                    "byte_ratio": float(size[0] / size[-1]),
                    "gap_db": float(psnr[-1] - psnr[0])})
    return {"seeds": out, "seeds_planned": rate["seeds_planned"]}


def fixed_groups(data: dict, cfg: Config, backend: str, size: int, keyframes: dict, log=None) -> list[dict]:
    """The sequence coded in fixed groups of ``size`` frames: segments [a, a + size), each one group (τ_μ = ∞).
    ``keyframes`` (frame → record) holds the keyframes coded so far: a one-frame segment reuses its frame's, and
    every keyframe coded here is added."""
    frames = []
    for a in range(0, data["images"].shape[0], size):
        b = min(a + size, data["images"].shape[0])
        if b - a == 1 and a in keyframes:
            frames.append({**keyframes[a], "reused": True})
            continue
        seq = encode_sequence3d(frames_of(data, a, b), cfg.replace(tau_mu=math.inf), backend, log=log)
        recs = [_frame(r, a) for r in seq.frames]
        keyframes.update({r["t"]: r for r in recs if r["kind"] == "key"})
        frames += recs
    return frames


def grouping_stage(ctx: StageContext) -> dict:
    """Per seed the profile's sequence coded with motion-aware grouping (a new keyframe when the rigid stage's
    mean‖Δμ_t‖ > τ_μ, paper Sec. 3.3), with fixed groups of 5 and with fixed groups of 1 (every frame a keyframe),
    in that order so that the fixed groups of 1 reuse the keyframes already coded; the RD curves (mean over frames),
    the group starts, and the BD-rate / BD-PSNR of each fixed grouping against motion-aware (> 0 % BD-rate: the
    fixed grouping needs more bytes for the same PSNR)."""
    P = ctx.profile
    order = sorted((n for n, g in GROUP_VARIANTS.items() if g is not None), key=lambda n: -GROUP_VARIANTS[n])

    def run(s):
        data, cfg = _dataset(ctx, s), _config(P, s)
        ma = [_frame(r) for r in encode_sequence3d(data, cfg, P["backend"], log=ctx.log).frames]
        keyframes = {r["t"]: r for r in ma if r["kind"] == "key"}
        frames = {"motion-aware": ma}
        for name in order:
            frames[name] = fixed_groups(data, cfg, P["backend"], GROUP_VARIANTS[name], keyframes, ctx.log)
        curves = {name: rd_curve(fr) for name, fr in frames.items()}
        bd = _bd(curves, "motion-aware")
        ctx.log(f"[grouping] seed {s}: " + ", ".join(f"{n} {b['bd_rate']} % BD-rate" for n, b in bd.items()))
        return {"seed": s, "curves": curves, "bd": bd,
                "groups": {n: [f["t"] for f in fr if f["kind"] == "key"] for n, fr in frames.items()},
                "mean_dmu": [f["mean_dmu"] for f in ma],
                "reused_keyframes": {n: [f["t"] for f in fr if f.get("reused")] for n, fr in frames.items()},
                "frames": {n: [{k: f[k] for k in ("t", "kind", "bytes", "psnr_test", "train_s")} for f in fr]
                           for n, fr in frames.items()}}

    return _per_seed(ctx, run)

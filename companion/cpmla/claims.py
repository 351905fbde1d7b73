"""Claim rows for paper 14 (CPMLA), built from this run's results.

Inputs: ``fixed`` - :func:`companion.cpmla.experiments.compare_fixed_target` on the κ = 100 Gaussian;
``coop`` - the cooperative comparison, ``{"cpmla": {epoch: ED}, "cpflow": {epoch: ED}, "early", "late",
"floor", "n_data", "iterations_per_epoch", "T", "eta", "seed"}`` (one seed); ``gpu`` - the recorded GPU
results (:func:`companion.cpmla.scale.recorded`) or None.
"""

from __future__ import annotations

import numpy as np

from companion.core import Claim

SPEEDUP_RATIO = 2.0  # learned-mirror vs ULA: ED_ULA / ED_mirror at the largest T, required in every seed
DIAG_MARGIN = 0.25  # the diagonal Hessian is "harmless" if its ED is within +25 % of the full Hessian's in every seed
MATCH_TOLERANCE = 0.10  # CPMLA after the early epoch count "matches" CP-Flow after the late one within +10 % ED


def _by(rows, sampler, T):
    return np.array([r["energy_distance"] for r in rows if r["sampler"] == sampler and r["T"] == T])


def _ms(a):
    return f"{a.mean():.4f} ± {a.std(ddof=1) if len(a) > 1 else 0.0:.4f}"


def geometry_row(fixed, n_chains):
    rows = fixed["rows"]
    T = max(r["T"] for r in rows)
    seeds = sorted({r["seed"] for r in rows})
    ula, mirror = _by(rows, "ULA", T), _by(rows, "mirror: learned ICNN", T)
    ratio = ula / np.maximum(mirror, 1e-12)
    if ratio.min() >= SPEEDUP_RATIO:
        verdict = "reproduced"
    elif ratio.mean() > 1:
        verdict = "partly reproduced"
    else:
        verdict = "not reproduced"
    return Claim(
        claim="mirror Langevin through a learned convex potential converges faster than Langevin",
        paper="CPMLA accelerates convergence; exponential convergence with vanishing bias (Thm 4.5)",
        measured=(f"energy distance to exact samples after T = {T}: ULA {_ms(ula)}, learned-ICNN mirror {_ms(mirror)} "
                  f"(ratio {ratio.min():.1f}-{ratio.max():.1f}; needs ≥ {SPEEDUP_RATIO:g} in every seed); each at "
                  f"{fixed['eta_scale']:g}/L of its own relative smoothness L; the mirror chain starts from the fitted flow"),
        scale=f"2-D Gaussian, κ = 100, {n_chains} chains, {len(seeds)} seeds, fixed target, CPU",
        verdict=verdict,
    )


def diagonal_row(fixed, n_chains, newton_bias):
    rows = fixed["rows"]
    T = max(r["T"] for r in rows)
    full, diag = _by(rows, "mirror: learned ICNN", T), _by(rows, "mirror: learned ICNN, diagonal Hessian", T)
    ok = bool(np.all(diag <= full * (1 + DIAG_MARGIN)))
    return Claim(
        claim="replacing ∇²G by its diagonal (the paper's practice) keeps the sampler accurate",
        paper="diagonal Hessian used in practice for O(d) cost; no effect on accuracy reported",
        measured=(f"ED after T = {T}: full {_ms(full)}, diagonal {_ms(diag)} (allowed: +{DIAG_MARGIN:.0%}); "
                  f"exact Newton-map stationary covariance error ‖Cov − Σ‖/‖Σ‖ = {newton_bias['full']:.3f} (full) "
                  f"vs {newton_bias['diagonal']:.1f} (diagonal) at η = {newton_bias['eta']:g}"),
        scale=f"2-D Gaussian, κ = 100, axes rotated 45°, {n_chains} chains, {len(full)} seeds, CPU",
        verdict="reproduced" if ok else "not reproduced",
    )


def toy_row(coop):
    e, l = coop["early"], coop["late"]
    cp_early, cp_late, ours = coop["cpflow"][e], coop["cpflow"][l], coop["cpmla"][e]
    if ours <= cp_late * (1 + MATCH_TOLERANCE):
        verdict = "reproduced"
    elif ours < cp_early:
        verdict = "partly reproduced"
    else:
        verdict = "not reproduced"
    return Claim(
        claim=f"toy: CPMLA after {e} epochs matches CP-Flow alone after {l}",
        paper="8 Gaussians: CPMLA matches CP-Flow's 10-iteration fit in 3 iterations",
        measured=(f"energy distance to exact samples: CPMLA {ours:.4f} after {e} epochs (and {coop['cpmla'][l]:.4f} after {l}); "
                  f"CP-Flow alone {cp_early:.4f} after {e}, {cp_late:.4f} after {l}; needs CPMLA ≤ CP-Flow(late) "
                  f"+{MATCH_TOLERANCE:.0%}; metric noise floor {coop['floor']:.4f}"),
        scale=(f"one seed; {coop['n_data']} points, {coop['iterations_per_epoch']} updates per epoch, "
               f"T = {coop['T']}, η = {coop['eta']:g}, 1 ICNN block (2×32), CPU"),
        verdict=verdict,
    )


def gpu_rows(gpu):
    if gpu is None:
        return [Claim(claim="image quality and sampling speed", paper="CIFAR-10 FID 20.85 (CPMLAprt, T = 20); 15.92 s per 1k "
                      "samples; flow 0.26M vs CoopFlow's 28.78M parameters", measured="no GPU run recorded",
                      scale="—", verdict="not run here")]
    q = gpu["quality"]
    t = gpu["sampling_time"]
    fastest = min(t, key=lambda r: r["T"])
    return [
        Claim(claim="sample quality of CPMLA vs its flow alone (FID not computable here)",
              paper="CIFAR-10 FID: CPMLAprt 20.85 (T = 20), CPMLA 21.09 (T = 30), CoopFlow 21.16 / 30.74",
              measured=(f"KID on fixed random features: CPMLA {q['cpmla']['kid']:.3g}, CP-Flow alone {q['cpflow']['kid']:.3g}, "
                        f"EBM + ULA {q['ula']['kid']:.3g} (two halves of the data: {q['data_split_half']['kid']:.3g}); "
                        f"mean pixel error of the CPMLA samples {q['cpmla']['pixel_mean_abs_error']:.3g} on a [-1, 1] scale"
                        f" (energy regulariser {gpu['config'].get('energy_reg', 0.0):g})"),
              scale=f"{gpu['config']['size']}×{gpu['config']['size']} upsampled digits, {gpu['device']}, {gpu['date']}",
              verdict="recorded on GPU"),
        Claim(claim="sampling time and mirror-map size",
              paper="15.92 s per 1k CIFAR images (CoopFlow 16.84 s); flow 0.26M parameters",
              measured=(f"{fastest['seconds_per_1k']:.3f} s per 1k samples at T = {fastest['T']} "
                        f"({t[-1]['seconds_per_1k']:.3f} s at T = {t[-1]['T']}); flow {gpu['flow_parameters'] / 1e6:.2f}M parameters"),
              scale=f"d = {gpu['config']['size'] ** 2}, {gpu['device']}", verdict="recorded on GPU"),
    ]


def claim_rows(fixed, coop, gpu=None, *, n_chains, newton_bias):
    """The Reproduce table's rows."""
    return [geometry_row(fixed, n_chains), diagonal_row(fixed, n_chains, newton_bias), toy_row(coop), *gpu_rows(gpu)]

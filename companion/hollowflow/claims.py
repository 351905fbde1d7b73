"""Claim rows of paper 13's notebook (HollowFlow), built from this run's results and judged by ``companion.core.judge``.

Inputs (all from :mod:`companion.hollowflow.experiments`): ``check`` = :func:`construction_check`,
``cost`` = :func:`cost_scaling`, ``toy`` = :func:`toy_flow`, ``peer`` = :func:`peer_likelihood` (or None when
flow-matching is not installed), ``gpu`` = :func:`companion.hollowflow.scale.recorded` (or None).

The rule: Theorem 1, the agreement of the two divergence paths and the agreement with flow-matching's solver are
exact (one run, an error within a tolerance); the pruning ablation and EffSU are effects (one value per seed; fewer
than three: inconclusive); the cost and the GPU per-step times are timings (ratios from the same run, one per size).
A model whose ESS is below ``ESS_FLOOR`` effective samples gives no EffSU: such seeds are left out, and a row with
none left says it was not measured. The GPU toy's ESS rows judge each model's 68 % bootstrap interval (its two
ends, in effective samples) against ``ESS_FLOOR``. Every threshold is a named constant below, tested just inside and
just outside in ``tests/unit/test_hollowflow_claims.py``.
"""

from __future__ import annotations

import math

from companion.core import Claim, inconclusive, judge, not_run
from companion.core.stages import not_finished

DIV_TOL = 1e-10  # |d-VJP divergence − trace of the full Jacobian| counted as equal (float64)
LEAK_MIN = 1e-6  # without pruning the two must differ by at least this (per seed) to count as "wrong"
SLOPE_GAP_MIN = 1.0  # exponent of the speed-up in n (brute-force minus hollow log-log slope; theory ≈ 2 for constant k)
PATH_TOL = 1e-8  # |log q_hollow − log q_bruteforce| on the same trajectories (float64)
PEER_TOL = 1e-8  # |log q − log q_flow_matching| with the same RK4 steps (float64)
ESS_FLOOR = 2.0  # effective samples (ESS·N) below which a model's ESS is at the floor: that seed gives no EffSU
EFFSU_TARGET_LJ13 = 31.9  # the paper's EffSU on LJ13 (k = 6): reproduced at or above it
EFFSU_TARGET_LJ55 = 82.3  # the paper's EffSU on LJ55 (k = 7)
EFFSU_MARGIN = 2.0  # an EffSU of at least this factor is a speed-up, short of the paper's: partly reproduced
GPU_SPEEDUP_TARGET = 20.0  # the issue's target for the likelihood step at n = 55 on one GPU
SPEEDUP64_TARGET = 10.0  # ≥ 10× faster likelihood step at n = 64 (fully connected n·d VJPs vs hollow d VJPs)
KERNEL_SPEEDUP_TARGET = 1.2  # index_add_ time / kernel time of the RK4 likelihood step, plans rebuilt at every evaluation
KERNEL_MIN_N = 55  # ... judged at the timed sizes n ≥ this (smaller graphs leave too little to aggregate)

EFFSU_TARGET = {"LJ13": EFFSU_TARGET_LJ13, "LJ55": EFFSU_TARGET_LJ55}
# the cells of notebooks/13_hollowflow.ipynb (nbformat ids) that measure the rows: the construction check and the
# peer solver, the cost sweep, the toy flow, and the Scale-up section that shows the recorded GPU run
CHECK_CELL, COST_CELL, TOY_CELL, GPU_CELL = "19dd220b", "f91b2bf8", "262fd978", "81d11844"


def _x(v: float) -> str:
    if not math.isfinite(v):
        return str(v)
    return f"{v:,.0f}×" if abs(v) >= 100 else f"{v:.3g}×"


def theorem_row(check: dict, scale: str) -> Claim:
    p = check["pruned"]
    # every entry must vanish: the divergence gap, J − J_τ on the diagonal blocks, J_τ off them, the leaks (a count)
    errors = [p["div_error"], p["diag_block_diff"], p["offblock_detached"], p["self_dependence"], float(p["leaks"])]
    return Claim(
        "Theorem 1: J_b = J_c (block-hollow) + J_τ (block-diagonal); ∇·b from d VJPs",
        "tr J_b = Σ_c v_cᵀ J_τ v_c over c = 1…d, v_c = e_c ⊗ 1_n, with hᵀ detached",
        f"d-VJP divergence {p['hollow']:.6f} vs trace {p['trace']:.6f} (|Δ| = {p['div_error']:.1e})",
        scale, judge(errors, DIV_TOL, kind="exact", fmt=lambda v: f"{v:.1e}"),
        details=(f"n = {check['n']}, {check['k']}-NN, {check['steps']} steps; diagonal blocks of J and J_τ differ by "
                 f"{p['diag_block_diff']:.1e}; J_τ off-block max {p['offblock_detached']:.1e}; line states depending on "
                 f"their own x_j: {p['leaks']}; line-edge counts {' → '.join(map(str, p['counts']))}"),
        cell=CHECK_CELL)


def pruning_row(check: dict, scale: str) -> Claim:
    """Without the removal the d-VJP divergence must be wrong: one value per seed (``check["unpruned_seeds"]``),
    the |Δ| from the trace where some line state leaks, 0 where none does."""
    seeds = check.get("unpruned_seeds") or [check["unpruned"]]
    gaps = [u["div_error"] if u["leaks"] > 0 else 0.0 for u in seeds]
    u = seeds[0]
    return Claim(
        "The backtracking removal is what makes it exact",
        "remove (i, j, k) ∈ E^lg when h_ij already depends on x_k (§3, backtracking array B)",
        f"pruning off: |Δ| per seed of the weights {', '.join(format(x['div_error'], '.2e') for x in seeds)}",
        scale + f", {len(seeds)} seed{'s' if len(seeds) > 1 else ''} of the weights",
        judge(gaps, LEAK_MIN, direction="higher", fmt=lambda v: f"{v:.1e}"),
        details=(f"{', '.join(str(x['leaks']) for x in seeds)} of {u['line_nodes']} line states see their own x_j; "
                 f"d-VJP 'divergence' {u['hollow']:.4f} vs trace {u['trace']:.4f}; diagonal blocks leak by "
                 f"{u['diag_block_diff']:.2e}"),
        cell=CHECK_CELL)


def _local_exponents(n, speedup) -> list[float]:
    """The speed-up's log-log slope between consecutive sizes, one per pair: its exponent in n, size by size."""
    return [math.log(b / a) / math.log(m / k) for k, m, a, b in zip(n, n[1:], speedup, speedup[1:])]


def cost_row(cost: dict, scale: str) -> Claim:
    gap = cost["slope_brute"] - cost["slope_hollow"]
    local = _local_exponents(cost["n"], cost["speedup"])
    vjp = f"; brute-force VJP time scaled from {cost['vjp_sample']} of n·d VJPs" if cost.get("vjp_sample") else ""
    return Claim(
        "Likelihood cost: O(n²) speed-up for constant k",
        "fully connected exact divergence O(T n³ d) vs HollowFlow O(n(T k² + d k)) per step (Theorem 2)",
        f"speed-up {' → '.join(f'{x:.1f}×' for x in cost['speedup'])} at n = {', '.join(map(str, cost['n']))}: its "
        f"exponent in n between consecutive sizes {', '.join(f'{x:.2f}' for x in local)}",
        scale, judge(local, SLOPE_GAP_MIN, kind="timing", direction="higher", fmt=lambda v: f"{v:.2f}"),
        details=f"log-log slopes: brute force {cost['slope_brute']:.2f}, hollow {cost['slope_hollow']:.2f} (gap {gap:.2f}){vjp}",
        cell=COST_CELL)


def paths_row(toy: dict, scale: str) -> Claim:
    diff = toy["hollow"].get("path_diff", math.inf)
    return Claim(
        "Hollow and brute-force likelihoods are the same number",
        "exact likelihoods with d backward passes instead of n·d",
        f"{toy['system']} flow, {toy.get('check_samples', '?')} samples, RK4 {toy.get('check_steps', toy['ode_steps'])} steps: "
        f"max |log q_hollow − log q_brute| = {diff:.1e}",
        scale, judge(diff, PATH_TOL, kind="exact", fmt=lambda v: f"{v:.1e}"), cell=TOY_CELL)


def peer_row(peer: dict | None, scale: str) -> Claim:
    if peer is None:
        return Claim("Agrees with flow-matching's exact likelihood solver",
                     "exact divergence, same ODE steps", "flow_matching is not installed", scale,
                     not_run("flow_matching is not installed (pip install flow_matching)"), cell=CHECK_CELL)
    d = peer["max_abs_diff"]
    return Claim(
        "Agrees with flow-matching's exact likelihood solver",
        "exact divergence, same ODE steps",
        f"max |Δ log q| = {d:.1e} over {peer['ode_steps']} RK4 steps",
        scale, judge(d, PEER_TOL, kind="exact", fmt=lambda v: f"{v:.1e}"),
        details="flow_matching's ODESolver.compute_likelihood (method rk4, exact divergence) vs the d-VJP RK4 (3/8 rule)",
        cell=CHECK_CELL)


def _recipe_text(recipe: dict) -> str:
    """A toy's recorded training recipe in words (its ``recipe`` entry)."""
    return (f"Adam {recipe['lr']:g} → {recipe['lr_final']:g} (cosine), batch {recipe['batch']}, {recipe['data']} MALA "
            f"samples after {recipe['burn_in']} burn-in steps (every {recipe['thin']}th kept), {recipe['ode_steps']} RK4 steps")


def _ess_text(r: dict, n: int) -> str:
    return (f"ESS {100 * r['ess']:.2f}% [{100 * r['ess_ci'][0]:.2f}, {100 * r['ess_ci'][1]:.2f}] "
            f"({r['ess'] * n:.2f} effective of {n}), ESS_rem {100 * r['ess_rem']:.2f}% [{100 * r['ess_rem_ci'][0]:.2f}, "
            f"{100 * r['ess_rem_ci'][1]:.2f}] (biased), {1e3 * r['seconds_per_sample']:.1f} ms/sample")


def _effsu(h: dict, b: dict) -> float:
    return (h["ess"] / h["seconds_per_sample"]) / (b["ess"] / b["seconds_per_sample"])


def effsu_judgement(seeds, target: float):
    """The EffSU of each seed whose two models both reach ``ESS_FLOOR`` effective samples, judged against
    ``target`` (partly from ``EFFSU_MARGIN``). ``seeds``: (hollow, baseline, hollow samples, baseline samples) per
    seed. Returns (judgement, note, kept EffSU values): a seed at the floor is left out and named in the note; with
    none left the EffSU was not measured."""
    kept, floored = [], []
    for h, b, nh, nb in seeds:
        low = [f"{name} {r['ess'] * n:.2f} of {n}" for name, r, n in (("hollow", h, nh), ("baseline", b, nb))
               if r["ess"] * n < ESS_FLOOR]
        if low:
            floored.append(", ".join(low))
        else:
            kept.append(_effsu(h, b))
    note = ""
    if floored:
        note = (f"; at the floor (below {ESS_FLOOR:g} effective samples: too little training to compare), left out: "
                + " | ".join(floored))
    if not kept:
        return inconclusive(f"no EffSU measured: every seed's ESS is below the floor of {ESS_FLOOR:g} effective samples "
                       f"({' | '.join(floored)}); it needs longer training"), note, kept
    return judge(kept, target, direction="higher", weaker=EFFSU_MARGIN, fmt=_x), note, kept


def ess_row(toy: dict, scale: str) -> Claim:
    paper = ("LJ13 k = 6: ESS 3.30% vs 2.13%, ESS_rem 20.2% vs 40.7%; EffSU 31.9 (3.26 on ESS_rem), "
             "887 s vs 2,508 s; raw ESS lower on LJ55 (0.006% vs 0.048%)")
    claim = "Effective speed-up (EffSU) over the fully connected baseline"
    h = toy["hollow"]
    N = toy["n_samples"]
    if "baseline" not in toy:
        return Claim(claim, paper, f"hollow only: ESS {100 * h['ess']:.2f}%", scale,
                     not_run("the fully connected baseline was not trained (TOY_BASELINE = False): no EffSU"),
                     details=_ess_text(h, N), cell=TOY_CELL)
    b = toy["baseline"]
    eff_rem = (h["ess_rem"] / h["seconds_per_sample"]) / (b["ess_rem"] / b["seconds_per_sample"])
    judgement, note, _ = effsu_judgement([(h, b, N, N)], EFFSU_TARGET.get(toy["system"], EFFSU_TARGET_LJ13))
    return Claim(claim, paper, f"EffSU {_effsu(h, b):.1f} (ESS_rem: {eff_rem:.1f}){note}", scale, judgement,
                 details=f"hollow k = {toy['k']}: {_ess_text(h, N)}; baseline: {_ess_text(b, N)}", cell=TOY_CELL)


GPU_TOY_PAPER = {
    "LJ13": "LJ13 k = 6: ESS 3.30% vs 2.13%, ESS_rem 20.2% vs 40.7%; EffSU 31.9 (3.26 on ESS_rem); 887 s vs 2,508 s",
    "LJ55": ("LJ55 k = 7: ESS 0.006% vs 0.048%, ESS_rem 0.53% vs 2.96%; EffSU 82.3 (93.7 on ESS_rem); 1,370 s vs "
             "529,793 s for 4e4 samples"),
}


def _gpu_where(gpu: dict) -> str:
    return f"{gpu.get('device', 'GPU')}, {gpu.get('date', '?')}"



def _timing_row(gpu: dict, paper: str) -> Claim:
    claim = "Per-step likelihood time on one GPU"
    why = "; ".join(not_finished(gpu, ("likelihood_step",)))
    if why:
        return Claim(claim, paper, f"not recorded: the stage did not finish: {why}", _gpu_where(gpu),
                     not_run(f"the likelihood-step stage did not finish: {why}"), cell=GPU_CELL)
    stage = gpu["likelihood_step"]
    rows = stage["rows"]
    where = (_gpu_where(gpu) + f", one run, ms per {stage['batch']} samples"
             + (" (timed at the per-n batches that fit, scaled)" if any("hollow_batch" in r for r in rows) else ""))
    if stage["skipped"]:
        where += "; skipped: " + ", ".join(f"n = {s['n']} ({s['reason']})" for s in stage["skipped"])
    at55 = [r for r in rows if r["n"] == 55]
    details = ("RK4 step with exact likelihood, fully connected vs hollow: "
               + "; ".join(f"n = {r['n']}, k = {r['k']}: {r['speedup']:.0f}× ({r['baseline_ms']:.0f} vs "
                           f"{r['hollow_ms']:.1f} ms)" for r in rows)
               + "; fitted exponents in n: " + ", ".join(f"{k} {v:.2f}" for k, v in stage["exponents"].items()))
    if not at55:
        return Claim(claim, paper, "n = 55 not timed", where, not_run("n = 55 was not timed in the recorded run"),
                     details=details, cell=GPU_CELL)
    headline = "speed-up at n = 55: " + ", ".join(f"{r['speedup']:.0f}× (k = {r['k']})" for r in at55)
    return Claim(claim, paper, headline, where,
                 judge([r["speedup"] for r in at55], GPU_SPEEDUP_TARGET, kind="timing", direction="higher", fmt=_x),
                 details=details, cell=GPU_CELL)


def _kernel_words(r: dict) -> str:
    """index_add_ time / kernel time of one size in words: which is faster, forward, forward + backward, RK4 step
    (plans rebuilt at every evaluation) and RK4 step with the plans reused (the bound)."""
    parts = []
    for key, what in (("fwd", "forward"), ("fwd_bwd", "forward + backward"), ("rk4", "RK4 step"),
                      ("rk4_reused", "RK4 step, plans reused")):
        x = r.get(f"speedup_{key}")
        if x:
            parts.append(f"{what}: kernel {x:.2f}× faster" if x >= 1 else f"{what}: kernel slower ({1 / x:.2f}× the time)")
    return "; ".join(parts)


def _kernel_size_text(r: dict) -> str:
    """One size of the kernel stage in words: its times, index_add_ first, the plan builds and the differences.
    A row without ``rk4_segment_sum_reused_ms`` was recorded before the sort-free plan build: its ``plan_ms`` is
    the sorted build, rebuilt at every evaluation of its RK4 step."""
    rk4 = ""
    if r.get("rk4_index_add_ms") and r.get("rk4_segment_sum_ms"):
        rk4 = f", RK4 step {r['rk4_index_add_ms']:.1f} vs {r['rk4_segment_sum_ms']:.1f} ms"
        if r.get("rk4_segment_sum_reused_ms"):
            rk4 += f" (plans reused: {r['rk4_segment_sum_reused_ms']:.1f} ms)"
    build = ""
    if "sort_plan_ms" in r:
        build = f"; plans built in {r['plan_ms']:.3f} ms without a sort ({r['sort_plan_ms']:.3f} ms with one)"
    elif "plan_ms" in r:
        build = f"; plans built with a sort in {r['plan_ms']:.3f} ms"
    return (f"n = {r['n']} ({sum(r['line_edges']):,} line edges): forward {r['index_add_ms']:.3f} vs "
            f"{r['segment_sum_ms']:.3f} ms, forward + backward {r['index_add_fwd_bwd_ms']:.3f} vs "
            f"{r['segment_sum_fwd_bwd_ms']:.3f} ms{rk4} (index_add_ vs kernel; {_kernel_words(r)}){build}; max |Δ| "
            f"{r['max_abs_diff']:.1e}, divergence |Δ| {r['divergence_max_abs_diff']:.1e}")


def _rk4_ratios(rows: list, kernel: str = "rk4_segment_sum_ms") -> str:
    """index_add_ time / kernel time of the RK4 step per size (``kernel``: the rebuilt or the reused plans)."""
    return ", ".join(f"{r['rk4_index_add_ms'] / r[kernel]:.2f}× at n = {r['n']}" for r in rows if r.get(kernel))


def kernel_row(gpu: dict) -> Claim:
    """The Triton segment-sum kernel against ``index_add_`` (the ``segment_sum`` stage), judged on the RK4
    likelihood step with the plans rebuilt at every evaluation (what a likelihood does: the kNN graph follows x),
    index_add_ time / kernel time at the sizes n ≥ ``KERNEL_MIN_N``, against ``KERNEL_SPEEDUP_TARGET``. The step
    with the plans reused (the bound when graphs do not change) is reported, not judged. "not run here" when the
    stage did not finish, or when the record predates the sort-free plan build (its recorded values are shown)."""
    claim = (f"Triton segment sum makes the RK4 likelihood step ≥ {KERNEL_SPEEDUP_TARGET:g}× faster than index_add_ "
             f"at n ≥ {KERNEL_MIN_N}, plans rebuilt at every evaluation")
    paper = "this project: a fused gather–message–scatter kernel, timed against index_add_ (not a paper claim)"
    why = "; ".join(not_finished(gpu, ("segment_sum",)))
    if why:
        return Claim(claim, paper, f"not recorded: the stage did not finish: {why}", _gpu_where(gpu),
                     not_run(f"the kernel stage did not finish: {why}"), cell=GPU_CELL)
    rows = gpu["segment_sum"]["rows"]
    if not rows:
        why = "; ".join(f"n = {s['n']}: {s['reason']}" for s in gpu["segment_sum"]["skipped"]) or "no size was timed"
        return Claim(claim, paper, f"not recorded: {why}", _gpu_where(gpu), not_run(f"no size was timed: {why}"),
                     cell=GPU_CELL)
    r0 = rows[0]
    where = _gpu_where(gpu) + f", one run, k = {r0['k']}, {r0['batch']} samples, {r0['features']} features, impl {r0['impl']}"
    details = " | ".join(_kernel_size_text(r) for r in rows)
    both = [r for r in rows if r.get("rk4_index_add_ms") and r.get("rk4_segment_sum_ms")]
    if any("rk4_segment_sum_reused_ms" not in r for r in rows):
        why = ("the recorded run predates the sort-free plan build (its kernel sorted the receivers at every "
               "evaluation): python -m companion.bench hollowflow --stages segment_sum --resume "
               "benchmarks/results/hollowflow_gpu.json on one GPU")
        return Claim(claim, paper, f"recorded with the sorted plan rebuilt at every evaluation, RK4 step, index_add_ "
                     f"time / kernel time: {_rk4_ratios(both) or 'not timed'}", where, not_run(why), details=details, cell=GPU_CELL)
    timed = [r for r in both if r["n"] >= KERNEL_MIN_N]
    if not timed:
        return Claim(claim, paper, f"no size n ≥ {KERNEL_MIN_N} timed with both aggregations", where,
                     not_run(f"the RK4 step was not timed with both aggregations at any n ≥ {KERNEL_MIN_N}"),
                     details=details, cell=GPU_CELL)
    bound = _rk4_ratios(timed, "rk4_segment_sum_reused_ms")
    headline = (f"RK4 step, index_add_ time / kernel time with the plans rebuilt: {_rk4_ratios(timed)}"
                + (f" (plans reused, the bound when graphs do not change: {bound})" if bound else ""))
    return Claim(claim, paper, headline, where,
                 judge([r["rk4_index_add_ms"] / r["rk4_segment_sum_ms"] for r in timed], KERNEL_SPEEDUP_TARGET,
                       kind="timing", direction="higher", fmt=_x),
                 details=details, cell=GPU_CELL)


GPU_ESS_PAPER = {
    ("LJ13", "hollow"): "LJ13 HollowFlow k = 6: ESS 3.30% (ESS_rem 20.2%) after 5.8–7.9 h of training",
    ("LJ13", "baseline"): "LJ13 fully connected: ESS 2.13% (ESS_rem 40.7%) after hours of training",
    ("LJ55", "hollow"): "LJ55 HollowFlow k = 7: ESS 0.006% (ESS_rem 0.53%)",
    ("LJ55", "baseline"): "LJ55 fully connected: ESS 0.048% (ESS_rem 2.96%)",
}


def toy_missing(gpu: dict, system: str) -> str:
    """Why the recorded toy of ``system`` gives no row ("" when it does): the stage did not finish, or it was
    recorded with the earlier recipe (no ``recipe`` in the payload: a few seconds of training on unequilibrated data)."""
    why = "; ".join(not_finished(gpu, (f"toy_{system}",)))
    if why:
        return f"the {system} stage did not finish: {why}"
    if "recipe" not in gpu[f"toy_{system}"]:
        return (f"the recorded {system} toy predates the current recipe (≈ 10 s of training, 500 MALA burn-in "
                "steps): rerun python -m companion.bench hollowflow on one GPU")
    return ""


def _not_recorded(claim: str, paper: str, gpu: dict, why: str) -> Claim:
    """A GPU row whose stage is missing from the recorded study, or stale: not run here, saying why."""
    return Claim(claim, paper, f"not recorded: {why}", _gpu_where(gpu), not_run(why), cell=GPU_CELL)


def ess_rows(gpu: dict) -> list[Claim]:
    """One row per system and model of the GPU toy: the ESS in effective samples (ESS·N) with its 68 % bootstrap
    interval (1,000 resamples), judged by the one rule on the interval's two ends (one run; the spread is the
    bootstrap's) against ``ESS_FLOOR``: an ESS clearly above the floor means the EffSU rows compare trained models."""
    out = []
    for (system, name), paper in GPU_ESS_PAPER.items():
        claim = f"{system} {'hollow NoBGNN' if name == 'hollow' else 'fully connected baseline'}: ESS above the floor"
        why = toy_missing(gpu, system)
        if why:
            out.append(_not_recorded(claim, paper, gpu, why))
            continue
        t = gpu[f"toy_{system}"]
        r = t[name]
        N = r["samples"]
        lo, hi = (v * N for v in r["ess_ci"])
        measured = (f"{r['ess'] * N:.2f} effective of {N} (68% bootstrap interval {lo:.2f}–{hi:.2f}) after "
                    f"{r['train_seconds']:.0f} s ({r['iterations']} iterations) of training")
        details = ("judged on the two ends of the 68 % bootstrap interval (the evidence's n=2; one run): both at or "
                   "above the floor reproduce, an interval across it is inconclusive; "
                   f"{_ess_text(r, N)}; loss {r['first_loss']:.3f} → {r['final_loss']:.3f}; recipe: {_recipe_text(t['recipe'])}; "
                   f"mean data energy {t['data_energy']:.2f}"
                   + (" (first / second half of the MALA samples: {:.2f} / {:.2f})".format(*t["data_energy_halves"])
                      if "data_energy_halves" in t else "")
                   + (f"; {r['diverged']} of {N} trajectories blew up (zero weight)" if r.get("diverged") else ""))
        out.append(Claim(claim, paper, measured, _gpu_where(gpu) + f", one run, {N} samples",
                         judge([lo, hi], ESS_FLOOR, kind="timing", direction="higher", fmt=lambda v: f"{v:.2f}"),
                         details=details, cell=GPU_CELL))
    return out


def toy_rows(gpu: dict) -> list[Claim]:
    """One EffSU row per system of the GPU toy (stages ``toy_LJ13``, ``toy_LJ55``), judged like the CPU row (a seed
    whose ESS is below ``ESS_FLOOR`` effective samples gives no EffSU); a stage that did not finish, or one
    recorded with the earlier recipe, says so."""
    out = []
    for system, paper in GPU_TOY_PAPER.items():
        claim = f"{system} EffSU of trained models on one GPU"
        why = toy_missing(gpu, system)
        if why:
            out.append(_not_recorded(claim, paper, gpu, why))
            continue
        t = gpu[f"toy_{system}"]
        seeds = t.get("seeds") or [t]
        h, b = t["hollow"], t["baseline"]
        judgement, note, kept = effsu_judgement([(s["hollow"], s["baseline"], s["hollow"]["samples"],
                                                  s["baseline"]["samples"]) for s in seeds], EFFSU_TARGET[system])
        details = (f"hollow k = {t['k']} ({h['samples']} samples): {_ess_text(h, h['samples'])}; baseline "
                   f"({b['samples']} samples): {_ess_text(b, b['samples'])}; {h['iterations']} vs {b['iterations']} "
                   "training iterations")
        if b["samples"] < h["samples"]:
            details += (f"; the baseline's ESS from {b['samples']} samples is at least 1/{b['samples']} by construction, "
                        "which favours the baseline")
        n = len(seeds)
        measured = (f"EffSU {', '.join(f'{v:.1f}' for v in kept)}" if kept else "no EffSU compared") + note
        out.append(Claim(claim, paper, measured,
                         _gpu_where(gpu) + (", one seed" if n == 1 else f", {n} seeds"), judgement,
                         details=details, cell=GPU_CELL))
    return out


def speedup64_row(gpu: dict) -> Claim:
    """The ≥ 10× check at n = 64: the RK4 likelihood step of the fully connected baseline (n·d VJPs) over the
    hollow one's (d VJPs), per hollow k of the ``likelihood_step`` stage, timed side by side (Theorem 2)."""
    claim = "Likelihood step ≥ 10× faster than the fully connected baseline at n = 64"
    paper = "fully connected O(T n³ d) vs HollowFlow O(n(T k² + d k)) per step (Theorem 2); exact divergence both"
    why = "; ".join(not_finished(gpu, ("likelihood_step",)))
    if not why and not any(r["n"] == 64 for r in gpu["likelihood_step"]["rows"]):
        why = "n = 64 was not timed in the recorded run"
    if why:
        return _not_recorded(claim, paper, gpu, why)
    rows = [r for r in gpu["likelihood_step"]["rows"] if r["n"] == 64]
    measured = "; ".join(f"k = {r['k']}: {r['speedup']:.0f}× ({r['baseline_ms']:.0f} vs {r['hollow_ms']:.1f} ms per "
                         f"{gpu['likelihood_step']['batch']} samples)" for r in rows)
    return Claim(claim, paper, measured, _gpu_where(gpu) + ", one run, n = 64",
                 judge([r["speedup"] for r in rows], SPEEDUP64_TARGET, kind="timing", direction="higher", fmt=_x),
                 cell=GPU_CELL)


def gpu_rows(gpu: dict | None) -> list[Claim]:
    """Rows from the recorded GPU run: the LJ13 / LJ55 toy rows (ESS per model, EffSU per system), the per-step
    likelihood time, the ≥ 10× check at n = 64 and the segment-sum kernel; a row whose stage did not finish (or
    was recorded with the earlier toy recipe) says so and is not judged."""
    paper = "LJ55: 1,370 s vs 529,793 s for 4e4 samples (≈10²× effective); speed-up grows with n"
    if not gpu:
        return [Claim("Per-step likelihood time on one GPU", paper, "no GPU run recorded yet", "one GPU",
                      not_run("no GPU run recorded yet: python -m companion.bench hollowflow on one GPU"), cell=GPU_CELL)]
    return [*ess_rows(gpu), *toy_rows(gpu), _timing_row(gpu, paper), speedup64_row(gpu), kernel_row(gpu)]


def run_summary(check: dict, cost: dict, toy: dict, rows) -> str:
    """The notebook's "what this run shows" paragraph, built from this run's numbers and its rows' verdicts
    (``rows``: the CPU rows of :func:`claim_rows`)."""
    p = check["pruned"]
    seeds = check.get("unpruned_seeds") or [check["unpruned"]]
    errs = [u["div_error"] for u in seeds]
    spread = f"{min(errs):.1e}–{max(errs):.1e}" if len(errs) > 1 else f"{errs[0]:.1e}"
    local = _local_exponents(cost["n"], cost["speedup"])
    h, N = toy["hollow"], toy["n_samples"]
    eff = h["ess"] * N
    text = (f"**What this run shows, at its scale.** With the backtracking removal, {p['leaks']} line states depend on "
            f"their own target particle and the d-VJP divergence differs from the trace of the full Jacobian by "
            f"{p['div_error']:.1e}; without it, {seeds[0]['leaks']} of {seeds[0]['line_nodes']} line states do and the two "
            f"differ by {spread} ({len(seeds)} seed{'s' if len(seeds) > 1 else ''} of the weights). The hollow divergence is "
            f"{cost['speedup'][0]:.1f}× faster than the brute force at n = {cost['n'][0]} and {cost['speedup'][-1]:.0f}× at "
            f"n = {cost['n'][-1]}; the speed-up's exponent in n between consecutive sizes is "
            f"{', '.join(f'{x:.2f}' for x in local)} (Theorem 2: 2 for constant k, as n grows; the times here include "
            f"graph building and per-call overheads). The {toy['system']} toy flow, after {toy['iterations']} training "
            f"iterations, has an ESS of {100 * h['ess']:.2f}% of {N} samples ({eff:.2f} effective)")
    if eff < ESS_FLOOR:
        text += f", below the floor of {ESS_FLOOR:g} effective samples"
    text += ("; the paper's ESS and EffSU come from hours of training on a GPU. The table's verdicts: "
             + "; ".join(f"{r.claim}: {r.verdict}" for r in rows) + ".")
    return text


def claim_rows(*, check: dict, cost: dict, toy: dict, peer: dict | None, gpu: dict | None = None,
               check_scale: str, cost_scale: str, toy_scale: str) -> list[Claim]:
    """All rows of the Reproduce table."""
    return [theorem_row(check, check_scale), pruning_row(check, check_scale), peer_row(peer, check_scale),
            cost_row(cost, cost_scale), paths_row(toy, toy_scale), ess_row(toy, toy_scale), *gpu_rows(gpu)]


def scale_summary(gpu: dict | None) -> str:
    """The Scale-up section's outcome paragraph, built from the GPU rows (:func:`gpu_rows`): each toy model's
    effective samples and verdict against the floor, each system's EffSU row, and the ≥ 10× check at n = 64."""
    rows = gpu_rows(gpu)
    if not gpu:
        return f"**Recorded GPU run.** {rows[0].measured}."
    parts = [f"{r.claim} — {r.measured} ({r.verdict}{'' if r.evidence in r.measured else ': ' + r.evidence})" for r in rows
             if "ESS above the floor" in r.claim or "EffSU" in r.claim or r.claim.startswith("Likelihood step ≥ 10×")]
    return (f"**Recorded GPU run ({_gpu_where(gpu)}), as the table judges it.** " + "; ".join(parts) + ".")

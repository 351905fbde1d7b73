"""Claim rows of paper 19's notebook, built from the run's results and judged by the one rule
(:func:`companion.core.judge`).

Inputs: ``toy`` -- :func:`~companion.diverse_sampling.toy.summary` at the notebook's ``N``, one per seed (a
list; a single dict is one seed), ``curve`` -- :func:`~companion.diverse_sampling.toy.cluster_error_curve`,
one per seed likewise, ``text`` -- :func:`~companion.diverse_sampling.textqa.run_text_experiment` (or None when
skipped), ``gpu`` -- the recorded GPU study (:func:`companion.diverse_sampling.scale.recorded`, or None): its
``sweep`` stage gives the GPU rows (meanings covered at every point; at N = 16 the AUROC and the |bias| and RMSE
of steered + IS + CV against the model's exact SE, over IID's), whose scale names the scorer the run used; a
sweep that did not finish (``payload["stages"]``) gives a not-run row.

Every row is an effect claim judged on one value per seed: a toy seed is a whole ``TRIALS``-trial
simulation, a text seed a pass over every question. A claim that is a reduction in magnitude (debiasing) is
judged on ``|bias|``, never on a signed bias that a sign flip would pass, and the reweighted estimate's RMSE
is judged beside it. Every threshold is a named constant, tested just inside and just outside in
``tests/unit/test_diverse_sampling_claims.py``.
"""

from __future__ import annotations

import math

import numpy as np

from companion.core import Claim, judge, not_run, per_seed, seeds_text
from companion.core.claims import at_cell
from companion.core.stages import not_finished
from companion.diverse_sampling.sampler import ADAPTIVE_SCHEDULE

COMMAND = "python -m companion.bench diverse_sampling"  # the study that records the GPU rows
# the cells of notebooks/19_diverse_sampling.ipynb (nbformat ids) that measure the rows: the exact toy, the text
# version, and the Scale-up cell that shows the recorded GPU study
TOY_CELL, TEXT_CELL, GPU_CELL = "b6de2a8d", "ab163986", "61d18ff3"
COVERAGE_RATIO = 1.3  # steered must cover at least 1.3x the clusters IID covers (paper: "more clusters")
STEER_BIAS_MIN = 0.05  # unweighted steered SE must over-estimate by at least this (nats) to count as biased upwards
BIAS_REDUCTION = 0.5  # IS must cut |bias| of the unweighted steered estimate to at most this fraction of it
RMSE_RATIO_MAX = 1.0  # ... and leave its RMSE at most this multiple of the unweighted steered estimate's
CV_RMSE_GAIN = 0.9  # the control variate must bring RMSE to at most 0.9x that of IS alone
ESS_PAPER = 0.4  # the paper: ESS/N stays above 0.4 (App. D)
ESS_MIN = 0.2  # the weaker bar for ESS/N: weights still usable
CURVE_SHRINK = 0.5  # the IS cluster-probability error at the largest N must be at most half that at the smallest
AUROC_MARGIN = 0.05  # steered + IS must beat IID AUROC by this margin to count as a gain at this scale
TEXT_COVERAGE_RATIO = 1.1  # text model: steered covers at least 1.1x the IID meanings
GPU_BIAS_RATIO = 1.0  # one-GPU study: |bias| of steered + IS + CV vs the model's exact SE at most IID's (per seed)
GPU_RMSE_RATIO = 1.0  # ... and its RMSE at most IID's, at equal N
GPU_N = 16  # the N of the paper's Table 1, where the one-GPU study's AUROC, bias and RMSE rows are judged

PAPER_BIAS = "steering alone biases the estimate; self-normalised p/q weights debias it (§3.3)"


def _mean(toys, *keys) -> float:
    vals = []
    for t in toys:
        v = t
        for k in keys:
            v = v[k]
        vals.append(v)
    return float(np.mean(vals))


def magnitude_ratio(a: float, b: float) -> float:
    """``|a| / |b|``: how much of a magnitude is left (``inf`` when ``b`` is 0 and ``a`` is not, 1 when both are)."""
    a, b = abs(float(a)), abs(float(b))
    if b == 0.0:
        return 1.0 if a == 0.0 else math.inf
    return a / b


def _fmt(x: float) -> str:
    return f"{x:.2f}" if math.isfinite(x) else ("inf" if x > 0 else "-inf")


def _ratio_fmt(x: float) -> str:
    return f"{x:.2f}x" if math.isfinite(x) else _fmt(x)


def _opt(x) -> str:
    """A recorded mean that may be missing (None: undefined on every seed)."""
    return "n/a" if x is None else f"{x:.2f}"


def coverage_row(toy, scale: str) -> Claim:
    toys = per_seed(toy)
    ratios = [t["covered"]["steered"] / t["covered"]["iid"] for t in toys]
    t0 = toys[0]
    return Claim("Steering covers more semantic clusters with the same N",
                 "more clusters than IID / DBS / SDLG at N = 16 on four QA sets (Table 1, Fig. 3)",
                 f"clusters covered at N = {t0['n']} (mean over trials and seeds): IID {_mean(toys, 'covered', 'iid'):.2f} "
                 f"vs steered {_mean(toys, 'covered', 'steered'):.2f} (λ = {t0['lam']:g}, k = {t0['k']}, "
                 f"{t0['aggregation']}); judged on steered/IID per seed",
                 f"{scale}, {seeds_text(len(toys))}", judge(ratios, COVERAGE_RATIO, direction="higher", fmt=_ratio_fmt))


def steer_bias_row(toy, scale: str) -> Claim:
    toys = per_seed(toy)
    bias = [t["bias"]["steered"] for t in toys]
    return Claim("Steering alone biases the SE estimate upwards", PAPER_BIAS,
                 f"bias of the unweighted steered estimate vs true SE {toys[0]['true_se']:.3f}: "
                 + ", ".join(f"{b:+.3f}" for b in bias) + " nats per seed",
                 f"{scale}, {seeds_text(len(toys))}",
                 judge(bias, STEER_BIAS_MIN, direction="higher", fmt=lambda x: f"{x:.3f}" if math.isfinite(x) else _fmt(x)))


def bias_row(toy, scale: str) -> Claim:
    """Debiasing is a reduction in magnitude: judged on |bias of steered + IS| / |bias of steered|, per seed."""
    toys = per_seed(toy)
    left = [magnitude_ratio(t["bias"]["steered_is"], t["bias"]["steered"]) for t in toys]
    keys = ("iid", "steered", "steered_is", "steered_is_cv")
    shift = {k: _mean(toys, "bias", k) - _mean(toys, "bias", "iid") for k in ("steered", "steered_is")}
    return Claim("Importance reweighting debiases the steered SE estimate (|bias|)", PAPER_BIAS,
                 f"bias vs true SE {toys[0]['true_se']:.3f} (mean over seeds): "
                 + ", ".join(f"{k} {_mean(toys, 'bias', k):+.3f}" for k in keys)
                 + "; judged on |bias steered + IS| / |bias steered| per seed: " + ", ".join(_fmt(v) for v in left)
                 + f" (a sign flip counts by its size). The plug-in entropy keeps a negative small-sample bias "
                 f"(IID's); against IID's mean, steering shifts the estimate by {shift['steered']:+.3f} and steered + IS "
                 f"by {shift['steered_is']:+.3f}",
                 f"{scale}, {seeds_text(len(toys))}", judge(left, BIAS_REDUCTION, direction="lower", fmt=_fmt))


def rmse_row(toy, scale: str) -> Claim:
    toys = per_seed(toy)
    ratios = [magnitude_ratio(t["rmse"]["steered_is"], t["rmse"]["steered"]) for t in toys]
    return Claim("Reweighting brings the steered SE estimate closer to the truth (RMSE)", PAPER_BIAS,
                 "RMSE (mean over seeds): " + ", ".join(f"{k} {_mean(toys, 'rmse', k):.3f}"
                                                        for k in ("iid", "steered", "steered_is", "steered_is_cv"))
                 + "; judged on RMSE steered + IS / RMSE steered per seed",
                 f"{scale}, {seeds_text(len(toys))}", judge(ratios, RMSE_RATIO_MAX, direction="lower", fmt=_ratio_fmt))


def cv_row(toy, scale: str) -> Claim:
    toys = per_seed(toy)
    ratios = [magnitude_ratio(t["rmse"]["steered_is_cv"], t["rmse"]["steered_is"]) for t in toys]
    return Claim("A control variate shrinks the variance",
                 "control variates on −log p(s) reduce the estimator's variance (§3.4; Eq. 10 garbled)",
                 "RMSE (mean over seeds): steered + IS " + f"{_mean(toys, 'rmse', 'steered_is'):.3f}, + CV "
                 f"{_mean(toys, 'rmse', 'steered_is_cv'):.3f}; chain-rule CV Z = −log p(s) − Σ_t H_t; judged on RMSE "
                 "with CV / without per seed",
                 f"{scale}, {seeds_text(len(toys))}", judge(ratios, CV_RMSE_GAIN, direction="lower", fmt=_ratio_fmt))


def ess_row(toy, scale: str) -> Claim:
    toys = per_seed(toy)
    ess = [t["ess"] for t in toys]
    return Claim("Weights stay usable", "ESS/N stays above 0.4 (App. D)",
                 f"mean ESS/N per seed: {', '.join(f'{e:.2f}' for e in ess)} (min over trials "
                 f"{min(t['ess_min'] for t in toys):.2f})",
                 f"{scale}, {seeds_text(len(toys))}",
                 judge(ess, ESS_PAPER, direction="higher", weaker=ESS_MIN, fmt=_fmt))


def curve_row(curve, scale: str) -> Claim:
    curves = per_seed(curve)
    shrink = [c["error_l1_is"][-1] / c["error_l1_is"][0] for c in curves]
    c0 = curves[0]
    err = np.mean([c["error_l1_is"] for c in curves], axis=0)
    return Claim("IS cluster probabilities converge to the truth",
                 "p^(c) = Σ w~_i 1[s_i ∈ c] is consistent (self-normalised IS)",
                 "mean Σ_c |p^(c) − p(c)| (mean over seeds) at N = " + ", ".join(f"{n}: {v:.3f}" for n, v in zip(c0["n"], err))
                 + f"; |E p^ − p| at N = {c0['n'][-1]}: {np.mean([c['bias_l1_is'][-1] for c in curves]):.3f} (unweighted: "
                 f"{np.mean([c['bias_l1_unweighted'][-1] for c in curves]):.3f}); judged on the error at N = {c0['n'][-1]} "
                 f"over that at N = {c0['n'][0]}, per seed",
                 f"{scale}, {seeds_text(len(curves))}", judge(shrink, CURVE_SHRINK, direction="lower", fmt=_ratio_fmt))


def _text_seed_ratios(text: dict) -> list[float]:
    iid, st = np.asarray(text["covered_iid"], dtype=float), np.asarray(text["covered_steered"], dtype=float)
    return (st.mean(1) / iid.mean(1)).tolist()


def auroc_row(text: dict | None, scale: str) -> Claim:
    paper = ("AUROC of SE at N = 16: TriviaQA/OPT-6.7B .82 steered vs .66 IID, .78 SDLG; TruthfulQA/LLaDA-8B "
             ".94 vs .85; SDLG wins TriviaQA/OPT-13B (.86 vs .85)")
    claim = "Higher AUROC of SE for predicting errors"
    if text is None:
        return Claim(claim, paper, "text experiment skipped", scale, not_run("the text experiment was skipped (TEXT = False)"))
    a = text["auroc"]
    seeds = len(text["seeds"])
    per_seed = text.get("auroc_seeds") or {k: [v[0]] for k, v in a.items()}
    gains = [b - c for c, b in zip(per_seed["iid"], per_seed["steered_is"])]
    measured = (f"{text['n_questions']} templated questions, N = {text['n']}: AUROC IID {a['iid'][0]:.2f}, steered + IS "
                f"{a['steered_is'][0]:.2f}, + CV {a['steered_is_cv'][0]:.2f}, unweighted {a['steered_unweighted'][0]:.2f} "
                f"(exact model SE: {text['auroc_truth']:.2f})"
                + (f"; jackknife SE over questions ±{text['auroc_jackknife_se']['steered_is']:.2f}"
                   if "auroc_jackknife_se" in text else "")
                + ("; above the exact-SE ceiling, i.e. sampling noise at this size"
                   if a["steered_is"][0] > text["auroc_truth"] else "")
                + "; judged on AUROC steered + IS − IID per seed")
    where = f"{scale}, {seeds_text(seeds)}"
    if not all(np.isfinite(gains)):
        why = "AUROC undefined: the greedy answers are all right or all wrong on these questions"
        return Claim(claim, paper, f"{measured}; {why}", where, not_run(why))
    return Claim(claim, paper, measured, where, judge(gains, AUROC_MARGIN, direction="higher", fmt=_fmt))


def text_coverage_row(text: dict | None, scale: str) -> Claim:
    claim = "Steering with a partial-sequence NLI covers more meanings"
    if text is None:
        return Claim(claim, "more clusters at equal N", "text experiment skipped", scale,
                     not_run("the text experiment was skipped (TEXT = False)"))
    ratios = _text_seed_ratios(text)
    iid, st = float(np.mean(text["covered_iid"])), float(np.mean(text["covered_steered"]))
    return Claim(claim, "the [TRUNC]-fine-tuned NLI steers decoding away from meanings already sampled (Alg. 1)",
                 f"distinct meanings per question at N = {text['n']}: IID {iid:.2f} vs steered {st:.2f}; ESS/N "
                 f"{float(np.mean(text['ess'])):.2f}; NLI clusters vs true meanings ARI {float(np.mean(text['agree'])):.2f}; "
                 "judged on steered/IID per seed",
                 f"{scale}, {seeds_text(len(ratios))}", judge(ratios, TEXT_COVERAGE_RATIO, direction="higher", fmt=_ratio_fmt))


def _gpu_values(r: dict, key: str, value: float, seeds) -> list | None:
    """Per-seed values of a sweep point: recorded per seed, or the one value of a one-seed run (None when a
    several-seed payload kept only the mean)."""
    if key in r:
        return r[key]
    return [value] if len(r.get("seeds", seeds)) == 1 else None


def _no_sweep(gpu: dict | None) -> str | None:
    """Why a payload has no sweep to judge (None when it has one)."""
    left = [s for s in not_finished(gpu) if s.split(" ", 1)[0] == "sweep"]
    if not gpu or left or "sweep" not in gpu:
        return f"the GPU study's stage {left[0]}" if left else f"no GPU results recorded: run {COMMAND} on a GPU"
    return None


def gpu_rows(gpu: dict | None) -> list[Claim]:
    why = _no_sweep(gpu)
    if why:
        return [Claim("Steered sampling at one-GPU scale", "AUROC, clusters and ESS/N vs N ∈ {4 … 64}, λ schedules, k",
                      why, "H200", not_run(why))]
    cfg = gpu.get("profile", {})
    seeds = cfg.get("seeds", [0])
    scorer = gpu.get("text_model", {}).get("scorer", "?")
    scored = f"similarity: {scorer}" + ("; an exact oracle of the templates, not an NLI model" if "oracle" in scorer else "")
    where = (f"{gpu.get('device', 'GPU')}, {gpu.get('date', '?')}; word GRU LM (dim {cfg.get('lm_dim', '?')}), "
             f"{3 * cfg.get('questions_per_type', 0)} templated questions; {scored}")
    current = cfg.get("adaptive_schedule")
    rows = []
    for r in gpu["sweep"]:
        adaptive = r.get("adaptive", "adaptive" in r["schedule"])
        stale = adaptive and current != ADAPTIVE_SCHEDULE
        n_seeds = len(r.get("seeds", seeds))
        text = (f"meanings per question IID {r['covered_iid']:.2f} vs steered {r['covered_steered']:.2f}; AUROC IID "
                f"{_opt(r['auroc_iid'])} vs steered + IS {_opt(r['auroc_is'])}; ESS/N {r['ess']:.2f}; "
                f"{r['ms_per_sample']:.1f} ms per sample; judged on steered/IID meanings per seed")
        if stale:
            text = ("unsteered: recorded with the earlier adaptive schedule, whose λ stayed 0 until the meaning word had "
                    f"been drawn (ESS/N {r['ess']:.2f}), so these answers are IID draws; inconclusive until "
                    f"{COMMAND} is rerun — " + text)
        values = _gpu_values(r, "covered_ratio_seeds", r["covered_steered"] / r["covered_iid"], seeds)
        label = f"Steered sampling at N = {r['n']} ({r['schedule']}{', unsteered' if stale else ''})"
        scale = f"{where}; {seeds_text(n_seeds)}"
        if values is None:
            why = f"the payload kept only the mean over seeds: rerun {COMMAND}"
            rows.append(Claim(label, "more clusters at equal N", f"{text}; {why}", scale, not_run(why)))
            continue
        judgement = judge(values, TEXT_COVERAGE_RATIO, direction="higher", fmt=_ratio_fmt)
        rows.append(Claim(label, "more clusters at equal N", text, scale, judgement))
    for r in gpu["sweep"]:
        if r["n"] != GPU_N:
            continue
        adaptive = r.get("adaptive", "adaptive" in r["schedule"])
        stale = adaptive and current != ADAPTIVE_SCHEDULE
        gains = _gpu_values(r, "auroc_gain_seeds", r["auroc_is"] - r["auroc_iid"], seeds)
        label = f"Higher AUROC of SE at N = 16 ({r['schedule']}{', unsteered' if stale else ''})"
        text = (f"AUROC IID {_opt(r['auroc_iid'])}, steered + IS {_opt(r['auroc_is'])}, + CV {_opt(r['auroc_is_cv'])} "
                f"(exact model SE {_opt(r['auroc_truth'])}); judged on steered + IS − IID per seed"
                + ("; unsteered (the earlier adaptive schedule): inconclusive until rerun" if stale else ""))
        scale = f"{where}; {seeds_text(len(r.get('seeds', seeds)))}"
        if gains is None or any(g is None or not np.isfinite(g) for g in gains):
            why = "AUROC undefined or kept only as a mean over seeds"
            rows.append(Claim(label, "AUROC .82 vs .66 IID (TriviaQA/OPT-6.7B, N = 16)", f"{text}; {why}", scale, not_run(why)))
            continue
        rows.append(Claim(label, "AUROC .82 vs .66 IID (TriviaQA/OPT-6.7B, N = 16)", text, scale,
                          judge(gains, AUROC_MARGIN, direction="higher", fmt=_fmt)))
        rows.extend(gpu_error_rows(r, f"{r['schedule']}{', unsteered' if stale else ''}", scale))
    return rows


def gpu_error_rows(r: dict, schedule: str, scale: str) -> list[Claim]:
    """|bias| and RMSE of the debiased estimate (steered + IS + CV) against the model's exact SE, each over IID's,
    per seed, at one sweep point; not run for a payload that kept no per-seed bias and RMSE."""
    paper = "reweighting and control variates give an SE estimate at least as good as IID's at equal N (§3.3-3.4)"
    names = {"iid": "IID", "steered_unweighted": "steered", "steered_is": "steered + IS", "steered_is_cv": "+ CV"}
    rows = []
    for what, key, target in (("|bias|", "bias_seeds", GPU_BIAS_RATIO), ("RMSE", "rmse_seeds", GPU_RMSE_RATIO)):
        label = f"Debiased SE estimate vs IID at N = {r['n']}, {what} ({schedule})"
        if key not in r:
            why = f"the payload kept no per-seed bias and RMSE: rerun {COMMAND}"
            means = ", ".join(f"{names[e]} {r[k]:.3f}" for e, k in (("iid", "rmse_iid"), ("steered_is", "rmse_is"),
                                                                       ("steered_is_cv", "rmse_is_cv")) if k in r)
            rows.append(Claim(label, paper, f"RMSE vs the exact model SE (mean): {means}; {why}", scale, not_run(why)))
            continue
        vals = r[key]
        ratios = [magnitude_ratio(a, b) for a, b in zip(vals["steered_is_cv"], vals["iid"])]
        shown = "bias" if key == "bias_seeds" else "RMSE"
        text = (f"{shown} vs the model's exact SE (mean over seeds): "
                + ", ".join(f"{names[e]} {float(np.mean(v)):{'+' if shown == 'bias' else ''}.3f}" for e, v in vals.items())
                + f"; judged on {what} of steered + IS + CV over IID's per seed")
        rows.append(Claim(label, paper, text, scale, judge(ratios, target, direction="lower", fmt=_ratio_fmt)))
    return rows


def _point(claim: str) -> tuple[str, str, str] | None:
    """``(kind, N, schedule)`` of a sweep row's claim ``"<family> at N = <n>[, <measure>] (<schedule>)"``; None for
    another claim."""
    head, paren, schedule = claim.rpartition(" (")
    family, at, rest = head.partition(" at N = ")
    if not (paren and at and schedule.endswith(")")):
        return None
    n, comma, measure = rest.partition(",")
    return family + comma + measure, n, schedule[:-1]


def gpu_outcome(gpu: dict | None) -> str:
    """The one-GPU study's outcome built from its rows (:func:`gpu_rows`): the scorer, then one line per kind of row
    saying at which (N, schedule) points each verdict fell."""
    why = _no_sweep(gpu)
    if why:
        return f"No one-GPU result to report: {why}."
    scorer = (gpu.get("text_model") or {}).get("scorer", "an unrecorded scorer")
    kinds: dict = {}
    for r in gpu_rows(gpu):
        point = _point(r.claim)
        points = kinds.setdefault(point[0] if point else r.claim, {}).setdefault(r.verdict, {})
        if point:
            points.setdefault(point[2], []).append(point[1])
    lines = [f"The recorded study steered with the {scorer}"
             + (" (an exact oracle of the templates, not an NLI model)" if "oracle" in scorer else "") + "."]
    for kind, verdicts in kinds.items():
        said = [verdict + "".join(f" at N = {', '.join(ns)} ({schedule})" if i == 0 else
                                  f" and N = {', '.join(ns)} ({schedule})" for i, (schedule, ns) in enumerate(at.items()))
                for verdict, at in verdicts.items()]
        lines.append(f"{kind}: {'; '.join(said)}.")
    return "\n".join(lines)


def claim_rows(*, toy, curve, text: dict | None, toy_scale: str, text_scale: str, gpu: dict | None = None) -> list[Claim]:
    """All rows of the notebook's Reproduce table (``toy`` and ``curve``: one per seed, or one dict)."""
    return [*at_cell(TOY_CELL, [coverage_row(toy, toy_scale), steer_bias_row(toy, toy_scale), bias_row(toy, toy_scale),
                                rmse_row(toy, toy_scale), cv_row(toy, toy_scale), ess_row(toy, toy_scale),
                                curve_row(curve, toy_scale)]),
            *at_cell(TEXT_CELL, [text_coverage_row(text, text_scale), auroc_row(text, text_scale)]),
            *at_cell(GPU_CELL, gpu_rows(gpu))]

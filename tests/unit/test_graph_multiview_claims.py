"""companion.graph_multiview.claims: every threshold just inside and just outside, on the one rule (judge)."""

import dataclasses

import numpy as np
import pytest

from companion.core import VERDICTS
from companion.graph_multiview import claims as C
from companion.graph_multiview.submix import WEIGHT_RULE
from companion.graph_multiview.training import RECIPE, RunResult


def run(method, acc, kl=0.1, dis=5.0, train=1.0, cache=0.0):
    return RunResult(method, acc, dis, kl, train, cache, 10, 12, np.zeros((1, 2, 3)), np.zeros(1), [1.0], {})


def runs(gmv_accs, van_accs, *, kl_gmv=0.1, kl_ref=0.1, t_gmv=2.0, t_van=1.0, abl=(50.0, 50.0)):
    """Per-fold results; ``kl_gmv``, ``t_gmv``, ``abl`` may be one value or one per fold."""
    n = len(van_accs)
    per = lambda x: list(x) if np.ndim(x) else [x] * n  # noqa: E731
    out = {"vanilla": [run("vanilla", a, train=t) for a, t in zip(van_accs, per(t_van))],
           "gmimo": [run("gmimo", a, kl=k) for a, k in zip(van_accs, per(kl_ref))],
           "mixed_single": [run("mixed_single", abl[0]) for _ in van_accs],
           "decomposition": [run("decomposition", abl[1]) for _ in van_accs],
           "gmv": [run("gmv", a, kl=k, train=t, cache=0.1) for a, k, t in zip(gmv_accs, per(kl_gmv), per(t_gmv))]}
    return out


INV = dict(pairs=10, identity_err=0.0, weight_err=0.0, size_errors=0, feature_errors=0, non_images=0,
           removed_inside=0, mean_w_src=0.2)
PPR = dict(err=0.0, roots=10, top_differs=4)


def test_exact_tol():
    ok = C.mechanics_rows({**INV, "weight_err": C.EXACT_TOL * 0.99}, PPR, "s")[0]
    bad = C.mechanics_rows({**INV, "weight_err": C.EXACT_TOL * 1.01}, PPR, "s")[0]
    assert ok.verdict == "reproduced" and bad.verdict == "not reproduced"
    for count in ("size_errors", "feature_errors", "non_images", "removed_inside"):
        assert C.mechanics_rows({**INV, count: 1}, PPR, "s")[0].verdict == "not reproduced"


def test_ppr_tol():
    assert C.mechanics_rows(INV, {**PPR, "err": C.PPR_TOL * 0.99}, "s")[1].verdict == "reproduced"
    row = C.mechanics_rows(INV, {**PPR, "err": C.PPR_TOL * 1.01}, "s")[1]
    assert row.verdict == "not reproduced" and "D^-½ A D^-½" in row.paper and "4 of 10 roots" in row.measured


def test_acc_margin_pp():
    m = C.ACC_MARGIN_PP
    assert C.accuracy_row(runs([70 + m * 1.01] * 3, [70] * 3), "s").verdict == "reproduced"
    assert C.accuracy_row(runs([70 + m * 0.99] * 3, [70] * 3), "s").verdict == "not reproduced"
    # the mean past the margin, one seed below it: partly
    assert C.accuracy_row(runs([70 + 2 * m, 70 + 2 * m, 70 + m * 0.9], [70] * 3), "s").verdict == "partly reproduced"


def test_accuracy_one_seed_and_straddling_spread():
    m = C.ACC_MARGIN_PP
    one = C.accuracy_row(runs([70 + 10 * m], [70]), "s")
    assert one.verdict == "inconclusive" and one.evidence.startswith("n=1")
    two = C.accuracy_row(runs([70 + 10 * m] * 2, [70] * 2), "s")
    assert two.verdict == "inconclusive"  # fewer than 3 seeds, however large the gain
    # mean gain below the margin but the spread reaches past it
    gains = np.array([m + 10, m - 5, -m])
    assert gains.mean() < m < gains.mean() + gains.std(ddof=1)
    row = C.accuracy_row(runs(list(70 + gains), [70] * 3), "s")
    assert row.verdict == "inconclusive" and "straddles" in row.evidence


def test_ablation_row():
    m = C.ACC_MARGIN_PP
    assert C.ablation_row(runs([70 + m * 1.01] * 3, [70] * 3, abl=(70, 60)), "s").verdict == "reproduced"
    assert C.ablation_row(runs([70 + m * 0.99] * 3, [70] * 3, abl=(60, 70)), "s").verdict == "not reproduced"
    assert C.ablation_row(runs([80] * 2, [70] * 2, abl=(70, 70)), "s").verdict == "inconclusive"
    r = runs([80] * 3, [70] * 3)
    del r["mixed_single"]
    assert C.ablation_row(r, "s").verdict == "not run here"


def test_diversity_factor():
    f = C.DIVERSITY_FACTOR
    assert C.diversity_row(runs([1] * 3, [1] * 3, kl_gmv=f * 1.01, kl_ref=1.0), "s").verdict == "reproduced"
    assert C.diversity_row(runs([1] * 3, [1] * 3, kl_gmv=f * 0.99, kl_ref=1.0), "s").verdict == "not reproduced"
    assert C.diversity_row(runs([1], [1], kl_gmv=10 * f, kl_ref=1.0), "s").verdict == "inconclusive"  # one seed
    # ratios are per seed: a comparison with zero KL counts as infinitely less diverse, equal zeros as 1
    assert C.kl_ratio(0.2, 0.0) == np.inf and C.kl_ratio(0.0, 0.0) == 1.0 and C.kl_ratio(0.3, 0.1) == pytest.approx(3)


def test_overhead_lo_hi():
    for ratio, verdict in ((C.OVERHEAD_LO * 1.01, "reproduced"), (C.OVERHEAD_LO * 0.99, "not reproduced"),
                           (C.OVERHEAD_HI * 0.99, "reproduced"), (C.OVERHEAD_HI * 1.01, "not reproduced")):
        assert C.overhead_row(runs([1], [1], t_gmv=ratio, t_van=1.0), "s").verdict == verdict  # one ratio is enough
    # ratios per fold, one inside the band and one far outside: the mean margin is negative, the spread straddles 0
    row = C.overhead_row(runs([1, 1], [1, 1], t_gmv=[2.0, 5.0], t_van=[1.0, 1.0]), "s")
    assert row.verdict == "inconclusive" and "2.00×, 5.00×" in row.measured
    assert C.overhead_margins([2.0, 1.0, 4.0]) == pytest.approx([0.5, -0.5, -1.0])
    # per epoch trained: GMV stopped after 6 epochs, vanilla after 12, the same total time is twice the cost per epoch
    r = runs([1], [1], t_gmv=1.0, t_van=1.0)
    r["gmv"] = [dataclasses.replace(r["gmv"][0], epochs_run=6)]
    row = C.overhead_row(r, "s")
    assert "2.00×" in row.measured and "epochs run: GMV 6, vanilla 12" in row.measured and row.verdict == "reproduced"


def test_tu_row_not_run():
    row = C.tu_row()
    assert row.verdict == "not run here" and "not shipped" in row.evidence


def test_no_hard_coded_result_in_measured():
    """The PROTEINS numbers of a run that never ran here left the measured column."""
    rows = C.claim_rows(runs([80] * 3, [70] * 3), INV, PPR, scale="s")
    assert not any("70.6" in r.measured or "61.9" in r.measured or "PROTEINS run" in r.measured for r in rows)


def stat(accs):
    a = np.asarray(accs, dtype=float)
    return {"acc": list(a), "acc_mean": float(a.mean()), "acc_std": float(a.std(ddof=1)) if len(a) > 1 else 0.0,
            "folds": len(a)}


def gpu_payload(gmv, van, *, sweep=None, per_fold=True, rule=WEIGHT_RULE, lat=(1.0, 1.1), recipe=RECIPE):
    def s(accs):
        out = stat(accs)
        return out if per_fold else {k: v for k, v in out.items() if k != "acc"}

    sweep = sweep or {"2": van, "4": gmv, "10": gmv}
    stages = ("main", "heads_sweep", "label_noise", "label_ratio", "latency_ms")
    table = {"vanilla": s(van), "ensemble": s(van), "gmv": s(gmv)}
    payload = {"device": "NVIDIA H200", "date": "2026-12-02",
               "profile": {"graphs": 720, "train": {"epochs": 30}, "recipe": recipe},
               "stages": {k: {"state": "done"} for k in stages}, "main": {"gcn": table, "gin": table, "gps": table},
               "heads_sweep": {k: s(v) for k, v in sweep.items()},
               "label_noise": {"20%": {"vanilla": s(van), "gmv": s(gmv)}, "40%": {"vanilla": s(van), "gmv": s(gmv)}},
               "label_ratio": {"50%": {"vanilla": s(van), "gmv": s(gmv)}},
               "latency_ms": {"vanilla": lat[0], "gmv": lat[1]}}
    if rule is not None:
        payload["profile"]["weight_rule"] = rule
    return payload


def verdicts(gpu):
    return {r.claim.split(":")[0].split(" (")[0]: r.verdict for r in C.gpu_rows(gpu)}


def test_gpu_rows_none():
    assert [r.verdict for r in C.gpu_rows(None)] == ["not run here"]


def test_gpu_rows_judged_per_fold():
    m = C.ACC_MARGIN_PP
    v = verdicts(gpu_payload([70 + m * 1.01] * 3, [70] * 3))
    assert v == {"GCN": "reproduced", "GIN": "reproduced", "GPS": "reproduced",
                 "More sub-networks do not lower accuracy": "reproduced",
                 "GMV is more robust to label noise": "reproduced", "GMV is better with fewer labels": "reproduced",
                 "Inference cost": "reproduced"}
    v = verdicts(gpu_payload([70 + m * 0.99] * 3, [70] * 3))
    assert v["GMV is more robust to label noise"] == "not reproduced" and v["GCN"] == "reproduced"
    v = verdicts(gpu_payload([60] * 3, [70] * 3))
    assert v["GCN"] == "not reproduced" and v["More sub-networks do not lower accuracy"] == "not reproduced"
    assert all(r.verdict in VERDICTS for r in C.gpu_rows(gpu_payload([60] * 3, [70] * 3)))
    row = C.gpu_rows(gpu_payload([70] * 3, [70] * 3))[0]
    assert "H200" in row.scale and "3 folds" in row.scale and "30 epochs" in row.scale


def test_gpu_best_margin_pp_and_heads_min_gain_pp():
    b, h = C.BEST_MARGIN_PP, C.HEADS_MIN_GAIN_PP
    assert verdicts(gpu_payload([70 + b + 0.1] * 3, [70] * 3))["GCN"] == "reproduced"
    assert verdicts(gpu_payload([70 + b - 0.1] * 3, [70] * 3))["GCN"] == "not reproduced"
    sweep = lambda d: {"2": [70] * 3, "6": [70 + h + d] * 3}  # noqa: E731
    assert verdicts(gpu_payload([70] * 3, [70] * 3, sweep=sweep(0.1)))["More sub-networks do not lower accuracy"] \
        == "reproduced"
    assert verdicts(gpu_payload([70] * 3, [70] * 3, sweep=sweep(-0.1)))["More sub-networks do not lower accuracy"] \
        == "not reproduced"


def test_gpu_one_seed_two_seeds_and_straddle():
    assert set(verdicts(gpu_payload([90], [70])).values()) == {"inconclusive", "reproduced"}  # only latency judged
    assert verdicts(gpu_payload([90] * 2, [70] * 2))["GCN"] == "inconclusive"  # the sweep stages' 2 folds
    row = C.gpu_rows(gpu_payload([80, 70, 60], [70, 70, 70]))[0]  # GMV − best: +10, 0, −10 around 0
    assert row.verdict == "partly reproduced"  # mean 0 is on the target; not every fold is
    row = C.gpu_rows(gpu_payload([80, 60, 58], [70, 70, 70]))[0]
    assert row.verdict == "inconclusive" and "straddles" in row.evidence


def test_gpu_means_only_json_is_inconclusive():
    """A JSON recorded before per-fold accuracies were kept: one value (the difference of the means)."""
    rows = C.gpu_rows(gpu_payload([90] * 3, [70] * 3, per_fold=False))
    by = {r.claim.split(":")[0].split(" (")[0]: r for r in rows}
    assert by["GCN"].verdict == "inconclusive" and by["GCN"].evidence.startswith("n=1")
    assert "means only" in by["GCN"].measured


def test_gpu_stale_heads_sweep_is_inconclusive():
    """A sweep recorded under an older M > 2 label-weight rule (its profile names none, or an
    older one) says so until rerun."""
    for rule in (None, WEIGHT_RULE - 1):
        gpu = gpu_payload([90] * 3, [70] * 3, rule=rule, per_fold=False)
        assert C.heads_stale(gpu)
        row = next(r for r in C.gpu_rows(gpu) if r.claim.startswith("More sub-networks"))
        assert row.verdict == "inconclusive" and "stale" in row.claim and "STALE" in row.details
        assert C.COMMAND in row.details and "another weight rule" in row.details
    assert not C.heads_stale(gpu_payload([90] * 3, [70] * 3))


def test_the_recorded_study_is_judged_only_under_this_recipe():
    """The committed JSON: its sweep ran under this weight rule; a JSON trained with an older recipe gives
    not-run accuracy rows that say why (never a crash), one of this recipe gives judged rows."""
    from companion.graph_multiview.scale import recorded

    gpu = recorded()
    assert gpu["profile"]["weight_rule"] == WEIGHT_RULE and not C.heads_stale(gpu)
    rows = C.gpu_rows(gpu)
    accuracy = [r for r in rows if not r.claim.startswith("Inference")]
    if C.recipe_stale(gpu):
        assert len(accuracy) == 4 and all(r.verdict == "not run here" and "older training recipe" in r.evidence
                                          for r in accuracy)
    else:
        assert gpu["complete"] and all(r.verdict != "not run here" for r in rows)


def test_older_recipe_payload_is_not_run():
    for recipe in (None, RECIPE - 1):
        gpu = gpu_payload([90] * 3, [70] * 3)
        gpu["profile"].pop("recipe") if recipe is None else gpu["profile"].update(recipe=recipe)
        rows = C.gpu_rows(gpu)
        assert C.recipe_stale(gpu) and [r.verdict for r in rows] == ["not run here"] * 4 + ["reproduced"]
        assert all(C.COMMAND in r.evidence for r in rows[:4])


def test_folds_are_paired_by_index():
    """A stage cut by the deadline: GMV holds folds 0–3, vanilla 0–2; only the common folds are compared."""
    gpu = gpu_payload([90] * 3, [70] * 3)
    gpu["main"]["gcn"]["gmv"] = {**stat([80, 80, 80, 0]), "fold": [0, 1, 2, 3]}
    gpu["main"]["gcn"]["vanilla"] = gpu["main"]["gcn"]["ensemble"] = {**stat([70, 70, 70]), "fold": [0, 1, 2]}
    row = next(r for r in C.gpu_rows(gpu) if r.claim.startswith("GCN"))
    assert row.verdict == "reproduced" and row.evidence.startswith("n=3")
    gpu["main"]["gcn"]["gmv"] = {**stat([80, 80, 80]), "fold": [1, 2, 3]}  # one common fold left
    row = next(r for r in C.gpu_rows(gpu) if r.claim.startswith("GCN"))
    assert row.verdict == "inconclusive" and row.evidence.startswith("n=2")


def test_gpu_sign_flip_is_not_a_gain():
    """GMV below vanilla by the margin on every fold: the gain's sign flipped, so not reproduced (never a pass
    on |gain|)."""
    m = C.ACC_MARGIN_PP
    v = verdicts(gpu_payload([70 - 2 * m] * 3, [70] * 3))
    assert v["GMV is more robust to label noise"] == v["GMV is better with fewer labels"] == "not reproduced"
    assert v["GCN"] == "not reproduced"


def test_stages_that_did_not_finish_are_not_run():
    """A stage the runner left skipped, failed or unfinished (or one the run did not hold), and an encoder the
    main stage did not reach, give not-run rows that say why; the other rows are judged as before."""
    gpu = gpu_payload([90] * 3, [70] * 3)
    del gpu["main"]["gps"], gpu["heads_sweep"], gpu["label_noise"], gpu["latency_ms"]
    gpu["stages"]["heads_sweep"] = {"state": "failed", "error": "RuntimeError: CUDA out of memory"}
    gpu["stages"]["label_noise"] = {"state": "unfinished", "started": "2026-12-04 04:50:00 UTC"}
    gpu["stages"]["latency_ms"] = {"state": "skipped", "reason": "deadline: 3 s left, needs 5 s"}
    rows = {r.claim.split(":")[0]: r for r in C.gpu_rows(gpu)}
    assert rows["GPS"].verdict == "not run here" and "deadline" in rows["GPS"].evidence
    assert rows["More sub-networks do not lower accuracy"].verdict == "not run here"
    assert "stage heads_sweep (failed: RuntimeError: CUDA out of memory)" in rows["More sub-networks do not lower accuracy"].measured
    assert "label_noise (unfinished)" in rows["GMV is more robust to label noise"].evidence
    assert "needs 5 s" in rows["Inference cost"].evidence and rows["Inference cost"].verdict == "not run here"
    assert rows["GCN"].verdict == rows["GMV is better with fewer labels"].verdict == "reproduced"
    del gpu["main"], gpu["stages"]["main"]
    assert C.gpu_rows(gpu)[0].verdict == "not run here" and "main not in the recorded run" in C.gpu_rows(gpu)[0].measured


def test_inference_ratio_max():
    r = C.INFERENCE_RATIO_MAX
    assert verdicts(gpu_payload([70] * 3, [70] * 3, lat=(1.0, r * 0.99)))["Inference cost"] == "reproduced"
    assert verdicts(gpu_payload([70] * 3, [70] * 3, lat=(1.0, r * 1.01)))["Inference cost"] == "not reproduced"


@pytest.mark.parametrize("n_folds", [1, 3])
def test_rows_follow_the_run(n_folds):
    rows = C.claim_rows(runs([80] * n_folds, [70] * n_folds), INV, PPR, scale="60 motif graphs")
    assert all(r.verdict in VERDICTS for r in rows) and all(r.evidence for r in rows)
    assert ("one fold" if n_folds == 1 else f"{n_folds} folds") in rows[2].scale
    assert rows[2].evidence.startswith(f"n={n_folds}")

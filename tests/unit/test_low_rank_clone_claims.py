"""companion.low_rank_clone.claims: every verdict threshold, just inside and just outside, under the one rule
(companion.core.judge): exact rows on one run, effect rows on per-seed values, the throughput row on a ratio."""

import numpy as np
import pytest

from companion.core import VERDICTS
from companion.low_rank_clone import claims as C
from companion.low_rank_clone import experiments as E
from companion.low_rank_clone.scale import SEED_STAGES


def checks(lemma=1e-12, merge=1e-7):
    return {"lemma1_gap": lemma, "merge_gap": merge, "identity_gap": 0.0, "identity_clone_max": 0.0}


def study(lrc=0.8, tb=0.7, no_ffn=0.7, no_attn=0.79, n=12, tb_start=0.1):
    def f(s, start=0.2):
        return {"final": {"spearman": s, "retrieval": 0.5}, "steps": 150,
                "snapshots": [{"step": 0, "scores": {"spearman": start}}, {"step": 150, "scores": {"spearman": s}}]}

    return {"teacher_cos": np.eye(n), "runs": {"LRC": f(lrc), "TinyBERT-style": f(tb, tb_start),
                                               "LRC without FFN clone": f(no_ffn), "LRC without attention clone": f(no_attn)}}


def causal(lrc_tokens_at_target, rnd_final=2.0, pruned_final=None):
    tokens = [0, 100, 200, 300, 400]
    rnd = {"curve": {"tokens": tokens, "val_loss": [5, 4, 3, 2.5, rnd_final]}, "final_val_loss": rnd_final}
    lrc_loss = [5.0 if t < lrc_tokens_at_target else rnd_final - 0.1 for t in tokens]
    lrc = {"curve": {"tokens": tokens, "val_loss": lrc_loss}, "final_val_loss": lrc_loss[-1]}
    pruned = rnd if pruned_final is None else {"final_val_loss": pruned_final}
    return {"runs": {"LRC": lrc, "random init + KD": rnd, "hard pruning + KD": pruned}, "teacher_val_loss": 1.5}


# ---------------------------------------------------------------------------------- exact rows (one run)
def test_mechanism_thresholds():
    assert C.mechanism_rows(checks(lemma=0.99 * C.LEMMA_TOL))[0].verdict == "reproduced"
    assert C.mechanism_rows(checks(lemma=1.01 * C.LEMMA_TOL))[0].verdict == "not reproduced"
    assert C.mechanism_rows(checks(merge=0.99 * C.MERGE_TOL))[1].verdict == "reproduced"
    assert C.mechanism_rows(checks(merge=1.01 * C.MERGE_TOL))[1].verdict == "not reproduced"
    assert "error" in C.mechanism_rows(checks())[0].evidence


# ---------------------------------------------------------------------------------- effect rows (per seed)
def test_spearman_margin_three_seeds():
    m = C.SPEARMAN_MARGIN
    inside = C.encoder_rows([study(lrc=0.8, tb=0.8 - 1.01 * m)] * 3, "s")[0]
    assert inside.verdict == "reproduced" and "3 seeds" in inside.scale and "n=3" in inside.evidence
    assert C.encoder_rows([study(lrc=0.8, tb=0.8 - 0.99 * m)] * 3, "s")[0].verdict == "not reproduced"


def test_spearman_one_seed_is_inconclusive():
    row = C.encoder_rows(study(lrc=0.8, tb=0.2), "MiniLM")[0]
    assert row.verdict == "inconclusive" and "one seed" in row.scale and "n=1" in row.evidence


def test_spearman_spread_straddles_margin():
    m = C.SPEARMAN_MARGIN
    row = C.encoder_rows([study(lrc=0.8, tb=0.8 - g * m) for g in (0.2, 0.8, 1.4)], "s")[0]
    assert row.verdict == "inconclusive" and "straddles" in row.evidence


def test_baseline_that_did_not_learn_is_said():
    """The committed TinyBERT-style runs end below their step-0 Spearman: the row must say the baseline did not learn."""
    stalled = C.encoder_rows(study(tb=0.034, tb_start=0.112), "s")[0]
    assert "did not learn" in stalled.measured and "0.112 at step 0 → 0.034" in stalled.measured
    learned = C.encoder_rows(study(tb=0.5, tb_start=0.1), "s")[0]
    assert "did not learn" not in learned.measured


def test_committed_minilm_grid_says_the_baseline_did_not_learn():
    from companion.core import repo_path
    from companion.low_rank_clone.study_io import load_grid

    grid = load_grid(repo_path("data", "low_rank_clone", "minilm_grid"))
    if not grid:
        pytest.skip("no committed MiniLM grid")
    for s in grid.values():
        row = C.encoder_rows(s, "committed")[0]
        assert "did not learn" in row.measured and row.verdict == "inconclusive"


def test_ablation_margin():
    m = C.ABLATION_MARGIN
    # per seed: (FFN drop) − (attention drop) against the margin
    inside = [study(lrc=0.8, no_ffn=0.8 - 2.02 * m, no_attn=0.8 - 1.0 * m)] * 3  # 2.02 m − 1.0 m = 1.02 m
    outside = [study(lrc=0.8, no_ffn=0.8 - 1.98 * m, no_attn=0.8 - 1.0 * m)] * 3  # 0.98 m
    assert C.encoder_rows(inside, "s")[1].verdict == "reproduced"
    assert C.encoder_rows(outside, "s")[1].verdict == "not reproduced"
    assert C.encoder_rows(study(lrc=0.8, no_ffn=0.5, no_attn=0.8), "s")[1].verdict == "inconclusive"  # one seed
    assert C.encoder_rows(None, "s")[0].verdict == "not run here"


def test_efficiency_ratio():
    # LRC first reaches the target at 100 tokens, random init + KD at 400: ratio 0.25, per seed
    assert C.causal_rows([causal(100)] * 3, "s")[0].verdict == "reproduced"
    assert C.EFFICIENCY_RATIO == 0.5
    # exactly on the bar (200 / 400 = 0.5) counts, with three seeds
    assert C.causal_rows([causal(200)] * 3, "s")[0].verdict == "reproduced"
    # 0.75: past the weaker bar (< 1) only
    assert C.causal_rows([causal(300)] * 3, "s")[0].verdict == "partly reproduced"
    # LRC never reaches the target: an infinite ratio
    never = C.causal_rows([causal(401)] * 3, "s")[0]
    assert never.verdict == "not reproduced"
    assert "never reached" in never.measured and "inf" in never.evidence
    assert C.causal_rows(None, "s")[0].verdict == "not run here"


def test_efficiency_one_seed_on_the_bar_is_inconclusive():
    """The old CPU row: 0.50 against ≤ 0.5 from one 30-step run was 'reproduced'; one seed is inconclusive now."""
    row = C.causal_rows(causal(200), "s")[0]
    assert row.verdict == "inconclusive" and "one seed" in row.scale and "0.50" in row.measured


def causal_ratio(t_lrc, t_rnd=400):
    """A study in which random init + KD reaches its final loss at ``t_rnd`` tokens and LRC at ``t_lrc``."""
    tokens = list(range(0, 1001, 50))
    rnd = [5.0 if t < t_rnd else 2.0 for t in tokens]
    lrc = [5.0 if t < t_lrc else 1.9 for t in tokens]
    return {"runs": {"LRC": {"curve": {"tokens": tokens, "val_loss": lrc}, "final_val_loss": lrc[-1]},
                     "random init + KD": {"curve": {"tokens": tokens, "val_loss": rnd}, "final_val_loss": 2.0}},
            "teacher_val_loss": 1.5}


def test_efficiency_spread_straddles_the_bar():
    # ratios 0.25, 1.5, 1.5: the mean 1.08 misses even the weaker bar (< 1), but mean ± std (0.72) straddles 0.5
    row = C.causal_rows([causal_ratio(100), causal_ratio(600), causal_ratio(600)], "s")[0]
    assert row.verdict == "inconclusive" and "straddles" in row.evidence
    # ratios 0.25, 0.5, 0.75: the mean on the bar, not every seed: partly
    row = C.causal_rows([causal_ratio(100), causal_ratio(200), causal_ratio(300)], "s")[0]
    assert row.verdict == "partly reproduced"
    # ratios 1.5 each: slower than random init + KD on every seed
    assert C.causal_rows([causal_ratio(600)] * 3, "s")[0].verdict == "not reproduced"


def test_prune_margin():
    lrc_final = causal(100)["runs"]["LRC"]["final_val_loss"]
    inside = [causal(100, pruned_final=lrc_final + 1.01 * C.PRUNE_MARGIN)] * 3
    outside = [causal(100, pruned_final=lrc_final + 0.99 * C.PRUNE_MARGIN)] * 3
    assert C.causal_rows(inside, "s")[1].verdict == "reproduced"
    assert C.causal_rows(outside, "s")[1].verdict == "not reproduced"
    assert C.causal_rows(inside[0], "s")[1].verdict == "inconclusive"  # one seed
    straddle = [causal(100, pruned_final=lrc_final + g * C.PRUNE_MARGIN) for g in (0.2, 0.8, 1.4)]
    row = C.causal_rows(straddle, "s")[1]
    assert row.verdict == "inconclusive" and "straddles" in row.evidence


def test_hard_pruning_winning_is_said():
    lrc_final = causal(100)["runs"]["LRC"]["final_val_loss"]
    row = C.causal_rows(causal(100, pruned_final=lrc_final - 0.3), "s")[1]
    assert "hard pruning + KD beat LRC" in row.measured and row.verdict == "inconclusive"
    row = C.causal_rows([causal(100, pruned_final=lrc_final - 0.3)] * 3, "s")[1]
    assert row.verdict == "not reproduced"


# ---------------------------------------------------------------------------------- GPU rows (recorded JSON)
STEP_TOKENS = 20 * 32 * 256  # one evaluation interval of the GPU profile: 20 steps of 32 × 256 bytes
TOKENS = [i * STEP_TOKENS for i in range(16)]  # 0 … 2,457,600: the 300-step budget
TARGET = 2.0


def _seed(seed=0, lrc_at=7, rnd_at=15, pruned_at=1, lrc_final=1.25, pruned_final=1.0, rnd_final=1.8, teacher=0.9):
    """One recorded per-seed stage: each student's validation loss is 5 until evaluation ``*_at`` (None: never),
    then its final value (below the target)."""
    def run(at, final):
        loss = [5.0 if at is None or i < at else final for i in range(len(TOKENS))]
        return {"curve": {"step": [20 * i for i in range(len(TOKENS))], "tokens": TOKENS, "val_loss": loss},
                "final_val_loss": loss[-1]}

    runs = {"LRC": run(lrc_at, lrc_final), "random init + KD": run(rnd_at, rnd_final),
            "hard pruning + KD": run(pruned_at, pruned_final)}
    return {"seed": seed, "d_teacher": 512, "d_student": 256, "teacher_val_loss": teacher, "target_loss": TARGET,
            "runs": runs, "tokens_to_target": {m: E.tokens_to_reach(r["curve"], TARGET) for m, r in runs.items()}}


def _gpu(*seeds, ratio=0.58, states=None):
    """A recorded payload in the stage-runner layout: a seed stage for each of ``seeds``, the others skipped."""
    done = {"state": "done"}
    stages = {"teacher": done, **{n: done if k < len(seeds) else {"state": "skipped", "reason": "deadline: 20 s left, needs 65 s"}
                                  for k, n in enumerate(SEED_STAGES)}, "throughput": done, **(states or {})}
    gpu = {"device": "NVIDIA H200", "date": "2027-01-02", "profile": {"student_steps": 300, "batch": 32, "seq_len": 256},
           "stages": stages, "teacher": {"curve": {"tokens": [0, 10**6], "val_loss": [5.5, 0.9]}, "parameters": 25_960_960,
                                         "seconds": 90.0, "tokens": 30_000_000, "val_loss": 0.9},
           "throughput": {"lrc_tok_s": 84e3, "plain_tok_s": 146e3, "ratio": ratio, "factored_ms": 1.0, "materialised_ms": 2.0}}
    gpu.update(zip(SEED_STAGES, seeds))
    return gpu


def _three(ratio=0.58, **kw):
    return _gpu(*(_seed(seed=k, **kw) for k in range(3)), ratio=ratio)


def test_gpu_rows_without_a_run_or_with_the_earlier_one_seed_layout():
    assert [r.verdict for r in C.gpu_rows(None)] == ["not run here"]
    old = {"device": "NVIDIA H200", "date": "2026-12-02", "profile": {"batch": 32, "seq_len": 256},
           "stages": {s: {"state": "done"} for s in ("teacher", "causal", "throughput")}, "causal": {"runs": {}},
           "throughput": _gpu().pop("throughput")}
    eff, prune, thr = C.gpu_rows(old)
    assert eff.verdict == prune.verdict == "not run here" and thr.verdict == "reproduced"
    assert "students_0 (not run)" in eff.evidence and "no per-seed stages: its stages are teacher, causal, throughput" in prune.measured


def test_gpu_efficiency_ratio_three_seeds():
    # LRC reaches the target at evaluation 7, random init + KD at 15: 7/15 = 0.47 on every seed, inside the bar
    eff = C.gpu_rows(_three(lrc_at=7, rnd_at=15))[0]
    assert eff.verdict == "reproduced" and "3 seeds" in eff.scale and "n=3" in eff.evidence
    assert "LRC / random init + KD per seed 0.47, 0.47, 0.47" in eff.measured
    assert "LRC 1.15 ± 0.00M, random init + KD 2.46 ± 0.00M, hard pruning + KD 0.16 ± 0.00M" in eff.measured
    assert "teacher d 512 (26M parameters, trained 90 s on 30.0M tokens)" in eff.scale and "2.46M tokens each" in eff.scale
    assert C.gpu_rows(_three(lrc_at=7, rnd_at=14))[0].verdict == "reproduced"  # 0.5 = EFFICIENCY_RATIO: on the bar counts
    assert C.gpu_rows(_three(lrc_at=8, rnd_at=15))[0].verdict == "partly reproduced"  # 0.53: past the weaker bar (< 1) only
    assert C.gpu_rows(_three(lrc_at=15, rnd_at=12))[0].verdict == "not reproduced"  # 1.25: slower on every seed


def test_gpu_efficiency_one_seed_and_a_straddling_spread():
    one = C.gpu_rows(_gpu(_seed(lrc_at=2, rnd_at=15)))[0]
    assert one.verdict == "inconclusive" and "one seed" in one.scale and "n=1" in one.evidence
    assert "not in these numbers: students_1 (skipped: deadline: 20 s left, needs 65 s)" in one.measured
    # ratios 0.25, 1.5, 1.5: the mean 1.08 misses even the weaker bar, but mean ± std (0.72) reaches 0.5
    straddle = C.gpu_rows(_gpu(_seed(0, lrc_at=2, rnd_at=8), _seed(1, lrc_at=12, rnd_at=8), _seed(2, lrc_at=12, rnd_at=8)))[0]
    assert straddle.verdict == "inconclusive" and "straddles" in straddle.evidence


def test_gpu_efficiency_when_a_student_never_reaches_the_target():
    # random init + KD never reaches it: charged the budget plus one evaluation, so the ratio is an upper bound
    censored = C.gpu_rows(_three(lrc_at=7, rnd_at=None))[0]
    assert censored.verdict == "reproduced" and "0.44, 0.44, 0.44" in censored.measured
    assert "random init + KD not reached" in censored.measured and "charged its budget plus one evaluation (2.62M)" in censored.measured
    never = C.gpu_rows(_three(lrc_at=None, rnd_at=15))[0]  # LRC never reaches it: an infinite ratio
    assert never.verdict == "not reproduced" and "LRC not reached" in never.measured and "inf" in never.evidence
    partly = C.gpu_rows(_gpu(_seed(0, lrc_at=None), _seed(1), _seed(2)))[0]
    assert "LRC 1.15 ± 0.00M (1 of 3 not reached)" in partly.measured


def test_gpu_prune_margin_sign_flip_and_spread():
    m = C.PRUNE_MARGIN
    inside = C.gpu_rows(_three(lrc_final=1.0, pruned_final=1.0 + 1.01 * m))[1]
    assert inside.verdict == "reproduced" and "n=3" in inside.evidence
    assert C.gpu_rows(_three(lrc_final=1.0, pruned_final=1.0 + 0.99 * m))[1].verdict == "not reproduced"
    # the claim is signed (LRC lower): the same gap with hard pruning lower never passes
    flipped = C.gpu_rows(_three(lrc_final=1.0 + 1.01 * m, pruned_final=1.0))[1]
    assert flipped.verdict == "not reproduced" and "hard pruning + KD beat LRC" in flipped.measured
    one = C.gpu_rows(_gpu(_seed(lrc_final=1.0, pruned_final=1.5)))[1]
    assert one.verdict == "inconclusive" and "one seed" in one.scale
    straddle = C.gpu_rows(_gpu(*(_seed(k, lrc_final=1.0, pruned_final=1.0 + g * m) for k, g in enumerate((0.2, 0.8, 1.4)))))[1]
    assert straddle.verdict == "inconclusive" and "straddles" in straddle.evidence


def test_gpu_students_below_their_teacher_are_said():
    row = C.gpu_rows(_three(lrc_final=1.25, pruned_final=0.85, teacher=0.9))[1]
    assert "ended below the teacher's own validation loss 0.900: hard pruning + KD 0.850" in row.measured
    assert "below the teacher" not in C.gpu_rows(_three(pruned_final=0.95, teacher=0.9))[1].measured


def test_gpu_throughput_min():
    assert C.gpu_rows(_three(ratio=1.01 * C.THROUGHPUT_MIN))[-1].verdict == "reproduced"
    assert C.gpu_rows(_three(ratio=0.99 * C.THROUGHPUT_MIN))[-1].verdict == "not reproduced"
    assert f"{C.THROUGHPUT_MIN:.0%}" in C.gpu_rows(_three())[-1].paper


def test_unfinished_stages_are_never_judged():
    """Seed stages that did not finish leave the rows not run, naming each and the recorded reason; so does a
    throughput stage that did not run."""
    gpu = _gpu(states={"students_0": {"state": "failed", "error": "RuntimeError: out of memory"},
                       "students_1": {"state": "unfinished", "started": "2027-01-02 10:00 UTC"},
                       "throughput": {"state": "skipped", "reason": "deadline: 3 s left, needs 10 s"}})
    del gpu["throughput"]
    rows = C.gpu_rows(gpu)
    assert [r.verdict for r in rows] == ["not run here"] * 3
    assert all("students_0 (failed: RuntimeError: out of memory); students_1 (unfinished)" in r.evidence for r in rows[:2])
    assert "throughput (skipped: deadline: 3 s left" in rows[2].measured


def test_gpu_figure_of_the_per_seed_study():
    """Every seed's three curves and tokens-to-target markers, the teacher's curve; a student that never reached
    the target is drawn at its budget with an open cross; without per-seed stages the figure says it is not recorded."""
    from companion.low_rank_clone.figures import gpu_figure

    assert "Not recorded: no GPU results recorded" in gpu_figure(None).layout.annotations[0].text
    old = {"stages": {"teacher": {"state": "done"}, "causal": {"state": "done"}}}
    assert "its stages: teacher, causal" in gpu_figure(old).layout.annotations[0].text
    fig = gpu_figure(_gpu(_seed(0), _seed(1, rnd_at=None), _seed(2)))
    assert len(fig.data) == 1 + 3 * 3 * 2
    markers = [t for t in fig.data if t.mode == "markers"]
    crosses = [t for t in markers if t.marker.symbol == "x-open"]
    assert len(markers) == 9 and len(crosses) == 1 and crosses[0].y[0] == TOKENS[-1] and crosses[0].x[0] == "random init + KD"


def test_recorded_json_rows():
    """The committed JSON: per-seed rows judged when its run has the per-seed stages, else not run (never a crash)."""
    from companion.low_rank_clone.scale import recorded

    gpu = recorded()
    if gpu is None:
        pytest.skip("no recorded GPU results")
    rows = C.gpu_rows(gpu)
    assert len(rows) == 3 and all(r.verdict in VERDICTS and r.evidence for r in rows)
    if not any(n in gpu for n in SEED_STAGES):
        assert rows[0].verdict == rows[1].verdict == "not run here"
    elif sum(n in gpu for n in SEED_STAGES) < 3:
        assert rows[0].verdict == rows[1].verdict == "inconclusive"


def test_all_rows_valid():
    rows = C.claim_rows(checks=checks(), encoder=study(), encoder_scale="MiniLM", causal=causal(100), causal_scale="tiny",
                        gpu=None)
    assert len(rows) == 8 and all(r.verdict in VERDICTS and r.evidence for r in rows)


def test_outcome_sentences_follow_the_numbers():
    lrc_final = causal(100)["runs"]["LRC"]["final_val_loss"]
    won = C.outcome_sentences(causal=causal(100, pruned_final=lrc_final - 0.2), gpu=_three(pruned_final=0.966), grid=None)
    assert "Hard pruning + KD reached a lower final validation loss than LRC at every scale" in won[0]
    assert "the recorded NVIDIA H200 run (3 seeds): hard pruning + KD 0.966 vs LRC 1.250" in won[0]
    lost = C.outcome_sentences(causal=causal(100, pruned_final=lrc_final + 0.2), gpu=_three(lrc_final=0.9), grid=None)
    assert lost[0].startswith("LRC reached a lower final validation loss than hard pruning + KD")
    mixed = C.outcome_sentences(causal=causal(100, pruned_final=lrc_final + 0.2), gpu=_three(), grid=None)
    assert "in the recorded NVIDIA H200 run (3 seeds)" in mixed[0]
    assert len(C.outcome_sentences(causal=None, gpu=_gpu(), grid=None)) == 0  # no seed recorded: nothing to say
    grid = {(192, 0.2): study(tb=0.034, tb_start=0.112), (96, 0.2): study(tb=0.5, tb_start=0.1)}
    text = " ".join(C.outcome_sentences(causal=None, gpu=None, grid=grid))
    assert "d_S 192, α 0.2: the TinyBERT-style baseline did not learn (its Spearman went 0.112 → 0.034" in text
    assert "d_S 96, α 0.2: the TinyBERT-style baseline's Spearman went 0.100 → 0.500" in text

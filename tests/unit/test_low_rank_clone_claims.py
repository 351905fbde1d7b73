"""companion.low_rank_clone.claims: every verdict threshold, just inside and just outside, under the one rule
(companion.core.judge): exact rows on one run, effect rows on per-seed values, the throughput row on a ratio."""

import numpy as np
import pytest

from companion.core import VERDICTS
from companion.low_rank_clone import claims as C


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
def _gpu(lrc_final=1.25, pruned_final=0.966, tokens=None, ratio=0.58):
    """A recorded payload in the stage-runner layout, every stage done."""
    c = causal(100)
    c["runs"]["LRC"]["final_val_loss"] = lrc_final
    c["runs"]["hard pruning + KD"] = {"final_val_loss": pruned_final, "curve": c["runs"]["random init + KD"]["curve"]}
    return {"device": "NVIDIA H200", "date": "2026-12-02", "profile": {"student_steps": 300, "batch": 32, "seq_len": 256},
            "stages": {s: {"state": "done"} for s in ("teacher", "causal", "throughput")},
            "causal": {**c, "d_teacher": 512, "d_student": 256, "target_loss": 2.0,
                       "tokens_to_target": tokens or {"LRC": 1_638_400, "random init + KD": 2_457_600, "hard pruning + KD": 204_800}},
            "throughput": {"lrc_tok_s": 84e3, "plain_tok_s": 146e3, "ratio": ratio, "factored_ms": 1.0, "materialised_ms": 2.0}}


def test_gpu_rows_one_seed_and_throughput_min():
    assert [r.verdict for r in C.gpu_rows(None)] == ["not run here"]
    rows = C.gpu_rows(_gpu())
    assert [r.verdict for r in rows] == ["inconclusive", "inconclusive", "reproduced"]
    assert "H200" in rows[0].scale and "one seed" in rows[0].scale
    assert "LRC 1.64M, random init + KD 2.46M" in rows[0].measured and "= 0.67" in rows[0].measured
    assert "hard pruning + KD beat LRC: final validation loss 0.966 vs LRC 1.250" in rows[1].measured
    assert f"{C.THROUGHPUT_MIN:.0%}" in rows[2].paper and "58%" in rows[2].measured
    assert C.gpu_rows(_gpu(ratio=1.01 * C.THROUGHPUT_MIN))[2].verdict == "reproduced"
    assert C.gpu_rows(_gpu(ratio=0.99 * C.THROUGHPUT_MIN))[2].verdict == "not reproduced"
    never = C.gpu_rows(_gpu(tokens={"LRC": None, "random init + KD": 2_457_600}))[0]
    assert "LRC —" in never.measured and "inf" in never.evidence


def test_unfinished_stages_are_never_judged():
    """A stage that did not finish leaves its rows not run, naming it and the recorded reason; so does a
    student the causal stage left out at its deadline."""
    gpu = _gpu()
    del gpu["causal"], gpu["throughput"]
    gpu["stages"]["causal"] = {"state": "failed", "error": "RuntimeError: out of memory"}
    gpu["stages"]["throughput"] = {"state": "skipped", "reason": "deadline: 3 s left, needs 15 s"}
    rows = C.gpu_rows(gpu)
    assert [r.verdict for r in rows] == ["not run here"] * 3
    assert all("causal (failed: RuntimeError: out of memory)" in r.evidence for r in rows[:2])
    assert "throughput (skipped: deadline: 3 s left" in rows[2].measured
    cut = _gpu()
    del cut["causal"]["runs"]["hard pruning + KD"]
    rows = C.gpu_rows(cut)
    assert rows[0].verdict == "inconclusive" and rows[1].verdict == "not run here"
    assert "left out hard pruning + KD" in rows[1].evidence


def test_recorded_json_rows():
    """The committed JSON: the causal rows are one seed (inconclusive), and say that hard pruning won."""
    from companion.core.stages import stage_states
    from companion.low_rank_clone.scale import STAGES, recorded

    gpu = recorded()
    if gpu is None:
        pytest.skip("no recorded GPU results")
    rows = C.gpu_rows(gpu)
    assert all(r.verdict in VERDICTS and r.evidence for r in rows)
    assert set(stage_states(gpu)) == {s.name for s in STAGES}
    if "causal" in gpu:
        runs = gpu["causal"]["runs"]
        assert rows[0].verdict == rows[1].verdict == "inconclusive"
        if runs["hard pruning + KD"]["final_val_loss"] < runs["LRC"]["final_val_loss"]:
            assert "hard pruning + KD beat LRC" in rows[1].measured


def test_all_rows_valid():
    rows = C.claim_rows(checks=checks(), encoder=study(), encoder_scale="MiniLM", causal=causal(100), causal_scale="tiny",
                        gpu=None)
    assert len(rows) == 8 and all(r.verdict in VERDICTS and r.evidence for r in rows)


def test_outcome_sentences_follow_the_numbers():
    lrc_final = causal(100)["runs"]["LRC"]["final_val_loss"]
    won = C.outcome_sentences(causal=causal(100, pruned_final=lrc_final - 0.2), gpu=_gpu(), grid=None)
    assert "Hard pruning + KD reached a lower final validation loss than LRC at every scale" in won[0]
    assert "0.966 vs LRC 1.250" in won[0]
    lost = C.outcome_sentences(causal=causal(100, pruned_final=lrc_final + 0.2), gpu=_gpu(lrc_final=0.9), grid=None)
    assert lost[0].startswith("LRC reached a lower final validation loss than hard pruning + KD")
    mixed = C.outcome_sentences(causal=causal(100, pruned_final=lrc_final + 0.2), gpu=_gpu(), grid=None)
    assert "in the recorded NVIDIA H200 run" in mixed[0]
    grid = {(192, 0.2): study(tb=0.034, tb_start=0.112), (96, 0.2): study(tb=0.5, tb_start=0.1)}
    text = " ".join(C.outcome_sentences(causal=None, gpu=None, grid=grid))
    assert "d_S 192, α 0.2: the TinyBERT-style baseline did not learn (its Spearman went 0.112 → 0.034" in text
    assert "d_S 96, α 0.2: the TinyBERT-style baseline's Spearman went 0.100 → 0.500" in text

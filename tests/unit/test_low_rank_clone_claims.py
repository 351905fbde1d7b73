"""companion.low_rank_clone.claims: every verdict threshold, just inside and just outside."""

import numpy as np

from companion.core import VERDICTS
from companion.low_rank_clone import claims as C


def checks(lemma=1e-12, merge=1e-7, ident=1e-7, clone=0.0):
    return {"lemma1_gap": lemma, "merge_gap": merge, "identity_gap": ident, "identity_clone_max": clone}


def study(lrc=0.8, tb=0.7, no_ffn=0.7, no_attn=0.79, n=12):
    f = lambda s: {"final": {"spearman": s, "retrieval": 0.5}}  # noqa: E731
    return {"teacher_cos": np.eye(n), "runs": {"LRC": f(lrc), "TinyBERT-style": f(tb), "LRC without FFN clone": f(no_ffn),
                                               "LRC without attention clone": f(no_attn)}}


def causal(lrc_tokens_at_target, rnd_final=2.0):
    tokens = [0, 100, 200, 300, 400]
    rnd = {"curve": {"tokens": tokens, "val_loss": [5, 4, 3, 2.5, rnd_final]}, "final_val_loss": rnd_final}
    lrc_loss = [5.0 if t < lrc_tokens_at_target else rnd_final - 0.1 for t in tokens]
    lrc = {"curve": {"tokens": tokens, "val_loss": lrc_loss}, "final_val_loss": lrc_loss[-1]}
    return {"runs": {"LRC": lrc, "random init + KD": rnd, "hard pruning + KD": rnd}, "teacher_val_loss": 1.5}


def test_mechanism_thresholds():
    assert [r.verdict for r in C.mechanism_rows(checks(lemma=0.99 * C.LEMMA_TOL))][0] == "reproduced"
    assert [r.verdict for r in C.mechanism_rows(checks(lemma=1.01 * C.LEMMA_TOL))][0] == "not reproduced"
    assert C.mechanism_rows(checks(merge=0.99 * C.MERGE_TOL))[1].verdict == "reproduced"
    assert C.mechanism_rows(checks(merge=1.01 * C.MERGE_TOL))[1].verdict == "not reproduced"
    assert C.mechanism_rows(checks(ident=0.99 * C.IDENTITY_TOL, clone=0.99 * C.IDENTITY_TOL))[1].verdict == "reproduced"
    assert C.mechanism_rows(checks(ident=1.01 * C.IDENTITY_TOL))[1].verdict == "not reproduced"
    assert C.mechanism_rows(checks(clone=1.01 * C.IDENTITY_TOL))[1].verdict == "not reproduced"


def test_spearman_margin():
    m = C.SPEARMAN_MARGIN
    assert C.encoder_rows(study(lrc=0.8, tb=0.8 - 1.01 * m), "s")[0].verdict == "reproduced"
    assert C.encoder_rows(study(lrc=0.8, tb=0.8 - 0.99 * m), "s")[0].verdict == "not reproduced"
    assert "one seed" in C.encoder_rows(study(), "MiniLM")[0].scale


def test_ablation_margin():
    m = C.ABLATION_MARGIN
    # FFN drop beyond the margin and beyond the attention drop + margin
    assert C.encoder_rows(study(lrc=0.8, no_ffn=0.8 - 2.02 * m, no_attn=0.8 - 0.99 * m), "s")[1].verdict == "reproduced"
    assert C.encoder_rows(study(lrc=0.8, no_ffn=0.8 - 1.99 * m, no_attn=0.8 - 1.0 * m), "s")[1].verdict == "partly reproduced"
    assert C.encoder_rows(study(lrc=0.8, no_ffn=0.8 - 0.99 * m, no_attn=0.8), "s")[1].verdict == "not reproduced"
    assert C.encoder_rows(None, "s")[0].verdict == "not run here"


def test_efficiency_ratio():
    # LRC first reaches the target at 100 tokens, random init + KD at 400: ratio 0.25
    assert C.causal_rows(causal(100), "s")[0].verdict == "reproduced"
    # exactly the ratio 0.5 (200 / 400) is inside, 0.75 is outside
    assert C.EFFICIENCY_RATIO == 0.5
    assert C.causal_rows(causal(200), "s")[0].verdict == "reproduced"
    assert C.causal_rows(causal(300), "s")[0].verdict == "partly reproduced"
    assert C.causal_rows(causal(401), "s")[0].verdict == "not reproduced"
    assert C.causal_rows(None, "s")[0].verdict == "not run here"


def test_prune_margin():
    c = causal(100)
    lrc_final = c["runs"]["LRC"]["final_val_loss"]
    c["runs"]["hard pruning + KD"] = {"final_val_loss": lrc_final + 1.01 * C.PRUNE_MARGIN}
    assert C.causal_rows(c, "s")[1].verdict == "reproduced"
    c["runs"]["hard pruning + KD"] = {"final_val_loss": lrc_final + 0.99 * C.PRUNE_MARGIN}
    assert C.causal_rows(c, "s")[1].verdict == "not reproduced"


def test_gpu_rows_and_throughput_min():
    assert [r.verdict for r in C.gpu_rows(None)] == ["not run here"]
    gpu = {"device": "NVIDIA H200", "date": "2026-12-02", "causal": {**causal(100), "d_teacher": 512, "d_student": 256,
                                                                      "tokens_to_target": {"LRC": 1_640_000, "random init + KD": None}},
           "throughput": {"lrc_tok_s": 84e3, "plain_tok_s": 146e3, "ratio": 0.58, "factored_ms": 1.0, "materialised_ms": 2.0}}
    rows = C.gpu_rows(gpu)
    assert [r.verdict for r in rows] == ["recorded on GPU"] * 2 and "H200" in rows[0].scale
    assert "LRC 1.64M, random init + KD —" in rows[0].measured
    assert f"{C.THROUGHPUT_MIN:.0%}" in rows[1].paper and "58%" in rows[1].measured


def test_all_rows_valid():
    rows = C.claim_rows(checks=checks(), encoder=study(), encoder_scale="MiniLM", causal=causal(100), causal_scale="tiny",
                        gpu=None)
    assert len(rows) == 8 and all(r.verdict in VERDICTS for r in rows)

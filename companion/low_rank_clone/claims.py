"""Claim rows of paper 11's notebook, built from the run's results.

Every threshold is a named constant below, tested just inside and just outside in
``tests/unit/test_low_rank_clone_claims.py``. Inputs:

* ``checks``: ``{"lemma1_gap", "merge_gap", "identity_gap", "identity_clone_max"}`` (floats) from the run;
* ``encoder``: a MiniLM study (:func:`~companion.low_rank_clone.experiments.run_encoder_study` or its saved
  form) and ``encoder_scale`` (what it was and whether it was run live or loaded);
* ``causal``: :func:`~companion.low_rank_clone.experiments.run_causal_study` results;
* ``gpu``: the recorded GPU payload (or None).
"""

from __future__ import annotations

from companion.core import Claim
from companion.low_rank_clone.experiments import BASELINE, tokens_to_reach

LEMMA_TOL = 1e-6  # max |o_S - o_T W^p_down| under an exact up/gate clone (float64 rounding)
MERGE_TOL = 1e-5  # max |merged - projected| student output (float32)
IDENTITY_TOL = 1e-5  # max |student - teacher| output with d_S = d_T, identity projections, teacher norms
SPEARMAN_MARGIN = 0.05  # one seed: LRC must beat the TinyBERT-style student by this much Spearman
ABLATION_MARGIN = 0.02  # one seed: a Spearman drop counts only beyond this
EFFICIENCY_RATIO = 0.5  # issue's target: LRC reaches the loss in at most half the tokens of random init + KD
PRUNE_MARGIN = 0.05  # one seed: LRC's final validation loss must be below hard pruning + KD's by this (nats/byte)
THROUGHPUT_MIN = 0.5  # issue's target: LRC trains at >= 50 % of plain training's tokens/s


def mechanism_rows(checks: dict) -> list[Claim]:
    lem, mg = checks["lemma1_gap"], checks["merge_gap"]
    idg, idc = checks["identity_gap"], checks["identity_clone_max"]
    return [
        Claim("Lemma 1: cloning h_up and h_gate aligns the FFN output with no extra matrix",
              "exact h_up, h_gate clone ⇒ o^S_ffn = o^T_ffn W^p_down",
              f"max |o^S − o^T W^p_down| = {lem:.1e} on random matrices (float64)", "random SwiGLU FFN, d_T 24, d_S 8",
              "reproduced" if lem < LEMMA_TOL else "not reproduced"),
        Claim("Soft pruning gives a standalone student (merge_weight)",
              "W^S = W^T W^p can be merged into a plain model after training",
              f"merged vs projected student output: max gap {mg:.1e}; with d_S = d_T, identity W^p and the teacher's "
              f"norms the student equals the teacher to {idg:.1e} and every clone term is {idc:.1e}",
              "tiny LLaMA and MiniLM teachers", "reproduced" if mg < MERGE_TOL and idg < IDENTITY_TOL and idc < IDENTITY_TOL
              else "not reproduced"),
    ]


def _final(study, name):
    return study["runs"][name]["final"]


def encoder_rows(study: dict | None, scale: str) -> list[Claim]:
    if not study:
        return [Claim("LRC beats feature distillation (MiniLM stand-in)", "TinyBERT-style needs ≈2.7× longer to LM loss 3.0",
                      "no MiniLM study in this run", "—", "not run here")]
    runs = study["runs"]
    lrc, tb = _final(study, "LRC"), _final(study, BASELINE) if BASELINE in runs else None
    rows = []
    if tb is not None:
        gap = lrc["spearman"] - tb["spearman"]
        rows.append(Claim(
            "Activation clone transfers more than TinyBERT-style hidden-state distillation",
            "TinyBERT-style distillation needs ≈2.7× the training to reach LRC's loss 3.0 (Fig. 4, 2.5B tokens)",
            f"Spearman(teacher, student pairwise cosines) on {study['teacher_cos'].shape[0]} held-out sentences: "
            f"LRC {lrc['spearman']:.3f} vs TinyBERT-style {tb['spearman']:.3f} (counts beyond {SPEARMAN_MARGIN}); "
            f"top-1 retrieval agreement {lrc['retrieval']:.2f} vs {tb['retrieval']:.2f}",
            f"{scale}, one seed", "reproduced" if gap > SPEARMAN_MARGIN else "not reproduced"))
    if "LRC without FFN clone" in runs and "LRC without attention clone" in runs:
        d_ffn = lrc["spearman"] - _final(study, "LRC without FFN clone")["spearman"]
        d_att = lrc["spearman"] - _final(study, "LRC without attention clone")["spearman"]
        ok = d_ffn > ABLATION_MARGIN and d_ffn > d_att + ABLATION_MARGIN
        some = d_ffn > ABLATION_MARGIN or d_ffn > d_att + ABLATION_MARGIN
        rows.append(Claim(
            "The FFN clone matters more than the attention clone",
            "removing the gate clone raises LM loss 2.639 → 2.677 (largest); attention terms barely matter long-term",
            f"Spearman drop without FFN clone {d_ffn:+.3f}, without attention clone {d_att:+.3f} "
            f"(counts beyond {ABLATION_MARGIN}; BERT has no gate: the FFN terms are up and FFN output)",
            f"{scale}, one seed", "reproduced" if ok else "partly reproduced" if some else "not reproduced"))
    return rows


def causal_rows(causal: dict | None, scale: str) -> list[Claim]:
    if not causal:
        return [Claim("Training efficiency (tokens to a loss)", "over 1,000× fewer tokens than models trained from scratch",
                      "no causal study in this run", "—", "not run here")]
    runs = causal["runs"]
    rnd, lrc = runs["random init + KD"], runs["LRC"]
    target = rnd["final_val_loss"]
    t_lrc, t_rnd = tokens_to_reach(lrc["curve"], target), tokens_to_reach(rnd["curve"], target)
    finals = ", ".join(f"{m} {r['final_val_loss']:.3f}" for m, r in runs.items())
    if t_lrc is None or not t_rnd:
        measured = f"LRC never reached random init + KD's final loss {target:.3f}; final validation loss: {finals}"
        verdict = "not reproduced"
    else:
        ratio = t_lrc / t_rnd
        measured = (f"tokens to reach random init + KD's final loss {target:.3f}: LRC {t_lrc:,} vs {t_rnd:,} "
                    f"(ratio {ratio:.2f}, target ≤ {EFFICIENCY_RATIO}); final validation loss (nats/byte): {finals}; "
                    f"teacher {causal['teacher_val_loss']:.3f}")
        verdict = "reproduced" if ratio <= EFFICIENCY_RATIO else "partly reproduced" if ratio < 1 else "not reproduced"
    rows = [Claim("LRC reaches a loss with far fewer tokens than training the student from random init + KD",
                  "LRC-1.7B: 64.98 average from 20B tokens vs Qwen3-1.7B 63.17 from 36T (>1,000× fewer tokens)",
                  measured, f"{scale}, one seed", verdict)]
    if "hard pruning + KD" in runs:
        pr = runs["hard pruning + KD"]["final_val_loss"]
        gap = pr - lrc["final_val_loss"]
        rows.append(Claim("Soft pruning beats hard pruning + distillation",
                          "LRC-2.7B-B 52.67 (10B tokens) vs Sheared-Llama-2.7B-B 52.55 (50B tokens), teacher Llama-2-7B",
                          f"final validation loss after the same tokens: LRC {lrc['final_val_loss']:.3f} vs hard pruning + KD "
                          f"{pr:.3f} (LRC must be lower by {PRUNE_MARGIN})", f"{scale}, one seed",
                          "reproduced" if gap > PRUNE_MARGIN else "not reproduced"))
    return rows


def headline_row() -> Claim:
    return Claim("Benchmark averages of the released LRC models",
                 "LRC-1.7B 64.98 vs Qwen3-1.7B 63.17; LRC-4B 70.30 vs Qwen3-4B 70.29 (9 zero-shot tasks)",
                 "needs 3B-7B teachers, 10-20B tokens and lm-eval: not attempted", "paper scale", "not run here")


def _tokens(to_target: dict) -> str:
    """``{method: tokens or None}`` as "LRC 1.64M, ... (— = not reached)"."""
    return ", ".join(f"{m} {'—' if t is None else f'{t / 1e6:.2f}M'}" for m, t in to_target.items()) + " (— = not reached)"


def gpu_rows(gpu: dict | None) -> list[Claim]:
    if not gpu or "causal" not in gpu:
        return [Claim("One-GPU study: tokens to a loss and throughput", "LRC 84K vs plain 146K tok/s (≈58 %) on 8 × H800",
                      "no GPU results recorded yet", "H200", "not run here")]
    where = f"{gpu.get('device', 'GPU')}, {gpu.get('date', '?')}, one seed"
    c = gpu["causal"]
    finals = ", ".join(f"{m} {r['final_val_loss']:.3f}" for m, r in c["runs"].items())
    rows = [Claim("One-GPU causal study: LRC vs random init + KD vs hard pruning + KD",
                  "LRC reaches a given loss with far fewer tokens",
                  f"teacher d {c['d_teacher']}, students d {c['d_student']}; final validation loss {finals}; "
                  f"tokens to random init + KD's final loss: {_tokens(c.get('tokens_to_target') or {})}", where,
                  "recorded on GPU")]
    thr = gpu.get("throughput")
    if isinstance(thr, dict):
        rows.append(Claim("LRC's training throughput relative to plain training of the same student",
                          f"84K vs 146K tok/s ≈ 58 % (issue's target ≥ {THROUGHPUT_MIN:.0%})",
                          f"{thr['lrc_tok_s']:,.0f} vs {thr['plain_tok_s']:,.0f} tok/s = {thr['ratio']:.0%}; "
                          f"x·Pᵀ·W_Tᵀ {thr.get('factored_ms', float('nan')):.3f} ms vs materialised W_S "
                          f"{thr.get('materialised_ms', float('nan')):.3f} ms", where, "recorded on GPU"))
    return rows


def claim_rows(*, checks: dict, encoder: dict | None, encoder_scale: str, causal: dict | None, causal_scale: str,
               gpu: dict | None = None) -> list[Claim]:
    """All rows of the notebook's Reproduce table."""
    return [*mechanism_rows(checks), *encoder_rows(encoder, encoder_scale), *causal_rows(causal, causal_scale),
            headline_row(), *gpu_rows(gpu)]

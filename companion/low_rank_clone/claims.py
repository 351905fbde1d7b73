"""Claim rows of paper 11's notebook, built from the run's results; every verdict comes from
:func:`companion.core.judge` (the one rule) or :func:`companion.core.not_run`.

Every threshold is a named constant below, tested just inside and just outside in
``tests/unit/test_low_rank_clone_claims.py``. Inputs:

* ``checks``: ``{"lemma1_gap", "merge_gap", ...}`` (floats) from the run (the identity case, d_S = d_T with
  identity projections, is an implementation check: the notebook's Checks section asserts it);
* ``encoder``: a MiniLM study (:func:`~companion.low_rank_clone.experiments.run_encoder_study` or its saved
  form), or a list of them, one per seed, and ``encoder_scale`` (what it was and whether it was run live or loaded);
* ``causal``: :func:`~companion.low_rank_clone.experiments.run_causal_study` results, or a list of them, one per seed;
* ``gpu``: the recorded GPU payload (:func:`companion.low_rank_clone.scale.recorded`, or None): a teacher, then one
  stage per seed of three students on the same tokens; its rows are judged per seed from those stages.

Effect rows take one value per seed (a study is one seed); with fewer than three seeds they are inconclusive.
"""

from __future__ import annotations

import math

import numpy as np

from companion.core import Claim, judge, mean_std, not_run, per_seed, seeds_text
from companion.core.claims import at_cell
from companion.core.stages import not_finished
from companion.low_rank_clone.experiments import BASELINE, CAUSAL_METHODS, tokens_to_reach
from companion.low_rank_clone.scale import SEED_STAGES

LEMMA_TOL = 1e-6  # max |o_S - o_T W^p_down| under an exact up/gate clone (float64 rounding)
MERGE_TOL = 1e-5  # max |merged - projected| student output (float32)
SPEARMAN_MARGIN = 0.05  # per seed: LRC must beat the TinyBERT-style student by this much Spearman
ABLATION_MARGIN = 0.02  # per seed: the FFN-clone ablation's Spearman drop must exceed the attention one's by this
EFFICIENCY_RATIO = 0.5  # this project's bar: LRC reaches the loss in at most half the tokens of random init + KD
PRUNE_MARGIN = 0.05  # per seed: LRC's final validation loss must be below hard pruning + KD's by this (nats/byte)
THROUGHPUT_MIN = 0.5  # this project's bar: LRC trains at >= 50 % of plain training's tokens/s
# the cells of notebooks/11_low_rank_clone.ipynb (nbformat ids) that measure the rows: the clone's checks, the MiniLM
# study (run here or loaded from its committed run), the causal study, and the Scale-up cell that shows the recorded
# GPU study
CHECKS_CELL, ENCODER_CELL, CAUSAL_CELL, GPU_CELL = "7d512f35", "3ce446b0", "145d1d53", "044c7d86"


def _signed(x: float) -> str:
    return f"{x:+.3f}"


def mechanism_rows(checks: dict) -> list[Claim]:
    lem, mg = checks["lemma1_gap"], checks["merge_gap"]
    return [
        Claim("Lemma 1: cloning h_up and h_gate aligns the FFN output with no extra matrix",
              "exact h_up, h_gate clone ⇒ o^S_ffn = o^T_ffn W^p_down",
              f"max |o^S − o^T W^p_down| = {lem:.1e} on random matrices (float64)", "random SwiGLU FFN, d_T 24, d_S 8",
              judge(lem, LEMMA_TOL, kind="exact", fmt=lambda x: f"{x:.1e}")),
        Claim("Soft pruning gives a standalone student (merge_weight)",
              "W^S = W^T W^p can be merged into a plain model after training",
              f"merged vs projected student output: max gap {mg:.1e}",
              "MiniLM teacher, student at the notebook's d_S", judge(mg, MERGE_TOL, kind="exact", fmt=lambda x: f"{x:.1e}")),
    ]


def _final(study, name):
    return study["runs"][name]["final"]


def _learned(run) -> tuple[float, float]:
    """The run's Spearman at its first snapshot (step 0) and at the end."""
    snaps = run.get("snapshots") or []
    first = snaps[0]["scores"]["spearman"] if snaps and "scores" in snaps[0] else float("nan")
    return first, run["final"]["spearman"]


def encoder_rows(study, scale: str) -> list[Claim]:
    if not study:
        return [Claim("LRC beats feature distillation (MiniLM stand-in)", "TinyBERT-style needs ≈2.7× longer to LM loss 3.0",
                      "no MiniLM study in this run", "—", not_run("no MiniLM study in this run"))]
    studies = per_seed(study)
    first = studies[0]
    n = len(studies)
    rows = []
    if all(BASELINE in s["runs"] for s in studies):
        gaps = [_final(s, "LRC")["spearman"] - _final(s, BASELINE)["spearman"] for s in studies]
        lrc, tb = _final(first, "LRC"), _final(first, BASELINE)
        tb_start, tb_end = _learned(first["runs"][BASELINE])
        stalled = [s for s in studies if not _learned(s["runs"][BASELINE])[1] > _learned(s["runs"][BASELINE])[0]]
        steps = first["runs"][BASELINE].get("steps", "?")
        note = (f"; the TinyBERT-style baseline did not learn{'' if n == 1 else f' in {len(stalled)} of {n} seeds'}: "
                f"its Spearman went {tb_start:.3f} at step 0 → {tb_end:.3f} after {steps} steps"
                f"{'' if n == 1 else ' (first seed)'}, so LRC is compared with an untrained student here, not with a "
                "working feature distillation" if stalled else "")
        rows.append(Claim(
            "Activation clone transfers more than TinyBERT-style hidden-state distillation",
            "TinyBERT-style distillation needs ≈2.7× the training to reach LRC's loss 3.0 (Fig. 4, 2.5B tokens)",
            f"Spearman(teacher, student pairwise cosines) on {first['teacher_cos'].shape[0]} held-out sentences: "
            f"LRC {lrc['spearman']:.3f} vs TinyBERT-style {tb['spearman']:.3f}; LRC − TinyBERT-style per seed: "
            + ", ".join(_signed(g) for g in gaps) + f" (counts beyond {SPEARMAN_MARGIN}); top-1 retrieval agreement "
            f"{lrc['retrieval']:.2f} vs {tb['retrieval']:.2f}" + note,
            f"{scale}, {seeds_text(n)}", judge(gaps, SPEARMAN_MARGIN, direction="higher", fmt=lambda x: f"{x:.3f}")))
    if all("LRC without FFN clone" in s["runs"] and "LRC without attention clone" in s["runs"] for s in studies):
        drops = []
        for s in studies:
            base = _final(s, "LRC")["spearman"]
            drops.append((base - _final(s, "LRC without FFN clone")["spearman"],
                          base - _final(s, "LRC without attention clone")["spearman"]))
        d_ffn, d_att = drops[0]
        rows.append(Claim(
            "The FFN clone matters more than the attention clone",
            "removing the gate clone raises LM loss 2.639 → 2.677 (largest); attention terms barely matter long-term",
            f"Spearman drop without FFN clone {d_ffn:+.3f}, without attention clone {d_att:+.3f}; FFN drop − attention "
            "drop per seed: " + ", ".join(_signed(f - a) for f, a in drops)
            + f" (counts beyond {ABLATION_MARGIN}; BERT has no gate: the FFN terms are up and FFN output)",
            f"{scale}, {seeds_text(n)}", judge([f - a for f, a in drops], ABLATION_MARGIN, direction="higher", fmt=lambda x: f"{x:.3f}")))
    return rows


def _ratio(t_lrc, t_rnd, censor: int | None = None) -> float:
    """LRC's tokens to the target over random init + KD's (inf when LRC never reached it). Random init + KD that
    never reached it is charged ``censor`` tokens (:func:`_censor`), so the ratio is an upper bound."""
    if t_lrc is None:
        return math.inf
    t_rnd = censor if t_rnd is None else t_rnd
    if not t_rnd:
        return 1.0 if t_lrc == 0 else math.inf
    return t_lrc / t_rnd


def _pruning_text(lrc_final, pruned_final) -> str:
    if pruned_final < lrc_final:
        return (f"hard pruning + KD beat LRC: final validation loss {pruned_final:.3f} vs LRC {lrc_final:.3f} "
                f"({pruned_final - lrc_final:+.3f})")
    return f"final validation loss after the same tokens: LRC {lrc_final:.3f} vs hard pruning + KD {pruned_final:.3f}"


def causal_rows(causal, scale: str) -> list[Claim]:
    if not causal:
        return [Claim("Training efficiency (tokens to a loss)", "over 1,000× fewer tokens than models trained from scratch",
                      "no causal study in this run", "—", not_run("no causal study in this run"))]
    studies = per_seed(causal)
    n = len(studies)
    ratios, texts = [], []
    for c in studies:
        runs = c["runs"]
        target = runs["random init + KD"]["final_val_loss"]
        t_lrc, t_rnd = tokens_to_reach(runs["LRC"]["curve"], target), tokens_to_reach(runs["random init + KD"]["curve"], target)
        ratios.append(_ratio(t_lrc, t_rnd))
        texts.append(f"LRC never reached {target:.3f}" if t_lrc is None else f"{t_lrc:,} vs {t_rnd:,} tokens to {target:.3f}")
    first = studies[0]["runs"]
    finals = ", ".join(f"{m} {r['final_val_loss']:.3f}" for m, r in first.items())
    rows = [Claim("LRC reaches a loss with far fewer tokens than training the student from random init + KD",
                  "LRC-1.7B: 64.98 average from 20B tokens vs Qwen3-1.7B 63.17 from 36T (>1,000× fewer tokens)",
                  f"tokens to reach random init + KD's final loss, LRC vs random init + KD: {'; '.join(texts)}; ratio per seed "
                  + ", ".join(f"{r:.2f}" for r in ratios) + f" (target ≤ {EFFICIENCY_RATIO}, partly < 1); "
                  f"final validation loss (nats/byte): {finals}; teacher {studies[0]['teacher_val_loss']:.3f}",
                  f"{scale}, {seeds_text(n)}",
                  judge(ratios, EFFICIENCY_RATIO, direction="lower", weaker=1.0, fmt=lambda x: f"{x:.2f}"))]
    if all("hard pruning + KD" in c["runs"] for c in studies):
        lrc_f = [c["runs"]["LRC"]["final_val_loss"] for c in studies]
        pr_f = [c["runs"]["hard pruning + KD"]["final_val_loss"] for c in studies]
        gaps = [p - lf for p, lf in zip(pr_f, lrc_f)]
        rows.append(Claim("Soft pruning beats hard pruning + distillation",
                          "LRC-2.7B-B 52.67 (10B tokens) vs Sheared-Llama-2.7B-B 52.55 (50B tokens), teacher Llama-2-7B",
                          f"{_pruning_text(float(np.mean(lrc_f)), float(np.mean(pr_f)))}; hard pruning − LRC per seed: "
                          + ", ".join(_signed(g) for g in gaps) + f" (LRC must be lower by {PRUNE_MARGIN})",
                          f"{scale}, {seeds_text(n)}", judge(gaps, PRUNE_MARGIN, direction="higher", fmt=lambda x: f"{x:.3f}")))
    return rows


def headline_row() -> Claim:
    return Claim("Benchmark averages of the released LRC models",
                 "LRC-1.7B 64.98 vs Qwen3-1.7B 63.17; LRC-4B 70.30 vs Qwen3-4B 70.29 (9 zero-shot tasks)",
                 "needs 3B-7B teachers, 10-20B tokens and lm-eval: not attempted", "paper scale",
                 not_run("needs 3B-7B teachers, 10-20B tokens and lm-eval"))


def _censor(curve: dict) -> int:
    """The tokens charged to a run that never reached the target: its budget plus one evaluation interval, a lower
    bound on what it needs."""
    tok = curve["tokens"]
    return tok[-1] + (tok[-1] - tok[-2] if len(tok) > 1 else 0)


def _seeds(gpu: dict) -> list[dict]:
    """The recorded per-seed student stages that finished, in seed order."""
    return [gpu[n] for n in SEED_STAGES if n in gpu]


# (claim, paper) of the GPU study's rows
_EFFICIENCY_CLAIM = ("One-GPU study: LRC reaches a fixed validation loss in far fewer tokens than random init + KD",
                     "LRC reaches a given loss with far fewer tokens (>1,000× at paper scale)")
_PRUNING_CLAIM = ("One-GPU study: soft pruning beats hard pruning + distillation on the same tokens",
                  "LRC-2.7B-B 52.67 (10B tokens) vs Sheared-Llama-2.7B-B 52.55 (50B tokens)")
_THROUGHPUT_CLAIM = ("LRC's training throughput relative to plain training of the same student",
                     f"84K vs 146K tok/s ≈ 58 % (this project's bar ≥ {THROUGHPUT_MIN:.0%})")


def _students_scale(gpu: dict, seeds: list[dict]) -> str:
    prof, t, s0 = gpu["profile"], gpu.get("teacher") or {}, seeds[0]
    budget = prof["student_steps"] * prof["batch"] * prof["seq_len"]
    teacher = f"teacher d {s0['d_teacher']}"
    if "curve" in t:
        teacher += f" ({t['parameters'] / 1e6:.0f}M parameters, trained {t['seconds']:.0f} s on {t['tokens'] / 1e6:.1f}M tokens)"
    return (f"{gpu.get('device', 'GPU')}, {gpu.get('date', '?')}, {seeds_text(len(seeds))}, {teacher} → students d "
            f"{s0['d_student']}, {prof['student_steps']} steps of {prof['batch']} × {prof['seq_len']} bytes "
            f"({budget / 1e6:.2f}M tokens each)")


def _students_rows(gpu: dict) -> list[Claim]:
    """The efficiency and pruning rows from the per-seed stages (:data:`~companion.low_rank_clone.scale.SEED_STAGES`),
    judged on the seeds that finished; those that did not are named, and with none the rows are not run."""
    seeds, left = _seeds(gpu), not_finished(gpu, SEED_STAGES)
    if not seeds:
        why = "stages " + "; ".join(left)
        if not set(SEED_STAGES) & set(gpu.get("stages") or {}):
            why += (" (the recorded run has no per-seed stages: its stages are "
                    + ", ".join(gpu.get("stages") or {}) + ")")
        where = f"{gpu.get('device', 'GPU')}, {gpu.get('date', '?')}"
        return [Claim(*_EFFICIENCY_CLAIM, why, where, not_run(why)), Claim(*_PRUNING_CLAIM, why, where, not_run(why))]
    n, target, scale = len(seeds), seeds[0]["target_loss"], _students_scale(gpu, seeds)
    missing = f"; not in these numbers: {'; '.join(left)}" if left else ""
    finals = {m: [s["runs"][m]["final_val_loss"] for s in seeds] for m in CAUSAL_METHODS}
    teacher = float(np.mean([s["teacher_val_loss"] for s in seeds]))

    tokens = []
    for m in CAUSAL_METHODS:
        got = [s["tokens_to_target"][m] / 1e6 for s in seeds if s["tokens_to_target"][m] is not None]
        tokens.append(f"{m} " + (f"{mean_std(got, lambda x: f'{x:.2f}')}M" if got else "not reached")
                      + (f" ({n - len(got)} of {n} not reached)" if got and len(got) < n else ""))
    ratios, charged = [], []
    for s in seeds:
        to, rnd_curve = s["tokens_to_target"], s["runs"]["random init + KD"]["curve"]
        ratios.append(_ratio(to["LRC"], to["random init + KD"], _censor(rnd_curve)))
        if to["random init + KD"] is None and to["LRC"] is not None:
            charged.append(f"seed {s['seed']}")
    censored = (f"; random init + KD never reached it in {', '.join(charged)}: charged its budget plus one evaluation "
                f"({_censor(seeds[0]['runs']['random init + KD']['curve']) / 1e6:.2f}M), so those ratios are upper bounds"
                if charged else "")
    efficiency = Claim(
        *_EFFICIENCY_CLAIM,
        f"tokens to validation loss {target:g} nats/byte (mean ± std over the seeds that reached it): {', '.join(tokens)}; "
        "LRC / random init + KD per seed " + ", ".join(f"{r:.2f}" for r in ratios)
        + f" (target ≤ {EFFICIENCY_RATIO}, partly < 1; inf: LRC never reached it){censored}; final validation loss "
        "(mean ± std): " + ", ".join(f"{m} {mean_std(v)}" for m, v in finals.items()) + f"; teacher {teacher:.3f}{missing}",
        scale, judge(ratios, EFFICIENCY_RATIO, direction="lower", weaker=1.0, fmt=lambda x: f"{x:.2f}"))

    lrc, pruned = finals["LRC"], finals["hard pruning + KD"]
    gaps = [p - q for p, q in zip(pruned, lrc)]
    below = [f"{m} {np.mean(v):.3f}" for m, v in finals.items() if np.mean(v) < teacher]
    beat = f"; ended below the teacher's own validation loss {teacher:.3f}: {', '.join(below)}" if below else ""
    pruning = Claim(*_PRUNING_CLAIM,
                    f"{_pruning_text(float(np.mean(lrc)), float(np.mean(pruned)))} (means over seeds); hard pruning − "
                    "LRC per seed: " + ", ".join(_signed(g) for g in gaps) + f" (LRC must be lower by {PRUNE_MARGIN})"
                    + beat + missing, scale, judge(gaps, PRUNE_MARGIN, direction="higher", fmt=lambda x: f"{x:.3f}"))
    return [efficiency, pruning]


def _throughput_row(gpu: dict) -> Claim:
    thr, prof = gpu["throughput"], gpu["profile"]
    return Claim(*_THROUGHPUT_CLAIM,
                 f"{thr['lrc_tok_s']:,.0f} vs {thr['plain_tok_s']:,.0f} tok/s = {thr['ratio']:.0%} (plain step timed "
                 f"first, then LRC's, teacher forward included); x·Pᵀ·W_Tᵀ {thr['factored_ms']:.3f} ms "
                 f"vs materialised W_S {thr['materialised_ms']:.3f} ms",
                 f"{gpu.get('device', 'GPU')}, {gpu.get('date', '?')}, one step of {prof['batch']} × {prof['seq_len']} bytes, "
                 "do_bench median",
                 judge([thr["ratio"]], THROUGHPUT_MIN, kind="timing", direction="higher", fmt=lambda x: f"{x:.0%}"))


def gpu_rows(gpu: dict | None) -> list[Claim]:
    """The rows of the recorded GPU study (:mod:`companion.low_rank_clone.scale`); a row whose stages did not
    finish (:func:`companion.core.stages.not_finished`) says which and why, and is not run."""
    if not gpu:
        return [Claim("One-GPU study: tokens to a loss and throughput", "LRC 84K vs plain 146K tok/s (≈58 %) on 8 × H800",
                      "no GPU results recorded yet", "H200",
                      not_run("no GPU results recorded: run `python -m companion.bench low_rank_clone` on one GPU"))]
    if "throughput" in gpu:
        throughput = _throughput_row(gpu)
    else:
        why = "stage " + "; ".join(not_finished(gpu, ["throughput"]))
        throughput = Claim(*_THROUGHPUT_CLAIM, why, f"{gpu.get('device', 'GPU')}, {gpu.get('date', '?')}", not_run(why))
    return [*_students_rows(gpu), throughput]


def claim_rows(*, checks: dict, encoder, encoder_scale: str, causal, causal_scale: str,
               gpu: dict | None = None) -> list[Claim]:
    """All rows of the notebook's Reproduce table."""
    return [*at_cell(CHECKS_CELL, mechanism_rows(checks)), *at_cell(ENCODER_CELL, encoder_rows(encoder, encoder_scale)),
            *at_cell(CAUSAL_CELL, causal_rows(causal, causal_scale)), headline_row(), *at_cell(GPU_CELL, gpu_rows(gpu))]


def outcome_sentences(*, causal, gpu: dict | None, grid: dict | None) -> list[str]:
    """The notebook's outcome prose, computed from this run's and the recorded numbers (never written by hand):
    how hard pruning + KD compares with LRC at each scale, and whether each MiniLM study's TinyBERT-style
    baseline learned at all."""
    out = []
    scales = []
    if causal:
        studies = per_seed(causal)
        if all("hard pruning + KD" in c["runs"] for c in studies):
            lrc = float(np.mean([c["runs"]["LRC"]["final_val_loss"] for c in studies]))
            pr = float(np.mean([c["runs"]["hard pruning + KD"]["final_val_loss"] for c in studies]))
            scales.append(("this CPU run", lrc, pr))
    seeds = _seeds(gpu) if gpu else []
    if seeds:
        scales.append((f"the recorded {gpu.get('device', 'GPU')} run ({seeds_text(len(seeds))})",
                       float(np.mean([r["runs"]["LRC"]["final_val_loss"] for r in seeds])),
                       float(np.mean([r["runs"]["hard pruning + KD"]["final_val_loss"] for r in seeds]))))
    if scales:
        won = [s for s in scales if s[2] < s[1]]
        detail = "; ".join(f"{w}: hard pruning + KD {pr:.3f} vs LRC {lrc:.3f}" for w, lrc, pr in scales)
        if len(won) == len(scales):
            out.append(f"Hard pruning + KD reached a lower final validation loss than LRC at {'every' if len(scales) > 1 else 'this'} "
                       f"scale ({detail}): no run here supports the claim that soft pruning beats hard pruning + distillation.")
        elif won:
            out.append(f"Hard pruning + KD reached a lower final validation loss than LRC in {', '.join(w for w, _, _ in won)} "
                       f"({detail}).")
        else:
            out.append(f"LRC reached a lower final validation loss than hard pruning + KD ({detail}).")
    for (d_s, alpha), s in sorted((grid or {}).items()):
        if BASELINE in s["runs"]:
            start, end = _learned(s["runs"][BASELINE])
            lrc = s["runs"]["LRC"]["final"]["spearman"] if "LRC" in s["runs"] else float("nan")
            if not end > start:
                out.append(f"MiniLM study d_S {d_s}, α {alpha:g}: the TinyBERT-style baseline did not learn (its Spearman "
                           f"went {start:.3f} → {end:.3f}; LRC reached {lrc:.3f}), so LRC's lead there is over an untrained "
                           "student, not over a working feature distillation.")
            else:
                out.append(f"MiniLM study d_S {d_s}, α {alpha:g}: the TinyBERT-style baseline's Spearman went "
                           f"{start:.3f} → {end:.3f} (LRC {lrc:.3f}).")
    return out

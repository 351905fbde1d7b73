"""Claim rows of paper 10's notebook, built from the run's result objects; every verdict comes from
:func:`companion.core.judge` (the one rule) or :func:`companion.core.not_run`.

Every threshold is a named constant below (tested just inside and just outside in
``tests/unit/test_ortho_residual_claims.py``). Inputs:

* ``vit``: ``{mode: [train_vit result, one per seed]}`` for ``"linear"``, ``"feature"`` (the same seeds, each with
  its own digits split) and ``"global"`` (the notebook trains it on the first seed only; the text says so);
* ``lm``: ``{mode: [train_char_lm result, one per seed]}`` for ``"linear"``, ``"feature"`` (each seed its own split
  of the docstrings);
* ``gpu``: the recorded GPU payload (:func:`companion.ortho_residual.scale.recorded`, or None).

The precision table (the official code's bf16 coefficient against an fp32 one) is an audit of the official
code, not a paper claim: the notebook's Checks section shows and asserts it
(:func:`~companion.ortho_residual.experiments.precision_check`).
"""

from __future__ import annotations

import numpy as np

from companion.core import Claim, inconclusive, judge, mean_std, not_run, seeds_text
from companion.core.claims import at_cell
from companion.core.stages import not_finished
from companion.ortho_residual.experiments import stream_summary
from companion.ortho_residual.scale import BF16_SEEDS, LM_SEEDS, TIMINGS, seed_results, step_times, when
from companion.ortho_residual.study import COEF_ARMS, RULES

COS_TOL = 1e-4  # |cos(x, update)| an orthogonal add may show (fp32 rounding and eps)
GROWTH_TOL = 1e-5  # relative shrink of ||x||^2 at one add still counted as rounding
# mean |cos(x, f)| the linear model's updates must exceed to carry "a real parallel part": twice the chance
# level of independent directions in the ViT's width d = 64, 2·sqrt(2 / (π d)) = 0.1995 (E|cos| = 0.0997)
PARALLEL_MIN = 0.2
ACC_MARGIN_PP = 6.0  # per-seed accuracy gain (pp) to exceed: ~2.5 binomial standard errors on 449 test digits
LOSS_MARGIN = 0.05  # per-seed validation-loss gap (nats) an LM comparison must exceed
OVERHEAD_MAX = 1.10  # step time Orthogonal-F / linear: an O(d) reduction per add against O(d^2) matmuls
# the cells of notebooks/10_ortho_residual.ipynb (nbformat ids) that measure the rows: the digits ViTs of the three
# rules, the char-level LMs, and the Scale-up cell that shows the recorded GPU study
VIT_CELL, LM_CELL, GPU_CELL = "0971c6ee", "590857ea", "fa4cbdb3"


def mechanism_rows(vit: dict, scale: str) -> list[Claim]:
    ortho = {m: [stream_summary(r) for r in vit[m]] for m in ("feature", "global") if m in vit}
    lin = [stream_summary(r) for r in vit["linear"]]
    cos_max = max(s["cos_update_max"] for ss in ortho.values() for s in ss)
    growth_min = min(s["growth_min"] for ss in ortho.values() for s in ss)
    shrink = max(s["shrink_share_max"] for ss in ortho.values() for s in ss)
    lin_shrink = max(s["shrink_share_max"] for s in lin)
    lin_cos = [s["abs_cos_x_out_mean"] for s in lin]  # one per seed
    rho = {m: (float(np.mean([s["rho_par_mean"] for s in ss])), len(ss)) for m, ss in {"linear": lin, **ortho}.items()}
    n = len(lin)
    return [
        Claim("Orthogonal updates add only new directions",
              "⟨x_n, f_⊥⟩ = 0: the added update is orthogonal to the stream",
              f"max mean |cos(x, update)| over every add and snapshot: {cos_max:.1e} (Orthogonal-F and -G)",
              scale, judge(cos_max, COS_TOL, kind="exact", fmt=lambda x: f"{x:.1e}")),
        Claim("The stream norm never shrinks (inferred from ⟨x, f_⊥⟩ = 0)",
              "‖xₙ₊₁‖² = ‖xₙ‖² + ‖f_⊥‖²",
              f"smallest relative change of ‖x‖² at an orthogonal add: {growth_min:+.1e}; units shrinking by more than "
              f"{GROWTH_TOL:.0e}: {100 * shrink:.0f}% (linear model: up to {100 * lin_shrink:.0f}% of tokens shrink at some add)",
              scale, judge(max(0.0, -growth_min), GROWTH_TOL, kind="exact", fmt=lambda x: f"{x:.1e}")),
        Claim("Linear updates carry a parallel part",
              "standard updates partly reinforce or modulate the existing stream direction",
              f"linear model: mean |cos(x, f)| = {mean_std(lin_cos, '{:.3f}'.format)} per seed (chance for independent directions "
              f"in d = 64: 0.100; counts beyond {PARALLEL_MIN}); mean ρ_par (final): "
              + ", ".join(f"{m} {v:.3f}" + _fewer(k, n) for m, (v, k) in rho.items()),
              f"{scale}, {seeds_text(n)}", judge(lin_cos, PARALLEL_MIN, direction="higher")),
    ]


def _fewer(k: int, n: int) -> str:
    """`` (one seed)`` where a rule ran on fewer seeds (``k``) than the judged ones (``n``), else nothing."""
    return f" ({seeds_text(k)})" if k != n else ""


def accuracy_row(vit: dict, scale: str) -> Claim:
    acc = {m: [100 * r["test_acc"] for r in runs] for m, runs in vit.items()}
    if len(acc["feature"]) != len(acc["linear"]):
        raise ValueError(f"linear and feature need the same seeds, got {len(acc['linear'])} and {len(acc['feature'])} runs")
    gains = [a - b for a, b in zip(acc["feature"], acc["linear"])]  # per seed, same split, initial weights and batches
    txt = ", ".join(f"{m} {mean_std(v, '{:.1f}'.format)} %" + _fewer(len(v), len(gains)) for m, v in acc.items())
    return Claim("Orthogonal-F generalises better",
                 "ViT-B ImageNet-1k 73.27 → 77.05 % (+3.78 pp); ViT-S CIFAR-100 71.92 → 73.86 (5-run means)",
                 f"digits test accuracy: {txt}; Orthogonal-F − linear per seed: "
                 + ", ".join(f"{g:+.1f}" for g in gains) + f" pp (counts beyond {ACC_MARGIN_PP:.0f} pp)",
                 f"{scale}, {seeds_text(len(gains))}", judge(gains, ACC_MARGIN_PP, direction="higher", fmt=lambda x: f"{x:.1f}"))


def lm_row(lm: dict, scale: str) -> Claim:
    vl = {m: [r["val_loss"] for r in runs] for m, runs in lm.items()}
    gaps = [a - b for a, b in zip(vl["linear"], vl["feature"])]  # per seed: positive = orthogonal lower
    txt = ", ".join(f"{m} {mean_std(v, '{:.3f}'.format)}" for m, v in vl.items())
    return Claim("Orthogonal updates give a lower validation loss (char-LM)",
                 "better accuracy and training stability (paper: ViTs, ResNetV2; no LM result published)",
                 f"validation loss (nats/byte): {txt}; linear − orthogonal per seed: "
                 + ", ".join(f"{g:+.3f}" for g in gaps) + f" (counts beyond {LOSS_MARGIN})",
                 f"{scale}, {seeds_text(len(gaps))}", judge(gaps, LOSS_MARGIN, direction="higher", fmt=lambda x: f"{x:.3f}"))


# (claim, paper) of the GPU study's rows
_LM_CLAIM = ("Byte-level decoder trained until the linear loss flattens: Orthogonal-F gives a lower validation loss "
             "at equal steps", "better accuracy and training stability (paper: ViTs, ResNetV2; no LM result published, "
                               "the repository ships an OrthoLlama preset)")
_VIT_CLAIM = ("ViT on upsampled digits: Orthogonal-F generalises better",
              "ViT-B ImageNet-1k 73.27 → 77.05 % (+3.78 pp); ViT-S CIFAR-100 71.92 → 73.86 (+1.94 pp; 5-run means)")
_TIMING_CLAIM = ("The projection adds little training-step time",
                 "an extra O(d) reduction per residual add, against the block's O(d²) matrix products")
_BF16_CLAIM = ("bf16 training: the official bf16 projection coefficient trains as well as an fp32 one",
               "the official code casts the coefficient to the activation dtype (bf16 under autocast); "
               "the paper reports no effect of it")
# the smallest per-seed test-accuracy gain (pp) the GPU ViT comparison must exceed: half the paper's smallest ViT gain
# (+1.94 pp, ViT-S on CIFAR-100), and about 3 test digits in 450
GPU_ACC_MARGIN_PP = 1.0


def _missing(gpu: dict, names) -> list[str]:
    """``"stage (state: why)"`` of each of ``names`` whose result is not in the payload."""
    left = {s.split(" ", 1)[0]: s for s in not_finished(gpu)}
    return [left.get(n, f"{n} (not recorded)") for n in names if n not in gpu]


def _stages(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{k}" for k in range(n)]


def _lm_row(gpu: dict) -> Claim:
    """Per seed, linear minus Orthogonal-F validation loss at the pilot's step count; inconclusive when the pilot
    did not flatten (the models were compared mid-training, the situation this study exists to avoid)."""
    runs, missing = seed_results(gpu, "lm_seed", LM_SEEDS), _missing(gpu, _stages("lm_seed", LM_SEEDS))
    if "lm_seed0" not in gpu:
        return Claim(*_LM_CLAIM, f"stage {missing[0]}", when(gpu, "lm_seed0"), not_run(f"stage {missing[0]}"))
    p, first = gpu["profile"], gpu["lm_seed0"]
    gaps = [r["linear"]["val_loss"] - r["feature"]["val_loss"] for r in runs]
    vl = {m: [r[m]["val_loss"] for r in runs] for m in RULES}
    pilot = (f"the linear pilot (seed {first['seed']}) {'flattened' if first['stop'] == 'flat' else 'did not flatten'}"
             f" by step {first['steps']} (less than {100 * p['flat_fraction']:g} % better over {p['flat_window']} steps; "
             f"cap {p['max_steps']} steps, {p['pilot_seconds']} s)")
    measured = (f"{pilot}; validation loss (nats/byte) at {first['steps']} steps: "
                + ", ".join(f"{m} {mean_std(v, '{:.3f}'.format)}" for m, v in vl.items()) + "; linear − orthogonal per seed: "
                + ", ".join(f"{g:+.3f}" for g in gaps) + f" (counts beyond {LOSS_MARGIN})"
                + (f"; not recorded: {'; '.join(missing)}" if missing else ""))
    c = first["config"]
    scale = (f"{when(gpu, 'lm_seed0')}, {seeds_text(len(gaps))}, {first['parameters'] / 1e6:.1f}M decoder "
             f"({c['n_layers']} layers, d {c['d']}), {first['steps']} steps of {p['batch']} × {p['seq_len']} bytes")
    judgement = (judge(gaps, LOSS_MARGIN, direction="higher", fmt=lambda x: f"{x:.3f}") if first["stop"] == "flat" else
                 inconclusive(f"the linear pilot stopped at its cap ({first['stop']}) before its loss flattened"))
    return Claim(*_LM_CLAIM, measured, scale, judgement)


def _vit_row(gpu: dict) -> Claim:
    """Per seed, Orthogonal-F minus linear test accuracy (pp) of the ``vit_digits`` stage."""
    if "vit_digits" not in gpu:
        why = _missing(gpu, ["vit_digits"])[0]
        return Claim(*_VIT_CLAIM, f"stage {why}", when(gpu, "vit_digits"), not_run(f"stage {why}"))
    v, runs = gpu["profile"]["vit"], gpu["vit_digits"]["runs"]
    acc = {m: [100 * r["test_acc"] for r in runs[m]] for m in RULES}
    gains = [b - a for a, b in zip(acc["linear"], acc["feature"])]
    return Claim(*_VIT_CLAIM,
                 "test accuracy: " + ", ".join(f"{m} {mean_std(a, '{:.2f}'.format)} %" for m, a in acc.items())
                 + "; Orthogonal-F − linear per seed: " + ", ".join(f"{g:+.2f}" for g in gains)
                 + f" pp (counts beyond {GPU_ACC_MARGIN_PP} pp)",
                 f"{when(gpu, 'vit_digits')}, {seeds_text(len(gains))}, ViT d {v['d']}, depth {v['depth']}, "
                 f"{v['image_size']}×{v['image_size']} digits in patches of {v['patch']}, {v['steps']} steps of {v['batch']}"
                 f" ({gpu['vit_digits']['n_train']} train / {gpu['vit_digits']['n_test']} test images)",
                 judge(gains, GPU_ACC_MARGIN_PP, direction="higher", fmt=lambda x: f"{x:.2f}"))


def _timing_row(gpu: dict, missing: list[str]) -> Claim:
    """Judged on the eager and the compiled ratio; with one of them ``missing`` (its stage did not finish)
    inconclusive, with both not run."""
    timing = step_times(gpu)
    measured = "; ".join(f"{'torch.compile' if k == 'compiled' else k}: {t['linear']:.1f} → {t['feature']:.1f} ms "
                         f"({t['overhead_pct']:+.1f}%)" for k, t in timing.items())
    why = "stage " + "; ".join(missing)
    if not missing:
        judgement = judge([t["feature"] / t["linear"] for t in timing.values()], OVERHEAD_MAX, kind="timing", direction="lower")
    else:
        judgement = inconclusive(why) if timing else not_run(why)
        measured = "; ".join(filter(None, (measured, why)))
    p = gpu["profile"]
    if "timing_model" in p:
        m, batch, seq_len = p["timing_model"], p["timing_batch"], p["timing_seq_len"]
    else:  # a record of the earlier layout timed its one training model
        m, batch, seq_len = p["model"], p["batch"], p["seq_len"]
    return Claim(*_TIMING_CLAIM, f"training-step time (Orthogonal-F / linear): {measured} (counts within ×{OVERHEAD_MAX})",
                 f"{when(gpu, 'step_time_eager')}, one step of batch {batch} × {seq_len} on a decoder of {m['n_layers']} "
                 f"layers, d {m['d']}, do_bench median", judgement)


def _bf16_row(gpu: dict) -> Claim:
    """Per seed, |bf16-coefficient validation loss − fp32-coefficient validation loss| on a bf16 residual stream:
    a claim of no effect, so judged on the magnitude (a large gap either way is an effect). Inconclusive when the
    two arms trained identically (``loss_diff_max`` 0: nothing was compared)."""
    runs, missing = seed_results(gpu, "bf16_seed", BF16_SEEDS), _missing(gpu, _stages("bf16_seed", BF16_SEEDS))
    if not runs:
        return Claim(*_BF16_CLAIM, f"stage {missing[0]}", when(gpu, "bf16_seed0"), not_run(f"stage {missing[0]}"))
    gaps = [r["input"]["val_loss"] - r["float32"]["val_loss"] for r in runs]
    m = gpu["profile"]["lm_model"]
    per = "; ".join(f"{coef} coefficient: validation loss {mean_std([r[coef]['val_loss'] for r in runs], '{:.3f}'.format)}, "
                    f"{sum(r[coef]['spikes'] for r in runs)} loss spikes, max mean |cos(x, f_⊥)| "
                    f"{max(r[coef]['cos_perp_max'] for r in runs):.1e}" for coef in COEF_ARMS)
    same = max(r["loss_diff_max"] for r in runs) == 0
    judgement = (inconclusive("both arms gave the same training losses: the stream was not bf16") if same else
                 judge([abs(g) for g in gaps], LOSS_MARGIN, direction="lower", fmt=lambda x: f"{x:.3f}"))
    return Claim(*_BF16_CLAIM,
                 f"{runs[0]['stream_dtype']} residual stream; {per}; bf16 − fp32 per seed: "
                 + ", ".join(f"{g:+.3f}" for g in gaps) + f" (|gap| counts within {LOSS_MARGIN})"
                 + (f"; not recorded: {'; '.join(missing)}" if missing else ""),
                 f"{when(gpu, 'bf16_seed0')}, {seeds_text(len(gaps))}, {runs[0]['steps']} steps per arm on the "
                 f"decoder of the first row ({m['n_layers']} layers, d {m['d']})", judgement)


def gpu_rows(gpu: dict | None) -> list[Claim]:
    """The rows of the recorded GPU study (:mod:`companion.ortho_residual.scale`); a row whose stages did not
    finish (:func:`companion.core.stages.not_finished`) says which and why, and is not run (or, with some seeds
    done, judged on those: fewer than 3 is inconclusive)."""
    if not gpu:
        return [Claim(*_LM_CLAIM, "no GPU results recorded", "H200",
                      not_run("no GPU results recorded: run `python -m companion.bench ortho_residual` on one GPU"))]
    return [_lm_row(gpu), _vit_row(gpu), _timing_row(gpu, _missing(gpu, [f"step_time_{k}" for k in TIMINGS])),
            _bf16_row(gpu)]


def claim_rows(*, vit: dict, lm: dict, vit_scale: str, lm_scale: str, gpu: dict | None = None) -> list[Claim]:
    """All rows of the notebook's Reproduce table."""
    return [*at_cell(VIT_CELL, [*mechanism_rows(vit, vit_scale), accuracy_row(vit, vit_scale)]),
            *at_cell(LM_CELL, [lm_row(lm, lm_scale)]), *at_cell(GPU_CELL, gpu_rows(gpu))]

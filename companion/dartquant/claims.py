"""Claim rows of paper 08's notebook (DartQuant), built from the run's results.

Every verdict threshold is a module-level constant, tested just inside and just outside in
``tests/unit/test_dartquant_claims.py``. Inputs:

* ``synthetic`` / ``real``: :func:`~companion.dartquant.experiment.layer_study` results (synthetic
  activations; one MiniLM ``intermediate.dense`` layer);
* ``seeds``: :func:`~companion.dartquant.experiment.seed_comparison` rows on synthetic data;
* ``invariance``: ``{"max_abs_diff": float, "max_abs_logit": float, "model": str}`` of the rotated tiny LLaMA;
* ``angle``: :func:`~companion.dartquant.experiment.angle_study` on the 2-D cloud;
* ``gpu``: the recorded GPU payload (or None).
"""

from __future__ import annotations

import numpy as np
import torch

from companion.core import Claim
from companion.dartquant.experiment import run_key
from companion.dartquant.whip import whip_loss

ORTH_TOL = 1e-5            # ‖RᵀR − I‖∞ a fp32 QR-Orth rotation may show
WHIP_DROP_MIN = 1e-3       # relative drop of the full-data Whip loss (final R vs initial R) that counts as a decrease
IDENTITY_FACTOR = 3.0      # quant MSE without rotation must exceed this many times the Hadamard one
BETTER_MARGIN = 0.02       # Whip/Hadamard quant-MSE ratio must be below 1 − this to count as better (every seed)
NONINFERIOR = 1.02         # ... and at most this to count as no worse (the spec's check)
VAR_MOVE_TOL = 1e-3        # max |R_final − R_0| entry below which the variance-loss run "did not move"
FLAT_TOL = 1e-2            # relative spread (max − min)/mean of a loss over the 2-D angles counted as flat
INVARIANCE_TOL = 1e-4      # max |logits(rotated) − logits(original)| in fp32
QR_SPEEDUP_MIN = 1.2       # Cayley/QR-Orth time per step counted as "QR-Orth faster" (paper ≈ 1.4× at large n)
STEP_REPS = 5              # timed steps per method on a CPU (companion.core.time_ms's default cpu_reps)


def _ratio_verdict(ratios) -> str:
    worst = max(ratios)
    if worst < 1 - BETTER_MARGIN:
        return "reproduced"
    if worst <= NONINFERIOR:
        return "partly reproduced"
    return "not reproduced"


def _full_whip(study: dict, r: torch.Tensor) -> float:
    with torch.no_grad():
        return float(whip_loss(study["x"].float() @ r))


def _scale(study: dict, what: str) -> str:
    return f"{what}: {study['tokens']} tokens × d={study['n']}, {study['steps']} steps of {study['batch']} tokens, lr {study['lr']:g}, CPU"


def orth_errors(studies: dict) -> dict:
    """``{source: max ‖RᵀR − I‖∞ over its QR-Orth runs}``."""
    return {name: max(s["metrics"][k]["orth_err"] for k in s["runs"] if k.startswith("qr_orth/")) for name, s in studies.items()}


def orthogonality_row(errs: dict) -> Claim:
    worst = max(errs.values())
    return Claim("QR-Orth keeps R orthogonal without a retraction",
                 "Alg. 1: R = Q(qr(Z)) each step, any optimiser on the free latent Z",
                 "max ‖RᵀR − I‖∞ of the QR-Orth rotations: " + ", ".join(f"{k} {v:.1e}" for k, v in errs.items())
                 + f" (threshold {ORTH_TOL:.0e})",
                 "every QR-Orth run of this notebook, fp32", "reproduced" if worst < ORTH_TOL else "not reproduced")


def whip_drops(studies: dict) -> dict:
    """``{source: (Whip of X R_0, Whip of X R_final)}`` on the full activation matrix, for QR-Orth + Whip."""
    out = {}
    for name, s in studies.items():
        run = s["runs"][run_key("qr_orth", "whip")]
        out[name] = (_full_whip(s, run.snapshots[0]), _full_whip(s, run.rotation))
    return out


def whip_decrease_row(drops: dict, scale: str) -> Claim:
    rel = {k: 1 - b / a for k, (a, b) in drops.items()}
    ok = all(v > WHIP_DROP_MIN for v in rel.values())
    return Claim("Minimising Whip flattens the rotated distribution",
                 "Eq. 4: Whip(x) = Σ exp(−|x_i|) decreases and the rotated activations approach a uniform shape",
                 "full-data Whip loss, random-Hadamard init → calibrated: "
                 + ", ".join(f"{k} {a:.2f} → {b:.2f} ({-100 * rel[k]:+.1f} %)" for k, (a, b) in drops.items())
                 + f" (a decrease counts beyond {100 * WHIP_DROP_MIN:.1f} %)",
                 scale, "reproduced" if ok else "not reproduced")


def outlier_row(m: dict, scale: str) -> Claim:
    ok = m["identity"]["quant_mse"] > IDENTITY_FACTOR * m["hadamard"]["quant_mse"]
    return Claim("Rotations smooth outliers (the premise, Fig. 3)",
                 "rotated activations have far fewer outliers and a smaller per-token INT4 error",
                 f"INT4 MSE identity {m['identity']['quant_mse']:.4f} → Hadamard {m['hadamard']['quant_mse']:.4f}; "
                 f"kurtosis {m['identity']['kurtosis']:.1f} → {m['hadamard']['kurtosis']:.2f}; max |y| "
                 f"{m['identity']['max_abs']:.1f} → {m['hadamard']['max_abs']:.1f} (spec at d=256: 0.0629 → 0.0083, 89.4 → 2.30)",
                 scale, "reproduced" if ok else "not reproduced")


def synthetic_gain_row(seeds: list, scale: str) -> Claim:
    ratios = [r["whip"] / r["hadamard"] for r in seeds]
    txt = ", ".join(f"{r['hadamard']:.4f} → {r['whip']:.4f}" for r in seeds)
    return Claim("Whip + QR-Orth beats the random Hadamard rotation (synthetic layer)",
                 "Fig. 3 / Table 2: calibrated rotations quantize better than QuaRot's random Hadamard "
                 "(spec at d=256: INT4 MSE 0.0083 → 0.0079)",
                 f"INT4 MSE Hadamard → Whip per seed: {txt}; worst ratio {max(ratios):.3f} (better below "
                 f"{1 - BETTER_MARGIN:.2f}, no worse up to {NONINFERIOR:.2f})",
                 scale + (", one seed" if len(seeds) == 1 else f", {len(seeds)} seeds (data and init)"),
                 _ratio_verdict(ratios))


def real_gain_row(m: dict, layer: int, scale: str) -> Claim:
    w, h = m[run_key("qr_orth", "whip")], m["hadamard"]
    ratio = w["quant_mse"] / h["quant_mse"]
    err = (f"; W4A4 layer error {m['identity']['layer_err']:.3f} (identity) → {h['layer_err']:.3f} → {w['layer_err']:.3f}"
           if "layer_err" in w else "")
    return Claim("Whip + QR-Orth beats Hadamard on a real layer",
                 "Llama-2-7B W4A4KV16 average PPL: DartQuant 18.53 vs SpinQuant 19.90 vs QuaRot 20.63",
                 f"MiniLM layer {layer} intermediate.dense input, INT4 MSE Hadamard {h['quant_mse']:.4f} → Whip "
                 f"{w['quant_mse']:.4f} (ratio {ratio:.3f}){err}",
                 scale + ", one seed", _ratio_verdict([ratio]))


def ablation_numbers(synthetic: dict, angle: dict) -> dict:
    """How far the variance-loss run moved R, and the relative spread of the variance and Whip over θ."""
    var = synthetic["runs"][run_key("qr_orth", "variance")]
    v, wv = np.asarray(angle["variance"]), np.asarray(angle["whip"])
    m = synthetic["metrics"]
    return {"moved": float((var.rotation - var.snapshots[0]).abs().max()),
            "flat": float((v.max() - v.min()) / v.mean()), "whip_range": float((wv.max() - wv.min()) / wv.mean()),
            "mse": {k: m[k]["quant_mse"] for k in ("hadamard", "qr_orth/variance", "qr_orth/kurtosis", "qr_orth/whip") if k in m},
            "steps": synthetic["steps"]}


def ablation_row(a: dict, scale: str) -> Claim:
    ok = a["moved"] < VAR_MOVE_TOL and a["flat"] < FLAT_TOL
    mse = a["mse"]
    return Claim("The variance loss has no signal; Whip has (Fig. 7a ablation)",
                 "variance is rotation-invariant for zero-mean symmetric data; kurtosis converges slowly",
                 f"variance-loss QR-Orth moved R by {a['moved']:.1e} (max entry; counts below {VAR_MOVE_TOL:.0e}); "
                 f"2-D: variance spread {100 * a['flat']:.2f} % over θ (flat below {100 * FLAT_TOL:.0f} %) vs Whip "
                 f"{100 * a['whip_range']:.0f} %; INT4 MSE after {a['steps']} steps: "
                 + ", ".join(f"{k.split('/')[-1]} {v:.4f}" for k, v in mse.items()),
                 scale, "reproduced" if ok else "not reproduced")


def invariance_row(inv: dict) -> Claim:
    d = inv["max_abs_diff"]
    return Claim("Computational invariance: fused R1, R2 and the R3/R4 Hadamards leave the model unchanged",
                 "Y = X Wᵀ = (X R)(Rᵀ Wᵀ); no inference overhead for R1, R2",
                 f"max |Δ logit| {d:.1e} (max |logit| {inv['max_abs_logit']:.2f}; threshold {INVARIANCE_TOL:.0e})",
                 f"{inv['model']}, fp32", "reproduced" if d < INVARIANCE_TOL else "not reproduced")


def step_cost_row(qr_ms: float, cayley_ms: float, n: int, scale: str, gpu: dict | None = None) -> Claim:
    paper = "QR-Orth ≈ (4/3)n³ per step vs ≈ 6n³ for Cayley SGD: ≈ 1.4× faster per iteration at LLM widths"
    steps = (gpu or {}).get("step_cost")
    if isinstance(steps, dict) and steps.get("rows"):
        txt = "; ".join(f"n={r['n']}: QR-Orth {r['qr_ms']:.1f} ms, Cayley {r['cayley_ms']:.1f} ms ({r['cayley_ms'] / r['qr_ms']:.2f}×)"
                        for r in steps["rows"])
        return Claim("QR-Orth is cheaper per step than Cayley", paper, txt + f" (CPU d={n}: {cayley_ms / qr_ms:.2f}×)",
                     f"{gpu.get('device', 'GPU')}, {gpu.get('date', '?')}, fp32", "recorded on GPU")
    ratio = cayley_ms / qr_ms
    return Claim("QR-Orth is cheaper per step than Cayley", paper,
                 f"ms per step at d={n}: QR-Orth {qr_ms:.1f}, Cayley {cayley_ms:.1f} (ratio {ratio:.2f}; counts from "
                 f"{QR_SPEEDUP_MIN}); small n on a shared CPU, where per-call overheads and load weigh as much as the n³ terms",
                 scale + ", wall time on a shared CPU", "reproduced" if ratio >= QR_SPEEDUP_MIN else "not reproduced")


def gpu_rows(gpu: dict | None) -> list[Claim]:
    ppl_paper = "Llama-2-7B W4A4KV4 avg PPL: DartQuant 19.14 vs SpinQuant 25.12; W4A4KV16 18.53 vs QuaRot 20.63"
    cost_paper = "70B calibration: 0.91 GPU-h / 23.47 GiB vs SpinQuant 42.90 GPU-h / 238.89 GiB (47×, 10×)"
    if not gpu or "models" not in gpu:
        return [Claim("End-to-end W4A4KV4 perplexity", ppl_paper, "no GPU run recorded", "one H200 (planned)", "not run here"),
                Claim("Calibration cost vs end-to-end rotation training", cost_paper, "no GPU run recorded",
                      "one H200 (planned)", "not run here")]
    where = f"{gpu.get('device', 'GPU')}, {gpu.get('date', '?')}, one seed"
    rows = []
    for mod in gpu["models"]:
        ppl = mod.get("ppl", {})
        if ppl:
            txt = "; ".join(f"{k}: " + ", ".join(f"{s} {v:.2f}" for s, v in d.items()) for k, d in ppl.items())
            rows.append(Claim(f"End-to-end W4A4KV4 perplexity ({mod['name']})", ppl_paper, txt,
                              f"{mod['name']} byte-level LLaMA trained {mod.get('train_seconds', '?')} s on local text; {where}",
                              "recorded on GPU"))
        cost = mod.get("cost")
        if cost:
            rows.append(Claim(f"Calibration cost vs end-to-end rotation training ({mod['name']})", cost_paper,
                              f"DartQuant R1+R2 {cost['dartquant_s']:.1f} s / {cost['dartquant_mib']:.0f} MiB vs end-to-end "
                              f"Cayley {cost['e2e_s']:.1f} s / {cost['e2e_mib']:.0f} MiB ({cost['e2e_s'] / cost['dartquant_s']:.1f}× time, "
                              f"{cost['e2e_mib'] / max(cost['dartquant_mib'], 1e-9):.1f}× memory)", where, "recorded on GPU"))
    return rows or [Claim("End-to-end W4A4KV4 perplexity", ppl_paper, "GPU run recorded without model results",
                          where, "recorded on GPU")]


def claim_rows(*, synthetic: dict, real: dict, real_layer: int, seeds: list, invariance: dict, angle: dict,
               gpu: dict | None = None, step_cost: dict | None = None) -> list[Claim]:
    """All rows of the notebook's Reproduce table. ``step_cost``: a :func:`companion.dartquant.scale.step_cost`
    row (median step times) at the synthetic width; without it the calibration runs' mean step times are used."""
    studies = {"synthetic": synthetic, "MiniLM": real}
    syn_scale = _scale(synthetic, "synthetic (Laplace, 4 channels ×20, RMS-normalised)")
    runs = synthetic["runs"]
    return [orthogonality_row(orth_errors(studies)),
            whip_decrease_row(whip_drops(studies), "; ".join(_scale(s, k) for k, s in studies.items())),
            outlier_row(synthetic["metrics"], syn_scale),
            synthetic_gain_row(seeds, syn_scale),
            real_gain_row(real["metrics"], real_layer, _scale(real, f"all-MiniLM-L6-v2 layer {real_layer}")),
            ablation_row(ablation_numbers(synthetic, angle), syn_scale + "; 2-D Laplace cloud, one outlier axis ×6"),
            invariance_row(invariance),
            step_cost_row(*((step_cost["qr_ms"], step_cost["cayley_ms"]) if step_cost else
                            (runs[run_key("qr_orth", "whip")].ms_per_step, runs[run_key("cayley", "whip")].ms_per_step)),
                          synthetic["n"], syn_scale + (f", median of {STEP_REPS} timed steps of {step_cost['tokens']} tokens"
                                                       if step_cost else ", mean step of the calibration runs"), gpu),
            *gpu_rows(gpu)]

"""Claim rows of paper 07's notebook (GMV), built from the run's results.

Inputs: ``runs`` — ``{method: [RunResult per fold]}`` from :func:`~companion.graph_multiview.training.compare`;
``invariants`` — :func:`~companion.graph_multiview.submix.mixing_invariants`; ``ppr_err`` — the largest
difference between our PPR and networkx's ``pagerank``; ``scale`` — what the run was; ``gpu`` — the recorded
GPU payload or None. Every verdict threshold is a named constant, tested just inside and just outside in
``tests/unit/test_graph_multiview_claims.py``.
"""

from __future__ import annotations

import numpy as np

from companion.core import Claim
from companion.graph_multiview.training import LABELS

EXACT_TOL = 1e-9  # |E_src + E_trg − I| and |w_src + w_trg − 1| allowed (they are exact by construction)
PPR_TOL = 1e-6  # our PPR against networkx pagerank (alpha = 1 − β)
ACC_MARGIN_PP = 3.0  # accuracy gain (pp) GMV must exceed over the comparison, and SPREAD_FACTOR std of the per-fold gains
SPREAD_FACTOR = 1.0
DIVERSITY_FACTOR = 1.5  # GMV's symmetric KL must exceed the comparison's by this factor to count as "more diverse"
OVERHEAD_LO, OVERHEAD_HI = 1.5, 3.0  # training-time ratio GMV / vanilla counted as the paper's +113–125 %
SHORT_RUN = "short CPU runs can favour the baseline (the spec's 40-epoch PROTEINS run: GCN 70.6 vs GMV 61.9)"


def _ms(values) -> str:
    v = np.asarray(values, dtype=float)
    return f"{v.mean():.1f} ± {v.std(ddof=1):.1f}" if len(v) > 1 else f"{v.mean():.1f}"


def _folds(runs) -> str:
    n = len(next(iter(runs.values())))
    return "one fold" if n == 1 else f"{n} folds, mean ± std"


def gain_verdict(gains) -> str:
    """``gains``: per-fold accuracy gains (pp) of GMV. Counts only beyond ``ACC_MARGIN_PP`` and, with several
    folds, beyond ``SPREAD_FACTOR`` standard deviations of the gains."""
    g = np.asarray(gains, dtype=float)
    spread = float(g.std(ddof=1)) if len(g) > 1 else 0.0
    return "partly reproduced" if g.mean() > ACC_MARGIN_PP and g.mean() > SPREAD_FACTOR * spread else "not reproduced"


def mechanics_rows(invariants: dict, ppr_err: float, scale: str) -> list[Claim]:
    inv = invariants
    exact = inv["identity_err"] <= EXACT_TOL and inv["weight_err"] <= EXACT_TOL
    clean = exact and inv["size_errors"] == inv["feature_errors"] == inv["non_images"] == inv["removed_inside"] == 0
    return [
        Claim("ST-SubMix replaces the target's subgraph by the source's (Alg. 2)",
              "E_src + E_trg = I; w_src + w_trg = 1 (Eq. 2); V_mix = V_trg; E′_src = φ(source edges)",
              f"{inv['pairs']} mixes: max |E_src + E_trg − I| = {inv['identity_err']:.0e}, max |w_src + w_trg − 1| = "
              f"{inv['weight_err']:.0e}; |V_mix| ≠ |V_trg|: {inv['size_errors']}; feature mismatches: "
              f"{inv['feature_errors']}; inserted edges not images under φ: {inv['non_images']}; mean w_src = "
              f"{inv['mean_w_src']:.2f}", scale, "reproduced" if clean else "not reproduced"),
        Claim("ST-PPR scores are personalised PageRank (β = 0.15)",
              "S = β (I − (1 − β) T)⁻¹ (Klicpera et al. 2019)",
              f"max |ours − networkx pagerank(alpha = 1 − β)| = {ppr_err:.1e} (tolerance {PPR_TOL:.0e})",
              scale, "reproduced" if ppr_err <= PPR_TOL else "not reproduced"),
    ]


def accuracy_row(runs: dict, scale: str) -> Claim:
    acc = {m: [r.acc for r in rs] for m, rs in runs.items()}
    gains = [a - b for a, b in zip(acc["gmv"], acc["vanilla"])]
    text = ", ".join(f"{LABELS.get(m, m)} {_ms(v)} %" for m, v in acc.items())
    return Claim("GMV improves accuracy over the vanilla GNN",
                 "GCN vanilla → GMV: IMDB-B 72.30 → 75.50, PROTEINS 72.15 → 74.67, NCI109 70.27 → 76.86 (Table 1)",
                 f"planted-motif test accuracy: {text}; GMV − vanilla = {np.mean(gains):+.1f} pp (counts only beyond "
                 f"{ACC_MARGIN_PP:g} pp); {SHORT_RUN}", f"{scale}, {_folds(runs)}", gain_verdict(gains))


def ablation_row(runs: dict, scale: str) -> Claim:
    need = ("mixed_single", "decomposition", "gmv")
    if not all(m in runs for m in need):
        return Claim("Both parts are needed (ablation)", "IMDB-B: mixed views only 74.10, decomposition only 72.70, "
                     "both 75.50", "ablations not run", scale, "not run here")
    acc = {m: [r.acc for r in runs[m]] for m in need}
    gains = [g - max(a, b) for g, a, b in zip(acc["gmv"], acc["mixed_single"], acc["decomposition"])]
    return Claim("Both parts are needed (ablation)",
                 "IMDB-B: mixed views only 74.10, decomposition only 72.70, both 75.50 (PROTEINS 74.40 / 73.41 / 74.67)",
                 f"mixed views only {_ms(acc['mixed_single'])}, decomposition only {_ms(acc['decomposition'])}, "
                 f"both (GMV) {_ms(acc['gmv'])} %; GMV − best ablation per fold {np.mean(gains):+.1f} pp; {SHORT_RUN}",
                 f"{scale}, {_folds(runs)}", gain_verdict(gains))


def diversity_row(runs: dict, scale: str) -> Claim:
    ref = next((m for m in ("ensemble", "gmimo", "two_head") if m in runs), None)
    if ref is None or "gmv" not in runs:
        return Claim("GMV's heads are more diverse", "NCI109-GCN D_disagree / D_KL: ensemble 10.02 / 1.56, "
                     "G-MIMO 12.14 / 1.63, GMV 13.40 / 5.41", "no multi-head comparison run", scale, "not run here")
    d = {m: ([r.disagree for r in rs], [r.sym_kl for r in rs]) for m, rs in runs.items()
         if m in ("ensemble", "gmimo", "two_head", "gmv")}
    kl_g, kl_r = float(np.mean(d["gmv"][1])), float(np.mean(d[ref][1]))
    text = "; ".join(f"{LABELS[m]} D_disagree {np.mean(a):.1f} %, sym. KL {np.mean(b):.3f}" for m, (a, b) in d.items())
    return Claim("GMV's heads are more diverse",
                 "NCI109-GCN D_disagree / D_KL: ensemble 10.02 / 1.56, G-MIMO 12.14 / 1.63, GMV 13.40 / 5.41",
                 f"{text} (GMV's KL must exceed {LABELS[ref]}'s by ×{DIVERSITY_FACTOR:g})", f"{scale}, {_folds(runs)}",
                 "partly reproduced" if kl_g > DIVERSITY_FACTOR * kl_r else "not reproduced")


def overhead_row(runs: dict, scale: str) -> Claim:
    t_v = float(np.mean([r.train_seconds for r in runs["vanilla"]]))
    t_g = float(np.mean([r.train_seconds for r in runs["gmv"]]))
    cache = float(np.mean([r.cache_seconds for r in runs["gmv"]]))
    ratio = t_g / t_v
    return Claim("Training overhead of GMV",
                 "+113 % (NCI1), +120 % (PROTEINS), +125 % (COLLAB) over GCN (Table 11 also says ≈ +9 %, which "
                 "disagrees with these); view caching ≈ 0.4 % of PROTEINS' training time",
                 f"training time GMV / vanilla = {ratio:.2f}× ({t_g:.2f} s vs {t_v:.2f} s per run, same epochs); "
                 f"view caching {cache:.2f} s per fold, {100 * cache / max(t_g, 1e-9):.0f} % of GMV's training time",
                 f"{scale}, CPU times (noisy on a shared machine)",
                 "reproduced" if OVERHEAD_LO <= ratio <= OVERHEAD_HI else "not reproduced")


def tu_row() -> Claim:
    return Claim("TU benchmarks (IMDB-B, PROTEINS, NCI1, NCI109, MUTAG, ...)", "Table 1 (10-fold CV)",
                 "not reproduced: data not shipped (the DGCNN-format loader is tested on a small local file)",
                 "—", "not run here")


def gpu_rows(gpu: dict | None) -> list[Claim]:
    if not gpu or "main" not in gpu:
        return [Claim("GCN / GIN / GraphGPS × methods on larger motif sets (one H200)",
                      "GMV beats augmentation and ensembles for GNNs and Graph Transformers",
                      "no GPU run recorded", "H200", "not run here")]
    where = f"{gpu.get('device', 'GPU')}, {gpu.get('date', '?')}"
    rows = []
    for conv, table in gpu["main"].items():
        text = ", ".join(f"{LABELS.get(m, m)} {v['acc_mean']:.1f} ± {v['acc_std']:.1f}" for m, v in table.items())
        n = next(iter(table.values()))["folds"]
        rows.append(Claim(f"{conv.upper()}: methods on the noisy motif set", "GMV best or near-best in Table 1",
                          text + " %", f"{where}, {n} folds, {gpu['config']['graphs']} graphs", "recorded on GPU"))
    sub = f"{where}, {gpu['config'].get('sweep_folds', '?')} folds each"
    sweep = gpu.get("heads_sweep")
    if sweep:
        rows.append(Claim("Sub-network sweep", "2 sub-networks by default; sweep 2–10 (paper: gains saturate)",
                          ", ".join(f"M = {k}: {v['acc_mean']:.1f} ± {v['acc_std']:.1f}" for k, v in sweep.items()) + " %",
                          sub, "recorded on GPU"))
    noise = gpu.get("label_noise")
    if noise:
        rows.append(Claim("Label noise", "GMV more robust to 10/20/40 % label noise",
                          "; ".join(f"{k}: " + ", ".join(f"{LABELS.get(m, m)} {v['acc_mean']:.1f}" for m, v in t.items())
                                    for k, t in noise.items()), sub, "recorded on GPU"))
    ratio = gpu.get("label_ratio")
    if ratio:
        rows.append(Claim("Fewer labels", "label ratios 75 / 50 / 25 / 10 %",
                          "; ".join(f"{k}: " + ", ".join(f"{LABELS.get(m, m)} {v['acc_mean']:.1f}" for m, v in t.items())
                                    for k, t in ratio.items()), sub, "recorded on GPU"))
    lat = gpu.get("latency_ms")
    if lat:
        rows.append(Claim("Inference cost", "one forward pass plus an extra head",
                          ", ".join(f"{LABELS.get(m, m)} {v:.2f} ms" for m, v in lat.items()) + " per test batch",
                          where, "recorded on GPU"))
    return rows


def claim_rows(runs: dict, invariants: dict, ppr_err: float, *, scale: str, gpu: dict | None = None) -> list[Claim]:
    """All rows of the notebook's Reproduce table."""
    return [*mechanics_rows(invariants, ppr_err, scale), accuracy_row(runs, scale), ablation_row(runs, scale),
            diversity_row(runs, scale), overhead_row(runs, scale), tu_row(), *gpu_rows(gpu)]

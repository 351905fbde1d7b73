"""The claims table of paper 03 (ScaleKV): rows built from the run's result objects.

Every verdict comes from :func:`companion.core.judge` (or :func:`~companion.core.not_run`), the one rule
of the project; every threshold is a named constant below, tested just inside and just outside in
``tests/unit/test_scalekv_claims.py``.

* The comparisons of ScaleKV with a uniform budget are effects with **one value per training seed**: the
  notebook's ``SEED`` and the committed models of the other seeds (``SEED_CHECKPOINTS``), each with its
  own calibration and sampling noise (:func:`companion.scalekv.experiment.seed_sweeps`). Below three seeds
  the rule says *inconclusive*.
* The comparisons with PyramidKV, the recency baselines and the δ ablation run on the notebook's own
  model only: one seed, inconclusive, with their numbers shown.
* ``PSNR_MARGIN_DB``: ScaleKV "beats" a baseline when its PSNR is higher by at least this many dB (the
  target of the per-seed gain); ``HIDDEN_MARGIN``: or, for the teacher-forced hidden-state error, lower
  by this relative share; ``DELTA_MARGIN_DB``: the δ ablation compares two *pre-declared* values, δ = 0
  (the smallest of ``DELTAS``) and the notebook's ``DELTA``, never the best of the grid.
* Exact claims on one run: the planted drafters found at every scale; the retained bytes equal to the
  budget up to ``MEMORY_ROUNDING_TOKENS`` tokens of ``N_{K-2}``.
* GPU rows are judged from the recorded JSON by the same rule: the larger model is one seed; the attention
  latency is a timing (``LATENCY_SPEEDUP``, full cache timed first, in the same run).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from companion.core import Claim, judge, not_run
from companion.core.claims import at_cell
from companion.core.stages import not_finished
from companion.scalekv.budgets import uniform_budget
from companion.scalekv.schedule import cumulative_tokens

__all__ = ["claim_rows", "recorded_rows", "memory_deviation_tokens", "memory_matches", "seed_gains", "Claim", "PSNR_MARGIN_DB",
           "HIDDEN_MARGIN", "DELTA_MARGIN_DB", "MEMORY_ROUNDING_TOKENS", "LATENCY_SPEEDUP"]

PSNR_MARGIN_DB = 0.5
HIDDEN_MARGIN = 0.05
DELTA_MARGIN_DB = 0.5
MEMORY_ROUNDING_TOKENS = 0.5
#: the paper's end-to-end speed-up (up to 1.25x on one H20); the attention-only speed-up measured here
#: bounds an end-to-end one from above, so it must reach at least this.
LATENCY_SPEEDUP = 1.25
# the cells of notebooks/03_scalekv.ipynb (nbformat ids) that measure the rows: the planted-structure model, the sweep
# of every method and budget (with the delta grid), the spread over training seeds, and the Scale-up cell that shows
# the recorded GPU run
PLANTED_CELL, SWEEP_CELL, SEEDS_CELL, GPU_CELL = "af51feb3", "8a476879", "af3acd44", "19461ab6"


def _db(x: float) -> str:
    return f"{x:.2f} dB"


def _rel(x: float) -> str:
    return f"{x:.1%}"


def _val(table, method: str, fraction: float, key: str) -> float:
    rows = table[(table.method == method) & (table.fraction == fraction)]
    if rows.empty:
        raise ValueError(f"the sweep has no row for method {method!r} at fraction {fraction}")
    return float(rows[key].iloc[0])


def _gain(a: float, b: float) -> float:
    """PSNR ``a`` over PSNR ``b`` in dB. Two equal values are no gain, also two infinite ones: an image equal to the
    full cache's has PSNR inf (an untrained model can sample the same tokens under every cache), and inf - inf is NaN."""
    return 0.0 if a == b else a - b


def _change(ours: float, theirs: float) -> float:
    """``ours / theirs - 1`` of two errors: 0 when equal (also 0 and 0), +inf for a non-zero error against none."""
    return 0.0 if ours == theirs else (ours / theirs - 1.0 if theirs else float("inf"))


def _nearest(values: Sequence[float], target: float) -> float:
    return min(values, key=lambda b: abs(b - target))


def _pct(f: float) -> str:
    return f"{f:.0%}"


def seed_gains(seed_table, fraction: float) -> dict[int, tuple[float, float]]:
    """Per training seed at ``fraction``: (ScaleKV's PSNR − uniform's in dB, ScaleKV's teacher-forced hidden error
    over uniform's − 1), from a table with a ``seed`` column (:func:`companion.scalekv.experiment.seed_sweeps`)."""
    out = {}
    for sd in sorted(int(x) for x in seed_table.seed.unique()):
        t = seed_table[seed_table.seed == sd]
        out[sd] = (_gain(_val(t, "scalekv", fraction, "psnr"), _val(t, "uniform", fraction, "psnr")),
                   _change(_val(t, "scalekv", fraction, "hidden_error"), _val(t, "uniform", fraction, "hidden_error")))
    return out


def claim_rows(table, planted: Mapping, delta_runs: Mapping, *, delta: float, sides, scale: str, planted_scale: str,
               recorded: Mapping | None = None, seed_table=None, seed_scale: str = "") -> list[Claim]:
    """The notebook's rows.

    ``table``: :attr:`companion.scalekv.experiment.Sweep.table` of the notebook's own model (one row per method
    and budget); ``planted``: :func:`~companion.scalekv.experiment.planted_experiment`'s result; ``delta_runs``:
    ``{(fraction, delta): {"psnr": ...}}`` (the explorer data's ScaleKV runs); ``delta``: the pre-declared δ of
    the ablation (the notebook's ``DELTA``); ``sides``: the schedule; ``scale``: the scale column of the rows on
    the notebook's own model (it says "one training seed"); ``seed_table``: ScaleKV and uniform on every training
    seed, the notebook's included (:func:`~companion.scalekv.experiment.seed_sweeps`; None: the notebook's model
    only), ``seed_scale`` its scale column; ``recorded``: the committed GPU results
    (:func:`companion.scalekv.scale.recorded`) or None.
    """
    fractions = sorted(float(f) for f in table.fraction.unique())
    if not fractions:
        raise ValueError("the sweep table is empty")
    f10, f4, f20 = _nearest(fractions, 0.1), fractions[0], _nearest(fractions, 0.2)
    rows: list[Claim] = []

    # ScaleKV vs uniform: one value per training seed (only the notebook's own where there is no seed table)
    spread = (seed_table if seed_table is not None and len(seed_table)
              else table[table.fraction.isin([f4, f10, f20])].assign(seed=-1))
    spread_scale = seed_scale if seed_table is not None and len(seed_table) else scale
    seed_fr = sorted(float(f) for f in spread.fraction.unique())
    s10 = _nearest(seed_fr, 0.1)
    g10 = seed_gains(spread, s10)
    seeds = ("per training seed (" + "/".join(str(s) for s in g10) + ")") if -1 not in g10 else "on this run's model only"
    sk10, un10, py10 = (_val(table, m, f10, "psnr") for m in ("scalekv", "uniform", "pyramid"))
    he10 = {m: _val(table, m, f10, "hidden_error") for m in ("scalekv", "uniform", "pyramid")}
    own = (f"; this run's model: ScaleKV {sk10:.2f}, uniform {un10:.2f}, PyramidKV {py10:.2f} dB, hidden error "
           f"{he10['scalekv']:.3f} / {he10['uniform']:.3f} / {he10['pyramid']:.3f}")
    rows.append(Claim(
        claim=f"ScaleKV beats a uniform SnapKV budget at {_pct(s10)} of the KV memory (PSNR)",
        paper="Infinity-8B, 10%: PSNR 23.25 vs SnapKV 20.60 (FID 2.12 vs 4.68)",
        measured=(f"PSNR gain over uniform {seeds}: " + "/".join(f"{g:+.2f}" for g, _ in g10.values())
                  + f" dB{own}"),
        scale=spread_scale,
        judgement=judge([g for g, _ in g10.values()], PSNR_MARGIN_DB, direction="higher", fmt=_db), cell=SEEDS_CELL))
    rows.append(Claim(
        claim=f"ScaleKV beats a uniform SnapKV budget at {_pct(s10)} of the KV memory (teacher-forced hidden error, our measure)",
        paper="Infinity-8B, 10%: closer to the full cache than SnapKV (FID, LPIPS, PSNR)",
        measured=(f"relative change of the final hidden-state error against uniform's {seeds}: " + "/".join(f"{h:+.1%}" for _, h in g10.values())),
        scale=spread_scale,
        judgement=judge([h for _, h in g10.values()], -HIDDEN_MARGIN, direction="lower", fmt=_rel), cell=SEEDS_CELL))

    per_budget = {f: seed_gains(spread, f) for f in seed_fr}
    worst = {sd: min(per_budget[f][sd][0] for f in seed_fr) for sd in g10}
    rows.append(Claim(
        claim="ScaleKV beats uniform at equal memory across budgets",
        paper="better at 4%, 10% and 20% on 2B and 8B",
        measured=(f"PSNR gain over uniform at the worst of {'/'.join(_pct(f) for f in seed_fr)} {seeds}: "
                  + "/".join(f"{w:+.2f}" for w in worst.values()) + " dB"),
        details=("PSNR gain over uniform at " + "/".join(_pct(f) for f in seed_fr) + ": "
                 + "; ".join((f"seed {sd} " if sd != -1 else "") + "/".join(f"{per_budget[f][sd][0]:+.2f}" for f in seed_fr) for sd in g10)
                 + " dB (judged: each seed's worst budget)"),
        scale=spread_scale,
        judgement=judge(list(worst.values()), PSNR_MARGIN_DB, direction="higher", fmt=_db), cell=SEEDS_CELL))

    vs_py = {f: _gain(_val(table, "scalekv", f, "psnr"), _val(table, "pyramid", f, "psnr")) for f in sorted({f4, f20})}
    rows.append(Claim(
        claim="ScaleKV beats PyramidKV",
        paper="2B PSNR at 4% 20.82 vs 18.65, at 20% 24.84 vs 22.62",
        measured="; ".join(f"PSNR at {_pct(f)}: {_val(table, 'scalekv', f, 'psnr'):.2f} vs {_val(table, 'pyramid', f, 'psnr'):.2f}"
                           for f in vs_py) + " (judged: the smaller gain)",
        scale=scale,
        judgement=judge([min(vs_py.values())], PSNR_MARGIN_DB, direction="higher", fmt=_db), cell=SWEEP_CELL))

    st10, wi10 = _val(table, "streaming", f10, "psnr"), _val(table, "window", f10, "psnr")
    rows.append(Claim(
        claim="recency baselines fall behind",
        paper="8B at 10%: StreamingLLM PSNR 19.97, sliding window FID 8.71 (worst)",
        measured=f"PSNR at {_pct(f10)}: StreamingLLM {st10:.2f}, sliding window {wi10:.2f}, ScaleKV {sk10:.2f} dB "
                 "(judged: ScaleKV minus the better of the two)",
        scale=scale,
        judgement=judge([_gain(sk10, max(st10, wi10))], PSNR_MARGIN_DB, direction="higher", fmt=_db), cell=SWEEP_CELL))

    p_err = planted["errors"]
    pf = sorted(p_err["scalekv"])
    missed = sum(low != list(planted["planted"]) for low in planted["lowest"])
    rows.append(Claim(
        claim="ASI identifies the drafters",
        paper="low ASI = attention dispersed over earlier scales (Sec. 3.2)",
        measured=f"planted drafters (layers {', '.join(map(str, planted['planted']))}) have the lowest z at {len(planted['lowest']) - missed} of "
                 f"{len(planted['lowest'])} scales; hidden error at " + "/".join(_pct(f) for f in pf) + ": ScaleKV "
                 + "/".join(f"{p_err['scalekv'][f]:.3f}" for f in pf) + ", uniform " + "/".join(f"{p_err['uniform'][f]:.3f}" for f in pf)
                 + " (judged: scales where the lowest z are not the planted layers)",
        scale=planted_scale,
        judgement=judge([missed], 0, kind="exact", fmt=lambda x: f"{x:.0f}"), cell=PLANTED_CELL))

    deltas = sorted({float(d) for _, d in delta_runs})
    base = deltas[0]
    per_delta = {d: [v["psnr"] for (f, dd), v in delta_runs.items() if float(dd) == d] for d in deltas}
    mean = {d: sum(v) / len(v) for d, v in per_delta.items()}
    chosen = _nearest(deltas, float(delta))
    delta_claim, delta_paper = "refiner budgets decaying with scale help (delta ablation)", "2B at 10%: FID 3.49 (delta 0) -> 2.53 (delta 70/650)"
    if chosen == base:
        why = f"DELTA = {delta:g} is the smallest delta of the grid, nothing to compare it with"
        rows.append(Claim(claim=delta_claim, paper=delta_paper, measured=f"not measured: {why}", scale=scale, judgement=not_run(why),
                          cell=SWEEP_CELL))
    else:
        gain = _gain(mean[chosen], mean[base])
        rows.append(Claim(
            claim=delta_claim, paper=delta_paper,
            measured=f"mean PSNR over {len(per_delta[chosen])} budgets: {mean[base]:.2f} at delta {base:g}, {mean[chosen]:.2f} at the "
                     f"pre-declared delta {chosen:g} ({gain:+.2f} dB); over all {len(deltas)} deltas "
                     f"{min(mean.values()):.2f}..{max(mean.values()):.2f}",
            scale=scale,
            judgement=judge([gain], DELTA_MARGIN_DB, direction="higher", fmt=_db), cell=SWEEP_CELL))

    dev = memory_deviation_tokens(table, sides)
    rows.append(Claim(
        claim="the memory is the budget",
        paper="10% of the KV memory (8B, bs 8: 8.5 of 85 GB)",
        measured=f"retained K/V bytes after scale K-2 against the budget, every run: off by at most {dev:.2g} tokens of "
                 f"N_K-2 = {cumulative_tokens(sides)[-2]}; at {_pct(f10)} "
                 f"{_val(table, 'scalekv', f10, 'retained_bytes') / 1024:.0f} of {_val(table, 'scalekv', f10, 'full_bytes') / 1024:.0f} KiB, "
                 f"peak {_val(table, 'scalekv', f10, 'peak_fraction'):.0%} of the full peak",
        scale=scale,
        judgement=judge([dev], MEMORY_ROUNDING_TOKENS, kind="exact"), cell=SWEEP_CELL))

    why = "needs Infinity, flan-t5, Inception and VGG weights and MS-COCO"
    rows.append(Claim(
        claim="FID / LPIPS / GenEval / DPG at 10%",
        paper="8B FID 2.12, LPIPS 0.09; GenEval 0.790 vs 0.792",
        measured=f"not measured ({why})",
        scale="MS-COCO 2017 captions, Infinity-2B/8B", judgement=not_run(why)))
    rows.extend(at_cell(GPU_CELL, recorded_rows(recorded)))
    return rows


def memory_deviation_tokens(table, sides) -> float:
    """The largest difference, over every run of the sweep, between the retained fraction and the budget, in
    tokens of ``N_{K-2}`` (0 when every cache holds exactly its budget)."""
    n = cumulative_tokens(sides)[-2]
    return float(max(abs(r.memory_fraction - r.fraction) for r in table.itertuples()) * n)


def memory_matches(table, sides) -> bool:
    """Every run's retained fraction equals its budget up to ``MEMORY_ROUNDING_TOKENS`` of ``N_{K-2}``."""
    return memory_deviation_tokens(table, sides) <= MEMORY_ROUNDING_TOKENS + 1e-9


def _not_recorded(rec: Mapping | None, stage: str) -> str:
    """Why the recorded results have no ``stage``: the stage's state where the study ran but it did not finish."""
    left = [s for s in not_finished(rec) if s.split(" ")[0] == stage]
    if left:
        return f"the GPU study's stage {left[0]} (python -m companion.bench scalekv)"
    return f"no {stage} stage recorded (python -m companion.bench scalekv)"


def _selection_left_out(rec: Mapping, batch: int) -> str:
    """The latency row's note that its compressed arm leaves out the token selection, with what the same run's
    ``selection`` stage timed for it at the latency's batch (fused kernel and reference), where it did."""
    timed = [r for r in (rec.get("selection") or []) if r.get("batch") == batch]
    ms = {impl: [r["ms"] for r in timed if r["impl"] == impl] for impl in ("triton", "reference")}
    spans = "; ".join(f"{name} {min(v):.2f}–{max(v):.2f} ms" for name, v in (("fused kernel", ms["triton"]), ("PyTorch", ms["reference"])) if v)
    return ("; the compressed arm leaves out the token selection (window scores, pooling, top-k, gather), paid at every "
            "compressed scale" + (f": the same run times one selection at batch {batch} at {spans}, key lengths "
                                  f"{min(r['key_len'] for r in timed)}–{max(r['key_len'] for r in timed)}" if spans else ""))


def recorded_rows(rec: Mapping | None) -> list[Claim]:
    """Rows of the committed GPU results (:mod:`companion.scalekv.scale`'s study: ``larger_model`` and ``latency``
    stages), judged by the same rule; a stage that did not finish gives a "not run here" row that says so. The
    fused selection kernel is ours, not a paper claim: the notebook's Scale up and Checks show it."""
    lm_claim, lm_paper = "ScaleKV beats uniform and PyramidKV on a larger model", "ScaleKV best at 4/10/20% (Table 1)"
    lat_claim = "less attention time with the compressed cache (attention only, selection left out; end to end not measured)"
    lat_paper = "up to 1.25x faster end to end (Infinity-8B, 1024^2, one H20)"
    where = f"{(rec or {}).get('device', '?')} ({(rec or {}).get('date', '?')})"
    done = {name for name, s in ((rec or {}).get("stages") or {}).items() if s.get("state") == "done"}
    rows: list[Claim] = []
    if "larger_model" in done:
        lm = rec["larger_model"]
        cfg, lrows = lm["config"], lm["rows"]
        ps = {(r["method"], float(r["fraction"])): float(r["psnr"]) for r in lrows}
        lf = sorted({f for _, f in ps})
        # a budget B no larger than the observation window keeps the window only, the same tokens in ScaleKV, uniform and
        # PyramidKV: their gap there is 0 by construction, not a measurement, so it is shown but not judged
        win = int(cfg["window_size"])
        tokens = {float(r["fraction"]): int(r.get("budget_tokens", uniform_budget(float(r["fraction"]), cfg["sides"])))
                  for r in lrows}
        judged = [f for f in lf if tokens[f] > win]
        gains = {f: ps["scalekv", f] - max(ps["uniform", f], ps["pyramid", f]) for f in judged}
        measured = "PSNR " + "; ".join(f"{f:.0%}: ScaleKV {ps['scalekv', f]:.2f}, uniform {ps['uniform', f]:.2f}, "
                                       f"PyramidKV {ps['pyramid', f]:.2f}" for f in lf)
        lm_scale = (f"{cfg['layers']} layers, width {cfg['dim']}, {len(cfg['sides'])} scales ({cfg['tokens']} tokens), "
                    f"window {win}, {cfg['n_eval']} images, one seed, {where}")
        void = [f for f in lf if f not in judged]
        void_txt = (f"; at {'/'.join(_pct(f) for f in void)} the budget is no larger than the {win}-token window, so every "
                    "SnapKV-style method keeps the same tokens (not judged)") if void else ""
        if not judged:
            why = f"every recorded budget is no larger than the {win}-token window: the methods keep the same tokens"
            rows.append(Claim(claim=lm_claim, paper=lm_paper, measured=measured + f" ({why})", scale=lm_scale, judgement=not_run(why)))
        else:
            rows.append(Claim(
                claim=lm_claim, paper=lm_paper,
                measured=measured + f" (judged: ScaleKV minus the better baseline at its worst budget above the window{void_txt})",
                scale=lm_scale,
                judgement=judge([min(gains.values())], PSNR_MARGIN_DB, direction="higher", fmt=_db)))
    else:
        why = _not_recorded(rec, "larger_model")
        rows.append(Claim(claim=lm_claim, paper=lm_paper, measured=why, scale="GPU", judgement=not_run(why)))
    if "latency" in done:
        lt, lp = rec["latency"]["total"], rec["profile"]["latency"]
        rows.append(Claim(
            claim=lat_claim, paper=lat_paper,
            measured=f"one attention layer summed over the {len(lp['sides'])} scales: {lt['full_ms']:.2f} ms full vs "
                     f"{lt['compressed_ms']:.2f} ms with a {lp['budget']}-token cache ({lt['speedup']:.2f}x; attention only, "
                     "not end to end)" + _selection_left_out(rec, lp["batch"]),
            scale=f"{rec.get('device', '?')}, batch {lp['batch']}, {lp['heads']} heads x {lp['head_dim']}, {lp['dtype']}, "
                  f"random tensors, one run ({rec.get('date', '?')})",
            judgement=judge([lt["full_ms"] / lt["compressed_ms"]], LATENCY_SPEEDUP, kind="timing", direction="higher",
                            fmt=lambda x: f"{x:.2f}x")))
    else:
        why = _not_recorded(rec, "latency")
        rows.append(Claim(claim=lat_claim, paper=lat_paper, measured=why, scale="H200, Infinity-8B geometry", judgement=not_run(why)))
    return rows

"""The claims table of paper 03 (ScaleKV): rows built from the run's result objects.

Every verdict threshold is a named constant below, tested just inside and just outside in
``tests/unit/test_scalekv_claims.py``. The comparisons of the trained model rest on **one training
seed** (the notebook's ``SEED``); the scale column says so and a win needs a stated margin:

* ``PSNR_MARGIN_DB``: ScaleKV must beat a baseline's PSNR by this many dB. A stated margin, not a
  measured noise level: other training seeds of this tiny model give no clear drafter and reverse
  the ScaleKV-vs-uniform order, so a gap of a few tenths of a dB on one seed is not read as a win.
* ``HIDDEN_MARGIN``: the teacher-forced hidden-state error must be lower by this relative share.
* ``DELTA_MARGIN_DB``: the δ ablation compares two *pre-declared* values, δ = 0 (the smallest of
  ``DELTAS``) and the notebook's ``DELTA``, never the best of the grid; the gain must exceed this.
* ``PARTLY_SHARE``: "partly" across budgets needs lower hidden error at more than this share of them.
* ``MEMORY_ROUNDING_TOKENS``: the retained bytes may differ from the budget by rounding, at most
  this many tokens of ``N_{K-2}``.
* ``MIN_SEEDS``: the seed-spread row (:func:`seed_spread_row`: ScaleKV vs uniform on models trained
  with several seeds, committed as checkpoints) needs at least this many seeds; each seed's win uses
  the margins above, and the row shows every seed's gain with the mean and standard deviation.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

from companion.core import Claim
from companion.scalekv.schedule import cumulative_tokens

__all__ = ["claim_rows", "recorded_rows", "memory_matches", "psnr_win", "hidden_win", "Claim", "PSNR_MARGIN_DB", "HIDDEN_MARGIN", "DELTA_MARGIN_DB", "PARTLY_SHARE",
           "MEMORY_ROUNDING_TOKENS", "MIN_SEEDS", "seed_spread_row"]

PSNR_MARGIN_DB = 0.5
HIDDEN_MARGIN = 0.05
DELTA_MARGIN_DB = 0.5
PARTLY_SHARE = 0.5
MEMORY_ROUNDING_TOKENS = 0.5
MIN_SEEDS = 2


def _val(table, method: str, fraction: float, key: str) -> float:
    rows = table[(table.method == method) & (table.fraction == fraction)]
    if rows.empty:
        raise ValueError(f"the sweep has no row for method {method!r} at fraction {fraction}")
    return float(rows[key].iloc[0])


def _nearest(values: Sequence[float], target: float) -> float:
    return min(values, key=lambda b: abs(b - target))


def psnr_win(ours: float, theirs: float) -> bool:
    """ScaleKV's PSNR beats ``theirs`` by at least ``PSNR_MARGIN_DB``."""
    return ours - theirs >= PSNR_MARGIN_DB


def hidden_win(ours: float, theirs: float) -> bool:
    """ScaleKV's teacher-forced hidden error is at least ``HIDDEN_MARGIN`` (relative) lower."""
    return ours <= (1.0 - HIDDEN_MARGIN) * theirs


def _pct(f: float) -> str:
    return f"{f:.0%}"


def seed_spread_row(seed_table, *, scale: str) -> Claim:
    """ScaleKV vs uniform on models trained with different seeds (:func:`companion.scalekv.experiment.seed_sweeps`'s
    table, ``seed`` column; the run's own seed included). Per seed at the budget nearest 10 %: the PSNR gain
    and the relative change of the teacher-forced hidden error, with mean and standard deviation over seeds.
    "reproduced" needs every seed to win by both margins; "partly" more than ``PARTLY_SHARE`` of the seeds
    to win by at least one."""
    claim = "ScaleKV beats uniform, across training seeds"
    paper = "Infinity-8B, 10%: PSNR 23.25 vs SnapKV 20.60 (one model)"
    seeds = sorted(int(x) for x in seed_table.seed.unique()) if len(seed_table) else []
    if len(seeds) < MIN_SEEDS:
        return Claim(claim=claim, paper=paper, scale=scale, verdict="not run here",
                     measured=f"not measured: {len(seeds)} training seed(s) with a matching checkpoint (needs {MIN_SEEDS}; SEED_CHECKPOINTS)")
    fractions = sorted(float(f) for f in seed_table.fraction.unique())
    f10 = _nearest(fractions, 0.1)

    def per_seed(f):
        out = {}
        for sd in seeds:
            t = seed_table[seed_table.seed == sd]
            ps, pu = _val(t, "scalekv", f, "psnr"), _val(t, "uniform", f, "psnr")
            hs, hu = _val(t, "scalekv", f, "hidden_error"), _val(t, "uniform", f, "hidden_error")
            out[sd] = (ps - pu, hs / hu - 1.0, psnr_win(ps, pu), hidden_win(hs, hu))
        return out

    def ms(values):
        return statistics.fmean(values), statistics.stdev(values)

    r10 = per_seed(f10)
    both = [sd for sd, (_, _, p, h) in r10.items() if p and h]
    either = [sd for sd, (_, _, p, h) in r10.items() if p or h]
    dp, dh = ms([v[0] for v in r10.values()]), ms([v[1] for v in r10.values()])
    others = [f for f in fractions if f != f10]
    other_txt = "; PSNR gain at " + ", ".join(f"{_pct(f)} {m:+.2f} ± {d:.2f}" for f in others for m, d in [ms([v[0] for v in per_seed(f).values()])]) if others else ""
    n = len(seeds)
    return Claim(
        claim=claim, paper=paper, scale=scale,
        measured=f"seeds {'/'.join(map(str, seeds))} at {_pct(f10)}: PSNR gain " + "/".join(f"{v[0]:+.2f}" for v in r10.values())
                 + f" dB (mean {dp[0]:+.2f} ± {dp[1]:.2f} sd), hidden error " + "/".join(f"{v[1]:+.0%}" for v in r10.values())
                 + f" (mean {dh[0]:+.0%} ± {dh[1]:.0%}); wins by both margins at {len(both)}/{n} seeds, by one at {len(either)}/{n}" + other_txt,
        verdict="reproduced" if len(both) == n else ("partly reproduced" if len(either) > PARTLY_SHARE * n else "not reproduced"))


def claim_rows(table, planted: Mapping, delta_runs: Mapping, *, delta: float, sides, scale: str, planted_scale: str,
               recorded: Mapping | None = None, seed_table=None, seed_scale: str = "") -> list[Claim]:
    """The notebook's rows.

    ``table``: :attr:`companion.scalekv.experiment.Sweep.table` (one row per method and budget);
    ``planted``: :func:`~companion.scalekv.experiment.planted_experiment`'s result; ``delta_runs``:
    ``{(fraction, delta): {"psnr": ...}}`` (the explorer data's ScaleKV runs); ``delta``: the
    pre-declared δ of the ablation (the notebook's ``DELTA``); ``sides``: the schedule; ``scale``:
    the scale column of the trained-model rows (must say "one seed"); ``recorded``: the committed
    GPU results (:func:`companion.scalekv.scale.recorded`) or None; ``seed_table``: ScaleKV and uniform
    on several training seeds (:func:`seed_spread_row`; None: no such row), ``seed_scale`` its scale column.
    """
    fractions = sorted(float(f) for f in table.fraction.unique())
    if not fractions:
        raise ValueError("the sweep table is empty")
    n = len(fractions)
    f10, f4, f20 = _nearest(fractions, 0.1), fractions[0], _nearest(fractions, 0.2)
    rows: list[Claim] = []
    margin_txt = f"win = PSNR +{PSNR_MARGIN_DB:g} dB / hidden error -{HIDDEN_MARGIN:.0%}"

    sk10, un10, py10 = (_val(table, m, f10, "psnr") for m in ("scalekv", "uniform", "pyramid"))
    he10 = {m: _val(table, m, f10, "hidden_error") for m in ("scalekv", "uniform", "pyramid")}
    p_ok, h_ok = psnr_win(sk10, un10), hidden_win(he10["scalekv"], he10["uniform"])
    rows.append(Claim(
        claim=f"ScaleKV beats a uniform SnapKV budget at {_pct(f10)} of the KV memory",
        paper="Infinity-8B, 10%: PSNR 23.25 vs SnapKV 20.60 (FID 2.12 vs 4.68)",
        measured=f"PSNR {sk10:.2f} vs uniform {un10:.2f} (PyramidKV {py10:.2f}) dB; teacher-forced hidden error "
                 f"{he10['scalekv']:.3f} vs {he10['uniform']:.3f} ({he10['pyramid']:.3f}); {margin_txt}",
        scale=scale,
        verdict="reproduced" if p_ok and h_ok else ("partly reproduced" if p_ok or h_ok else "not reproduced")))
    if seed_table is not None:
        rows.append(seed_spread_row(seed_table, scale=seed_scale or scale))

    wins_he = [f for f in fractions if hidden_win(_val(table, "scalekv", f, "hidden_error"), _val(table, "uniform", f, "hidden_error"))]
    wins_ps = [f for f in fractions if psnr_win(_val(table, "scalekv", f, "psnr"), _val(table, "uniform", f, "psnr"))]
    rows.append(Claim(
        claim="ScaleKV beats uniform at equal memory across budgets",
        paper="better at 4%, 10% and 20% on 2B and 8B",
        measured=f"hidden error lower by the margin at {len(wins_he)}/{n} budgets, PSNR higher by the margin at "
                 f"{len(wins_ps)}/{n} ({', '.join(_pct(f) for f in fractions if f not in wins_ps) or 'none'} not); {margin_txt}",
        scale=scale,
        verdict="reproduced" if len(wins_he) == n and len(wins_ps) == n else
        ("partly reproduced" if len(wins_he) > PARTLY_SHARE * n else "not reproduced")))

    vs_py = [f for f in fractions if psnr_win(_val(table, "scalekv", f, "psnr"), _val(table, "pyramid", f, "psnr"))]
    rows.append(Claim(
        claim="ScaleKV beats PyramidKV",
        paper="2B PSNR at 4% 20.82 vs 18.65, at 20% 24.84 vs 22.62",
        measured=f"PSNR at {_pct(f4)}: {_val(table, 'scalekv', f4, 'psnr'):.2f} vs {_val(table, 'pyramid', f4, 'psnr'):.2f}; "
                 f"at {_pct(f20)}: {_val(table, 'scalekv', f20, 'psnr'):.2f} vs {_val(table, 'pyramid', f20, 'psnr'):.2f}; "
                 f"higher by >= {PSNR_MARGIN_DB:g} dB at {len(vs_py)}/{n} budgets",
        scale=scale,
        verdict="reproduced" if len(vs_py) == n else ("partly reproduced" if vs_py else "not reproduced")))

    st10, wi10 = _val(table, "streaming", f10, "psnr"), _val(table, "window", f10, "psnr")
    rows.append(Claim(
        claim="recency baselines fall behind",
        paper="8B at 10%: StreamingLLM PSNR 19.97, sliding window FID 8.71 (worst)",
        measured=f"PSNR at {_pct(f10)}: StreamingLLM {st10:.2f}, sliding window {wi10:.2f}, ScaleKV {sk10:.2f} dB "
                 f"(win = +{PSNR_MARGIN_DB:g} dB over both)",
        scale=scale,
        verdict="reproduced" if psnr_win(sk10, max(st10, wi10)) else "not reproduced"))

    p_err = planted["errors"]
    pf = sorted(p_err["scalekv"])
    rows.append(Claim(
        claim="ASI identifies the drafters",
        paper="low ASI = attention dispersed over earlier scales (Sec. 3.2)",
        measured=f"planted drafters {planted['planted']} have the lowest z at every scale: {bool(planted['found'])}; hidden error at "
                 + "/".join(_pct(f) for f in pf) + ": ScaleKV " + "/".join(f"{p_err['scalekv'][f]:.3f}" for f in pf)
                 + ", uniform " + "/".join(f"{p_err['uniform'][f]:.3f}" for f in pf),
        scale=planted_scale,
        verdict="reproduced" if planted["found"] else "not reproduced"))

    deltas = sorted({float(d) for _, d in delta_runs})
    base = deltas[0]
    per_delta = {d: [v["psnr"] for (f, dd), v in delta_runs.items() if float(dd) == d] for d in deltas}
    mean = {d: sum(v) / len(v) for d, v in per_delta.items()}
    chosen = _nearest(deltas, float(delta))
    if chosen == base:
        rows.append(Claim(
            claim="refiner budgets decaying with scale help (delta ablation)",
            paper="2B at 10%: FID 3.49 (delta 0) -> 2.53 (delta 70/650)",
            measured=f"not measured: DELTA = {delta:g} is the smallest delta of the grid, nothing to compare it with",
            scale=scale, verdict="not run here"))
    else:
        gain = mean[chosen] - mean[base]
        rows.append(Claim(
            claim="refiner budgets decaying with scale help (delta ablation)",
            paper="2B at 10%: FID 3.49 (delta 0) -> 2.53 (delta 70/650)",
            measured=f"mean PSNR over {len(per_delta[chosen])} budgets: {mean[base]:.2f} at delta {base:g}, {mean[chosen]:.2f} at the "
                     f"pre-declared delta {chosen:g} ({gain:+.2f} dB; win = +{DELTA_MARGIN_DB:g} dB); over all "
                     f"{len(deltas)} deltas {min(mean.values()):.2f}..{max(mean.values()):.2f}",
            scale=scale,
            verdict="reproduced" if gain >= DELTA_MARGIN_DB else "not reproduced"))

    mem_ok = memory_matches(table, sides)
    rows.append(Claim(
        claim="the memory is the budget",
        paper="10% of the KV memory (8B, bs 8: 8.5 of 85 GB)",
        measured=f"retained K/V bytes after scale K-2 within rounding of the budget for every run: {mem_ok}; at {_pct(f10)} "
                 f"{_val(table, 'scalekv', f10, 'retained_bytes') / 1024:.0f} of {_val(table, 'scalekv', f10, 'full_bytes') / 1024:.0f} KiB, "
                 f"peak {_val(table, 'scalekv', f10, 'peak_fraction'):.0%} of the full peak",
        scale=scale,
        verdict="reproduced" if mem_ok else "not reproduced"))

    rows.append(Claim(
        claim="FID / LPIPS / GenEval / DPG at 10%",
        paper="8B FID 2.12, LPIPS 0.09; GenEval 0.790 vs 0.792",
        measured="not measured (needs Infinity, flan-t5, Inception and VGG weights)",
        scale="MS-COCO 2017 captions, Infinity-2B/8B", verdict="not run here"))
    rows.extend(recorded_rows(recorded))
    return rows


def memory_matches(table, sides) -> bool:
    """Every run's retained fraction equals its budget up to ``MEMORY_ROUNDING_TOKENS`` of ``N_{K-2}``."""
    tol = MEMORY_ROUNDING_TOKENS / cumulative_tokens(sides)[-2] + 1e-9
    return bool(all(abs(r.memory_fraction - r.fraction) <= tol for r in table.itertuples()))


def recorded_rows(rec: Mapping | None) -> list[Claim]:
    """Rows of the committed GPU results (``benchmarks/results/scalekv_gpu.json``); verdict "recorded on GPU"."""
    rows: list[Claim] = []
    kernel_paper = "selection runs inside every layer at every compressed scale"
    kernel_claim = "fused selection kernel (ours; the paper ships none)"
    if rec is None:
        return [Claim(claim=kernel_claim, paper=kernel_paper, measured="no GPU results recorded yet",
                      scale="H200, Infinity-8B geometry", verdict="not run here")]
    where = f"{rec.get('device', '?')} ({rec.get('date', '?')})"
    lm = rec.get("larger_model")
    if lm:
        cfg, lrows = lm["config"], lm["rows"]

        def lval(method, f, key="psnr"):
            return next((float(r[key]) for r in lrows if r["method"] == method and r["fraction"] == f), math.nan)

        lf = sorted({r["fraction"] for r in lrows})
        rows.append(Claim(
            claim="ScaleKV vs uniform and PyramidKV on a larger model (recorded)",
            paper="ScaleKV best at 4/10/20% (Table 1)",
            measured="PSNR " + "; ".join(f"{f:.0%}: ScaleKV {lval('scalekv', f):.2f}, uniform {lval('uniform', f):.2f}, "
                                         f"PyramidKV {lval('pyramid', f):.2f}" for f in lf),
            scale=f"{cfg['layers']} layers, width {cfg['dim']}, {len(cfg['sides'])} scales ({cfg['tokens']} tokens), "
                  f"window {cfg['window_size']}, {cfg['n_eval']} images, one seed, {where}",
            verdict="recorded on GPU"))
    lt = rec.get("latency_total")
    if lt:
        rows.append(Claim(
            claim="less attention time with the compressed cache",
            paper="up to 1.25x faster end to end (Infinity-8B, 1024^2, one H20)",
            measured=f"one attention layer summed over the 13 scales: {lt['full_ms']:.2f} ms full vs {lt['compressed_ms']:.2f} ms "
                     f"with a 650-token cache ({lt['speedup']:.2f}x; attention only, not end to end)",
            scale=f"{rec.get('device', '?')}, batch {rec.get('latency_batch', '?')}, 28 heads x 128, bf16, random tensors ({rec.get('date', '?')})",
            verdict="recorded on GPU"))
    sel = [r for r in rec.get("selection") or [] if "ms" in r]
    if sel:
        bmax = max(r.get("batch", 0) for r in sel)
        big = max(r["key_len"] for r in sel)
        ms = {r["impl"]: r["ms"] for r in sel if r["key_len"] == big and r.get("batch", 0) == bmax}
        rows.append(Claim(
            claim=kernel_claim, paper=kernel_paper,
            measured=f"N={big}, B={bmax}: Triton {ms.get('triton', math.nan):.3f} ms vs PyTorch {ms.get('reference', math.nan):.3f} ms"
                     + (f", compiled {ms['reference (torch.compile)']:.3f} ms" if "reference (torch.compile)" in ms else ""),
            scale=f"{rec.get('device', '?')}, Infinity-8B geometry (28 heads x 128, C = 650), bf16, random tensors ({rec.get('date', '?')})",
            verdict="recorded on GPU"))
    else:
        rows.append(Claim(claim=kernel_claim, paper=kernel_paper, measured="no kernel timing in the recorded results",
                          scale="H200, Infinity-8B geometry", verdict="not run here"))
    return rows

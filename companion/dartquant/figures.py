"""Figures and tables of paper 08's notebook (plotly, pandas)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from companion.dartquant.experiment import rotation_2d
from companion.dartquant.explorer import LABELS
from companion.dartquant.whip import LOSSES
from companion.viz import COLORS

_PAL = list(COLORS.values()) if isinstance(COLORS, dict) else list(COLORS)


def idea_figure(cloud, angle: dict, best: float = 45.0) -> go.Figure:
    """Left: the 2-D cloud as it is (θ = 0) and rotated by ``best``; right: the three losses against θ."""
    fig = make_subplots(rows=1, cols=2, column_widths=[0.45, 0.55],
                        subplot_titles=("a Laplace cloud with one outlier axis, at θ = 0 and rotated",
                                        "loss of the rotated cloud against θ (÷ value at 0°)"))
    for i, (th, name) in enumerate(((0.0, "θ = 0° (outlier on channel 1)"), (best, f"θ = {best:g}°"))):
        c = (cloud[:800] @ rotation_2d(th)).numpy()
        fig.add_trace(go.Scatter(x=c[:, 0], y=c[:, 1], mode="markers", name=name, opacity=0.45,
                                 marker=dict(size=3, color=_PAL[i])), row=1, col=1)
    for i, name in enumerate(LOSSES):
        v = np.asarray(angle[name])
        fig.add_trace(go.Scatter(x=angle["angles"], y=v / v[0], mode="lines", name=f"{name} loss",
                                 line=dict(color=_PAL[(i + 2) % len(_PAL)], width=3)), row=1, col=2)
    lim = float(np.abs(cloud.numpy()).max())
    fig.update_xaxes(range=[-lim, lim], title_text="channel 1", row=1, col=1)
    fig.update_yaxes(range=[-lim, lim], title_text="channel 2", scaleanchor="x", row=1, col=1)
    fig.update_xaxes(title_text="rotation angle θ (degrees)", row=1, col=2)
    fig.update_layout(height=420, title="Whip sees the outlier direction, the variance does not",
                      legend=dict(orientation="h", y=-0.2))
    return fig


def metrics_table(studies: dict):
    """One row per (source, rotation): the layer metrics of :func:`~companion.dartquant.experiment.layer_metrics`."""
    import pandas as pd

    rows = []
    for src, s in studies.items():
        for k, m in s["metrics"].items():
            label = LABELS.get(k, None) or f"{LABELS[k.split('/')[0]]} + {k.split('/')[1]}"
            rows.append({"data": src, "rotation": label, "INT4 MSE": round(m["quant_mse"], 5),
                         "kurtosis": round(m["kurtosis"], 2), "outliers %": round(100 * m["outlier_frac"], 3),
                         "max |y|": round(m["max_abs"], 2), "W4A4 layer err": round(m.get("layer_err", float("nan")), 4),
                         "‖RᵀR−I‖∞": f"{m['orth_err']:.0e}"})
    return pd.DataFrame(rows)


def layer_figure(studies: dict) -> go.Figure:
    """INT4 quant MSE (left) and the Whip loss curves of the calibrated runs (right), per source."""
    n = len(studies)
    fig = make_subplots(rows=n, cols=2, vertical_spacing=0.18, horizontal_spacing=0.1,
                        subplot_titles=[t for src in studies for t in (f"{src}: INT4 per-token MSE of X R",
                                                                       f"{src}: Whip loss per step")])
    for i, (src, s) in enumerate(studies.items(), start=1):
        names = list(s["metrics"])
        fig.add_trace(go.Bar(x=names, y=[s["metrics"][k]["quant_mse"] for k in names], showlegend=False,
                             marker_color=[_PAL[3] if k == "qr_orth/whip" else _PAL[0] for k in names]), row=i, col=1)
        fig.update_yaxes(type="log", row=i, col=1)
        for j, (k, run) in enumerate(s["runs"].items()):
            if run.loss_name != "whip":
                continue
            fig.add_trace(go.Scatter(y=run.losses, mode="lines", name=k, legendgroup=k, showlegend=i == 1,
                                     line=dict(color=_PAL[(j + 1) % len(_PAL)])), row=i, col=2)
        fig.update_xaxes(title_text="step", row=i, col=2)
    fig.update_layout(height=340 * n, title="One layer, every rotation", legend=dict(orientation="h", y=-0.1))
    return fig


STREAM_ARMS = (("none", "none"), ("QuaRot", "quarot"), ("DartQuant", "dartquant"), ("end-to-end", "end-to-end"))


def _method_values(run: dict) -> list[tuple[str, float]]:
    """(label, average W4A4KV4 PPL) in the order of the figure: FP, none at each norm-gain s, fused norms, then
    the four arms on the residual-stream model (``stream: ...``)."""
    from companion.dartquant.claims import mean_ppl, none_ppl

    ppl = run["ppl"]
    return ([("FP32", mean_ppl(ppl, "fp32"))] + [(f"gains ×{s}: none", none_ppl(run, s)) for s in ppl["none"]]
            + [("fused, no rotation", mean_ppl(ppl, "fused"))]
            + [(f"stream: {name}", mean_ppl(ppl["stream"], key)) for name, key in STREAM_ARMS])


def gpu_figure(gpu: dict | None) -> go.Figure:
    """The recorded massive-channel study per seed: average W4A4KV4 perplexity by method (left: the norm-gain
    injection without rotation, fused norms, then no rotation, QuaRot, DartQuant and end-to-end training on the
    model whose residual stream carries the massive channels; the legend gives each seed's channel RMS ratio
    there), the calibration wall time of DartQuant and of end-to-end training (middle), the end-to-end loss
    curves (right). Without a recorded run of those stages, a figure that says so."""
    from companion.dartquant.claims import cost_values, outlier_runs
    from companion.dartquant.scale import missing

    runs, why = outlier_runs(gpu)
    if why:
        fig = go.Figure()
        fig.add_annotation(text=f"GPU massive-channel study not recorded: {why}", showarrow=False, x=0.5, y=0.5,
                           xref="paper", yref="paper")
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
        return fig.update_layout(height=200)
    fig = make_subplots(rows=1, cols=3, column_widths=[0.45, 0.25, 0.3],
                        subplot_titles=("average W4A4KV4 perplexity per seed (log)", "calibration wall time (s, log)",
                                        "end-to-end training loss"))
    for i, r in enumerate(runs):
        vals = _method_values(r)
        fig.add_trace(go.Scatter(x=[lab for lab, _ in vals], y=[v for _, v in vals], mode="markers+lines",
                                 name=f"seed {r['seed']} (stream channel RMS ratio {r['stream']['rms_ratio']:.1f})",
                                 legendgroup=f"s{i}", marker=dict(size=9, color=_PAL[i % len(_PAL)]),
                                 line=dict(width=1, dash="dot")), row=1, col=1)
        fig.add_trace(go.Scatter(y=r["cost"]["e2e_loss"], mode="lines", name=f"seed {r['seed']}", legendgroup=f"s{i}",
                                 showlegend=False, line=dict(color=_PAL[i % len(_PAL)])), row=1, col=3)
    for j, m in enumerate([] if missing(gpu, "cost") else gpu["cost"]):
        fig.add_trace(go.Scatter(y=m["cost"]["e2e_loss"], mode="lines", name=m["name"],
                                 line=dict(color=_PAL[(len(runs) + j) % len(_PAL)], dash="dash")), row=1, col=3)
    costs = cost_values(gpu)
    for k, (method, key) in enumerate((("DartQuant", "dartquant_s"), ("end-to-end", "e2e_s"))):
        fig.add_trace(go.Bar(x=[n for n, _ in costs], y=[c[key] for _, c in costs], name=method,
                             marker_color=_PAL[(k + 3) % len(_PAL)]), row=1, col=2)
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_yaxes(type="log", row=1, col=2)
    fig.update_xaxes(title_text="step", row=1, col=3)
    fig.update_layout(height=460, barmode="group", legend=dict(orientation="h", y=-0.35),
                      title=f"Massive channels put in by hand (norm gains; residual stream), {len(runs)} seed(s), "
                            f"recorded on {gpu.get('device')} ({gpu.get('date')})")
    return fig


def outcome_text(rows, seeds: list, real_seeds: list) -> str:
    """The Reproduce section's summary, built from this run's numbers and claim rows (Markdown)."""
    from collections import Counter

    def gain(rs):
        return 100 * (1 - float(np.mean([r["whip"] / r["hadamard"] for r in rs])))

    rot = float(np.mean([r["identity"] / r["hadamard"] for r in seeds]))
    counts = Counter(r.verdict for r in rows)
    lines = [f"**What this run shows, at its scale** ({len(seeds)} seed{'s' if len(seeds) > 1 else ''}):",
             f"* without a rotation the per-token INT4 MSE of the synthetic layer is {rot:.1f}× the random Hadamard's;",
             f"* Whip + QR-Orth changes the INT4 MSE against QuaRot's random Hadamard by {-gain(seeds):+.1f} % on the "
             f"synthetic layer and {-gain(real_seeds):+.1f} % on the MiniLM layer (mean over seeds; negative is better);",
             "* the claims table above: " + ", ".join(f"{n} {v}" for v, n in counts.most_common()) + "."]
    return "\n".join(lines)

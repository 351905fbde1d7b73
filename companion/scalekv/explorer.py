"""The KV-cache-groups explorer of paper 03 (ScaleKV). Imports plotly.

The explorer's science is :func:`kv_groups_view`, a pure function of two control values (the total
budget as a fraction of the full cache, and the refiner decay ``delta``) and a precomputed
:class:`KVGroupsData`. It returns a figure (left: the layers x scales grid, each cell coloured
drafter / refiner / uncompressed and labelled with the tokens that layer keeps after that step;
right: final maps of the same labels and noise generated with the full cache, with ScaleKV and with
the best baseline at that budget) and a one-line readout of the retained K/V bytes against the full
cache and the fidelity of both compressed runs.

Everything expensive (the generations at every budget and ``delta`` of the grid) is computed once by
:func:`kv_groups_data`; a control change only looks results up and draws about 1,300 heatmap cells.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from companion.core import check_float, check_int
from companion.scalekv.budgets import LABELS, Budgets, expected_retained
from companion.scalekv.experiment import Sweep, compare, final_images, memory_summary, plan, run_policy
from companion.scalekv.model import TinyVAR
from companion.scalekv.schedule import cumulative_tokens
from companion.viz import COLORS

__all__ = ["KVGroupsData", "kv_groups_data", "kv_groups_view", "explorer_view", "explorer_controls", "budget_grid", "format_bytes",
           "GROUP_COLORS"]

# uncompressed, refiner, drafter
GROUP_COLORS = ("#d9d9d9", COLORS[0], COLORS[1])
GROUP_NAMES = ("full cache (not yet compressed)", "refiner", "drafter")


def format_bytes(n: float) -> str:
    """``1536 -> '1.5 KiB'``."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


@dataclass
class KVGroupsData:
    """Precomputed results behind the explorer (all on the CPU)."""

    sides: tuple[int, ...]
    layers: int
    fractions: list[float]
    deltas: list[float]
    n_eval: int  # images the fidelity numbers average over
    full_images: torch.Tensor  # [n, s, s]
    bytes_per_token: int  # K and V bytes of one cached token in one layer (whole batch)
    scalekv: dict = field(default_factory=dict)  # (fraction, delta) -> {budgets, images, psnr, agreement, memory}
    baselines: dict = field(default_factory=dict)  # fraction -> {method, label, images, psnr, agreement}

    def nearest(self, fraction: float, delta: float) -> tuple[float, float]:
        f = min(self.fractions, key=lambda x: abs(x - fraction))
        d = min(self.deltas, key=lambda x: abs(x - delta))
        return f, d


def _best_baseline(table, fraction: float) -> str:
    rows = table[(table.fraction == fraction) & (table.method != "scalekv")]
    if rows.empty:
        raise ValueError(f"the sweep has no baseline at fraction {fraction}")
    rows = rows.sort_values(["psnr", "agreement"], ascending=False, kind="stable")
    return str(rows.iloc[0]["method"])


def kv_groups_data(model: TinyVAR, labels: torch.Tensor, z: torch.Tensor, result: Sweep, deltas, *, n_images: int = 3) -> KVGroupsData:
    """Run ScaleKV at every (budget of ``result``, ``delta``) on ``labels`` and collect what the view shows.

    ``result`` is a :func:`~companion.scalekv.experiment.sweep` over the same ``labels`` with
    ``keep_images >= n_images``; its ScaleKV rows are reused where ``delta`` equals the sweep's. The
    best baseline at a budget is the non-ScaleKV method with the highest PSNR in that sweep.
    """
    check_int("n_images", n_images, lo=1, hi=len(labels))
    p = result.params
    if result.full_images is None or len(result.full_images) < n_images:
        raise ValueError(f"the sweep kept {0 if result.full_images is None else len(result.full_images)} images; "
                         f"run it with keep_images >= {n_images}")
    deltas = sorted({round(check_float("delta", d, lo=0.0), 6) for d in deltas})
    fractions = list(p["fractions"])
    kw = dict(seed=p["seed"], temperature=p["temperature"], guidance=p["guidance"], bias=p["bias"])
    data = KVGroupsData(sides=tuple(model.config.sides), layers=model.config.layers, fractions=fractions, deltas=deltas,
                        n_eval=len(labels), full_images=result.full_images[:n_images],
                        bytes_per_token=int(result.full.retained_bytes[0, 0]) // max(1, int(result.full.retained[0, 0])))
    table = result.table
    for f in fractions:
        best = _best_baseline(table, f)
        row = table[(table.fraction == f) & (table.method == best)].iloc[0]
        data.baselines[f] = {"method": best, "label": LABELS[best], "images": result.images[(best, f)][:n_images],
                             "psnr": float(row.psnr), "agreement": float(row.agreement),
                             "memory": {k: row[k] for k in ("retained_bytes", "full_bytes", "memory_fraction")}}
        for d in deltas:
            if abs(d - p["delta"]) < 1e-9 and ("scalekv", f) in result.images:
                row = table[(table.fraction == f) & (table.method == "scalekv")].iloc[0]
                data.scalekv[(f, d)] = {"budgets": result.budgets[("scalekv", f)], "images": result.images[("scalekv", f)][:n_images],
                                        "psnr": float(row.psnr), "agreement": float(row.agreement),
                                        "memory": {k: row[k] for k in ("retained_bytes", "full_bytes", "memory_fraction",
                                                                       "peak_bytes", "full_peak_bytes", "peak_fraction")}}
                continue
            b = plan("scalekv", model, f, model.config.sides, z=z, drafters_per_scale=p["drafters_per_scale"], mode=p["mode"],
                     delta=d, refiner_start=p["refiner_start"], window_size=p["window_size"])
            gen = run_policy(model, labels, b, window_size=p["window_size"], impl=p["impl"], **kw)
            data.scalekv[(f, d)] = {"budgets": b, "images": final_images(model, gen.tokens)[:n_images],
                                    **compare(model, result.full, gen), "memory": memory_summary(gen, result.full)}
    return data


def budget_grid(b: Budgets) -> tuple[np.ndarray, np.ndarray]:
    """``(group [L, K], kept tokens [L, K])``: 0 not yet compressed, 1 refiner, 2 drafter; tokens kept after each step."""
    kept = expected_retained(b).numpy()
    group = np.zeros_like(kept)
    group[:, b.first:] = 1
    group[b.drafters.numpy() & (group == 1)] = 2
    return group, kept


def _image_heatmap(img: torch.Tensor) -> go.Heatmap:
    return go.Heatmap(z=np.round(img.numpy()[::-1], 3), colorscale="gray", zmin=0, zmax=1, showscale=False, hoverinfo="skip")


def kv_groups_view(data: KVGroupsData, *, budget: float, delta: float):
    """Pure update: ``(figure, readout)`` at total budget ``budget`` (fraction of the full cache) and ``delta``."""
    check_float("budget", budget, lo=0.0, hi=1.0, lo_open=True)
    check_float("delta", delta, lo=0.0)
    f, d = data.nearest(budget, delta)
    sk, bl = data.scalekv[(f, d)], data.baselines[f]
    b: Budgets = sk["budgets"]
    group, kept = budget_grid(b)
    nl, nk = group.shape
    n_img = len(data.full_images)
    cum = cumulative_tokens(data.sides)

    specs = [[{"rowspan": n_img}, {}, {}, {}]] + [[None, {}, {}, {}] for _ in range(n_img - 1)]
    titles = ["KV-cache groups: tokens kept per layer after each scale", "full cache", "ScaleKV", bl["label"]]
    titles += [""] * (3 * (n_img - 1))
    fig = make_subplots(rows=n_img, cols=4, specs=specs, column_widths=[0.46, 0.18, 0.18, 0.18], subplot_titles=titles,
                        horizontal_spacing=0.03, vertical_spacing=0.03)
    scale = [[0.0, GROUP_COLORS[0]], [1 / 3, GROUP_COLORS[0]], [1 / 3, GROUP_COLORS[1]], [2 / 3, GROUP_COLORS[1]],
             [2 / 3, GROUP_COLORS[2]], [1.0, GROUP_COLORS[2]]]
    hover = [[f"layer {li}, scale {k} ({data.sides[k]}x{data.sides[k]}): {GROUP_NAMES[group[li, k]]}<br>keeps {kept[li, k]} "
              f"of {cum[k]} tokens = {format_bytes(kept[li, k] * data.bytes_per_token)} of K/V" for k in range(nk)] for li in range(nl)]
    fig.add_trace(go.Heatmap(z=group.tolist(), x=[f"{s}x{s}" for s in data.sides], y=[f"layer {i}" for i in range(nl)],
                             text=kept.tolist(), texttemplate="%{text}", colorscale=scale, zmin=-0.5, zmax=2.5, showscale=False,
                             hovertext=hover, hoverinfo="text", xgap=2, ygap=2), row=1, col=1)
    for name, color in zip(GROUP_NAMES, GROUP_COLORS):  # legend entries for the categorical colours
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", marker=dict(size=12, color=color, symbol="square"),
                                 name=name, showlegend=True), row=1, col=1)
    fig.update_yaxes(autorange="reversed", row=1, col=1)
    fig.update_xaxes(title_text="scale (token map)", row=1, col=1)
    for r in range(n_img):
        for c, img in enumerate((data.full_images[r], sk["images"][r], bl["images"][r])):
            fig.add_trace(_image_heatmap(img), row=r + 1, col=c + 2)
    for r in range(1, n_img + 1):
        for c in range(2, 5):
            anchor = fig.get_subplot(r, c).xaxis.plotly_name.replace("axis", "")
            fig.update_xaxes(visible=False, row=r, col=c)
            fig.update_yaxes(visible=False, scaleanchor=anchor, row=r, col=c)
    fig.update_layout(height=150 + 130 * n_img, margin=dict(l=70, r=10, t=50, b=40),
                      legend=dict(orientation="h", y=-0.12, x=0.0), title=None)
    mem = sk["memory"]
    readout = (f"budget {f:.0%} = {b.base} tokens per layer (full cache before the last scale: {cum[-2]}), delta = {d:g}: "
               f"ScaleKV retains {format_bytes(mem['retained_bytes'])} of K/V after the {data.sides[-2]}x{data.sides[-2]} map vs "
               f"{format_bytes(mem['full_bytes'])} for the full cache ({mem['memory_fraction']:.1%}); last-step peak "
               f"{format_bytes(mem['peak_bytes'])} vs {format_bytes(mem['full_peak_bytes'])}. Fidelity to the full cache over "
               f"{data.n_eval} images: ScaleKV PSNR {sk['psnr']:.1f} dB, token agreement {sk['agreement']:.1%}; "
               f"best baseline ({bl['label']}) {bl['psnr']:.1f} dB, {bl['agreement']:.1%}.")
    return fig, readout


def explorer_view(data: KVGroupsData, *, budget: float, delta: float):
    """The explorer's update (the notebook binds it with ``functools.partial(explorer_view, data)``)."""
    return kv_groups_view(data, budget=budget, delta=delta)


def explorer_controls(data: KVGroupsData, *, budget: float = 0.1, delta: float | None = None) -> dict:
    """``{"budget", "delta"}`` selection sliders over the budgets and deltas ``data`` was computed at,
    starting at the grid points nearest ``budget`` and ``delta`` (default: the middle delta)."""
    import ipywidgets as W

    f, d = data.nearest(budget, data.deltas[len(data.deltas) // 2] if delta is None else delta)
    style = {"description_width": "initial"}
    return {
        "budget": W.SelectionSlider(options=[(f"{b:.0%}", b) for b in data.fractions], value=f, description="total budget",
                                    continuous_update=False, style=style),
        "delta": W.SelectionSlider(options=[(f"{x:g}", x) for x in data.deltas], value=d, description="refiner decay δ",
                                   continuous_update=False, style=style),
    }

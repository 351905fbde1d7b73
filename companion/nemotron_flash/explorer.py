"""The latency-frontier explorer of paper 15 (Nemotron-Flash).

Left: loss of every cached tiny run at the chosen parameter budget against its decode time per token (the sum
of its layers' measured decode steps) at batch 1 whatever the batch control (with ``metric="throughput"``:
tokens/s at the chosen batch), coloured by depth, with the Pareto front drawn and the chosen model (depth; width derived from the budget; one operator per stage) marked.
Right: decode time per token against context length for each operator at the chosen width and batch — for
attention timed at every context (the KV cache grows); for DeltaNet, Mamba2 and the FFN timed once at the shortest
context and drawn flat (a fixed-size state: flat by construction here, see the operator sweep for a measurement).

``device="cpu"`` uses the timings this run measured on this CPU; ``device="h200"`` the committed H200 timings of
the ``explorer_layer_ms`` stage of ``python -m companion.bench nemotron_flash`` (the figure says "not recorded
yet" when there are none).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from plotly.subplots import make_subplots

from companion.core import check_choice
from companion.nemotron_flash.frontier import (
    EXPLORER_BATCHES,
    EXPLORER_BUDGETS,
    EXPLORER_CONTEXTS,
    EXPLORER_DEPTHS,
    EXPLORER_OPS,
    TIMED_OPS,
    composed_ms,
    pareto_front,
    stage_layer_types,
)
from companion.nemotron_flash.model import OPERATOR_NAMES
import companion.viz  # noqa: F401  (the theme and the mode bar)

DEVICES = ("cpu", "h200")
METRICS = ("latency", "throughput")
OP_COLORS = {"a": "#D55E00", "deltanet": "#0072B2", "m2": "#009E73", "f": "#999999"}
DEPTH_COLORS = {3: "#56B4E9", 6: "#E69F00", 12: "#CC79A7"}


@dataclass
class ExplorerData:
    """The cached runs (``frontier.load_runs``) and the per-operator timing tables by device
    (``frontier.measure_layer_table``; ``None`` where not recorded)."""

    runs: list
    tables: dict = field(default_factory=dict)
    labels: dict = field(default_factory=dict)   # device -> "this CPU (…)" / "NVIDIA H200 · date"


def _x(table, run, context, batch, metric):
    ms = composed_ms(table, stage_layer_types(run["depth"], run["early"], run["middle"], run["late"]),
                     run["width"], context, batch)
    return ms if metric == "latency" else batch * 1e3 / ms


def explorer_view(data: ExplorerData, budget=EXPLORER_BUDGETS[0], depth=EXPLORER_DEPTHS[1], early="deltanet",
                  middle="a", late="m2", context=EXPLORER_CONTEXTS[1], batch=1, device="cpu", metric="latency"):
    """The figure and readout for one setting of the controls (pure: only ``data`` and the controls)."""
    check_choice("budget", budget, EXPLORER_BUDGETS)
    check_choice("depth", depth, EXPLORER_DEPTHS)
    for name, op in (("early", early), ("middle", middle), ("late", late)):
        check_choice(name, op, EXPLORER_OPS)
    check_choice("context", context, EXPLORER_CONTEXTS)
    check_choice("batch", batch, EXPLORER_BATCHES)
    check_choice("device", device, DEVICES)
    check_choice("metric", metric, METRICS)
    table = data.tables.get(device)
    label = data.labels.get(device, device)
    fig = make_subplots(rows=1, cols=2, column_widths=[0.6, 0.4], horizontal_spacing=0.1,
                        subplot_titles=(f"loss vs {'decode ms/token, batch 1' if metric == 'latency' else f'tokens/s at batch {batch}'}",
                                        f"decode ms/token vs context (batch {batch})"))
    if table is None:
        fig.add_annotation(text=f"{label}: measurements not recorded yet", x=0.5, y=0.5, xref="paper", yref="paper",
                           showarrow=False, font={"size": 16})
        fig.update_layout(height=430, title="Latency frontier")
        return fig, f"{label}: measurements not recorded yet (run python -m companion.bench nemotron_flash on an H200)."
    runs = [r for r in data.runs if r["budget"] == budget]
    xs = [_x(table, r, context, 1 if metric == "latency" else batch, metric) for r in runs]
    ys = [r["loss"] for r in runs]
    for d in EXPLORER_DEPTHS:
        idx = [i for i, r in enumerate(runs) if r["depth"] == d]
        if idx:
            fig.add_scatter(x=[xs[i] for i in idx], y=[ys[i] for i in idx], mode="markers", name=f"depth {d}",
                            marker={"color": DEPTH_COLORS[d], "size": 7, "opacity": 0.8},
                            text=[f"{runs[i]['early']}/{runs[i]['middle']}/{runs[i]['late']} · width {runs[i]['width']}"
                                  for i in idx], hovertemplate="%{text}<br>x %{x:.3g}<br>loss %{y:.3f}", row=1, col=1)
    front = pareto_front(xs, ys, maximize_x=metric == "throughput")
    if front:
        fig.add_scatter(x=[xs[i] for i in front], y=[ys[i] for i in front], mode="lines", name="Pareto front",
                        line={"color": "black", "dash": "dot"}, row=1, col=1)
    chosen = next((i for i, r in enumerate(runs) if r["depth"] == depth and
                   (r["early"], r["middle"], r["late"]) == (early, middle, late)), None)
    width = next((r["width"] for r in runs if r["depth"] == depth), None)
    if chosen is not None:
        fig.add_scatter(x=[xs[chosen]], y=[ys[chosen]], mode="markers", name="chosen",
                        marker={"symbol": "star", "size": 16, "color": "black"}, row=1, col=1)
    if width is not None:
        for op in TIMED_OPS:
            pts = sorted((r["context"], r["ms"]) for r in table["rows"]
                         if r["op"] == op and r["width"] == width and r["batch"] == batch)
            fig.add_scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers",
                            name=OPERATOR_NAMES[op], line={"color": OP_COLORS[op]}, row=1, col=2)
    fig.update_xaxes(title_text="decode ms/token (batch 1)" if metric == "latency" else "tokens/s", row=1, col=1)
    fig.update_yaxes(title_text="validation loss (short run)", row=1, col=1)
    fig.update_xaxes(title_text="context length", type="log", row=1, col=2)
    fig.update_yaxes(title_text="ms per decode step", row=1, col=2)
    fig.update_layout(height=430, title=f"Latency frontier at {budget:,} parameters · {label} · context {context}",
                      legend={"orientation": "h", "y": -0.2})
    if chosen is None:
        readout = (f"{early}/{middle}/{late} at depth {depth}: no cached run at this budget "
                   f"({len(runs)} cached runs here).")
    else:
        r = runs[chosen]
        on = chosen in front
        unit = "ms/token" if metric == "latency" else "tokens/s"
        readout = (f"depth {depth}, width {r['width']}, {r['params']:,} params: loss {r['loss']:.3f}, "
                   f"{xs[chosen]:.3g} {unit} on {label} — {'on' if on else 'off'} the Pareto front "
                   f"({len(front)} of {len(runs)} runs are on it).")
    return fig, readout


def explorer_controls(data: ExplorerData, **initial):
    """The ipywidgets controls, keyed by :func:`explorer_view`'s argument names."""
    import ipywidgets as w

    v = dict(budget=EXPLORER_BUDGETS[0], depth=EXPLORER_DEPTHS[1], early="deltanet", middle="a", late="m2",
             context=EXPLORER_CONTEXTS[1], batch=1, device="cpu", metric="latency")
    v.update(initial)
    style = {"description_width": "initial"}
    ops = [(OPERATOR_NAMES[o], o) for o in EXPLORER_OPS]
    return {
        "budget": w.Dropdown(options=[(f"{b:,} params", b) for b in EXPLORER_BUDGETS], value=v["budget"],
                             description="parameter budget", style=style),
        "depth": w.Dropdown(options=list(EXPLORER_DEPTHS), value=v["depth"], description="depth (blocks)", style=style),
        "early": w.Dropdown(options=ops, value=v["early"], description="early stage", style=style),
        "middle": w.Dropdown(options=ops, value=v["middle"], description="middle stage", style=style),
        "late": w.Dropdown(options=ops, value=v["late"], description="late stage", style=style),
        "context": w.Dropdown(options=list(EXPLORER_CONTEXTS), value=v["context"], description="context", style=style),
        "batch": w.Dropdown(options=list(EXPLORER_BATCHES), value=v["batch"], description="batch", style=style),
        "device": w.Dropdown(options=[("this CPU (live)", "cpu"), ("H200 (committed)", "h200")], value=v["device"],
                             description="device", style=style),
        "metric": w.ToggleButtons(options=[("latency", "latency"), ("throughput", "throughput")], value=v["metric"],
                                  description="tab", style=style),
    }

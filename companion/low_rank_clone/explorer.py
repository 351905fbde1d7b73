"""The clone explorer of paper 11 (plotly, ipywidgets; notebook only).

``data`` is a MiniLM study (:func:`~companion.low_rank_clone.experiments.run_encoder_study`, live or loaded
with :func:`~companion.low_rank_clone.study_io.load_study`); :func:`grid_view` picks one study of a grid
``{(d_S, α): study}`` (:func:`~companion.low_rank_clone.study_io.load_grid`). Controls: the student width
d_S and clone weight α (grid), the run (LRC, its ablations with clone terms switched off, the
TinyBERT-style baseline), the training step (a snapshot), the layer and the module whose projection
W^p's singular values are drawn. Panels: the teacher's and the student's
pairwise-cosine matrices of held-out sentences (Spearman in the readout), per-layer bars of each clone
term at that step, the training curves of every run, Spearman at each snapshot, and the singular values.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from companion.core import ParameterError, check_choice, check_int
from companion.viz import COLORS

_PALETTE = list(COLORS.values()) if isinstance(COLORS, dict) else list(COLORS)
TERM_ORDER = ("q", "k", "v", "gate", "up", "attn_out", "ffn_out")
MODULES = ("q", "k", "v", "o", "gate", "up", "down", "emb")


def _color(i):
    return _PALETTE[i % len(_PALETTE)]


def run_names(data: dict) -> list[str]:
    return list(data["runs"])


def steps_of(data: dict, run: str) -> list[int]:
    return [s["step"] for s in data["runs"][run]["snapshots"]]


def modules_of(data: dict) -> list[str]:
    """Modules with a projection in the LRC run (BERT has no gate)."""
    svs = data["runs"]["LRC"]["snapshots"][-1].get("singular_values", {})
    present = {k.rsplit("_", 1)[0] if k not in ("emb", "lm") else k for k in svs}
    return [m for m in MODULES if m in present]


def explorer_view(data: dict, *, run: str = "LRC", step: int | None = None, layer: int = 0, module: str = "up"):
    """Returns ``(figure, readout)`` for one run at one snapshot step."""
    check_choice("run", run, run_names(data))
    n_layers = int(data["n_layers"])
    check_int("layer", layer, lo=0, hi=n_layers - 1)
    check_choice("module", module, modules_of(data))
    steps = steps_of(data, run)
    if step is None:
        step = steps[-1]
    if step not in steps:
        raise ParameterError("step", step, f"one of the snapshot steps {steps}")
    snap = data["runs"][run]["snapshots"][steps.index(step)]
    fig = make_subplots(rows=2, cols=3, horizontal_spacing=0.08, vertical_spacing=0.17,
                        subplot_titles=("teacher: pairwise cosines", f"student ({run}, step {step})",
                                        "clone terms per layer (MSE, probe batch)", "training loss (task term)",
                                        "Spearman(teacher, student) at snapshots",
                                        f"singular values of W^p ({module}{'' if module == 'emb' else f', layer {layer}'})"))
    t_cos, s_cos = np.asarray(data["teacher_cos"]), np.asarray(snap["cos"])
    n_show = min(80, t_cos.shape[0])
    for col, mat in ((1, t_cos), (2, s_cos)):
        fig.add_trace(go.Heatmap(z=mat[:n_show, :n_show], zmin=-0.2, zmax=1.0, colorscale="Viridis", showscale=col == 2,
                                 colorbar=dict(len=0.4, y=0.8)), row=1, col=col)
        fig.update_xaxes(showticklabels=False, row=1, col=col)
        fig.update_yaxes(showticklabels=False, autorange="reversed", row=1, col=col)
    terms = snap.get("clone_terms") or {}
    if terms:
        for k, term in enumerate(t for t in TERM_ORDER if any(key.endswith(":" + t) for key in terms)):
            ys = [terms.get(f"{i}:{term}", np.nan) for i in range(n_layers)]
            fig.add_trace(go.Bar(x=list(range(n_layers)), y=ys, name=term, marker_color=_color(k), legendgroup="terms"),
                          row=1, col=3)
        fig.update_yaxes(type="log", row=1, col=3)
    else:
        fig.add_annotation(text="no clone terms: this student is not<br>made of projected teacher weights",
                           row=1, col=3, showarrow=False, x=0.5, y=0.5, xref="x3 domain", yref="y3 domain")
    fig.update_xaxes(title_text="layer", row=1, col=3)
    for k, (name, r) in enumerate(data["runs"].items()):
        c = r["curve"]
        fig.add_trace(go.Scatter(x=c["step"], y=c["task"], mode="lines", name=name, line=dict(color=_color(k + 2),
                                 width=3 if name == run else 1.2), legendgroup="runs"), row=2, col=1)
        fig.add_trace(go.Scatter(x=[s["step"] for s in r["snapshots"]], y=[s["scores"]["spearman"] for s in r["snapshots"]],
                                 mode="lines+markers", name=name, showlegend=False, line=dict(color=_color(k + 2),
                                 width=3 if name == run else 1.2)), row=2, col=2)
    fig.add_vline(x=step, line_dash="dot", row=2, col=1)
    fig.update_yaxes(type="log", row=2, col=1)
    fig.update_xaxes(title_text="step", row=2, col=1)
    fig.update_xaxes(title_text="step", row=2, col=2)
    svs = snap.get("singular_values") or {}
    key = module if module == "emb" else f"{module}_{layer}"
    if key in svs:
        fig.add_trace(go.Scatter(y=svs[key], mode="lines+markers", name=f"σ(W^p_{key})", showlegend=False,
                                 line=dict(color=_color(1))), row=2, col=3)
    else:
        fig.add_annotation(text="no projection in this run", row=2, col=3, showarrow=False, x=0.5, y=0.5,
                           xref="x6 domain", yref="y6 domain")
    fig.update_xaxes(title_text="index", row=2, col=3)
    fig.update_layout(height=720, title=f"Low-Rank Clone of MiniLM at d_S = {data['d_student']} "
                      f"(teacher d_T = {data['d_teacher']})", legend=dict(orientation="h", y=-0.1), barmode="group")
    sc = snap["scores"]
    sv_txt = ""
    if key in svs:
        s = np.asarray(svs[key])
        sv_txt = f" | W^p_{key}: σ_max {s[0]:.3f}, σ_min {s[-1]:.3f}, effective rank {float(s.sum() ** 2 / (s ** 2).sum()):.0f}"
    readout = (f"{run}, step {step}: Spearman {sc['spearman']:.3f}, top-1 retrieval agreement {sc['retrieval']:.2f} "
               f"on {t_cos.shape[0]} held-out sentences{sv_txt}")
    return fig, readout


def grid_view(grid: dict, *, d_student: int, alpha: float, **view):
    """:func:`explorer_view` of the study at ``(d_student, alpha)`` in ``grid``."""
    if (d_student, alpha) not in grid:
        raise ParameterError("(d_student, alpha)", (d_student, alpha), f"one of the studies {sorted(grid)}")
    return explorer_view(grid[(d_student, alpha)], **view)


def grid_controls(grid: dict, default: tuple[int, float]) -> dict:
    """Width and α dropdowns over the grid, then :func:`explorer_controls` of the ``default`` study."""
    import ipywidgets as w

    if default not in grid:
        raise ParameterError("default", default, f"one of the studies {sorted(grid)}")
    return {"d_student": w.Dropdown(options=sorted({k[0] for k in grid}), value=default[0], description="d_S"),
            "alpha": w.Dropdown(options=sorted({k[1] for k in grid}), value=default[1], description="α"),
            **explorer_controls(grid[default])}


def explorer_controls(data: dict) -> dict:
    import ipywidgets as w

    steps = steps_of(data, "LRC")
    return {
        "run": w.Dropdown(options=run_names(data), value="LRC", description="run"),
        "step": w.SelectionSlider(options=steps, value=steps[-1], description="step"),
        "layer": w.IntSlider(value=0, min=0, max=int(data["n_layers"]) - 1, description="layer"),
        "module": w.Dropdown(options=modules_of(data), value="up" if "up" in modules_of(data) else modules_of(data)[0],
                             description="module"),
    }

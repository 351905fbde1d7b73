"""The attention-sparsity explorer of SeerAttention (paper 01). Imports plotly; figures: ``figures.py``.

The explorer's science is :func:`explorer_view`, a pure function of the control values and a
precomputed :class:`ExplorerData` (one held-out sequence: each layer's ground-truth block map, attention
mass map, gate scores and the raw Q/K/V needed to run one head block-sparse). It returns the figure
(true map | gate prediction | selected mask) and a one-line readout of sparsity, recall and the head's
output similarity to dense attention.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from companion.core.validation import check_choice, check_float, check_int
from companion.seer_attention.evaluate import density, head_output_cosine, recall, threshold_select, topk_select
import companion.viz  # noqa: F401  (the theme and the mode bar)

RULES = ("top-k", "threshold")


@dataclass
class ExplorerData:
    gt: list  # per layer [H, n, n] ground truth (max-pool target) of one sequence
    mass: list  # per layer [H, n, n] attention-mass map
    scores: list  # per layer [H, n, n] trained gate scores
    qkv: dict  # layer -> (q [H, N, d], k, v, scaling)
    block_size: int
    causal: bool

    @property
    def num_layers(self) -> int:
        return len(self.gt)

    @property
    def num_heads(self) -> int:
        return self.gt[0].shape[0]


def explorer_data(gates, data, seq: int = 0) -> ExplorerData:
    """Collect what the explorer shows for sequence ``seq`` of teacher ``data`` (with mass maps and
    the raw Q/K/V kept for that sequence, see ``collect_teacher(keep_qkv_of=seq)``)."""
    if not data.mass or not data.qkv:
        raise ValueError("the explorer needs teacher data collected with with_mass=True and keep_qkv_of=<sequence>")
    with torch.no_grad():
        scores = [gates[l].scores_from_pooled(data.qp[l][seq:seq + 1], data.kp[l][seq:seq + 1])[0].cpu() for l in range(len(gates))]
    return ExplorerData(
        gt=[g[seq].cpu() for g in data.gt], mass=[m[seq].cpu() for m in data.mass], scores=scores,
        qkv={l: tuple(x.cpu() if torch.is_tensor(x) else x for x in t) for l, t in data.qkv.items()},
        block_size=data.block_size, causal=data.causal,
    )


def _log_heat(x: torch.Tensor, floor: float = 1e-4) -> np.ndarray:
    return np.round(np.log10(np.clip(x.numpy().astype(float), floor, None)), 2)  # 2 decimals: smaller notebooks


def explorer_view(data: ExplorerData, *, layer: int, head: int, rule: str = "top-k", sparsity: float = 0.7, threshold: float = 0.02):
    """Pure update: ``(figure, readout)`` for one layer/head and one selection rule."""
    check_int("layer", layer, lo=0, hi=data.num_layers - 1)
    check_int("head", head, lo=0, hi=data.num_heads - 1)
    check_choice("rule", rule, RULES)
    gt, mass, sc = data.gt[layer][head], data.mass[layer][head], data.scores[layer][head]
    if rule == "top-k":
        check_float("sparsity", sparsity, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
        mask = topk_select(sc, sparsity, causal=data.causal)
        oracle = topk_select(gt, sparsity, causal=data.causal)
    else:
        check_float("threshold", threshold, lo=0.0, hi=1.0, hi_open=True)
        mask = threshold_select(sc, threshold, causal=data.causal)
        k = mask.sum(-1)  # the oracle at the same per-row budget
        order = gt.argsort(-1, descending=True)
        oracle = torch.zeros_like(mask).scatter_(-1, order, (torch.arange(gt.shape[-1])[None, :] < k[:, None]))
    dens = density(mask, data.causal)
    rec, rec_oracle = recall(mass, mask), recall(mass, oracle)
    readout = f"layer {layer}, head {head}: keeps {dens:.0%} of blocks (sparsity {1 - dens:.0%}); attention mass kept {rec:.1%} (oracle at the same budget {rec_oracle:.1%})"
    if layer in data.qkv:
        q, k, v, scaling = data.qkv[layer]
        cos = head_output_cosine(q[head], k[head], v[head], mask, block_size=data.block_size, causal=data.causal, scaling=scaling)
        readout += f"; this head's output vs dense: cosine {cos:.4f}"
    n = gt.shape[-1]
    # Wide gaps: the shared log10 colour bar sits in the gap between the second and third panel.
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.1,
                        subplot_titles=("true block map (log10)", "gate prediction (log10)", "kept (blue) · oracle-only (orange)"))
    zmin = -4
    fig.add_trace(go.Heatmap(z=_log_heat(gt), zmin=zmin, zmax=0, colorscale="Viridis", showscale=False,
                             hovertemplate="q block %{y}, k block %{x}: log10 gt %{z:.2f}<extra></extra>"), 1, 1)
    fig.add_trace(go.Heatmap(z=_log_heat(sc), zmin=zmin, zmax=0, colorscale="Viridis",
                             colorbar=dict(title="log10", x=0.642, xanchor="left", len=0.8, thickness=10),
                             hovertemplate="q block %{y}, k block %{x}: log10 score %{z:.2f}<extra></extra>"), 1, 2)
    sel = mask.float().numpy() + 0.5 * (oracle & ~mask).float().numpy()
    fig.add_trace(go.Heatmap(z=sel, zmin=0, zmax=1, showscale=False,
                             colorscale=[[0, "#f4f4f4"], [0.5, "#E69F00"], [1, "#0072B2"]],
                             hovertemplate="q block %{y}, k block %{x}: %{z}<extra>1 = kept, 0.5 = missed by gate, kept by oracle</extra>"), 1, 3)
    for c in (1, 2, 3):
        fig.update_yaxes(autorange="reversed", title_text="query block" if c == 1 else None, row=1, col=c, scaleanchor=f"x{'' if c == 1 else c}")
        fig.update_xaxes(title_text="key block", row=1, col=c)
    fig.update_layout(height=380,
                      title=f"Layer {layer}, head {head}: {n}×{n} blocks of {data.block_size} tokens")
    return fig, readout


def explorer_controls(data: ExplorerData, layer: int = 0, head: int = 0):
    """The ipywidgets controls of the explorer."""
    import ipywidgets as w

    return {
        "layer": w.IntSlider(value=layer, min=0, max=data.num_layers - 1, description="layer"),
        "head": w.IntSlider(value=head, min=0, max=data.num_heads - 1, description="head"),
        "rule": w.ToggleButtons(options=list(RULES), value="top-k", description="rule"),
        "sparsity": w.FloatSlider(value=0.7, min=0.05, max=0.95, step=0.05, description="sparsity"),
        "threshold": w.FloatLogSlider(value=0.02, base=10, min=-4, max=-0.5, step=0.1, description="threshold τ"),
    }

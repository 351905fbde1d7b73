"""Figures and the signed-attention explorer for the ZeroS notebook (paper 04, NeurIPS 2025).

Pure functions of their inputs returning plotly figures (unit-tested without a browser). The
explorer's update, :func:`signed_attention_view`, shows one head's softmax weights next to the
zero-sum reweighting of the *same* logits (ZeroS-SM, Sec. 3: ``r = sigma1 delta/n + sigmah eps``),
on a diverging colour scale centred at 0 so negative weights are visible, with row sums in the
readout. The logits come from a real pretrained model (all-MiniLM-L6-v2, ``minilm_logits``).
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

import companion.viz  # noqa: F401  (the theme and the mode bar)
from companion.zeros_attention import functional as Fz
from companion.zeros_attention.claims import CONVEX_FLOOR

__all__ = [
    "explorer_view",
    "explorer_controls",
    "minilm_logits",
    "signed_attention_view",
    "taylor_row_figure",
    "equivalence_figure",
    "properties_figure",
    "underflow_figure",
    "rope_figure",
    "expressivity_figure",
    "mqar_figure",
    "scaleup_figures",
]

DIVERGING = "RdBu_r"


def minilm_logits(text: str, *, max_tokens: int = 16, model=None, tokenizer=None):
    """Attention logits ``q . k / sqrt(d)`` of all-MiniLM-L6-v2 for ``text``: ``(tokens, [L, H, T, T])``."""
    from companion.models import capture_attention, load_minilm

    if model is None or tokenizer is None:
        tokenizer, model = load_minilm()
    enc = tokenizer(text, return_tensors="pt", truncation=True, max_length=max_tokens)
    with torch.no_grad(), capture_attention(model) as cap:
        model(**enc)
    d = cap.q[0].shape[-1]
    logits = torch.stack([(q[0] @ k[0].transpose(-1, -2)) / math.sqrt(d) for q, k in zip(cap.q, cap.k)])
    tokens = tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
    return tokens, logits.double()


def _sym(x: np.ndarray) -> float:
    m = float(np.nanmax(np.abs(x))) if x.size else 1.0
    return m if m > 0 else 1.0


def signed_attention_view(logits: torch.Tensor, tokens, *, layer: int = 0, head: int = 0, sigma1: float = 0.8,
                          sigmah: float = 0.5, temperature: float = 1.0, causal: bool = True):
    """Softmax vs ZeroS-SM weights of one head, side by side; returns ``(figure, readout)``.

    ``logits`` ``[L, H, T, T]``; the temperature divides the logits; gates are constants here (in a
    trained layer they are ``sigmoid(x_t W_g)``, one per query row).
    """
    L, H, T, _ = logits.shape
    if not 0 <= layer < L or not 0 <= head < H:
        raise ValueError(f"layer must be in [0, {L - 1}] and head in [0, {H - 1}], got {layer}, {head}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    S = (logits[layer, head] / temperature)[None, None]  # [1, 1, T, T]
    g1 = torch.full((1, T, 1), float(sigma1), dtype=S.dtype)
    gh = torch.full((1, T, 1), float(sigmah), dtype=S.dtype)
    p = Fz.softmax_weights(S, causal=causal)[0, 0].numpy()
    r = Fz.zeros_weights(S, g1, gh, causal=causal)[0, 0].numpy()
    vis = np.tril(np.ones((T, T), bool)) if causal else np.ones((T, T), bool)
    p_show = np.where(vis, p, np.nan)
    r_show = np.where(vis, r, np.nan)
    labels = [f"{i}:{t}" for i, t in enumerate(tokens)]
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.16,
                        subplot_titles=("softmax weights p (convex: >= 0, rows sum to 1)",
                                        "ZeroS-SM weights r (signed, rows sum to 0)"))
    mp, mr = _sym(p_show[vis]), _sym(r_show[vis])
    fig.add_trace(go.Heatmap(z=p_show, x=labels, y=labels, colorscale=DIVERGING, zmin=-mp, zmax=mp, zmid=0,
                             colorbar=dict(x=0.42, len=0.9, title="p"), hovertemplate="query %{y}<br>key %{x}<br>p=%{z:.4f}<extra></extra>"),
                  row=1, col=1)
    fig.add_trace(go.Heatmap(z=r_show, x=labels, y=labels, colorscale=DIVERGING, zmin=-mr, zmax=mr, zmid=0,
                             colorbar=dict(x=1.0, len=0.9, title="r"), hovertemplate="query %{y}<br>key %{x}<br>r=%{z:.4f}<extra></extra>"),
                  row=1, col=2)
    for c in (1, 2):
        fig.update_yaxes(autorange="reversed", title_text="query t", row=1, col=c)
        fig.update_xaxes(title_text="key i", tickangle=-60, row=1, col=c)
    fig.update_layout(title=f"MiniLM layer {layer}, head {head}: the same logits, convex vs zero-sum "
                            f"(sigma1={sigma1:.2f}, sigmah={sigmah:.2f}, temperature={temperature:.2f})",
                      height=520)
    rows_p = p.sum(-1)
    rows_r = r.sum(-1)
    neg = float((r[vis] < 0).mean())
    readout = (f"softmax row sums: {rows_p.min():.4f} .. {rows_p.max():.4f}   |   "
               f"ZeroS row sums: max |sum| = {np.abs(rows_r).max():.1e}   |   "
               f"negative ZeroS weights: {100 * neg:.0f}% of visible entries, range [{r[vis].min():.3f}, {r[vis].max():.3f}]")
    return fig, readout


def explorer_view(data: dict, *, layer: int = 2, head: int = 0, sigma1: float = 0.8, sigmah: float = 0.5,
                  temperature: float = 1.0, causal: bool = True):
    """The explorer's update on ``data = {"logits": [L, H, T, T], "tokens": [...]}`` (:func:`minilm_logits`)."""
    return signed_attention_view(data["logits"], data["tokens"], layer=layer, head=head, sigma1=sigma1, sigmah=sigmah,
                                 temperature=temperature, causal=causal)


def explorer_controls(data: dict, *, layer: int = 2, head: int = 0) -> dict:
    """Sliders for layer, head, the two gates, the temperature and a causal checkbox."""
    import ipywidgets as W

    L, H = data["logits"].shape[:2]
    return {
        "layer": W.IntSlider(value=min(layer, L - 1), min=0, max=L - 1, description="layer"),
        "head": W.IntSlider(value=min(head, H - 1), min=0, max=H - 1, description="head"),
        "sigma1": W.FloatSlider(value=0.8, min=0.0, max=1.0, step=0.05, description="σ¹"),
        "sigmah": W.FloatSlider(value=0.5, min=0.0, max=1.0, step=0.05, description="σʰ"),
        "temperature": W.FloatLogSlider(value=1.0, base=2, min=-2, max=2, step=0.25, description="temperature"),
        "causal": W.Checkbox(value=True, description="causal"),
    }


def taylor_row_figure(s: torch.Tensor, *, sigma1: float = 0.8, sigmah: float = 0.5) -> go.Figure:
    """One query row (1-D logits ``s_1..s_t``): softmax = 1/t + delta/t + eps, and ZeroS's r."""
    t = s.numel()
    S = s.double().view(1, 1, 1, t).expand(1, 1, t, t)
    p, zero, first, higher = (x[0, 0, -1].numpy() for x in Fz.taylor_split(S, causal=True))
    r = sigma1 * first + sigmah * higher
    i = np.arange(1, t + 1)
    fig = go.Figure()
    for name, y, color in (("softmax p", p, "#636efa"), ("zero order 1/t", zero, "#b0b0b0"),
                           ("first order delta/t", first, "#00a087"), ("higher orders eps", higher, "#ef553b"),
                           ("ZeroS r = sigma1 delta/t + sigmah eps", r, "#111111")):
        fig.add_trace(go.Bar(x=i, y=y, name=name, marker_color=color))
    fig.update_layout(barmode="group", title=f"Taylor split of one softmax row (t={t}); ZeroS drops 1/t and gates the rest",
                      xaxis_title="key i", yaxis_title="weight", height=420)
    return fig


def equivalence_figure(errors: dict) -> go.Figure:
    """Bar chart of max |difference| to the explicit oracle for each computation (log scale)."""
    names = list(errors)
    vals = [max(errors[n], 1e-18) for n in names]
    fig = go.Figure(go.Bar(x=names, y=vals, text=[f"{v:.1e}" for v in vals], textposition="outside"))
    fig.update_layout(title="Same function, different computations: max |o - o_explicit| (float64)",
                      yaxis_type="log", yaxis_title="max abs difference", xaxis_title="computation", height=400)
    return fig


def properties_figure(decay: dict, norms: dict) -> go.Figure:
    """Left: t * max|r_t| and sum|r_t| vs t. Right: ||o_t|| for ZeroS vs linear attention."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("weights are O(1/t): t * max_i |r_ti| and sum_i |r_ti|",
                                                        "output norms ||o_t|| (random values)"))
    t = np.array(decay["t"])
    fig.add_trace(go.Scatter(x=t, y=t * np.array(decay["max_abs"]), name="t * max_i |r_ti|", mode="lines+markers"), row=1, col=1)
    fig.add_trace(go.Scatter(x=t, y=decay["l1"], name="sum_i |r_ti|", mode="lines+markers"), row=1, col=1)
    tn = np.array(norms["t"])
    idx = np.unique(np.geomspace(1, len(tn), 200).astype(int) - 1)
    for key, name in (("zeros", "ZeroS"), ("linear_unnormalised", "linear attn, un-normalised"),
                      ("linear_normalised", "linear attn, normalised (convex)")):
        fig.add_trace(go.Scatter(x=tn[idx], y=np.array(norms[key])[idx], name=name, mode="lines"), row=1, col=2)
    fig.update_xaxes(type="log", title_text="t (query position)")
    fig.update_yaxes(title_text="value", row=1, col=1)
    fig.update_yaxes(type="log", title_text="||o_t||", row=1, col=2)
    fig.update_layout(title="Bounded zero-sum weights (Lemma 3.4): mass per row stays O(1) as t grows", height=420)
    return fig


def underflow_figure(demo: dict) -> go.Figure:
    t = np.array(demo["t"])
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=t, y=np.maximum(demo["rel_err_global"], 1e-12), name="global max (official scan)", mode="lines"))
    fig.add_trace(go.Scatter(x=t, y=np.maximum(demo["rel_err_running"], 1e-12), name="running max (chunked form)", mode="lines"))
    fig.update_layout(title="float32, rising logits: error vs the exact result, per query t",
                      xaxis_title="t", yaxis_title="||o_t - o_t(exact)|| / rms ||o(exact)||", yaxis_type="log", height=400)
    return fig


def rope_figure(standard: torch.Tensor, official: torch.Tensor, positions) -> go.Figure:
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=list(positions), y=standard.tolist(), name="standard (half-split) RoPE", mode="lines+markers"))
    fig.add_trace(go.Scatter(x=list(positions), y=official.tolist(), name="repository tables (interleaved cos/sin)", mode="lines+markers"))
    fig.update_layout(title="<R_{t+3} q, R_t k> at a fixed offset of 3: a true rotation gives a constant",
                      xaxis_title="t", yaxis_title="inner product", height=380)
    return fig


def expressivity_figure(results: dict) -> go.Figure:
    fig = go.Figure()
    for kind, res in results.items():
        c = np.array(res["curve"])
        k = max(1, len(c) // 30)
        smooth = np.convolve(c, np.ones(k) / k, mode="valid")
        fig.add_trace(go.Scatter(y=smooth, name=f"{kind} (test NMSE {res['test_nmse']:.3f})", mode="lines"))
    fig.add_hline(y=CONVEX_FLOOR, line_dash="dot", annotation_text=f"{CONVEX_FLOOR:g}: best convex weights that ignore the contents")
    fig.update_layout(title="One layer, one head, target v_a - v_b: training NMSE", xaxis_title="Adam step",
                      yaxis_title="MSE / mean(y^2)", yaxis_type="log", height=400)
    return fig


def mqar_figure(results: dict) -> go.Figure:
    fig = make_subplots(rows=1, cols=2, subplot_titles=("test accuracy at query positions", "training loss"))
    kinds = list(results)
    fig.add_trace(go.Bar(x=kinds, y=[results[k]["test_acc"] for k in kinds], text=[f"{results[k]['test_acc']:.2f}" for k in kinds],
                         textposition="outside", showlegend=False), row=1, col=1)
    for k in kinds:
        fig.add_trace(go.Scatter(y=results[k]["curve"], name=k, mode="lines"), row=1, col=2)
    fig.update_yaxes(range=[0, 1.1], title_text="accuracy", row=1, col=1)
    fig.update_yaxes(title_text="cross-entropy", row=1, col=2)
    fig.update_xaxes(title_text="mixer", row=1, col=1)
    fig.update_xaxes(title_text="step", row=1, col=2)
    fig.update_layout(title="MQAR-style recall (2 layers)", height=400)
    return fig


_LABEL = {"zeros": "ours: ZeroS Triton (chunked)", "sdpa_flash": "SDPA flash (causal softmax)",
          "fla_dk64": "fla chunk_linear dk=d", "fla_dk192": "fla chunk_linear dk=3d",
          "reference": "explicit O(T^2) reference", "scan_official": "official scan (d x d cumsums)"}


def scaleup_figures(payload: dict, anchors: dict | None = None) -> go.Figure:
    """Time (forward, forward+backward) and peak memory (fwd+bwd) vs T from a recorded study payload (its
    ``rows`` stage, read by :func:`companion.zeros_attention.scale.kernel_table`).

    ``anchors``: ``{label: {T: (fwd_ms, fwdbwd_ms, peak_mib)}}`` drawn dashed and labelled "anchor".
    """
    from companion.zeros_attention.scale import kernel_table

    fig = make_subplots(rows=1, cols=3, subplot_titles=("forward (ms)", "forward + backward (ms)", "peak memory, fwd+bwd (MiB)"))
    times, peaks = kernel_table(payload, "ms"), kernel_table(payload, "peak_mib")
    impls = sorted({i for t in times.values() for m in t.values() for i in m} | {i for t in peaks.values() for m in t.values() for i in m},
                   key=lambda i: (list(_LABEL).index(i) if i in _LABEL else len(_LABEL), i))
    for j, impl in enumerate(impls):
        for col, (table, mode) in enumerate(((times, "fwd"), (times, "fwd_bwd"), (peaks, "fwd_bwd")), start=1):
            pts = [(T, m[mode][impl]) for T, m in table.items() if impl in m.get(mode, {})]
            if pts:
                fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers",
                                         name=_LABEL.get(impl, impl), legendgroup=impl, showlegend=col == 1,
                                         line=dict(color=f"hsl({(j * 67) % 360},65%,45%)")), row=1, col=col)
    for label, table in (anchors or {}).items():
        Ts = sorted(table)
        for col in (1, 2, 3):
            fig.add_trace(go.Scatter(x=Ts, y=[table[T][col - 1] for T in Ts], mode="lines+markers",
                                     name=f"anchor: {label}", legendgroup=f"a{label}", showlegend=col == 1,
                                     line=dict(dash="dash")), row=1, col=col)
    fig.update_xaxes(type="log", title_text="T (tokens)")
    fig.update_yaxes(type="log")
    dev = payload.get("device", "?")
    cfg = payload.get("profile", {})
    fig.update_layout(title=f"Recorded on {dev}, {payload.get('date', '?')}: B={cfg.get('B')}, H={cfg.get('H')}, d={cfg.get('d')}, "
                            f"{cfg.get('dtype')}", height=460)
    return fig

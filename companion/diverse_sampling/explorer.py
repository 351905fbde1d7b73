"""The diversity-sampling explorer of paper 19 (plotly, ipywidgets; notebook only).

Top left: the exact toy's true cluster probabilities beside the cluster frequencies of one IID and one
steered sample set of size ``N``. Top right: histograms of the SE estimates over repeated trials (IID,
steered without IS, + IS, + IS + CV), the true SE marked; the chosen estimator is drawn solid.
Bottom (text model, when trained): the top-``k`` next words at a prefix of the ``N``-th answer with their base
probability, the aggregated entailment against the ``N − 1`` answers already drawn and the tilted
probability (grouped bars); and the ``N`` steered answers coloured by NLI cluster. The readout gives the
clusters covered, SE vs the truth, ESS/N and the λ trajectory of the last answer. With "adaptive" on, the
text model uses ``λ_0 = 0`` and the λ slider is the step size η of ``λ_{t+1} = λ_t + η (E_t − 0.3)``.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from companion.core import check_choice, check_float, check_int
from companion.diverse_sampling import toy as T
from companion.diverse_sampling.sampler import AGGREGATIONS, aggregate, tilted_logprobs, topk_candidates
from companion.viz import COLORS

_PAL = list(COLORS.values()) if isinstance(COLORS, dict) else list(COLORS)
EST_COLOR = {name: _PAL[i % len(_PAL)] for i, name in enumerate(T.ESTIMATORS)}
PREFIXES = ("", "the answer is")
TRIALS = 400


def _toy_panels(fig, data, lam, k, n, aggregation, estimator, seed):
    model = data["toy"]
    s = T.summary(model, n=n, trials=TRIALS, lam=lam, k=k, aggregation=aggregation, seed=seed)
    K = model.n_clusters
    x = [f"c{c + 1}" for c in range(K)]
    fig.add_trace(go.Bar(x=x, y=model.cluster_probs, name="true p(c)", marker_color="#555555"), row=1, col=1)
    for name, sim in (("IID", s["iid_sim"]), ("steered", s["steered_sim"])):
        freq = np.bincount(sim["clusters"][0], minlength=K) / n
        fig.add_trace(go.Bar(x=x, y=freq, name=f"{name} frequencies (trial 1)",
                             marker_color=EST_COLOR["iid" if name == "IID" else "steered"]), row=1, col=1)
    for name in T.ESTIMATORS:
        fig.add_trace(go.Histogram(x=s["se"][name], name=T.LABELS[name], nbinsx=30, marker_color=EST_COLOR[name],
                                   opacity=0.85 if name == estimator else 0.25, legendgroup=name), row=1, col=2)
    fig.add_vline(x=s["true_se"], line_dash="dash", line_color="black", row=1, col=2)
    fig.update_xaxes(title_text="cluster", row=1, col=1)
    fig.update_yaxes(title_text="probability / frequency", row=1, col=1)
    fig.update_xaxes(title_text=f"SE estimate (nats); true {s['true_se']:.3f}", row=1, col=2)
    fig.update_yaxes(title_text=f"trials (of {TRIALS})", row=1, col=2)
    return s


def _text_panels(fig, text, lam, k, n, aggregation, adaptive, prefix, question, seed):
    from companion.diverse_sampling import textqa as TQ

    data, model, nli = text["data"], text["model"], text["nli"]
    item = data.items[question]
    lm = TQ._LM(model, data, item.question)
    # adaptive: λ_0 = 0 and the slider's λ is the step size η of λ_{t+1} = λ_t + η (E_t − E_target)
    res = TQ.sample_question(model, nli, data, item, n=n, lam=0.0 if adaptive else lam, k=k, aggregation=aggregation,
                             adaptive=adaptive, eta=lam, seed=seed, lm=lm)
    done = res["texts"][:-1]
    pre = tuple(data.encode(prefix.split())) if prefix else ()
    logp = lm(pre)
    kk = min(k, len(logp))
    cand = topk_candidates(logp, kk)
    eos = data.index[TQ.EOS]
    items = [(" ".join(data.vocab[t] for t in pre + ((int(c),) if c != eos else ())), int(c) != eos) for c in cand]
    pen = aggregate(nli.similarity(items, done), aggregation) if done else np.zeros(kk)
    path = res["lam_path"][-1]
    lam_now = path[min(len(pre), len(path) - 1)] if adaptive else lam
    logq = tilted_logprobs(logp, cand, pen, lam_now)
    words = [data.vocab[int(c)] for c in cand]
    fig.add_trace(go.Bar(x=words, y=np.exp(logp[cand]), name="base p(y | prefix)", marker_color="#555555"), row=2, col=1)
    fig.add_trace(go.Bar(x=words, y=pen, name=f"{aggregation} E vs S", marker_color=_PAL[4 % len(_PAL)]), row=2, col=1)
    fig.add_trace(go.Bar(x=words, y=np.exp(logq[cand]), name="tilted q(y | prefix)", marker_color=EST_COLOR["steered"]),
                  row=2, col=1)
    fig.update_xaxes(title_text=f"top-{kk} next words after “{item.question} {prefix}…”", row=2, col=1)
    labels = res["labels"]
    fig.add_trace(go.Scatter(x=[1] * len(res["texts"]), y=list(range(len(res["texts"]), 0, -1)), mode="markers+text",
                             text=[f"{i + 1}. {t}" for i, t in enumerate(res["texts"])], textposition="middle right",
                             marker=dict(size=12, color=[_PAL[c % len(_PAL)] for c in labels]),
                             name="steered answers (colour = NLI cluster)", showlegend=False), row=2, col=2)
    fig.update_xaxes(visible=False, range=[0.9, 3.0], row=2, col=2)
    fig.update_yaxes(visible=False, row=2, col=2)
    return res, item


def explorer_view(data: dict, *, lam: float = 3.0, k: int = 8, n: int = 8, aggregation: str = "max",
                  estimator: str = "steered_is", adaptive: bool = False, prefix: str = "", question: int = 1,
                  seed: int = 0):
    """``data = {"toy": ToyModel, "text": {"data", "model", "nli"} or None}``; returns ``(figure, readout)``."""
    check_float("lam", lam, lo=0.0, hi=20.0)
    check_int("k", k, lo=1, hi=data["toy"].n_clusters)
    check_int("n", n, lo=1, hi=64)
    check_choice("aggregation", aggregation, AGGREGATIONS)
    check_choice("estimator", estimator, T.ESTIMATORS)
    check_choice("prefix", prefix, PREFIXES)
    check_int("seed", seed, lo=0)
    text = data.get("text")
    rows = 2 if text else 1
    if text:
        check_int("question", question, lo=0, hi=len(text["data"].items) - 1)
    titles = ["exact toy: true p(c) and one sample set", "exact toy: SE estimates over trials"]
    if text:
        titles += ["text model: the tilt at one step", "text model: the N steered answers"]
    fig = make_subplots(rows=rows, cols=2, subplot_titles=titles, vertical_spacing=0.16, horizontal_spacing=0.08)
    s = _toy_panels(fig, data, lam, k, n, aggregation, estimator, seed)
    readout = (f"toy (N = {n}, λ = {lam:g}, k = {k}, {aggregation}): clusters IID {s['covered']['iid']:.2f} vs steered "
               f"{s['covered']['steered']:.2f}; {T.LABELS[estimator]}: bias {s['bias'][estimator]:+.3f}, RMSE "
               f"{s['rmse'][estimator]:.3f} (true SE {s['true_se']:.3f}); ESS/N {s['ess']:.2f}")
    if text:
        res, item = _text_panels(fig, text, lam, min(k, len(text["data"].vocab)), n, aggregation, adaptive, prefix,
                                 question, seed)
        truth = text["truth"][question]["se"] if text.get("truth") else float("nan")
        lam_path = ", ".join(f"{v:.2f}" for v in res["lam_path"][-1])
        readout += (f"   |   “{item.question}”: {res['covered']} meanings in {n} answers; SE + IS {res['se_is']:.2f}, "
                    f"+ CV {res['se_is_cv']:.2f} vs model SE {truth:.2f}; ESS/N {res['ess']:.2f}; λ_t of the last answer "
                    f"({'adaptive' if adaptive else 'fixed'}): {lam_path}")
    fig.update_layout(height=420 * rows, barmode="group", legend=dict(orientation="h", y=-0.08),
                      title="Diversity-steered sampling: coverage, debiased SE, and the tilt")
    return fig, readout


def explorer_controls(data: dict) -> dict:
    """The ipywidgets controls, keyed by :func:`explorer_view`'s argument names."""
    import ipywidgets as w

    style = {"description_width": "initial"}
    controls = {
        "lam": w.FloatSlider(value=3.0, min=0.0, max=10.0, step=0.5, description="λ", continuous_update=False),
        "k": w.IntSlider(value=data["toy"].n_clusters, min=1, max=data["toy"].n_clusters, description="top-k",
                         continuous_update=False),
        "n": w.IntSlider(value=8, min=2, max=32, description="N", continuous_update=False),
        "aggregation": w.Dropdown(options=list(AGGREGATIONS), value="max", description="aggregation", style=style),
        "estimator": w.Dropdown(options=[(T.LABELS[e], e) for e in T.ESTIMATORS], value="steered_is",
                                description="estimator", style=style),
        "seed": w.IntSlider(value=0, min=0, max=20, description="seed", continuous_update=False),
    }
    if data.get("text"):
        controls["adaptive"] = w.Checkbox(value=False, description="adaptive λ (text)")
        controls["prefix"] = w.Dropdown(options=list(PREFIXES), value="", description="prefix", style=style)
        controls["question"] = w.IntSlider(value=1, min=0, max=len(data["text"]["data"].items) - 1,
                                           description="question", continuous_update=False)
    return controls

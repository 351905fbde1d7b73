"""The upgrade-mapping explorer of paper 12 (LoRASuite).

Left: the old × new minibatch-CKA heat map with the chosen rule's layer map, the allowed offset band and
the upgrade's known construction; middle: for one old layer, the head-similarity matrix against its mapped
new layer with the Hungarian assignment; right: validation loss against steps of LFT at each learning
rate beside LoRA from scratch and LoRA(full). Controls: the CKA text source and minibatch count, the
offset limit, the mapping rule (DP, greedy, proportional depth) and the old layer. The readout gives the
map's total similarity and the transferred adapter's validation loss before any fine-tuning (computed on
demand, cached per setting).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from plotly.subplots import make_subplots

from companion.core import ParameterError, check_choice, check_int
from companion.lorasuite.cka import cka_from_terms
from companion.lorasuite.figures import add_cka, add_curves, add_heads
from companion.lorasuite.mapping import LAYER_RULES, layer_mapping
from companion.lorasuite.pipeline import CKA_SOURCES, transferred_loss
from companion.lorasuite.transfer import transfer_adapter
import companion.viz  # noqa: F401  (the theme and the mode bar)


@dataclass
class ExplorerData:
    """The fixture, the HSIC terms per CKA source, W_h and the experiment's curves; ``cache`` memoises transfers."""

    fx: dict
    terms: dict
    W_h: dict
    res: dict
    cache: dict = field(default_factory=dict)

    @property
    def max_minibatches(self) -> int:
        return min(t["xy"].shape[0] for t in self.terms.values())

    def remember(self, source: str, n_minibatches: int, suite: dict, loss: float) -> None:
        """Seed the cache with a transfer already computed (the notebook's ``lorasuite`` run and its loss)."""
        lm = suite["layer_map"]
        key = (source, n_minibatches, lm["rule"], lm["offset"], tuple(lm["pairs"]))
        self.cache[key] = {"loss": loss, "head_sims": suite["head_sims"], "head_maps": suite["head_maps"]}

    @property
    def depths(self) -> tuple[int, int]:
        return self.fx["old_model"].config.num_hidden_layers, self.fx["new_model"].config.num_hidden_layers


def _transfer(data: ExplorerData, key, pairs):
    if key not in data.cache:
        res = transfer_adapter(data.fx["old_model"], data.fx["new_model"], data.fx["old_lora"], W_h=data.W_h["W_h"],
                               layer_pairs=pairs)
        data.cache[key] = {"loss": transferred_loss(data.fx, res["adapter"]), "head_sims": res["head_sims"],
                           "head_maps": res["head_maps"]}
    return data.cache[key]


def explorer_view(data: ExplorerData, source: str = "task", n_minibatches: int = 8, offset: int = 2, rule: str = "dp",
                  old_layer: int = 0):
    """``(figure, readout)`` for one setting of the controls."""
    check_choice("source", source, [s for s in CKA_SOURCES if s in data.terms])
    check_int("n_minibatches", n_minibatches, lo=1, hi=data.max_minibatches)
    check_int("offset", offset, lo=0)
    check_choice("rule", rule, LAYER_RULES)
    lo, ln = data.depths
    check_int("old_layer", old_layer, lo=0, hi=lo - 1)
    S = cka_from_terms(data.terms[source], n_minibatches)
    lm = layer_mapping(S, rule=rule, offset=offset)
    pairs = lm["pairs"]
    t = _transfer(data, (source, n_minibatches, rule, lm["offset"], tuple(pairs)), pairs)
    pair = next((p for p in pairs if p[0] == old_layer), None)
    if pair is None:
        raise ParameterError("old_layer", old_layer, f"an old layer the map uses: {[p[0] for p in pairs]}")
    truth = [tuple(p) for p in data.fx["upgrade"]["layer_pairs"]]
    slots = data.fx["upgrade"]["head_slots"].get(str(old_layer)) if pair in truth else None
    fig = make_subplots(rows=1, cols=3, column_widths=[0.3, 0.3, 0.4], horizontal_spacing=0.09,
                        subplot_titles=(f"CKA ({source} text, {n_minibatches} minibatches)",
                                        f"heads: old layer {pair[0]} → new layer {pair[1]}",
                                        "LFT vs LoRA from scratch"))
    add_cka(fig, S, lm, truth, row=1, col=1, showscale=False)
    add_heads(fig, t["head_sims"][pair].numpy(), t["head_maps"][pair], slots, row=1, col=2, showscale=False)
    add_curves(fig, data.res, row=1, col=3)
    fig.update_xaxes(title_text="new layer", row=1, col=1)
    fig.update_yaxes(title_text="old layer", row=1, col=1)
    fig.update_xaxes(title_text="new head", row=1, col=2)
    fig.update_yaxes(title_text="old head", row=1, col=2)
    fig.update_xaxes(title_text="step", row=1, col=3)
    fig.update_yaxes(title_text="val loss (nats/char)", row=1, col=3)
    fig.update_layout(title=f"Upgrade mapping: {rule} layer map, offset ≤ {lm['offset']}", height=460,
                      legend=dict(orientation="h", y=-0.25, font=dict(size=10)))
    v = data.res["val"]
    readout = (f"{rule} map {', '.join(f'{a}→{b}' for a, b in pairs)} · Σ CKA = {lm['total']:.3f} · transferred adapter "
               f"without LFT: val loss {t['loss']:.3f} (new model {v['new_base']:.3f}, LoRA(full) {v['full_lora']:.3f})")
    return fig, readout


def explorer_controls(data: ExplorerData, **initial):
    """The ipywidgets controls, keyed by :func:`explorer_view`'s argument names."""
    import ipywidgets as w

    lo, ln = data.depths
    v = dict(source="task", n_minibatches=data.max_minibatches, offset=abs(ln - lo), rule="dp", old_layer=0)
    v.update(initial)
    style = {"description_width": "initial"}
    return {
        "source": w.Dropdown(options=[s for s in CKA_SOURCES if s in data.terms], value=v["source"],
                             description="CKA text", style=style),
        "n_minibatches": w.IntSlider(value=v["n_minibatches"], min=1, max=data.max_minibatches,
                                     description="CKA minibatches", style=style, continuous_update=False),
        "offset": w.IntSlider(value=v["offset"], min=0, max=max(1, abs(ln - lo)), description="offset ≤",
                              style=style, continuous_update=False),
        "rule": w.Dropdown(options=list(LAYER_RULES), value=v["rule"], description="layer rule", style=style),
        "old_layer": w.Dropdown(options=list(range(lo)), value=v["old_layer"], description="old layer", style=style),
    }

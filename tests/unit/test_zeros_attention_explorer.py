"""Paper 04, ZeroS: the notebook's figures and the signed-attention explorer's update (no browser)."""

import numpy as np
import plotly.graph_objects as go
import pytest
import torch

from companion.zeros_attention import experiments as X
from companion.zeros_attention import explorer as E
from companion.zeros_attention import rope_relative_defect


def _logits(L=2, H=3, T=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(L, H, T, T, generator=g, dtype=torch.float64) * 2, [f"w{i}" for i in range(T)]


@pytest.mark.parametrize("causal", [True, False])
def test_signed_attention_view_panels_and_row_sums(causal):
    logits, toks = _logits()
    fig, readout = E.signed_attention_view(logits, toks, layer=1, head=2, sigma1=0.9, sigmah=0.3,
                                           temperature=0.5, causal=causal)
    assert isinstance(fig, go.Figure) and len(fig.data) == 2
    p, r = (np.array(tr.z, dtype=float) for tr in fig.data)
    assert np.allclose(np.nansum(p, axis=1), 1.0)
    assert np.abs(np.nansum(r, axis=1)).max() < 1e-12
    assert np.nanmin(r) < 0 < np.nanmax(r)
    assert fig.data[1].zmid == 0 and fig.data[1].zmin == -fig.data[1].zmax  # diverging, centred
    if causal:
        assert np.isnan(p[0, 1:]).all()  # future keys are blank
    assert "row sums" in readout and "negative" in readout
    assert fig.layout.title.text and fig.layout.xaxis.title.text


def test_signed_attention_view_responds_to_gates_and_rejects_bad_values():
    logits, toks = _logits()
    _, r1 = (np.array(t.z, dtype=float) for t in E.signed_attention_view(logits, toks, sigma1=0.2, sigmah=0.2)[0].data)
    _, r2 = (np.array(t.z, dtype=float) for t in E.signed_attention_view(logits, toks, sigma1=0.9, sigmah=0.2)[0].data)
    assert not np.allclose(np.nan_to_num(r1), np.nan_to_num(r2))
    with pytest.raises(ValueError, match="layer"):
        E.signed_attention_view(logits, toks, layer=5)
    with pytest.raises(ValueError, match="temperature"):
        E.signed_attention_view(logits, toks, temperature=0.0)


def test_taylor_row_figure_parts_add_up():
    s = torch.tensor([0.3, -1.0, 2.0, 0.5, 0.0])
    fig = E.taylor_row_figure(s, sigma1=0.7, sigmah=0.4)
    ys = {tr.name: np.array(tr.y) for tr in fig.data}
    p = ys["softmax p"]
    assert np.allclose(ys["zero order 1/t"] + ys["first order delta/t"] + ys["higher orders eps"], p)
    assert abs(ys["ZeroS r = sigma1 delta/t + sigmah eps"].sum()) < 1e-12


def test_other_figures_build():
    figs = [
        E.equivalence_figure({"scan": 1e-15, "chunked": 0.0}),
        E.properties_figure(X.decay_profile(T=256, n_points=6), X.output_norms(T=128, d=4, chunk_size=32)),
        E.underflow_figure(X.underflow_demo(T=128, slope=1.5)),
        E.rope_figure(rope_relative_defect(), rope_relative_defect(layout="official"), range(0, 40, 8)),
        E.expressivity_figure({"softmax": {"curve": [1.0, 0.6, 0.55], "test_nmse": 0.55}}),
        E.mqar_figure({"zeros": {"curve": [3.0, 1.0], "test_acc": 0.8}}),
    ]
    for f in figs:
        assert isinstance(f, go.Figure) and f.layout.title.text


def test_scaleup_figure_from_a_payload_with_anchors():
    payload = {
        "device": "NVIDIA H200", "date": "2026-12-01", "profile": {"B": 1, "H": 16, "d": 64, "dtype": "bfloat16"},
        "stages": {"rows": {"state": "done"}},
        "rows": [{"T": T, "impl": "zeros", "mode": mode, "ms": ms, "peak_mib": mib}
                 for T, mode, ms, mib in [(2048, "fwd", 0.2, 50), (2048, "fwd_bwd", 0.9, 100), (4096, "fwd", 0.3, 90),
                                          (4096, "fwd_bwd", 1.1, 200)]]
                + [{"T": 2048, "impl": "sdpa_flash", "mode": "fwd", "error": "RuntimeError: x"}],
    }
    fig = E.scaleup_figures(payload, anchors={"fla dk=192": {2048: (0.17, 1.2, 476), 8192: (0.18, 1.4, 832)}})
    names = {tr.name for tr in fig.data}
    assert "ours: ZeroS Triton (chunked)" in names and "anchor: fla dk=192" in names
    assert "H200" in fig.layout.title.text and "B=1, H=16, d=64" in fig.layout.title.text  # from the recorded profile


def test_explorer_view_and_controls():
    logits, toks = _logits()
    data = {"logits": logits, "tokens": toks}
    controls = E.explorer_controls(data, layer=5, head=1)
    assert set(controls) == {"layer", "head", "sigma1", "sigmah", "temperature", "causal"}
    assert controls["layer"].value == 1 and controls["layer"].max == 1 and controls["head"].max == 2  # clipped to the data
    values = {k: c.value for k, c in controls.items()}
    fig, readout = E.explorer_view(data, **values)
    want_fig, want_readout = E.signed_attention_view(logits, toks, **values)
    assert readout == want_readout and fig.to_json() == want_fig.to_json()

"""companion.low_rank_clone.explorer (a pure update function) and study_io (save/load round trip)."""

import numpy as np
import pytest

from companion.core import ParameterError
from companion.low_rank_clone import explorer as X
from companion.low_rank_clone.study_io import load_study, save_study


def fake_study(n=10, layers=2, d_s=4):
    rng = np.random.default_rng(0)
    tcos = np.corrcoef(rng.standard_normal((n, 5))).astype(np.float32)

    def run(with_terms):
        snaps = []
        for step in (0, 5):
            s = {"step": step, "scores": {"spearman": 0.1 * (step + 1), "retrieval": 0.5}, "cos": tcos + 0.01 * step}
            if with_terms:
                s["clone_terms"] = {f"{i}:{t}": 0.1 * (i + 1) for i in range(layers) for t in ("q", "k", "v", "up", "attn_out", "ffn_out")}
                s["singular_values"] = {**{f"{m}_{i}": list(np.linspace(1, 0.1, d_s)) for m in ("q", "k", "v", "o", "up", "down")
                                           for i in range(layers)}, "emb": [1.0, 0.5, 0.2, 0.1]}
            snaps.append(s)
        return {"curve": {"step": [0, 1, 2, 3, 4], "task": [1.0, 0.8, 0.6, 0.5, 0.4], "clone": [1.0] * 5}, "snapshots": snaps,
                "final": snaps[-1]["scores"], "seconds": 1.0}

    return {"teacher_cos": tcos, "d_student": d_s, "d_teacher": 8, "n_layers": layers,
            "runs": {"LRC": run(True), "LRC without FFN clone": run(True), "TinyBERT-style": run(False)}}


def test_view_is_deterministic_and_reads_the_snapshot():
    d = fake_study()
    fig, text = X.explorer_view(d, run="LRC", step=5, layer=1, module="up")
    fig2, text2 = X.explorer_view(d, run="LRC", step=5, layer=1, module="up")
    assert fig.to_json() == fig2.to_json() and text == text2
    assert "Spearman 0.600" in text and "W^p_up_1" in text
    assert X.modules_of(d) == ["q", "k", "v", "o", "up", "down", "emb"]


def test_view_for_a_baseline_without_projections():
    fig, text = X.explorer_view(fake_study(), run="TinyBERT-style", step=0, module="emb")
    assert "TinyBERT-style, step 0" in text and "W^p" not in text


@pytest.mark.parametrize("kw,name", [({"run": "nope"}, "run"), ({"step": 3}, "step"), ({"layer": 2}, "layer"),
                                     ({"layer": -1}, "layer"), ({"module": "gate"}, "module")])
def test_bad_controls_raise(kw, name):
    with pytest.raises(ParameterError, match=name):
        X.explorer_view(fake_study(), **kw)


def test_controls_cover_the_view():
    import inspect

    c = X.explorer_controls(fake_study())
    params = set(inspect.signature(X.explorer_view).parameters) - {"data"}
    assert set(c) == params and c["step"].options == (0, 5)


def test_study_round_trip(tmp_path):
    d = fake_study()
    for r in d["runs"].values():
        r["model"] = object()  # models are not saved
    save_study(d, tmp_path / "s")
    back = load_study(tmp_path / "s")
    assert set(back["runs"]) == set(d["runs"]) and back["n_layers"] == 2
    assert np.allclose(back["teacher_cos"], d["teacher_cos"], atol=1e-3)
    assert np.allclose(back["runs"]["LRC"]["snapshots"][1]["cos"], d["runs"]["LRC"]["snapshots"][1]["cos"], atol=1e-3)
    assert "model" not in back["runs"]["LRC"]
    assert load_study(tmp_path / "missing") is None


def test_grid_round_trip_picks_each_study_by_width_and_alpha(tmp_path):
    from companion.low_rank_clone.study_io import grid_stem, load_grid

    for d_s, alpha in ((4, 0.2), (4, 1.0), (6, 0.2)):
        s = fake_study(d_s=d_s)
        s["runs"]["LRC"]["alpha"] = alpha
        save_study(s, grid_stem(tmp_path, d_s, alpha))
    grid = load_grid(tmp_path)
    assert sorted(grid) == [(4, 0.2), (4, 1.0), (6, 0.2)]
    assert grid[(4, 1.0)]["runs"]["LRC"]["alpha"] == 1.0 and grid[(6, 0.2)]["d_student"] == 6
    fig, text = X.grid_view(grid, d_student=6, alpha=0.2, run="LRC", step=5, layer=0, module="q")
    assert "Spearman 0.600" in text and "d_S = 6" in fig.layout.title.text
    with pytest.raises(ParameterError, match="d_student, alpha"):
        X.grid_view(grid, d_student=6, alpha=1.0)
    c = X.grid_controls(grid, (4, 0.2))
    assert c["d_student"].options == (4, 6) and c["alpha"].options == (0.2, 1.0)
    assert load_grid(tmp_path / "none") == {}

"""The decode study of paper 05 on the CPU (companion.gaussian_video.decode and .scale): the coding order, the
H.264 scene codec (exact at qp 0, bytes per layer), the projection's gsplat conventions, the gsplat comparison's
glue (with a stand-in for gsplat built from our own pieces: gsplat itself needs CUDA, so its numbers come from
the H200 run), the gsplat and per_layer stages' own logic, and the readers of the recorded runs."""

import math

import numpy as np
import pytest
import torch

from companion.core.stages import StageContext, run_stages
from companion.gaussian_video.bitstream import h264_encoder
from companion.gaussian_video.decode import (
    NEAR_PLANE, H264Decoder, encode_scene_h264, gsplat_stage, layer_order, per_layer_stage, project, versus_gsplat)
from companion.gaussian_video.scale import (
    GSPLAT_MAX_MEAN_ABS_DIFF, SMOKE_PROFILE, STAGES, TRITON_MIN_SPEED, rasterizer_summary, recorded)
from companion.gaussian_video.scene3d import cameras, make_scene
from companion.gaussian_video.significance import significance, split_layers
from companion.gaussian_video.splat import project_ewa
from companion_kernels.gaussian_splat import bin_gaussians, rasterize_binned, rasterize_dense


def _scene(n=600, T=3, L=3):
    sc = make_scene(n, 3, T)
    layer = split_layers(significance(sc["opacities"], sc["scales"], 1e5, "sum"), L).numpy()
    return sc, layer


def test_layer_order_groups_layers_and_keeps_neighbours_close():
    sc, layer = _scene(2000)
    means = sc["means"][0].numpy()
    order = layer_order(layer, means)
    assert sorted(order.tolist()) == list(range(2000))
    assert np.all(np.diff(layer[order]) >= 0)
    step = lambda o: np.linalg.norm(np.diff(means[o], axis=0), axis=1).mean()  # noqa: E731
    assert step(order) < 0.5 * step(np.argsort(layer, kind="stable"))  # the Morton curve's locality


@pytest.mark.skipif(h264_encoder() is None, reason="this PyAV build has no libx264")
def test_h264_scene_codec_is_exact_at_qp0_and_counts_bytes_per_layer():
    sc, layer = _scene()
    L, T = 3, 3
    h = encode_scene_h264(sc, layer, L, qp=0)
    assert len(h["layers"]) == L and h["channels"] == 17  # 3 positions x 2 bytes + 4 + 3 + 1 + 3
    assert sum(h["counts"]) == 600 and len(h["header"]) == 5 * 8 + L * 2  # (min, span) float32 x 5, varint counts
    dec = H264Decoder(h, "cpu")
    order = torch.from_numpy(h["order"])
    for l in (1, L):
        sym = dec.symbols(l)
        assert sym.shape == (T, sum(h["counts"][:l]), 17)
    for t in range(T):
        g = dec.dequantise(dec.symbols(L)[t])
        for name, bits in (("means", 16), ("quats", 8), ("scales", 8), ("opacities", 8), ("colors", 8)):
            true = (sc[name][t] if name in ("means", "quats") else sc[name])[order]
            lo, span = h["meta"][name][:2]
            assert (g[name] - true).abs().max() <= span / ((1 << bits) - 1) / 2 * 1.01 + 1e-6, name
    lossy = H264Decoder(encode_scene_h264(sc, layer, L, qp=20), "cpu")
    assert not np.array_equal(lossy.symbols(L), dec.symbols(L))


def test_project_follows_gsplat():
    """Jacobian clamp (gsplat persp_proj): a Gaussian far left of the view gets J at t_x/t_z = −(c_x/f_x +
    0.15 W/f_x); one inside the view is unchanged; depths below NEAR_PLANE are culled."""
    K = torch.tensor([[100.0, 0, 32], [0, 100.0, 32], [0, 0, 1]], dtype=torch.float64)
    view = torch.eye(4, dtype=torch.float64)
    cov = 0.01 * torch.eye(3, dtype=torch.float64)[None].repeat(2, 1, 1)
    means = torch.tensor([[0.1, 0.0, 2.0], [-3.0, 0.0, 2.0]], dtype=torch.float64)
    _, free, _ = project_ewa(means, cov, view, K)
    _, clamped, _ = project_ewa(means, cov, view, K, image_size=(64, 64))
    assert torch.allclose(free[0], clamped[0])
    jx = -(32 / 100 + 0.15 * 64 / 100)
    J = torch.tensor([[100 / 2.0, 0, -100 * jx / 2.0], [0, 100 / 2.0, 0]], dtype=torch.float64)
    assert torch.allclose(clamped[1], J @ cov[1] @ J.T + 0.3 * torch.eye(2, dtype=torch.float64))
    g = {"means": torch.tensor([[0.0, 0.0, NEAR_PLANE * 0.5], [0.0, 0.0, NEAR_PLANE]]),
         "quats": torch.tensor([[1.0, 0, 0, 0]] * 2), "scales": torch.full((2, 3), 0.01), "opacities": torch.tensor([0.5, 0.5]), "colors": torch.rand(2, 3)}
    assert project(g, torch.eye(4), K.float(), 64)[0].shape[0] == 1  # gsplat keeps depth >= near_plane


class StandInGsplat:
    """gsplat's call signatures and tensor shapes (``rasterization`` with ``packed=False`` meta,
    ``rasterize_to_pixels``) built from our own projection, binning and PyTorch rasteriser."""

    __version__ = "stand-in"

    @staticmethod
    def rasterization(means, quats, scales, opacities, colors, viewmats, Ks, width, height, packed=True):
        g = {"means": means, "quats": quats, "scales": scales, "opacities": opacities, "colors": colors}
        m2, con, op, col, depth = project(g, viewmats[0], Ks[0], width)
        assert m2.shape[0] == means.shape[0]  # nothing culled, so rows stay indexed by Gaussian
        offsets, ids = bin_gaussians(m2, con, op, depth, height, width)
        meta = {"means2d": m2[None], "conics": con[None], "opacities": op.expand(1, -1), "flatten_ids": ids,
                "isect_offsets": offsets[:-1].reshape(1, math.ceil(height / 16), math.ceil(width / 16))}
        return rasterize_dense(m2, con, op, col, depth, height, width)[None], None, meta

    @staticmethod
    def rasterize_to_pixels(means2d, conics, colors, opacities, width, height, tile, isect_offsets, flatten_ids):
        offsets = torch.cat([isect_offsets.reshape(-1), isect_offsets.new_tensor([flatten_ids.numel()])])
        img = rasterize_binned(means2d[0], conics[0], opacities[0], colors[0], offsets, flatten_ids, height, width,
                               impl="reference")
        return img[None], None


def test_versus_gsplat_glue_on_the_cpu():
    sc = make_scene(300, 3, 1)
    views, K = cameras(1, 40)
    g = {"means": sc["means"][0], "quats": sc["quats"][0], "scales": sc["scales"] * 3, "opacities": sc["opacities"],
         "colors": sc["colors"]}
    out = versus_gsplat(StandInGsplat, g, views[0], K, 40, impl="reference")
    assert out["gsplat"] == "gsplat stand-in" and out["gsplat_n_intersections"] > 300
    for key in ("gsplat_rasterization_ms", "gsplat_rasterize_to_pixels_ms", "triton_on_gsplat_lists_ms",
                "triton_end_to_end_ms", "triton_project_and_bin_ms", "triton_on_own_lists_ms",
                "gsplat_rasterize_to_pixels_fwd_bwd_ms", "triton_fwd_bwd_on_gsplat_lists_ms",
                "gsplat_rasterization_fwd_bwd_ms", "tiles_end_to_end_fwd_bwd_ms"):
        assert out[key] > 0, key
    for name in ("means2d", "conics", "colors", "opacities"):  # the same kernel on both sides: equal gradients
        assert out[f"grad_{name}_rel_max_abs_diff"] < 1e-6, name
    assert out["kernel_max_abs_diff"] < 1e-6 and out["end_to_end_max_abs_diff"] < 1e-5
    assert out["own_n_intersections"] >= out["gsplat_n_intersections"]  # the stand-in bins our way, from project
    assert 0 <= out["kernel_mean_abs_diff"] <= out["kernel_max_abs_diff"]


def test_scale_up_figures_from_the_recorded_runs():
    from companion.gaussian_video.figures import decode_figure, train3d_figure
    from companion.gaussian_video.scale_train3d import recorded as recorded_train3d

    gpu, train = recorded(), recorded_train3d()
    names = {t.name for t in decode_figure(gpu).data}
    assert "render (Triton)" in names and "H.264 decode + dequantise + render" in names
    fig = train3d_figure(train)
    seq = train["sequence"]
    assert len(fig.data[0].x) == len(seq["per_layer"]) and len(fig.data[1].x) == seq["n_frames_done"]


def test_quality_figure_with_and_without_the_training_curve():
    import copy

    from companion.gaussian_video.figures import train3d_quality_figure
    from companion.gaussian_video.scale_train3d import recorded as recorded_train3d

    train = recorded_train3d()
    keys = [f for f in train["sequence"]["frames"] if f["kind"] == "key"]
    fig = train3d_quality_figure(train)
    notes = [a.text for a in fig.layout.annotations]
    assert [t.name for t in fig.data][:len(keys)] == [f"keyframe t = {f['t']}: training views" for f in keys]
    assert all(f"t = {f['t']} held-out {f['psnr_test'][-1]:.2f} dB" in notes for f in keys) and "target 27 dB" in notes
    assert len(fig.data[-1].x) == train["sequence"]["n_frames_done"]
    old = copy.deepcopy(train)
    for f in old["sequence"]["frames"]:
        f.pop("curve", None)
    fig = train3d_quality_figure(old)
    assert "training curve not recorded in this run" in [a.text for a in fig.layout.annotations]
    steps = train["profile"]["train"]["key_steps"]
    assert [t.name for t in fig.data] == [f"layers 1..6, {steps} keyframe steps", f"layer 1, {steps} keyframe steps"]


def test_quality_figure_adds_the_run_with_longer_keyframes_dotted():
    from companion.gaussian_video.figures import train3d_quality_figure
    from companion.gaussian_video.scale_train3d import recorded as recorded_train3d, recorded_longer

    train, longer = recorded_train3d(), recorded_longer()
    more = longer["profile"]["train"]["key_steps"]
    assert more > train["profile"]["train"]["key_steps"]
    base = len(train3d_quality_figure(train).data)
    fig = train3d_quality_figure(train, longer)
    added = fig.data[base:]
    keys = [f for f in longer["sequence"]["frames"] if f["kind"] == "key"]
    assert [t.name.split(":")[0] for t in added[:len(keys)]] == [f"keyframe t = {f['t']}, {more} steps" for f in keys]
    assert all(t.line.dash == "dot" for t in added)
    assert list(added[-1].y) == [f["psnr_test"][-1] for f in longer["sequence"]["frames"]]


def _ctx(profile, until=math.inf, states=None):
    return StageContext(profile={**profile}, device="cpu", log=lambda *a: None,
                        results={"stages": {k: {"state": v} for k, v in (states or {}).items()}}, until=until)


def test_gsplat_stage_off_in_a_cpu_profile_and_a_recorded_failure_without_cuda():
    assert gsplat_stage(_ctx(SMOKE_PROFILE)) == {"gsplat": "off in this profile (gsplat needs CUDA)"}
    out = run_stages(STAGES, {**SMOKE_PROFILE, "gsplat": True}, device="cpu", only=["gsplat"], log=lambda *a: None)
    assert out["stages"]["gsplat"]["state"] == "failed" and "GsplatUnavailable" in out["stages"]["gsplat"]["error"]
    assert "gsplat" not in out and not out["complete"]


def test_per_layer_stage_starts_no_layer_count_without_time_left():
    """No seconds left: no layer count is started, and the (empty) rows say so to the readers (rows < L)."""
    assert per_layer_stage(_ctx(SMOKE_PROFILE, until=-math.inf, states={"h264": "done"})) == []


def test_rasterizer_summary_for_the_checks():
    """The Triton-vs-gsplat comparison left the claims table (it tests this project's kernel, not the paper):
    the notebook's Checks print this summary (from the gsplat and rasterizer stages) and assert the agreement."""
    gs = {"gsplat": "gsplat 1.5.3", "gsplat_rasterization_ms": 4.0, "gsplat_rasterize_to_pixels_ms": 2.0,
          "triton_end_to_end_ms": 8.0, "kernel_mean_abs_diff": 1e-5, "kernel_max_abs_diff": 1e-4,
          "end_to_end_mean_abs_diff": 2e-5, "end_to_end_max_abs_diff": 1e-3}
    met = rasterizer_summary({"gsplat": {**gs, "triton_on_gsplat_lists_ms": 2.0 / (TRITON_MIN_SPEED * 1.01)}})
    assert met["speed"] == pytest.approx(TRITON_MIN_SPEED * 1.01) and f"≥ {TRITON_MIN_SPEED}×: met" in met["text"]
    missed = rasterizer_summary({"gsplat": {**gs, "triton_on_gsplat_lists_ms": 2.0 / (TRITON_MIN_SPEED * 0.99)}})
    assert f"≥ {TRITON_MIN_SPEED}×: not met" in missed["text"] and "end to end 8.00 vs 4.00 ms: 0.50×" in missed["text"]
    assert met["mean_abs_diff"] == 1e-5 and f"target < {GSPLAT_MAX_MEAN_ABS_DIFF:g}" in met["text"]
    ras = {"triton_ms": 1.0, "peer_ms": 2.0, "peer": "PyTorch", "max_abs_diff": 1e-6}
    failed = {"stages": {"gsplat": {"state": "failed", "error": "GsplatUnavailable: no CUDA"}}, "rasterizer": ras}
    no_gsplat = rasterizer_summary(failed)
    assert no_gsplat["speed"] == 2.0 and no_gsplat["mean_abs_diff"] is None and "PyTorch 2.00 ms" in no_gsplat["text"]
    assert "gsplat: GsplatUnavailable: no CUDA" in no_gsplat["text"]
    assert rasterizer_summary({"gsplat": {"gsplat": "off in this profile (gsplat needs CUDA)"}}) is None
    rec = rasterizer_summary(recorded())
    assert rec["peer"] == "gsplat 1.5.3" and rec["mean_abs_diff"] < GSPLAT_MAX_MEAN_ABS_DIFF
    backward = {**gs, "triton_on_gsplat_lists_ms": 1.0, "triton_fwd_bwd_on_gsplat_lists_ms": 3.0,
                "gsplat_rasterize_to_pixels_fwd_bwd_ms": 1.5, "tiles_end_to_end_fwd_bwd_ms": 10.0,
                "gsplat_rasterization_fwd_bwd_ms": 5.0, "grad_means2d_rel_max_abs_diff": 1e-4,
                "grad_conics_rel_max_abs_diff": 3e-4, "grad_colors_rel_max_abs_diff": 1e-6}
    text = rasterizer_summary({"gsplat": backward})["text"]
    assert "kernels 3.00 vs 1.50 ms (0.50×), end to end 10.00 vs 5.00 ms (0.50×)" in text and "within 0.0003" in text

"""The 3-D 4DGCPro pipeline (companion/gaussian_video/train3d.py) and its study's stages on the CPU, torch
renderer, tiny sizes."""

from __future__ import annotations

import math

import pytest
import torch

from companion.core import ParameterError, limit_threads
from companion.core.stages import StageContext
from companion.gaussian_video import train3d as T
from companion.gaussian_video.scale_train3d import GPU_PROFILE, SMOKE_PROFILE
from companion.gaussian_video.scene3d import cameras

SCENE = {"n_gt": 150, "n_parts": 2, "n_frames": 3, "n_cameras": 8, "width": 16, "test_every": 4, "jump_at": None,
         "jump": 0.0}
CFG = T.Config(L=3, key_steps=40, rd_steps=10, relayer_every=10, rigid_steps=4, residual_steps=4,
               motion_levels=(2, 3), lr_means=3e-3, tau_mu=math.inf)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    with limit_threads(1):
        yield


@pytest.fixture(scope="module")
def data():
    return T.make_dataset(**SCENE, backend="torch", device="cpu")


@pytest.fixture(scope="module")
def seq(data):
    return T.encode_sequence3d(data, CFG, "torch")


def test_one_group_with_infinite_tau_and_one_per_frame_with_tiny_tau(data, seq):
    assert seq.groups == [0]
    assert [f["kind"] for f in seq.frames] == ["key", "inter", "inter"]
    tiny = T.encode_sequence3d(data, CFG.replace(key_steps=4, rd_steps=2, tau_mu=1e-9), "torch")
    assert tiny.groups == [0, 1, 2]
    assert all(f["mean_dmu"] > 1e-9 for f in tiny.frames[1:])


def test_bytes_add_over_layers_exactly(seq):
    for enc, rec in zip(seq.encoded, seq.frames):
        assert enc.header_bytes + sum(enc.layer_bytes) == len(enc.data)
        assert rec["bytes"] == [enc.header_bytes + sum(enc.layer_bytes[:l]) for l in range(1, CFG.L + 1)]
        assert all(b > a for a, b in zip(rec["bytes"], rec["bytes"][1:]))


def test_decode_equals_the_quantised_state_bit_for_bit(seq):
    for upto in (None, 1):
        decoded = T.decode_sequence3d(seq.encoded, CFG, upto=upto)
        for (dec, dl), (enc, el) in zip(decoded, seq.states):
            n = len(dl)
            assert n == (len(el) if upto is None else int((el <= 1).sum()))
            assert torch.equal(dl, el[:n])
            for k in T.ATTRIBUTES:
                assert torch.equal(dec[k], enc[k][:n]), (upto, k)


def test_keyframe_state_is_the_dequantised_fit():
    p = {k: torch.randn(50, c) for k, c in T.ATTRIBUTES.items()}
    layer = torch.repeat_interleave(torch.arange(1, 4), torch.tensor([20, 20, 10]))
    enc, dec = T.encode_key(p, layer, 3)
    for k, c in T.ATTRIBUTES.items():
        step = (p[k].max(0).values - p[k].min(0).values) / ((1 << T.KEY_BITS.get(k, 8)) - 1)
        assert bool(((dec[k] - p[k]).abs() <= step / 2 + 1e-6).all()), k
    back, bl = T.decode_key(enc)
    assert torch.equal(bl, layer) and all(torch.equal(back[k], dec[k]) for k in T.ATTRIBUTES)
    # a layer's bytes are its own: the header and chunks 1..l alone decode layers <= l
    first, fl = T.decode_key(enc.data[:enc.bytes_upto(1)], 1)
    assert torch.equal(fl, layer[:20]) and all(torch.equal(first[k], dec[k][:20]) for k in T.ATTRIBUTES)


def test_inter_frame_round_trip_long_layers_and_an_empty_one():
    # one ANS stream per layer, however long (the old coder cut payloads into 2,048-symbol blocks)
    counts = [5000, 0, 7]
    layer = torch.repeat_interleave(torch.arange(1, 4), torch.tensor(counts))
    g = torch.Generator().manual_seed(1)
    grids = [torch.randint(-40, 40, (T.MOTION_CHANNELS, r, r, r), generator=g) for r in (2, 5)]
    res = {k: torch.randint(-9, 9, (len(layer), T.ATTRIBUTES[k]), generator=g) for k in T.RESIDUAL}
    enc = T.encode_inter(grids, res, layer, 3, 0.01)
    assert enc.header_bytes + sum(enc.layer_bytes) == len(enc.data) and enc.layer_bytes[1] == 1  # a varint 0
    back_g, back_r = T.decode_inter(enc, counts)
    assert all(torch.equal(a, b) for a, b in zip(back_g, grids))
    assert all(torch.equal(back_r[k], res[k]) for k in T.RESIDUAL)
    for upto in (1, 2):
        _, first = T.decode_inter(enc.data[:enc.bytes_upto(upto)], counts, upto=upto)
        assert all(torch.equal(first[k], res[k][:5000]) for k in T.RESIDUAL)


def test_constant_motion_grid_translates_and_rotates_every_gaussian_exactly():
    g = torch.Generator().manual_seed(2)
    p = {"means": torch.rand(30, 3, generator=g), "quats": torch.nn.functional.normalize(torch.randn(30, 4, generator=g), dim=-1)}
    d = torch.tensor([0.1, -0.2, 0.05, 0.0, 0.0, 0.3])  # Δμ and a rotation of 0.3 rad about z
    grids = [d[:, None, None, None].expand(6, 3, 3, 3).contiguous()]
    box = torch.tensor([[-0.5, -0.5, -0.5], [1.5, 1.5, 1.5]])
    moved = T.move(p, T.grid_motion(p["means"], grids, box))
    assert torch.allclose(moved["means"], p["means"] + d[:3], atol=1e-6)
    angle = math.atan(0.15) * 2  # normalise(1, v/2) is a rotation by 2·atan(|v|/2)
    dq = torch.tensor([math.cos(angle / 2), 0, 0, math.sin(angle / 2)]).expand(30, 4)
    assert torch.allclose(moved["quats"], T.quat_mul(dq, p["quats"]), atol=1e-6)


def test_training_lowers_the_loss_and_psnr_grows_with_layers_on_training_views(data):
    tr = data["train"]
    cfg = CFG.replace(rd_steps=0)
    p, layer, losses = T.fit_keyframe(data["means"][0], data["images"][0, tr], data["viewmats"][tr], data["K"], cfg,
                                      "torch")
    assert sum(losses[-5:]) < 0.7 * sum(losses[:5])
    ps = T.evaluate(p, layer, cfg.L, data["images"][0, tr], data["viewmats"][tr], data["K"], "torch")
    assert all(b >= a for a, b in zip(ps, ps[1:])), ps
    assert bool((layer[1:] >= layer[:-1]).all())


def test_residual_stage_lowers_its_loss(data):
    tr = data["train"]
    cfg = CFG.replace(rd_steps=0, key_steps=20)
    p, layer, _ = T.fit_keyframe(data["means"][0], data["images"][0, tr], data["viewmats"][tr], data["K"], cfg, "torch")
    p["colors"] = p["colors"] + 0.2  # a colour offset the residuals must undo
    _, losses = T.fit_residual(p, layer, data["images"][0, tr], data["viewmats"][tr], data["K"],
                               cfg.replace(residual_steps=15, lr_residual=0.02), "torch", torch.Generator().manual_seed(0))
    assert losses[-1] < losses[0]


def test_results(data, seq):
    r = T.results(seq, data)
    assert [x["l"] for x in r["per_layer"]] == [1, 2, 3]
    assert r["groups"] == [0] and r["n_frames_done"] == r["n_frames_planned"] == 3
    assert r["test_cameras"] == [3, 7] and r["train_cameras"] == [0, 1, 2, 4, 5, 6]
    mb = [x["mb_per_frame"] for x in r["per_layer"]]
    assert all(b > a for a, b in zip(mb, mb[1:]))


def test_config_from_a_profile():
    """A study profile's ``train`` knobs are JSON (motion_levels a list) and its seed is the study's."""
    assert T.Config.from_profile(GPU_PROFILE) == T.Config()
    assert T.Config.from_profile({"train": {**GPU_PROFILE["train"], "motion_levels": [2, 4]}, "seed": 3}) == \
        T.Config(motion_levels=(2, 4), seed=3)
    with pytest.raises(ParameterError, match="tau_mu"):
        T.Config.from_profile({**GPU_PROFILE, "train": {**GPU_PROFILE["train"], "tau_mu": 0.0}})


def test_sequence_stage_stops_at_the_deadline_and_decode_stage_checks_the_bytes():
    ctx = StageContext(profile={**SMOKE_PROFILE, "train": {**SMOKE_PROFILE["train"], "motion_levels": [2]}},
                       device="cpu", log=lambda *a: None, results={}, until=-math.inf)
    with pytest.raises(RuntimeError, match="sequence stage"):
        T.decode_stage(ctx)
    out = T.sequence_stage(ctx)  # no time left: the first frame only
    assert out["n_frames_done"] == 1 and out["n_frames_planned"] == SMOKE_PROFILE["scene"]["n_frames"]
    assert T.decode_stage(ctx)["decode_check"] is True


def test_deadline_stops_adding_frames(data):
    out = T.encode_sequence3d(data, CFG.replace(key_steps=2, rd_steps=0), "torch", deadline_s=0.0)
    assert len(out.frames) == 1 and T.results(out, data)["n_frames_done"] == 1


@pytest.mark.parametrize("kw", [{"L": 0}, {"tau_mu": 0.0}, {"tau_mu": -1.0}, {"q": 0.0}, {"q": -0.1},
                                {"q_motion": 0.0}, {"rd_steps": 50, "key_steps": 10}, {"motion_levels": (1,)}])
def test_bad_config_raises(kw):
    with pytest.raises(ParameterError) as err:
        T.Config(**kw)
    assert next(iter(kw)) in str(err.value)


def test_shape_mismatches_and_bad_arguments_raise(data):
    imgs, views, K = data["images"], data["viewmats"], data["K"]
    with pytest.raises(ParameterError, match="viewmats"):
        T.check_views(imgs[0, :3], views)
    with pytest.raises(ParameterError, match="images"):
        T.check_sequence(imgs[0], views)
    with pytest.raises(ParameterError, match="viewmats"):
        T.encode_sequence3d({**data, "viewmats": views[:2]}, CFG, "torch")
    with pytest.raises(ParameterError, match="backend"):
        T.render(*T.activated(T.init_model(data["means"][0], CFG, torch.Generator())), views, K, 16, 16, "opengl")
    with pytest.raises(ParameterError, match="test_every"):
        T.make_dataset(**{**SCENE, "test_every": 9}, backend="torch", device="cpu")
    with pytest.raises(ParameterError, match="q"):
        T.encode_inter([torch.zeros(6, 2, 2, 2, dtype=torch.long)], {k: torch.zeros(3, T.ATTRIBUTES[k], dtype=torch.long)
                       for k in T.RESIDUAL}, torch.tensor([1, 2, 2]), 2, 0.0)


@pytest.mark.gpu
def test_gsplat_and_torch_backends_agree():
    T.load_gsplat()
    views, K = cameras(2, 64)
    points = (torch.rand(300, 3, generator=torch.Generator().manual_seed(0)) - 0.5)
    out = T.backend_agreement(points.cuda(), views.cuda(), K.cuda(), 64)
    assert out["mean_abs_diff"] < 2e-3 and out["max_abs_diff"] < 0.1, out

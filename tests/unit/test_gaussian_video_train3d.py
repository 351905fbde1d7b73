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
    p, layer, losses, _ = T.fit_keyframe(data["means"][0], data["images"][0, tr], data["viewmats"][tr], data["K"],
                                         cfg, "torch")
    assert sum(losses[-5:]) < 0.7 * sum(losses[:5])
    ps = T.evaluate(p, layer, cfg.L, data["images"][0, tr], data["viewmats"][tr], data["K"], "torch")
    assert all(b >= a for a, b in zip(ps, ps[1:])), ps
    assert bool((layer[1:] >= layer[:-1]).all())


def test_residual_stage_lowers_its_loss(data):
    tr = data["train"]
    cfg = CFG.replace(rd_steps=0, key_steps=20)
    p, layer, *_ = T.fit_keyframe(data["means"][0], data["images"][0, tr], data["viewmats"][tr], data["K"], cfg, "torch")
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
    assert T.Config.from_profile(GPU_PROFILE) == T.Config(**{**GPU_PROFILE["train"], "seed": GPU_PROFILE["seed"]})
    assert T.Config.from_profile({"train": {**GPU_PROFILE["train"], "motion_levels": [2, 4]}, "seed": 3}) == \
        T.Config(**{**GPU_PROFILE["train"], "motion_levels": (2, 4), "seed": 3})
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


def test_tiles_backend_is_the_tile_rasteriser_on_the_projection_and_passes_gradients_to_every_attribute():
    """The "tiles" render equals the dense oracle on the same EWA projection (culling and the Jacobian clamp
    included), and a loss reaches every attribute and the retained 2-D means."""
    from companion_kernels.gaussian_splat import rasterize_dense

    views, K = cameras(2, 20)
    g = torch.Generator().manual_seed(3)
    n = 40
    means = ((torch.rand(n, 3, generator=g) - 0.5) * 0.8).requires_grad_(True)
    quats = torch.randn(n, 4, generator=g).requires_grad_(True)
    scales = (0.02 + 0.05 * torch.rand(n, 3, generator=g)).requires_grad_(True)
    opac = (0.2 + 0.7 * torch.rand(n, generator=g)).requires_grad_(True)
    colors = torch.rand(n, 3, generator=g).requires_grad_(True)
    info = {}
    imgs = T.render(means, quats, scales, opac, colors, views, K, 20, 18, backend="tiles", info=info)
    assert imgs.shape == (2, 18, 20, 3)
    cov = T.covariance_3d(quats, scales)
    for img, view in zip(imgs, views):
        m2, cov2, depth = T.project_ewa(means, cov, view, K, image_size=(20, 18))
        keep = depth > T.NEAR
        dense = rasterize_dense(m2[keep], T.conics(cov2[keep]), opac[keep], colors[keep], depth[keep], 18, 20)
        assert torch.allclose(img, dense, atol=1e-5)
    (imgs * torch.rand(imgs.shape, generator=g)).sum().backward()
    for name, t in (("means", means), ("quats", quats), ("scales", scales), ("opacities", opac), ("colors", colors)):
        assert t.grad is not None and torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0, name
    assert T.screen_grads(info, n).shape == (2, n, 2) and info["visible"].shape == (2, n)


# --- D-SSIM and adaptive density control ------------------------------------------------------------

def _ssim_scipy(x, y):
    """SSIM with scipy's Gaussian filter (σ 1.5, radius 5, zero padding) in float64, per channel."""
    from scipy.ndimage import gaussian_filter
    f = lambda z: gaussian_filter(z, 1.5, mode="constant", truncate=5 / 1.5)  # noqa: E731
    out = []
    for c in range(3):
        a, b = x[..., c].double().numpy(), y[..., c].double().numpy()
        ma, mb = f(a), f(b)
        saa, sbb, sab = f(a * a) - ma * ma, f(b * b) - mb * mb, f(a * b) - ma * mb
        out.append(((2 * ma * mb + 1e-4) * (2 * sab + 9e-4)) / ((ma * ma + mb * mb + 1e-4) * (saa + sbb + 9e-4)))
    return float(sum(o.mean() for o in out) / 3)


def test_ssim_is_one_on_identical_images_and_matches_an_independent_filter():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(20, 24, 3, generator=g)
    y = (x + 0.2 * torch.randn(20, 24, 3, generator=g)).clamp(0, 1)
    assert float(T.ssim(x, x)) == pytest.approx(1.0, abs=1e-6)
    assert float(T.ssim(x, y)) == pytest.approx(_ssim_scipy(x, y), abs=1e-5)
    assert float(T.ssim(x, y)) < 0.9
    assert float(T.photometric(x, y, 0.2)) == pytest.approx(
        0.8 * float((x - y).abs().mean()) + 0.2 * (1 - _ssim_scipy(x, y)), abs=1e-5)
    with pytest.raises(ParameterError, match="img"):
        T.ssim(x, y[:-1])


def _model(n=40, seed=0):
    """A small model, one Adam step taken (so that every moment is non-zero)."""
    g = torch.Generator().manual_seed(seed)
    p = {k: v.requires_grad_(True) for k, v in
         T.init_model(torch.rand(n, 3, generator=g), T.Config(L=2, init_fraction=1.0), g).items()}
    opt = torch.optim.Adam([{"params": [p[k]], "lr": 1e-2} for k in T.ATTRIBUTES], eps=1e-15)
    sum((v ** 2).sum() for v in p.values()).backward()
    opt.step()
    return p, opt


def _lengths(p, opt):
    return {len(v) for v in p.values()} | {len(opt.state[v][m]) for v in p.values() for m in ("exp_avg", "exp_avg_sq")}


def test_densify_clones_small_splits_large_and_keeps_adam_state_aligned():
    p, opt = _model()
    n = len(p["means"])
    with torch.no_grad():
        p["log_scales"][:10] = math.log(0.5)   # large: max scale 0.5 > 0.01 × extent 10
        p["log_scales"][10:] = math.log(0.05)  # small
        p["opacity"][:] = 0.0  # α = 0.5: nothing pruned
    before = {k: v.detach().clone() for k, v in p.items()}
    m_before = opt.state[p["colors"]]["exp_avg"].clone()
    grad = torch.zeros(n)
    grad[[0, 1, 2]] = 1.0    # split 3
    grad[[20, 21]] = 1.0     # clone 2
    grad[[3, 22]] = T.Config().grad_threshold  # at the threshold: neither
    out = T.densify_and_prune(p, opt, grad, 10.0, T.Config(L=2), torch.Generator().manual_seed(1), prune_big=False)
    assert out == {"cloned": 2, "split": 3, "pruned": 0}
    assert len(p["means"]) == n - 3 + 2 + 2 * 3 and _lengths(p, opt) == {len(p["means"])}
    assert all(opt.param_groups[i]["params"][0] is p[k] for i, k in enumerate(T.ATTRIBUTES))
    kept = torch.ones(n, dtype=torch.bool)
    kept[:3] = False
    assert torch.equal(p["means"][:n - 3].detach(), before["means"][kept])
    assert torch.equal(opt.state[p["colors"]]["exp_avg"][:n - 3], m_before[kept])
    assert torch.equal(opt.state[p["colors"]]["exp_avg"][n - 3:], torch.zeros(8, 3))
    clones = slice(n - 3, n - 1)
    assert torch.equal(p["means"][clones].detach(), before["means"][[20, 21]])
    children = p["log_scales"][n - 1:].detach()
    assert torch.allclose(children.exp(), before["log_scales"][[0, 1, 2]].exp().repeat(2, 1) / 1.6)
    assert torch.equal(p["colors"][n - 1:].detach(), before["colors"][[0, 1, 2]].repeat(2, 1))
    offsets = p["means"][n - 1:].detach() - before["means"][[0, 1, 2]].repeat(2, 1)
    assert 0 < float(offsets.norm(dim=1).max()) < 5 * 0.5 * math.sqrt(3)  # drawn from N(μ, Σ), not copied


def test_prune_removes_exactly_the_transparent_and_reset_clamps_opacity():
    p, opt = _model()
    n = len(p["means"])
    low = torch.zeros(n, dtype=torch.bool)
    low[[4, 9, 17]] = True
    with torch.no_grad():
        p["log_scales"][:] = math.log(1e-3)
        p["opacity"][:, 0] = torch.where(low, torch.tensor(math.log(0.004 / 0.996)), torch.tensor(0.5))
        p["log_scales"][30] = math.log(2.0)  # too large: pruned only with prune_big
    keep_means = p["means"].detach()[~low].clone()
    out = T.densify_and_prune(p, opt, torch.zeros(n), 10.0, T.Config(L=2), torch.Generator(), prune_big=False)
    assert out == {"cloned": 0, "split": 0, "pruned": 3}
    assert torch.equal(p["means"].detach(), keep_means) and _lengths(p, opt) == {n - 3}
    out = T.densify_and_prune(p, opt, torch.zeros(n - 3), 10.0, T.Config(L=2), torch.Generator(), prune_big=True)
    assert out["pruned"] == 1 and _lengths(p, opt) == {n - 4}
    with torch.no_grad():
        p["opacity"][:5, 0] = -8.0  # already below 0.01: left as it is
    T.reset_opacity(p, opt)
    alpha = torch.sigmoid(p["opacity"].detach()[:, 0])
    assert torch.allclose(alpha[5:], torch.full((n - 9,), 0.01)) and torch.allclose(alpha[:5], torch.sigmoid(torch.tensor(-8.0)))
    assert opt.param_groups[3]["params"][0] is p["opacity"]
    assert float(opt.state[p["opacity"]]["exp_avg"].abs().sum()) == 0 and _lengths(p, opt) == {n - 4}


def test_view_space_gradient_statistics_of_the_torch_renderer(data):
    """The retained 2-D mean gradients, summed over the progressive renders, scaled to NDC × C per camera."""
    tr = data["train"][:2]
    p = {k: v.requires_grad_(True) for k, v in T.init_model(data["means"][0], CFG, torch.Generator()).items()}
    layer = T.layering(p, CFG.L, CFG.lambda_psi)
    infos = []
    imgs = T.render_layers(p, layer, CFG.L, data["viewmats"][tr], data["K"], 16, 16, "torch", infos=infos)
    T._layer_loss(imgs, data["images"][0, tr], [0.0] * CFG.L, CFG.L).backward()
    n = len(layer)
    g2 = torch.zeros(2, n, 2)
    for sel, info in infos:
        g2[:, sel] += T.screen_grads(info, int(sel.sum()))
    assert float(g2.abs().sum()) > 0
    sums, seen = T.view_grad_norms(infos, n, 16, 16)
    assert torch.equal(seen, torch.full((n,), 2)) and torch.allclose(sums, (g2 * 16).norm(dim=-1).sum(0))


def test_keyframe_fit_with_densification_and_dssim_keeps_every_tensor_aligned(data):
    cfg = CFG.replace(key_steps=30, rd_steps=5, lambda_dssim=0.2, densify=True, densify_from=5, densify_every=5,
                      densify_until=25, opacity_reset=20, grad_threshold=1e-3)
    p, layer, losses, _ = T.fit_keyframe(data["means"][0], data["images"][0, data["train"]],
                                         data["viewmats"][data["train"]], data["K"], cfg, "torch")
    assert {len(v) for v in p.values()} == {len(layer)} and len(losses) == 30
    assert all(math.isfinite(x) for x in losses)
    assert len(layer) != int(round(CFG.init_fraction * SCENE["n_gt"]))  # the population changed


def test_random_init_is_uniform_in_the_box_with_the_stated_count():
    pts = torch.tensor([[0.0, 0, 0], [1, 2, 3], [0.5, 0.5, 0.5]])
    p = T.init_model(pts, T.Config(L=2, init="random", init_count=500), torch.Generator().manual_seed(0))
    assert len(p["means"]) == 500 and {len(v) for v in p.values()} == {500}
    assert bool((p["means"] >= 0).all()) and bool((p["means"] <= torch.tensor([1.0, 2, 3])).all())


def test_schedule_3dgs_scales_the_3dgs_defaults():
    assert T.schedule_3dgs(30_000) == {"densify_from": 500, "densify_every": 100, "densify_until": 15_000,
                                       "opacity_reset": 3_000}
    assert T.schedule_3dgs(3_000) == {"densify_from": 50, "densify_every": 10, "densify_until": 1_500,
                                      "opacity_reset": 300}
    c = T.Config()
    assert (c.densify_from, c.densify_every, c.densify_until, c.opacity_reset, c.grad_threshold, c.percent_dense,
            c.prune_alpha) == (500, 100, 15_000, 3_000, 2e-4, 0.01, 0.005)


@pytest.mark.parametrize("kw", [{"init": "mesh"}, {"init_count": 0}, {"lambda_dssim": 1.5}, {"densify": 1},
                                {"densify_every": 0}, {"opacity_reset": 0}, {"grad_threshold": 0.0},
                                {"percent_dense": 0.0}, {"densify_from": -1}, {"curve_every": 0}, {"stop_db": -0.1},
                                {"stop_windows": 0}, {"max_gaussians": 0}])
def test_bad_densification_config_raises(kw):
    with pytest.raises(ParameterError) as err:
        T.Config(**kw)
    assert next(iter(kw)) in str(err.value)


def test_an_old_recorded_profile_still_loads_with_the_old_recipe():
    # the profile of the first recorded H200 run, before D-SSIM, density control and the training curve
    old = {"backend": "gsplat", "workers": 16, "seed": 0, "train": {
        "init_fraction": 0.6, "init_noise": 0.01, "L": 6, "lambda_psi": 100000.0, "key_steps": 900, "rd_steps": 150,
        "relayer_every": 50, "rigid_steps": 40, "residual_steps": 40, "cams_per_step": 3, "lambda_rate_key": 0.01,
        "lambda_rate_inter": 0.01, "lambda_reg": 0.001, "q": 0.015625, "q_motion": 0.0005, "motion_levels": [4, 8, 16],
        "tau_mu": 0.03, "prune_alpha": 0.005, "lr_means": 0.001, "lr_quats": 0.001, "lr_scales": 0.005,
        "lr_opacity": 0.05, "lr_colors": 0.01, "lr_motion": 0.002, "lr_residual": 0.01}}
    cfg = T.Config.from_profile(old)
    assert cfg.densify is False and cfg.lambda_dssim == 0.0 and cfg.init == "points" and cfg.key_steps == 900


def test_densification_and_dssim_raise_the_held_out_psnr_of_a_short_fit():
    """300 steps at 16 px, one frame: L1 alone vs L1 + 0.2·D-SSIM with densification (from 50 every 25 until 150,
    reset at 100; at 16 px the view-space gradients are ~10× those of 3DGS's 800 px images, hence 2e-3)."""
    d = T.make_dataset(**{**SCENE, "n_frames": 1}, backend="torch", device="cpu")
    tr, te = d["train"], d["test"]
    base = T.Config(L=3, key_steps=300, rd_steps=0, relayer_every=10, lr_means=3e-3, init_fraction=0.3)
    dens = base.replace(lambda_dssim=0.2, densify=True, densify_from=50, densify_every=25, densify_until=150,
                        opacity_reset=100, grad_threshold=2e-3)
    psnr = []
    for cfg in (base, dens):
        p, layer, *_ = T.fit_keyframe(d["means"][0], d["images"][0, tr], d["viewmats"][tr], d["K"], cfg, "torch")
        psnr.append(T.evaluate(p, layer, cfg.L, d["images"][0, te], d["viewmats"][te], d["K"], "torch")[-1])
    assert psnr[1] > psnr[0] + 0.5, psnr


def test_plateau_rule():
    assert not T.plateaued([10.0, 11.0], 2, 0.1)  # fewer points than the window
    assert not T.plateaued([10.0, 11.0, 11.2], 2, 0.1)  # gained 1.2 dB over 2 points
    assert T.plateaued([10.0, 11.0, 11.05, 11.08], 2, 0.1)  # gained 0.08 dB over 2 points
    assert T.plateaued([12.0, 11.0, 11.5], 2, 0.1)  # fell


def test_keyframe_curve_counts_the_steps_and_rises(data):
    tr = data["train"]
    cfg = CFG.replace(key_steps=23, rd_steps=3, curve_every=5)
    *_, curve = T.fit_keyframe(data["means"][0], data["images"][0, tr], data["viewmats"][tr], data["K"], cfg, "torch")
    assert curve["step"] == [5, 10, 15, 20, 23] and curve["every"] == 5 and curve["stopped_at"] is None
    assert curve["train_psnr"][-1] > curve["train_psnr"][0]


def test_early_stop_ends_the_colour_steps_and_keeps_the_rd_steps(data):
    tr = data["train"]
    args = (data["means"][0], data["images"][0, tr], data["viewmats"][tr], data["K"])
    cfg = CFG.replace(key_steps=200, rd_steps=4, curve_every=5, stop_windows=1, stop_db=100.0)  # any gain is too small
    _, _, losses, curve = T.fit_keyframe(*args, cfg, "torch")
    assert curve["stopped_at"] == 10 and len(losses) == 14 and curve["step"] == [5, 10, 14]
    dens = cfg.replace(densify=True, densify_from=2, densify_every=5, densify_until=20, opacity_reset=50)
    assert T.fit_keyframe(*args, dens, "torch")[3]["stopped_at"] == 20  # not before densification ends
    never = cfg.replace(key_steps=12, stop_db=0.0)
    assert T.fit_keyframe(*args, never, "torch")[3]["stopped_at"] is None


def test_densification_cap_keeps_the_largest_gradients():
    p, opt = _model()
    n = len(p["means"])
    with torch.no_grad():
        p["log_scales"][:10] = math.log(0.5)   # large: split
        p["log_scales"][10:] = math.log(0.05)  # small: clone
        p["opacity"][:] = 0.0
    grad = torch.zeros(n)
    grad[[0, 1, 20, 21]] = torch.tensor([3.0, 1.0, 2.0, 1.0])
    out = T.densify_and_prune(p, opt, grad, 10.0, T.Config(L=2, max_gaussians=n + 2), torch.Generator().manual_seed(1),
                              prune_big=False)
    assert out == {"cloned": 1, "split": 1, "pruned": 0} and len(p["means"]) == n + 2 and _lengths(p, opt) == {n + 2}
    full = T.densify_and_prune(p, opt, torch.ones(n + 2), 10.0, T.Config(L=2, max_gaussians=n),
                               torch.Generator().manual_seed(1), prune_big=False)
    assert full == {"cloned": 0, "split": 0, "pruned": 0}  # already above the cap: nothing added


def test_backend_fit_check_fits_the_small_scene_with_each_backend_it_is_given():
    cfg = T.Config(lr_means=0.005)
    out = T.backend_fit_check(cfg, ("torch",), "cpu", n_gt=60, width=12, n_cameras=8, steps=20)
    assert out["scene"] == {"n_gt": 60, "width": 12, "n_cameras": 8, "steps": 20}
    assert set(out) == {"scene", "torch"}
    start = T.backend_fit_check(cfg, ("torch",), "cpu", n_gt=60, width=12, n_cameras=8, steps=1)["torch"]
    assert out["torch"]["psnr_test"] > start["psnr_test"]  # the fit learns the held-out views too


def test_an_inter_frame_without_motion_keeps_the_keyframe_quality():
    """Closed loop on a frame equal to its keyframe: zero symbols reproduce the decoded keyframe's renders
    exactly, and the trained rigid + residual stages keep its held-out top-layer PSNR (within 0.1 dB)."""
    d = T.make_dataset(**{**SCENE, "n_frames": 1}, backend="torch", device="cpu")
    tr, te = d["train"], d["test"]
    img, views, K = d["images"][0, tr], d["viewmats"][tr], d["K"]
    p, layer, *_ = T.fit_keyframe(d["means"][0], img, views, K, CFG, "torch")
    enc, state = T.encode_key(p, layer, CFG.L)
    _, box = T.grid_box(enc)
    held_out = lambda s: T.evaluate(s, layer, CFG.L, d["images"][0, te], d["viewmats"][te], K, "torch")  # noqa: E731
    key = held_out(state)
    zero_res = {k: torch.zeros_like(state[k], dtype=torch.long) for k in T.RESIDUAL}
    zero_grid = [torch.zeros(T.MOTION_CHANNELS, r, r, r, dtype=torch.long) for r in CFG.motion_levels]
    assert held_out(T.apply_inter(state, box, zero_grid, zero_res, CFG.q, CFG.q_motion)) == pytest.approx(key, abs=1e-4)
    gen = torch.Generator().manual_seed(1)
    grid_sym, _, _ = T.fit_rigid(state, box, img, views, K, CFG, "torch", gen)
    base = T.apply_inter(state, box, grid_sym, zero_res, CFG.q, CFG.q_motion)
    res_sym, _ = T.fit_residual(base, layer, img, views, K, CFG, "torch", gen)
    inter = held_out(T.apply_inter(state, box, grid_sym, res_sym, CFG.q, CFG.q_motion))
    assert inter[-1] > key[-1] - 0.1, (key, inter)


def test_separated_parts_keep_motion_a_function_of_position():
    """In the "separated" layout no Gaussian's nearest neighbour belongs to another part, first frame to last (in
    the "overlapping" one a good share does); more parts than fit apart are refused by name."""
    from companion.core import ParameterError
    from companion.gaussian_video.scene3d import make_scene

    def cross_part_share(layout):
        sc = make_scene(3000, 12, 16, seed=0, layout=layout)
        shares = []
        for t in (0, 15):
            d = torch.cdist(sc["means"][t], sc["means"][t])
            d.fill_diagonal_(float("inf"))
            nn = d.argmin(1)
            shares.append(float((sc["part"][nn] != sc["part"]).float().mean()))
        return shares

    assert cross_part_share("separated") == [0.0, 0.0]
    assert min(cross_part_share("overlapping")) > 0.05
    with pytest.raises(ParameterError, match="n_parts"):
        make_scene(100, 60, 1, layout="separated")

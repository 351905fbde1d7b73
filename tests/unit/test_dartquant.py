"""companion.dartquant: Hadamard constructions, losses, QR-Orth and its peers, quantizers, model placement,
calibration data and the explorer, against known truths."""

import copy

import numpy as np
import plotly.graph_objects as go
import pytest
import scipy.linalg
import torch

from companion.core import ParameterError
from companion.dartquant import PAPER
from companion.dartquant import experiment as DE
from companion.dartquant import hadamard as H
from companion.dartquant import qr_orth as Q
from companion.dartquant import quant as QU
from companion.dartquant import rotation as RO
from companion.dartquant import whip as W
from companion.dartquant.activations import collect_calibration, synthetic_activations


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Small per-op work on a shared two-core machine only gains contention from intra-op threads."""
    from companion.core import limit_threads

    with limit_threads(1):
        yield


def test_identity():
    assert PAPER.notebook == "08_dartquant"


# ---------------------------------------------------------------------------------------------- Hadamard

@pytest.mark.parametrize("n", [1, 2, 8, 12, 20, 24, 40, 96, 384, 640])
def test_hadamard_is_hadamard(n):
    h = H.hadamard_matrix(n, torch.float64)
    assert set(h.unique().tolist()) <= {-1.0, 1.0}
    assert torch.equal(h @ h.T, n * torch.eye(n, dtype=torch.float64))


def test_fwht_matches_scipy():
    x = torch.randn(5, 64, dtype=torch.float64)
    assert torch.allclose(H.fwht(x), x @ torch.from_numpy(scipy.linalg.hadamard(64)).double())
    assert np.array_equal(H.hadamard_matrix(128).numpy(), scipy.linalg.hadamard(128))


@pytest.mark.parametrize("n", [16, 48, 384, 160])
def test_transform_matches_matrix_and_is_orthonormal(n):
    x = torch.randn(3, 7, n, dtype=torch.float64)
    assert torch.allclose(H.hadamard_transform(x), x @ H.hadamard_matrix(n, torch.float64) / n ** 0.5)
    assert torch.allclose(H.hadamard_transform(x).norm(dim=-1), x.norm(dim=-1))


@pytest.mark.parametrize("n", [3, 28, 100, 336])
def test_unsupported_width_raises(n):
    with pytest.raises(ParameterError, match="Hadamard construction"):
        H.hadamard_matrix(n)
    assert not H.supported(n)


def test_random_rotations_are_orthogonal_and_seeded():
    r = H.random_hadamard(384, 3)
    assert Q.orthogonality_error(r) < 1e-5 and torch.equal(r, H.random_hadamard(384, 3))
    assert not torch.equal(r, H.random_hadamard(384, 4))
    assert Q.orthogonality_error(H.random_orthogonal(50, 1)) < 1e-5


# ---------------------------------------------------------------------------------------------- losses

def test_whip_exact_values_and_gradient():
    y = torch.tensor([[0.0, 0.0, 0.0], [1.0, -2.0, 0.5]], requires_grad=True)
    expected = (3.0 + np.exp(-1) + np.exp(-2) + np.exp(-0.5)) / 2
    loss = W.whip_loss(y)
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    loss.backward()
    assert torch.allclose(y.grad[1], -torch.sign(y[1].detach()) * torch.exp(-y[1].detach().abs()) / 2)


def test_variance_only_sees_the_mean_and_kurtosis_known_values():
    x = torch.randn(500, 32, dtype=torch.float64)
    r = H.random_orthogonal(32, 0).double()
    # Σ y² is rotation invariant: variance + mean² is the same before and after
    assert (W.variance_loss(x @ r) + (x @ r).mean() ** 2).item() == pytest.approx((W.variance_loss(x) + x.mean() ** 2).item())
    u = torch.linspace(-1, 1, 100001, dtype=torch.float64)[None]
    assert W.kurtosis_loss(u).item() == pytest.approx(1.8, abs=1e-3)
    with pytest.raises(ParameterError):
        W.get_loss("l2")
    with pytest.raises(ParameterError):
        W.whip_loss(torch.zeros(4))


# ---------------------------------------------------------------------------------------------- QR-Orth

@pytest.fixture(scope="module")
def acts():
    return synthetic_activations(1024, 32, massive=2, seed=0)


@pytest.mark.parametrize("method", Q.METHODS)
def test_every_method_stays_orthogonal_and_lowers_whip(acts, method):
    c = Q.calibrate(acts, method=method, steps=30, lr=0.02, batch=128, snapshot_steps=[0, 30])
    assert Q.orthogonality_error(c.rotation) < 1e-5 and len(c.losses) == 30
    assert W.whip_loss(acts @ c.rotation) < W.whip_loss(acts @ c.snapshots[0])


def test_qr_rotation_is_q_of_qr_and_rejects_non_square():
    z = torch.randn(6, 6)
    q = Q.qr_rotation(z)
    assert torch.allclose(q, torch.linalg.qr(z)[0]) and Q.orthogonality_error(q) < 1e-5
    with pytest.raises(ParameterError, match="square"):
        Q.qr_rotation(torch.randn(4, 6))
    with pytest.raises(ParameterError, match="square"):
        Q.initial_rotation(4, torch.randn(4, 5))


def test_variance_loss_does_not_move_r(acts):
    var = Q.calibrate(acts, loss="variance", steps=20, lr=0.02, snapshot_steps=[0])
    whip = Q.calibrate(acts, loss="whip", steps=20, lr=0.02, snapshot_steps=[0])
    moved = lambda c: float((c.rotation - c.snapshots[0]).abs().max())  # noqa: E731
    assert moved(var) < 2e-3 and moved(whip) > 20 * moved(var)  # only the batch-mean term gives it any signal


def test_per_head_r2_is_block_diagonal(acts):
    c = Q.calibrate(acts, steps=5, lr=0.05, heads=4, kv_heads=2)
    assert c.rotation.shape == (2, 8, 8)
    blocks = [c.rotation[i // 2] for i in range(4)]
    assert torch.allclose(Q.rotate(acts, c.rotation, heads=4), acts @ torch.block_diag(*blocks), atol=1e-5)
    with pytest.raises(ParameterError):
        Q.calibrate(acts, steps=1, heads=4, kv_heads=3)


def test_whole_sample_batches_and_bad_activations(acts):
    c = Q.calibrate(acts.reshape(16, 64, 32), steps=3, batch=4)
    assert c.steps == 3
    bad = acts.clone()
    bad[3, 4] = float("nan")
    with pytest.raises(ParameterError, match="NaN"):
        Q.calibrate(bad, steps=1)
    bad[3, 4] = float("inf")
    with pytest.raises(ParameterError):
        Q.calibrate(bad, steps=1)
    with pytest.raises(ParameterError):
        Q.calibrate(acts, method="adamw", steps=1)


# ---------------------------------------------------------------------------------------------- quantizers

def test_activation_quantizer_levels_and_exactness():
    x = torch.randn(6, 64)
    for bits in (2, 4, 8):
        q = QU.quantize_activations(x, bits)
        assert all(len(row.unique()) <= 2 ** bits for row in q)
    grid = QU.act_grid(torch.tensor([-1.0, 2.0]), 4, clip=1.0)
    assert torch.allclose(QU.quantize_activations(grid[None], 4, clip=1.0), grid[None], atol=1e-6)
    assert ((QU.quantize_activations(x, 8) - x) ** 2).mean() < ((QU.quantize_activations(x, 4) - x) ** 2).mean()


@pytest.mark.parametrize("bits", [1, 9, 16, 4.0])
def test_bits_outside_2_to_8_raise(bits):
    with pytest.raises(ParameterError, match="bits"):
        QU.quantize_activations(torch.randn(2, 8), bits)


def test_group_must_divide_width():
    with pytest.raises(ParameterError, match="divisor"):
        QU.quantize_activations(torch.randn(2, 10), 4, group=3)
    g = QU.quantize_activations(torch.randn(2, 12), 4, group=4)
    assert g.shape == (2, 12)


def test_gptq_equals_rtn_with_isotropic_inputs_and_beats_it_otherwise():
    torch.manual_seed(0)
    w = torch.randn(32, 256)
    rtn = QU.quantize_weight_rtn(w, 4, 128)
    assert torch.allclose(QU.gptq_quantize(w, 3 * torch.eye(256), 4, 128, percdamp=0.0), rtn, atol=1e-6)
    x = torch.randn(1024, 256) * torch.linspace(0.1, 3, 256)
    err = lambda q: float(((x @ w.T - x @ q.T) ** 2).mean())  # noqa: E731
    assert err(QU.gptq_quantize(w, x, 4, 128)) < err(rtn)
    assert len((rtn[0, :128] / rtn[0, :128].abs().max()).unique()) <= 16


def _plain_gptq(w, x, bits, group, percdamp):
    """Column-by-column GPTQ written out as the OBS update it is: quantize column c, then spread its error
    over the columns not yet quantized through the inverse of their own Hessian block (no Cholesky factor,
    no lazy batch); min-max symmetric scales found when a group starts, as GPTQ's ``find_params``."""
    W = w.double().clone()
    cols = W.shape[1]
    H = 2.0 * x.double().T @ x.double() / x.shape[0]
    H += percdamp * torch.diagonal(H).mean() * torch.eye(cols, dtype=H.dtype)
    maxq = 2 ** (bits - 1) - 1
    Q = torch.zeros_like(W)
    for c in range(cols):
        if c == 0 or (group is not None and c % group == 0):
            part = W if group is None else W[:, c:c + group]
            scale = part.abs().amax(dim=1).clamp(min=1e-8) / maxq
        Q[:, c] = torch.clamp(torch.round(W[:, c] / scale), -(maxq + 1), maxq) * scale
        hinv = torch.linalg.inv(H[c:, c:])
        W[:, c:] -= ((W[:, c] - Q[:, c]) / hinv[0, 0])[:, None] * hinv[0][None, :]
    return Q


def _correlated(tokens, cols, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(tokens, cols, generator=g, dtype=torch.float64) @ torch.randn(cols, cols, generator=g, dtype=torch.float64)
            / cols ** 0.5 * torch.linspace(0.2, 3.0, cols, dtype=torch.float64))


@pytest.mark.parametrize("group", [None, 16, 24])
def test_gptq_matches_a_plain_column_by_column_gptq(group):
    g = torch.Generator().manual_seed(1)
    w = torch.randn(8, 48, generator=g, dtype=torch.float64)
    x = _correlated(256, 48)
    plain = _plain_gptq(w, x, 4, group, 0.1)
    for blocksize in (1, 16, 20, 48):
        q = QU.gptq_quantize(w, x, 4, group, percdamp=0.1, blocksize=blocksize, mse=False)
        assert torch.allclose(q, plain, rtol=0, atol=1e-9), (blocksize, float((q - plain).abs().max()))
    assert not torch.allclose(plain, QU.quantize_weight_rtn(w, 4, group, mse=False), atol=1e-6)  # GPTQ did move the weights


def test_gptq_does_not_depend_on_the_lazy_batch_block_size():
    """Groups of 48 start inside the blocks of 128 and run across their ends (96..143, 240..287): the scales
    must see the columns as the column-by-column algorithm has updated them, whatever the block size."""
    g = torch.Generator().manual_seed(2)
    w = torch.randn(16, 384, generator=g, dtype=torch.float64)
    x = _correlated(768, 384, seed=3)
    full = QU.gptq_quantize(w, x, 4, 48, blocksize=384)
    for blocksize in (128, 64, 1):
        q = QU.gptq_quantize(w, x, 4, 48, blocksize=blocksize)
        assert torch.allclose(q, full, rtol=0, atol=1e-9), (blocksize, float((q - full).abs().max()))
    assert torch.allclose(QU.gptq_quantize(w, x, 4, 128, blocksize=128), QU.gptq_quantize(w, x, 4, 128, blocksize=384),
                          rtol=0, atol=1e-9)


# ---------------------------------------------------------------------------------------------- model

def test_invariance_of_the_rotated_tiny_llama():
    inv = RO.invariance_check(seed=1)
    assert inv["max_abs_diff"] < 1e-4


def _tiny():
    from companion.models import tiny_llama
    return tiny_llama(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128)


def test_rotating_before_fusing_norms_raises_and_bad_models_are_named():
    m = _tiny()
    with torch.no_grad():
        m.model.layers[0].input_layernorm.weight.mul_(1.5)
    with pytest.raises(ValueError, match="fuse_norms"):
        RO.rotate_model(m, torch.eye(64))
    from companion.models import tiny_gpt2
    with pytest.raises(ValueError, match="LLaMA-layout"):
        RO.llama_parts(tiny_gpt2())
    m2 = _tiny()
    del m2.model.layers[1].mlp.up_proj
    with pytest.raises(ValueError, match="up_proj"):
        RO.llama_parts(m2)
    with pytest.raises(ParameterError):
        RO.rotate_model(RO.fuse_norms(_tiny()), torch.eye(32))


def test_loader_keeps_all_128_samples():
    m = RO.fuse_norms(_tiny())
    ids = torch.randint(0, 256, (128, 16))
    data = collect_calibration(m, ids, tokens_per_sample=4, batch=32)
    assert data["r1_sample"].unique().numel() == 128 and data["samples"] == 128
    assert data["r1"].shape == (128 * 2 * 2, 4, 64) and data["r2"][0].shape == (128, 4, 64)
    whole = collect_calibration(m, ids[:10], tokens_per_sample=None)
    assert whole["r1"].shape[1] == 16


def test_quantized_model_runs_and_perplexity_is_finite():
    torch.manual_seed(0)
    m = RO.fuse_norms(_tiny())
    RO.rotate_model(m, H.random_hadamard(64, 0), r4=True)
    ids = torch.randint(0, 256, (4, 24))
    ref = RO.perplexity(m, ids)
    q = RO.quantize_weights(copy.deepcopy(m), 4, "gptq", calib_ids=ids)
    with RO.quantized_activations(q, 4, 4, r3=True):
        ppl = RO.perplexity(q, ids)
    assert np.isfinite(ppl) and ppl > 1 and abs(np.log(ppl / ref)) < 1.0


# ---------------------------------------------------------------------------------------------- study & explorer

@pytest.fixture(scope="module")
def explorer_data():
    x = synthetic_activations(512, 32, massive=2, seed=0)
    study = DE.layer_study(x, torch.randn(64, 32), steps=8, lr=0.05, batch=64, n_snapshots=3)
    real = DE.layer_study(x, None, steps=8, lr=0.05, batch=64, n_snapshots=3, learned=[("qr_orth", "whip")])
    cloud = DE.laplace_cloud(300)
    return {"sources": {"synthetic": study, "minilm": real}, "angle": DE.angle_study(cloud), "cloud": cloud}


def test_layer_metrics_known_values(explorer_data):
    s = explorer_data["sources"]["synthetic"]
    x = s["x"]
    m = DE.layer_metrics(x, torch.eye(32), 4)
    assert m["quant_mse"] == pytest.approx(float(((QU.quantize_activations(x, 4) - x) ** 2).mean()))
    assert m["orth_err"] == 0.0 and m["max_abs"] == pytest.approx(float(x.abs().max()))
    assert s["metrics"]["identity"]["quant_mse"] > s["metrics"]["hadamard"]["quant_mse"]


def test_angle_study_whip_prefers_45_degrees_variance_is_flat():
    a = DE.angle_study(DE.laplace_cloud(2000), angles=[0, 45, 90])
    assert a["whip"][1] < a["whip"][0] and a["whip"][1] < a["whip"][2]
    assert max(a["variance"]) - min(a["variance"]) < 1e-3 * a["variance"][0]


def test_explorer_view_is_pure_and_controls_match(explorer_data):
    from companion.dartquant.explorer import explorer_controls, explorer_view

    fig, readout = explorer_view(explorer_data, rotation="qr_orth", loss="whip", bits=4, step=4, angle=45.0)
    again, _ = explorer_view(explorer_data, rotation="qr_orth", loss="whip", bits=4, step=4, angle=45.0)
    assert isinstance(fig, go.Figure) and fig.to_json() == again.to_json()
    assert "quant MSE" in readout and "‖RᵀR − I‖∞" in readout and "layer error" in readout
    controls = explorer_controls(explorer_data)
    assert set(controls) == {"source", "rotation", "loss", "bits", "step", "angle"}
    explorer_view(explorer_data, **{k: c.value for k, c in controls.items()})
    for rot in ("identity", "random", "hadamard", "cayley", "riemannian"):
        explorer_view(explorer_data, rotation=rot, bits=2)
    _, note = explorer_view(explorer_data, source="minilm", rotation="cayley", loss="kurtosis", bits=8)
    fig_m, _ = explorer_view(explorer_data, source="minilm", rotation="cayley", loss="kurtosis", bits=8)
    assert "not calibrated" in fig_m.layout.title.text
    for bad in (dict(bits=9), dict(bits=1), dict(source="llama"), dict(rotation="givens"), dict(step=3),
                dict(angle=200.0), dict(loss="l1")):
        with pytest.raises(ParameterError):
            explorer_view(explorer_data, **bad)


# ------------------------------------------------------------------------------------------ massive channels

def _gained(seed=0):
    """A tiny random LLaMA (GQA) with non-trivial RMSNorm gains, and a batch of ids."""
    from companion.models import tiny_llama

    model = tiny_llama(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128, seed=seed)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.5 * torch.randn(p.shape, generator=g))
    return model.eval(), torch.randint(0, model.config.vocab_size, (2, 24), generator=g)


@pytest.mark.parametrize("scale,channels", [(10.0, [0]), (50.0, [3, 17, 40, 63]), (0.1, [5, 6]), (1000.0, list(range(8)))])
def test_injected_channels_leave_the_float_model_unchanged(scale, channels):
    from companion.dartquant.outliers import inject_massive_channels

    model, ids = _gained()
    with torch.no_grad():
        ref = model(input_ids=ids).logits
        out = inject_massive_channels(copy.deepcopy(model), channels, scale)(input_ids=ids).logits
    assert torch.allclose(out, ref, rtol=1e-5, atol=1e-5 * float(ref.abs().max())), float((out - ref).abs().max())


def _inputs(model, ids, name):
    """The inputs of every layer's ``name`` linear (q_proj, up_proj, ...) on ``ids``."""
    grabbed = []
    mods = [m for n, m in model.named_modules() if n.endswith(name)]
    hooks = [m.register_forward_pre_hook(lambda _m, a: grabbed.append(a[0].detach().clone())) for m in mods]
    with torch.no_grad():
        model(input_ids=ids)
    for h in hooks:
        h.remove()
    return grabbed


@pytest.mark.parametrize("reader", ["q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"])
def test_injected_channels_are_s_times_larger_in_the_readers_inputs_and_nowhere_else(reader):
    from companion.dartquant.outliers import inject_massive_channels

    model, ids = _gained(1)
    ch, s = [2, 33], 50.0
    before = _inputs(model, ids, reader)
    after = _inputs(inject_massive_channels(copy.deepcopy(model), ch, s), ids, reader)
    others = [c for c in range(64) if c not in ch]
    for x0, x1 in zip(before, after):
        torch.testing.assert_close(x1[..., ch], s * x0[..., ch], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(x1[..., others], x0[..., others], rtol=1e-5, atol=1e-6)
    for name in ("o_proj", "down_proj"):  # the attention output and the MLP's inner width are not touched
        for x0, x1 in zip(_inputs(model, ids, name), _inputs(inject_massive_channels(copy.deepcopy(model), ch, s), ids, name)):
            torch.testing.assert_close(x1, x0, rtol=1e-4, atol=1e-5)


def test_fusing_the_norms_cancels_the_injection():
    """W diag(s·g) / s = W diag(g): the fused injected model is the fused original, to rounding."""
    from companion.dartquant.outliers import inject_massive_channels

    model, _ = _gained(2)
    fused = RO.fuse_norms(copy.deepcopy(model))
    fused_inj = RO.fuse_norms(inject_massive_channels(copy.deepcopy(model), [1, 9, 60], 50.0))
    for (name, a), b in zip(fused_inj.named_parameters(), fused.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7, msg=name)


def test_peak_ratio_grows_with_s_up_to_sqrt_d():
    from companion.dartquant.outliers import channel_peak_ratio, inject_massive_channels

    model, ids = _gained(3)
    r = [channel_peak_ratio(inject_massive_channels(copy.deepcopy(model), [7], s), ids) for s in (1.0, 10.0, 1e4)]
    assert r[0] < r[1] < r[2] <= 64 ** 0.5 + 1e-4 and r[2] > 0.99 * 64 ** 0.5  # one channel carrying the token: √d


@pytest.mark.parametrize("scale", [0, -2.0, float("inf"), float("nan"), True, "10"])
def test_injection_rejects_a_bad_scale(scale):
    from companion.dartquant.outliers import inject_massive_channels

    with pytest.raises(ParameterError, match="scale"):
        inject_massive_channels(_gained()[0], [1], scale)


@pytest.mark.parametrize("channels,why", [([], "non-empty"), ([64], r"\[0, 64\)"), ([-1], r"\[0, 64\)"),
                                          ([3, 3], "distinct"), ([1.5], "integers"), ([True], "integers"),
                                          ("12", "integers"), (5, "integers")])
def test_injection_rejects_bad_channels(channels, why):
    from companion.dartquant.outliers import inject_massive_channels

    model, _ = _gained()
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(ParameterError, match=why):
        inject_massive_channels(model, channels, 10.0)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())  # refused before any change


def test_injection_needs_a_llama_layout_model():
    from companion.dartquant.outliers import inject_massive_channels

    with pytest.raises(ValueError, match="LLaMA-layout"):
        inject_massive_channels(torch.nn.Linear(4, 4), [0], 10.0)


def test_pick_channels():
    from companion.dartquant.outliers import pick_channels

    a = pick_channels(512, 4, seed=0)
    assert a == sorted(set(a)) and len(a) == 4 and all(0 <= c < 512 for c in a)
    assert a == pick_channels(512, 4, seed=0) and a != pick_channels(512, 4, seed=1)
    assert pick_channels(8, 8, seed=3) == list(range(8))
    with pytest.raises(ParameterError, match="count"):
        pick_channels(8, 9)


def test_end_to_end_r1_starts_at_the_hadamard_and_stays_orthogonal():
    from companion.dartquant.study import end_to_end_r1

    model, ids = _gained(4)
    RO.fuse_norms(model)
    kw = dict(lr=1e-3, batch=2, a_bits=4, kv_bits=4, device=torch.device("cpu"), seed=0)
    r0, losses0, (b0, a0) = end_to_end_r1(model, ids, steps=0, **kw)
    assert losses0 == [] and a0 == b0 and torch.allclose(r0, H.random_hadamard(64, 0), atol=1e-6)
    r, losses, (b, a) = end_to_end_r1(model, ids, steps=4, **kw)
    assert len(losses) == 4 and b == b0  # the same start, the same fixed batch
    assert Q.orthogonality_error(r) < 1e-5 and not torch.allclose(r, r0, atol=1e-6)
    assert all(p.requires_grad for p in model.parameters())  # the model is handed back as it came


# ------------------------------------------------------------------------------------------ residual-stream channels

def _orthonormal_rows(k, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.linalg.qr(torch.randn(d, k, generator=g, dtype=torch.float64))[0].T


@pytest.mark.parametrize("k,channels", [(1, [7]), (1, [0]), (3, [5, 0, 63]), (4, [60, 61, 62, 63])])
def test_householder_basis_is_orthogonal_and_maps_each_direction_onto_its_channel(k, channels):
    from companion.dartquant.outliers import householder_basis

    u = _orthonormal_rows(k, 64, seed=k)
    q = householder_basis(u, channels)
    eye = torch.eye(64, dtype=torch.float64)
    assert float((q @ q.T - eye).abs().max()) < 1e-12
    torch.testing.assert_close(q @ u.T, eye[:, channels], rtol=0, atol=1e-12)  # Q u_i = e_ci


def test_householder_basis_of_a_direction_already_on_its_channel_is_the_identity():
    from companion.dartquant.outliers import householder_basis

    e = torch.zeros(1, 8, dtype=torch.float64)
    e[0, 3] = 1.0
    assert torch.equal(householder_basis(e, [3]), torch.eye(8, dtype=torch.float64))


@pytest.mark.parametrize("directions,channels,why", [
    (torch.zeros(0, 8), [], "k >= 1"), (torch.ones(8), [0], r"\[k, d\]"), (_orthonormal_rows(2, 8), [1], "one channel per direction"),
    (_orthonormal_rows(1, 8), [8], r"\[0, 8\)"), (_orthonormal_rows(2, 8), [3, 3], "distinct"),
    (2 * _orthonormal_rows(1, 8), [0], "orthonormal"), (torch.full((1, 8), float("nan")), [0], "finite")])
def test_householder_basis_rejects_bad_input(directions, channels, why):
    from companion.dartquant.outliers import householder_basis

    with pytest.raises(ParameterError, match=why):
        householder_basis(directions, channels)


def _anisotropic(seed=5):
    """A fused tiny LLaMA whose residual stream has a dominant direction m spread over every channel (a common
    offset added to every embedding), its ids, and m."""
    model, _ = _gained(seed)
    g = torch.Generator().manual_seed(seed)
    m = torch.randn(64, generator=g)
    m /= m.norm()
    with torch.no_grad():
        emb = model.model.embed_tokens.weight
        emb += 3 * emb.norm(dim=1).mean() * m
    return RO.fuse_norms(model), torch.randint(0, model.config.vocab_size, (4, 24), generator=g), m


def test_stream_directions_find_the_dominant_direction():
    from companion.dartquant.outliers import stream_directions

    model, ids, m = _anisotropic()
    u = stream_directions(model, ids, k=3, batch=3)
    assert u.shape == (3, 64) and float((u @ u.T - torch.eye(3, dtype=torch.float64)).abs().max()) < 1e-10
    # the top right singular vectors of the stacked norm inputs, each token at unit RMS, up to sign
    xs = [x.double().reshape(-1, 64) for name in ("input_layernorm", "post_attention_layernorm")
          for x in _inputs(model, ids, name)]
    x = torch.cat([x / x.pow(2).mean(-1, keepdim=True).sqrt() for x in xs])
    vh = torch.linalg.svd(x, full_matrices=False).Vh[:3]
    torch.testing.assert_close((u * vh).sum(-1).abs(), torch.ones(3, dtype=torch.float64), rtol=0, atol=1e-6)
    assert abs(float(u[0] @ m.double())) > 0.8  # the offset put into every embedding
    for bad, why in (({"k": 0}, "k"), ({"k": 65}, "k"), ({"batch": 0}, "batch")):
        with pytest.raises(ParameterError, match=why):
            stream_directions(model, ids, **{"k": 1, **bad})
    with pytest.raises(ParameterError, match="input_ids"):
        stream_directions(model, ids[0])


@pytest.mark.parametrize("channels", [[7], [0, 31, 63]])
def test_the_stream_basis_change_keeps_the_logits_and_puts_the_stream_in_the_channels(channels):
    from companion.dartquant.outliers import channel_rms_ratio, inject_stream_channels, stream_directions

    model, ids, _ = _anisotropic()
    with torch.no_grad():
        ref = model(input_ids=ids).logits
    u = stream_directions(model, ids, k=len(channels))
    changed, q = inject_stream_channels(copy.deepcopy(model), channels, ids)
    with torch.no_grad():
        out = changed(input_ids=ids).logits
    assert float((out - ref).abs().max()) < 1e-4 * float(ref.abs().max())  # computational invariance
    torch.testing.assert_close(q @ u.T, torch.eye(64, dtype=torch.float64)[:, channels], rtol=0, atol=1e-10)
    # channel c_i of every reader's input now holds the normalised stream's component along u_i
    for x0, x1 in zip(_inputs(model, ids, "q_proj"), _inputs(changed, ids, "q_proj")):
        torch.testing.assert_close(x1[..., channels].double(), x0.double() @ u.T, rtol=1e-4, atol=1e-5)
    assert channel_rms_ratio(changed, ids) > 3 * channel_rms_ratio(model, ids)


def test_the_rms_ratio_grows_more_with_a_more_anisotropic_stream():
    from companion.dartquant.outliers import channel_rms_ratio, inject_stream_channels

    plain, ids = _gained(5)
    plain = RO.fuse_norms(plain)
    aniso, ids2, _ = _anisotropic()
    gain_plain = channel_rms_ratio(inject_stream_channels(copy.deepcopy(plain), [7], ids)[0], ids) / channel_rms_ratio(plain, ids)
    gain_aniso = channel_rms_ratio(inject_stream_channels(copy.deepcopy(aniso), [7], ids2)[0], ids2) / channel_rms_ratio(aniso, ids2)
    assert gain_aniso > 2 * gain_plain


def test_the_stream_injection_needs_fused_norms_and_good_channels():
    from companion.dartquant.outliers import inject_stream_channels

    model, ids = _gained(7)
    with pytest.raises(ValueError, match="fuse_norms"):
        inject_stream_channels(model, [1], ids)
    RO.fuse_norms(model)
    for channels, why in (([], "non-empty"), ([64], r"\[0, 64\)"), ([2, 2], "distinct")):
        with pytest.raises(ParameterError, match=why):
            inject_stream_channels(model, channels, ids)

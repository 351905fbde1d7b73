"""Paper 04, ZeroS: the equations, the layer, the properties the paper proves and the experiments' pieces."""

import math

import pytest
import torch
import torch.nn.functional as F

from companion.core import ParameterError
from companion.zeros_attention import (
    ZeroSAttention,
    causal_linear_attention,
    rope_cos_sin,
    apply_rope,
    rope_relative_defect,
    step_logits,
    taylor_split,
    three_key_features,
    zeros_as_linear_attention,
    zeros_chunked,
    zeros_explicit,
    zeros_quadratic,
    zeros_scan,
    zeros_sm,
    zeros_weights,
)
from companion.zeros_attention import experiments as X
from companion.zeros_attention.bench import summarize_targets

D64 = torch.float64


def _inputs(B=2, T=37, H=3, d=8, dv=5, *, seed=0, s_scale=2.0):
    g = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(B, T, H, d, generator=g, dtype=D64), dim=-1)
    k = F.normalize(torch.randn(B, T, H, d, generator=g, dtype=D64), dim=-1)
    v = torch.randn(B, T, H, dv, generator=g, dtype=D64)
    s = torch.randn(B, T, H, generator=g, dtype=D64) * s_scale
    s1, sh, s0 = (torch.rand(B, T, H, generator=g, dtype=D64) for _ in range(3))
    return q, k, v, s, s1, sh, s0


# ------------------------------------------------------------------------------------------ exactness
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("with_sigma0", [False, True])
def test_all_computations_equal_the_explicit_oracle(causal, with_sigma0):
    q, k, v, s, s1, sh, s0 = _inputs()
    s0 = s0 if with_sigma0 else None
    want = zeros_explicit(q, k, v, s, s1, sh, causal=causal, sigma0=s0)
    got = {
        "scan": zeros_scan(q, k, v, s, s1, sh, causal=causal, sigma0=s0, stabilizer="none", eps=0.0),
        "chunked8": zeros_chunked(q, k, v, s, s1, sh, causal=causal, sigma0=s0, chunk_size=8),
        "chunked16": zeros_chunked(q, k, v, s, s1, sh, causal=causal, sigma0=s0, chunk_size=16),
        "linear3d": zeros_as_linear_attention(q, k, v, s, s1, sh, causal=causal, sigma0=s0),
        "quadratic": zeros_quadratic(q, k, v, s, s1, sh, causal=causal, sigma0=s0),
    }
    for name, o in got.items():
        assert (o - want).abs().max().item() < 1e-10, name


def test_running_max_chunked_equals_global_max_scan_where_both_are_finite():
    q, k, v, s, s1, sh, _ = _inputs(T=64, seed=1, s_scale=4.0)
    a = zeros_scan(q, k, v, s, s1, sh, stabilizer="global", eps=0.0)
    b = zeros_chunked(q, k, v, s, s1, sh, chunk_size=16)
    assert (a - b).abs().max().item() < 1e-10


def test_three_key_identity_is_the_paper_prefix_scan():
    """K'_i = [e^{s-m} k, s k, k], Q'_t = [alpha~ q, beta q, gamma q]: plain linear attention on them."""
    q, k, v, s, s1, sh, _ = _inputs(T=20, seed=2)
    Qp, Kp = three_key_features(q, k, s, s1, sh)
    assert Qp.shape[-1] == Kp.shape[-1] == 3 * q.shape[-1]
    o = causal_linear_attention(Qp, Kp, v)
    want = zeros_scan(q, k, v, s, s1, sh, stabilizer="none", eps=0.0)
    assert (o - want).abs().max().item() < 1e-10


def test_chunked_state_streams():
    """Processing a prefix then continuing gives the same rows as one pass (causality of the state)."""
    q, k, v, s, s1, sh, _ = _inputs(T=40, seed=3)
    full = zeros_chunked(q, k, v, s, s1, sh, chunk_size=8)
    pre = zeros_chunked(q[:, :24], k[:, :24], v[:, :24], s[:, :24], s1[:, :24], sh[:, :24], chunk_size=8)
    assert (full[:, :24] - pre).abs().max().item() < 1e-12


# ------------------------------------------------------------------------------------------ weights
def test_taylor_split_adds_up_and_first_and_higher_sum_to_zero():
    _, _, _, s, *_ = _inputs(B=1, T=12, H=2)
    p, zero, first, higher = taylor_split(s, causal=True)
    assert torch.allclose(zero + first + higher, p * (zero > 0), atol=1e-14)
    assert first.sum(-1).abs().max() < 1e-13 and higher.sum(-1).abs().max() < 1e-13
    assert torch.allclose(zero.sum(-1), torch.ones_like(zero.sum(-1)))


def test_zero_sum_rows_and_the_first_layer_zero_order_term():
    _, _, _, s, s1, sh, s0 = _inputs(B=2, T=30, H=2)
    for causal in (True, False):
        r = zeros_weights(s, s1, sh, causal=causal)
        assert r.sum(-1).abs().max().item() < 1e-13
        r0 = zeros_weights(s, s1, sh, causal=causal, sigma0=s0)
        assert torch.allclose(r0.sum(-1), s0.permute(0, 2, 1), atol=1e-13)  # sum_i sigma0/n = sigma0
    # ... but r * cos(theta) does not sum to zero (the paper's loose wording)
    q, k, v, s, s1, sh, _ = _inputs(T=30)
    _, w = zeros_explicit(q, k, v, s, s1, sh, return_weights=True)
    assert w.sum(-1).abs().max().item() > 1e-3


def test_weights_can_be_negative_and_match_closed_form():
    _, _, _, s, s1, sh, _ = _inputs(B=1, T=16, H=1)
    r = zeros_weights(s, s1, sh)
    assert (r < 0).any() and (r > 0).any()
    t = 10
    sp = s[0, :t, 0]
    row = X.zeros_row(sp, s1[0, t - 1, 0].item(), sh[0, t - 1, 0].item())
    assert torch.allclose(row, r[0, 0, t - 1, :t], atol=1e-14)


def test_weights_are_order_one_over_t_and_rows_have_bounded_mass():
    prof = X.decay_profile(T=2048, n_points=15)
    tmax = [t * m for t, m in zip(prof["t"], prof["max_abs"])]
    assert max(tmax) < 2 * math.e ** 4  # with |s| <= 2: |r| <= (4 + e^4 + 2) / t, a constant over t
    assert max(prof["l1"]) < 2.0 and max(prof["row_sum"]) < 1e-12
    assert tmax[-1] < 3 * tmax[len(tmax) // 2]  # no growth with t


def test_output_norm_bounded_while_unnormalised_linear_attention_grows():
    n = X.output_norms(T=1024, d=8, chunk_size=128)
    z = torch.tensor(n["zeros"])
    lin = torch.tensor(n["linear_unnormalised"])
    assert z.max() < 3.0
    assert lin[-100:].mean() > 5 * lin[:10].mean()


def test_global_max_underflows_running_max_does_not():
    demo = X.underflow_demo(T=512, slope=0.4)
    assert demo["rows_broken_global"] > 50
    assert demo["rows_broken_running"] == 0
    assert demo["max_rel_err_running"] < 1e-4


def test_zeros_sm_reweights_ordinary_logits():
    q, k, v, _, s1, sh, _ = _inputs(T=15)
    o, r = zeros_sm(q, k, v, s1, sh, return_weights=True)
    assert r.sum(-1).abs().max().item() < 1e-13
    S = torch.einsum("bthd,bihd->bhti", q, k) / math.sqrt(q.shape[-1])
    assert torch.allclose(r, zeros_weights(S, s1, sh))
    assert torch.allclose(o, torch.einsum("bhti,bihe->bthe", r, v))


# ------------------------------------------------------------------------------------------ RoPE
def test_standard_rope_is_relative_the_repository_tables_are_not():
    std = rope_relative_defect(d=8, offset=3, layout="standard")
    off = rope_relative_defect(d=8, offset=3, layout="official")
    assert (std.max() - std.min()).item() < 1e-12
    assert (off.max() - off.min()).item() > 0.1


def test_rope_is_a_rotation_and_checks_even_dims():
    x = torch.randn(2, 9, 3, 8, dtype=D64)
    cos, sin = rope_cos_sin(9, 8, dtype=D64)
    y = apply_rope(x, cos, sin)
    assert torch.allclose(y.norm(dim=-1), x.norm(dim=-1))
    with pytest.raises(ValueError, match="even head dimension"):
        rope_cos_sin(4, 7)


def test_deviation_logits_follow_the_running_mean_rule():
    g = torch.Generator().manual_seed(0)
    u = torch.randn(1, 6, 2, 4, generator=g, dtype=D64)
    mu = torch.randn(2, 4, generator=g, dtype=D64)
    log_tau = torch.tensor([0.3, -0.2], dtype=D64)
    s = step_logits(u, mu=mu, log_tau=log_tau)
    i, h = 4, 1
    tau = math.exp(-0.2)
    ubar = (tau * mu[h] + u[0, : i + 1, h].sum(0)) / (tau + i + 1)
    assert abs(s[0, i, h].item() - (-(u[0, i, h] @ ubar).item() / 2.0)) < 1e-12
    with pytest.raises(ValueError, match="logit kind"):
        step_logits(u, kind="cosine")


# ------------------------------------------------------------------------------------------ layer
def test_layer_impls_agree_and_gradients_flow():
    torch.manual_seed(0)
    x = torch.randn(2, 21, 32, dtype=D64)
    layer = ZeroSAttention(32, 4, chunk_size=8, is_first_layer=True).double()
    outs = {}
    for impl in ("chunked", "quadratic", "explicit", "scan"):
        layer.impl = impl
        outs[impl] = layer(x)
    for impl, o in outs.items():
        assert o.shape == x.shape
        assert (o - outs["explicit"]).abs().max().item() < 1e-9, impl
    layer.impl = "chunked"
    layer(x).square().sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in layer.parameters())


def test_layer_is_causal_and_bidirectional_sees_the_future():
    torch.manual_seed(1)
    x = torch.randn(1, 16, 16)
    y = x.clone()
    y[:, 10:] += 1.0
    causal = ZeroSAttention(16, 2, chunk_size=4)
    assert torch.allclose(causal(x)[:, :10], causal(y)[:, :10], atol=1e-6)
    bidir = ZeroSAttention(16, 2, causal=False)
    assert not torch.allclose(bidir(x)[:, :10], bidir(y)[:, :10], atol=1e-4)


def test_layer_attention_weights_reproduce_the_output():
    torch.manual_seed(2)
    layer = ZeroSAttention(16, 2, use_norm=False)
    x = torch.randn(1, 12, 16)
    w = layer.attention_weights(x)
    v = layer.v(x).view(1, 12, 2, 8)
    o = torch.einsum("bhti,bihe->bthe", w, v)
    with torch.no_grad():
        f = layer.features(x)
        assert torch.allclose(o, layer.mix(f), atol=1e-5)
    sm = ZeroSAttention(16, 2, variant="zeros_sm")
    assert sm.attention_weights(x).sum(-1).abs().max() < 1e-5


def test_layer_bad_inputs():
    with pytest.raises(ValueError, match="even head dimension"):
        ZeroSAttention(18, 2)  # head dim 9 with RoPE
    ZeroSAttention(18, 2, rope="none")  # allowed without RoPE
    with pytest.raises(ValueError, match="divisible"):
        ZeroSAttention(30, 4)
    with pytest.raises(ParameterError, match="impl='fast'") as err:
        ZeroSAttention(16, 2, impl="fast")
    assert err.value.name == "impl" and "'chunked'" in err.value.allowed
    for name, bad in (("variant", "zeros2"), ("rope", "yarn"), ("logits", "cosine")):
        with pytest.raises(ParameterError, match=name):
            ZeroSAttention(16, 2, **{name: bad})
    layer = ZeroSAttention(16, 2)
    with pytest.raises(ValueError, match="T=0"):
        layer(torch.zeros(1, 0, 16))
    with pytest.raises(ValueError, match="d_model=16"):
        layer(torch.zeros(1, 5, 12))
    with pytest.raises(ValueError, match=r"\[B, T, D\]"):
        layer(torch.zeros(5, 16))


# ------------------------------------------------------------------------------------------ experiments
def test_difference_task_targets():
    x, y = X.make_difference_task(8, T=10, d=12, seed=0)
    dc = 8
    for n in range(8):
        a = int(x[n, :, dc].argmax())
        b = int(x[n, :, dc + 1].argmax())
        assert a != b and x[n, -1, dc + 2] == 1
        assert torch.allclose(y[n], x[n, a, :dc] - x[n, b, :dc])


def test_one_zeros_head_solves_the_difference_exactly_by_construction():
    """Prop. 3.1 by construction: one ZeroS layer, one head, outputs c_a - c_b exactly.

    tau -> inf pins the running mean to mu, so s_i = -(u_i . mu)/sqrt(d) = kappa (m_a - m_b);
    q^ = k^ (cos = 1); sigma1 = 1, sigmah = 0; at t = T: r_a = kappa/T, r_b = -kappa/T, others 0.
    """
    T, d = 12, 16
    dc = d - 4
    x, y = X.make_difference_task(64, T=T, d=d, seed=3)
    layer = ZeroSAttention(d, 1, rope="none", use_norm=False, impl="chunked", chunk_size=4).double()
    kappa = float(T)
    with torch.no_grad():
        for m in (layer.q, layer.k, layer.v, layer.u, layer.gate, layer.out_proj):
            m.weight.zero_()
            m.bias.zero_()
        layer.q.bias[0] = layer.k.bias[0] = 1.0
        layer.v.weight[:dc, :dc] = torch.eye(dc, dtype=D64)
        layer.out_proj.weight[:] = torch.eye(d, dtype=D64)
        layer.u.weight[0, dc] = kappa
        layer.u.weight[0, dc + 1] = -kappa
        layer.prior_mu[0, 0] = -math.sqrt(d)
        layer.prior_log_tau[0] = 30.0
        layer.gate.bias[0] = 40.0   # sigma1 -> 1
        layer.gate.bias[1] = -40.0  # sigmah -> 0
    out = layer(x.double())[:, -1, :dc]
    assert (out - y.double()).abs().max().item() < 1e-6


def test_convex_weights_that_ignore_the_contents_stay_at_or_above_the_floor():
    """y_hat = M sum_i p_i c_i + m with p >= 0, sum p = 1 fixed by the markers: the best readout (least
    squares) has NMSE 1 - (p_a - p_b)^2 / (2 sum p^2) >= CONVEX_FLOOR, reached with all the weight on a."""
    from companion.zeros_attention.claims import CONVEX_FLOOR

    x, y = X.make_difference_task(4096, T=10, d=12, seed=3)
    dc = x.shape[-1] - 4
    c, a, b = x[..., :dc].double(), x[..., dc].argmax(1), x[..., dc + 1].argmax(1)
    rows = torch.arange(len(x))

    def best_readout_nmse(w_a, w_b, w_rest):
        p = torch.full(x.shape[:2], w_rest, dtype=torch.float64)
        p[rows, a], p[rows, b] = w_a, w_b
        mixed = torch.cat([(p[..., None] * c).sum(1), torch.ones(len(x), 1, dtype=torch.float64)], 1)
        fit = torch.linalg.lstsq(mixed, y.double()).solution
        return float((mixed @ fit - y).pow(2).mean() / y.pow(2).mean())

    for w_a, w_b, w_rest in [(1.0, 0.0, 0.0), (0.7, 0.3, 0.0), (0.1, 0.1, 0.1), (0.6, 0.0, 0.05)]:
        theory = 1 - (w_a - w_b) ** 2 / (2 * (w_a ** 2 + w_b ** 2 + 7 * w_rest ** 2))  # T - 1 = 9 content tokens
        measured = best_readout_nmse(w_a, w_b, w_rest)
        assert abs(measured - theory) < 0.02 and measured > CONVEX_FLOOR - 0.02, (w_a, w_b, w_rest, measured, theory)
    assert abs(best_readout_nmse(1.0, 0.0, 0.0) - CONVEX_FLOOR) < 0.02


def test_mqar_data_binds_values_to_keys():
    x, y, vocab = X.make_mqar(4, T=24, n_pairs=4, n_keys=8, n_values=8, seed=0)
    assert vocab == 17 and x.max() < vocab
    for n in range(4):
        pairs = {int(x[n, 2 * j]): int(x[n, 2 * j + 1]) for j in range(4)}
        for t in range(8, 24):
            assert y[n, t].item() == pairs[int(x[n, t])]
        assert (y[n, :8] == -100).all()
    with pytest.raises(ValueError):
        X.make_mqar(2, T=8, n_pairs=4)


@pytest.mark.parametrize("steps", [3, 10, 11, 20])
def test_train_mqar_runs_at_few_steps(steps):
    """The one-cycle schedule's warm-up is at least two steps: at 10 steps a 10% warm-up ends at step 0, and
    torch's OneCycleLR divided 0 by 0 (MQAR_STEPS = 10 is the notebook's smallest allowed value)."""
    out = X.train_mqar("softmax", steps=steps, n_train=16, n_test=4, T=8, n_pairs=1, d_model=8, n_layers=1, batch=2)
    assert len(out["curve"]) == steps and all(math.isfinite(v) for v in out["curve"]) and 0.0 <= out["test_acc"] <= 1.0
    with pytest.raises(ParameterError, match="steps"):
        X.train_mqar("softmax", steps=2, n_train=16, n_test=4, T=8, n_pairs=1, d_model=8, n_layers=1, batch=2)


def test_tiny_lm_runs_every_mixer():
    ids = torch.randint(0, 20, (2, 16))
    for kind in X.MIXERS:
        m = X.TinyLM(kind, 20, d_model=16, n_layers=1, n_heads=2, max_len=16)
        assert m(ids).shape == (2, 16, 20)
    with pytest.raises(ValueError, match="mixer kind"):
        X.make_mixer("mamba", 16, 2)


def test_summarize_targets():
    rows = [{"T": T, "impl": impl, "mode": "fwd", "ms": ms} for T, impl, ms in
            [(2048, "zeros", 0.3), (2048, "sdpa_flash", 0.1), (8192, "zeros", 0.4), (8192, "sdpa_flash", 0.6),
             (65536, "zeros", 1.0), (65536, "sdpa_flash", 28.0)]]
    rows += [{"T": T, "impl": "zeros", "mode": "fwd_bwd", "ms": 1.0, "extra_mib": mib} for T, mib in
             [(2048, 100), (8192, 400), (65536, 3200)]]
    t = summarize_targets(rows, fla_available=False)
    assert t["faster_than_sdpa_fwd_from_T"] == 8192
    assert t["fwd_ratio_source"].startswith("fla anchor")
    assert abs(t["fwd_ratio_vs_fla_dk192_at_Tmax"] - 1.0 / 0.779) < 1e-9
    assert t["extra_mem_ratio_last_two_T"] == 8.0


def _ctx(profile, **results):
    from companion.core.stages import StageContext

    payload = {"profile": profile, "stages": {n: {"state": "done"} for n in results}, **results}
    return StageContext(profile=profile, device="cpu", log=lambda *a: None, results=payload)


def test_study_stages_refuse_what_they_cannot_measure():
    """The GPU profile requires flash-linear-attention (never skipped silently: here on a CPU it cannot run);
    the smoke profile records it absent with the reason. The targets need the rows stage; a bad dtype is refused
    naming the profile key."""
    from companion.core import ParameterError
    from companion.zeros_attention.bench import fla_stage, rows_stage, targets_stage
    from companion.zeros_attention.scale import GPU_PROFILE, SMOKE_PROFILE

    with pytest.raises(ImportError, match="flash-linear-attention"):
        fla_stage(_ctx(GPU_PROFILE))
    info = fla_stage(_ctx(SMOKE_PROFILE))
    assert info["available"] is False and info["error"]
    with pytest.raises(RuntimeError, match="rows stage"):
        targets_stage(_ctx(SMOKE_PROFILE))
    rows = [{"T": 64, "impl": "zeros", "mode": "fwd", "ms": 2.0}, {"T": 64, "impl": "sdpa_flash", "mode": "fwd", "ms": 4.0}]
    t = targets_stage(_ctx(SMOKE_PROFILE, rows=rows, fla=info))
    assert t["sdpa_over_zeros_fwd_at_Tmax"] == 2.0 and "anchors" in t
    with pytest.raises(ParameterError, match="dtype"):
        rows_stage(_ctx({**SMOKE_PROFILE, "dtype": "int8"}))


def test_rope_goes_through_the_shared_implementation():
    from companion.models import rope as shared

    for layout, shared_layout in (("standard", "standard"), ("official", "interleaved_tables")):
        cos, sin = rope_cos_sin(11, 8, layout=layout, offset=3, dtype=torch.float64)
        c2, s2 = shared.rope_cos_sin(torch.arange(3, 14), 8, layout=shared_layout, dtype=torch.float64)
        assert torch.equal(cos, c2) and torch.equal(sin, s2)
        x = torch.randn(2, 11, 3, 8, dtype=torch.float64)
        want = shared.apply_rope(x.transpose(1, 2), c2, s2).transpose(1, 2)  # [B, H, T, d] layout there
        assert torch.equal(apply_rope(x, cos, sin), want)

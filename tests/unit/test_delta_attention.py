"""Δ Attention (paper 09): the mechanism's exact properties, Lemma 1, the cut_n rule, diagnostics."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import spearmanr

from companion.core import ParameterError
from companion.delta_attention import (
    Method,
    compute_fraction,
    cosine_rows,
    delta_attention,
    delta_plan,
    lemma1_terms,
    masked_attention,
    sink_window_mask,
    spearman_rows,
)
from companion.delta_attention.attention import dense_mask
from companion.delta_attention.diagnostics import centred_ranks


def qkv(n, *, b=2, hq=4, hkv=2, d=8, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, n, d, generator=g, dtype=dtype) for h in (hq, hkv, hkv))


def dense(q, k, v, causal=True):
    return masked_attention(q, k, v, dense_mask(q.shape[2], causal=causal))


# ---------------------------------------------------------------- the official cut_n rule

@pytest.mark.parametrize("n", [1000, 1024, 1087, 4096 + 63, 131072, 131072 + 5])
def test_plan_matches_official_cut_n(n):
    """Official: cut_n = s mod λ + max(128, λ), s_p = s − cut_n (γ = 64, tail = 128)."""
    for gamma in (64, 128, 256):
        plan = delta_plan(n, gamma, tail=128)
        assert plan.cut_n == n % gamma + max(128, gamma)
        assert plan.s_p == n - plan.cut_n and plan.s_p % gamma == 0
        rows = plan.dense_rows()
        assert torch.equal(rows[:plan.num_anchors], torch.arange(0, plan.s_p, gamma))
        assert torch.equal(rows[plan.num_anchors:], torch.arange(plan.s_p, n))


def test_plan_rounds_tail_to_gamma_and_clamps():
    p = delta_plan(200, 48, tail=128)              # official would give s_p = 200-8-128 = 64, not /48
    assert p.s_p % 48 == 0 and p.cut_n == 200 % 48 + 144
    p = delta_plan(50, 16, tail=40)                # cut_n = 2 + 48 = 50 -> everything dense
    assert p.s_p == 0 and p.cut_n == 50


@pytest.mark.parametrize("kw, name", [
    (dict(n=64, gamma=0), "gamma"), (dict(n=64, gamma=65), "gamma"), (dict(n=64, gamma=4, tail=65), "tail"),
])
def test_plan_bad_input(kw, name):
    with pytest.raises(ParameterError, match=f"parameter {name}="):
        delta_plan(**kw)


@pytest.mark.parametrize("kw, name", [
    (dict(sink=65, window=8), "sink"), (dict(sink=4, window=65), "window"), (dict(sink=4, window=0), "window"),
])
def test_mask_bad_input(kw, name):
    with pytest.raises(ParameterError, match=f"parameter {name}="):
        sink_window_mask(64, **kw)


def test_method_bad_input():
    with pytest.raises(ParameterError, match="parameter mode="):
        Method(mode="fast")


@pytest.mark.parametrize("method, name, allowed", [
    (Method("sparse", sink=4, window=32), "window=32", "<= 16"),           # window larger than N
    (Method("delta", sink=17, window=4), "sink=17", "<= 16"),              # sink larger than N
    (Method("recompute", sink=2, window=4, gamma=4, tail=17), "tail=17", "<= 16"),  # tail longer than N
    (Method("delta", sink=2, window=4, gamma=17, tail=0), "gamma=17", "<= 16"),     # γ larger than N
])
def test_delta_attention_bad_input_names_parameter_value_and_range(method, name, allowed):
    """The issue's bad inputs: each error names the parameter, its value and the allowed range."""
    q, k, v = qkv(16)
    with pytest.raises(ParameterError, match=f"parameter {name} is not allowed: expected .*{allowed}"):
        delta_attention(q, k, v, method)


def test_gamma_below_one_is_refused_everywhere():
    for bad in (0, -1):
        with pytest.raises(ParameterError, match=f"parameter gamma={bad} is not allowed: expected an integer >= 1"):
            Method("delta", gamma=bad)
        with pytest.raises(ParameterError, match=f"parameter gamma={bad} "):
            delta_plan(64, bad)


# ---------------------------------------------------------------- masks

def test_masks_by_hand():
    m = sink_window_mask(6, sink=1, window=2, causal=True).int()
    assert m.tolist() == [[1, 0, 0, 0, 0, 0],
                          [1, 1, 0, 0, 0, 0],
                          [1, 1, 1, 0, 0, 0],
                          [1, 0, 1, 1, 0, 0],
                          [1, 0, 0, 1, 1, 0],
                          [1, 0, 0, 0, 1, 1]]
    s = sink_window_mask(5, sink=1, window=2, causal=False).int()
    assert s.tolist() == [[1, 1, 0, 0, 0],
                          [1, 1, 1, 0, 0],
                          [1, 1, 1, 1, 0],
                          [1, 0, 1, 1, 1],
                          [1, 0, 0, 1, 1]]


@pytest.mark.parametrize("causal", [True, False])
def test_compute_fraction_counts_entries(causal):
    for n, s, w in [(40, 0, 1), (40, 4, 8), (40, 25, 3), (17, 17, 17)]:
        m = Method("sparse", sink=s, window=w, causal=causal)
        mask = sink_window_mask(n, sink=s, window=w, causal=causal)
        total = n * (n + 1) / 2 if causal else n * n
        assert compute_fraction(n, m) == pytest.approx(mask.sum().item() / total, abs=1e-12)
    n, plan = 64, delta_plan(64, 8, 16)
    md = Method("delta", sink=4, window=8, gamma=8, tail=16, causal=causal)
    ms = Method("sparse", sink=4, window=8, causal=causal)
    full = (plan.dense_rows() + 1).sum().item() if causal else plan.dense_rows().numel() * n
    total = n * (n + 1) / 2 if causal else n * n
    assert compute_fraction(n, md) == pytest.approx(compute_fraction(n, ms) + full / total)


# ---------------------------------------------------------------- exact reductions

@pytest.mark.parametrize("causal", [True, False])
def test_full_window_is_dense_exactly(causal):
    n = 37
    q, k, v = qkv(n, seed=1)
    ref = dense(q, k, v, causal)
    out = delta_attention(q, k, v, Method("sparse", sink=3, window=n, causal=causal))
    assert torch.equal(out, ref)                                   # same mask, same arithmetic
    out = delta_attention(q, k, v, Method("delta", sink=3, window=n, gamma=5, tail=4, causal=causal))
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)       # Δ = 0 up to rounding


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("mode", ["delta", "recompute"])
def test_gamma_one_is_dense(causal, mode):
    n = 29
    q, k, v = qkv(n, seed=2)
    out = delta_attention(q, k, v, Method(mode, sink=2, window=3, gamma=1, tail=0, causal=causal))
    torch.testing.assert_close(out, dense(q, k, v, causal), atol=1e-12, rtol=0)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n, gamma, tail", [(61, 8, 16), (64, 8, 16), (50, 7, 3)])
def test_anchor_tail_rows_dense_and_delta_by_hand(causal, n, gamma, tail):
    q, k, v = qkv(n, seed=n)
    m = Method("delta", sink=2, window=5, gamma=gamma, tail=tail, causal=causal)
    out = delta_attention(q, k, v, m)
    ref = dense(q, k, v, causal)
    sparse = delta_attention(q, k, v, Method("sparse", sink=2, window=5, causal=causal))
    plan = delta_plan(n, gamma, tail)
    assert plan.s_p % gamma == 0 and n - plan.s_p == plan.cut_n
    rows = plan.dense_rows()
    torch.testing.assert_close(out[:, :, rows], ref[:, :, rows], atol=1e-12, rtol=0)
    want = sparse.clone()                                           # Eq. 6/7 written out
    for i in range(plan.s_p):
        a = gamma * (i // gamma)
        want[:, :, i] = sparse[:, :, i] + ref[:, :, a] - sparse[:, :, a]
    want[:, :, plan.s_p:] = ref[:, :, plan.s_p:]
    torch.testing.assert_close(out, want, atol=1e-12, rtol=0)
    rec = delta_attention(q, k, v, Method("recompute", sink=2, window=5, gamma=gamma, tail=tail, causal=causal))
    other = torch.ones(n, dtype=torch.bool)
    other[rows] = False
    assert torch.equal(rec[:, :, other], sparse[:, :, other])      # recompute propagates nothing
    torch.testing.assert_close(rec[:, :, rows], ref[:, :, rows], atol=1e-12, rtol=0)


def test_delta_reduces_error_on_average():
    """Not a theorem for every row, but the anchor rows are exact, so the mean error must drop."""
    n = 128
    q, k, v = qkv(n, b=1, hq=2, hkv=2, d=16, seed=7)
    ref = dense(q, k, v)
    e_sparse = (delta_attention(q, k, v, Method("sparse", sink=4, window=16)) - ref).norm()
    e_delta = (delta_attention(q, k, v, Method("delta", sink=4, window=16, gamma=4, tail=8)) - ref).norm()
    assert e_delta < e_sparse


# ---------------------------------------------------------------- Lemma 1

@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 40), d=st.integers(1, 8), keep=st.floats(0.05, 1.0),
       temp=st.floats(0.1, 5.0), seed=st.integers(0, 10_000))
def test_lemma1_bound_on_random_topk_rows(n, d, keep, temp, seed):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(3, n, generator=g, dtype=torch.float64) * temp
    values = torch.randn(3, n, d, generator=g, dtype=torch.float64)
    k = max(1, int(keep * n))
    kept = torch.zeros(3, n, dtype=torch.bool)
    kept.scatter_(1, scores.topk(k, dim=1).indices, True)
    t = lemma1_terms(scores, values, kept)
    assert (t["lhs_l2"] <= t["bound_l2"] + 1e-12).all()
    assert (t["lhs_coord"] <= t["bound_coord"] + 1e-12).all()
    assert (t["identity_residual"] < 1e-12).all()
    if k == n:
        assert t["delta"].abs().max() < 1e-12


def test_lemma1_delta_is_dense_minus_sparse_attention():
    n, d = 12, 4
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 1, n, d, generator=g, dtype=torch.float64)
    k = torch.randn(1, 1, n, d, generator=g, dtype=torch.float64)
    v = torch.randn(1, 1, n, d, generator=g, dtype=torch.float64)
    mask = sink_window_mask(n, sink=2, window=3, causal=False)
    scores = (q @ k.transpose(-1, -2))[0, 0] / math.sqrt(d)
    t = lemma1_terms(scores, v[0, 0].expand(n, n, d), mask)
    want = masked_attention(q, k, v, dense_mask(n, causal=False)) - masked_attention(q, k, v, mask)
    torch.testing.assert_close(t["delta"], want[0, 0], atol=1e-12, rtol=0)


# ---------------------------------------------------------------- diagnostics

def test_spearman_matches_scipy_and_cosine_basics():
    g = torch.Generator().manual_seed(3)
    p = torch.rand(5, 30, generator=g)
    q = p + 0.3 * torch.rand(5, 30, generator=g)
    q[0, :10] = q[0, 0]                                    # ties
    got = spearman_rows(p, q)
    for r in range(5):
        assert got[r].item() == pytest.approx(spearmanr(p[r].numpy(), q[r].numpy()).statistic, abs=1e-12)
    assert spearman_rows(p, p).sub(1).abs().max() < 1e-12
    assert torch.equal(spearman_rows(p, q_ranks=centred_ranks(q)), got)   # a reference ranked once gives the same values
    with pytest.raises(ValueError, match="exactly one of q and q_ranks"):
        spearman_rows(p, q, q_ranks=centred_ranks(q))
    with pytest.raises(ValueError, match="equal shapes"):
        spearman_rows(p, q_ranks=centred_ranks(q[:, :29]))
    x = torch.randn(4, 7, generator=g)
    assert cosine_rows(x, 3 * x).sub(1).abs().max() < 1e-12
    assert cosine_rows(x, -x).add(1).abs().max() < 1e-12

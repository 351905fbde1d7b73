"""Paper 17 (GAIN-RL): the gradient identity, the angle metric, the released formula, the sampler, GRPO."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from companion.core import ParameterError
from companion.gain_rl import angle as A
from companion.gain_rl import grpo as G
from companion.gain_rl import policy as P
from companion.gain_rl import sampler as S


# --------------------------------------------------------------------------------------------- identity

def test_identity_matches_autograd():
    torch.manual_seed(0)
    lin = torch.nn.Linear(7, 5, bias=False).double()
    x = torch.randn(3, 11, 7, dtype=torch.float64)
    target = torch.randn(3, 11, 5, dtype=torch.float64)
    for b in range(3):
        y = lin(x[b])
        y.retain_grad()
        loss = ((y - target[b]) ** 2).sum() * 0.3 + y.sin().sum()
        lin.zero_grad()
        loss.backward()
        want = (lin.weight.grad ** 2).sum()
        got = A.grad_norm_sq(x[b], y.grad)
        assert abs(float(got - want)) <= 1e-10 * float(want)


def test_identity_cosine_form_and_shape_error():
    torch.manual_seed(1)
    x, d = torch.randn(6, 4, dtype=torch.float64), torch.randn(6, 3, dtype=torch.float64)
    norms = x.norm(dim=1)
    cos = (x @ x.T) / (norms[:, None] * norms[None])
    cos_form = ((d @ d.T) * norms[:, None] * norms[None] * cos).sum()
    assert torch.allclose(A.grad_norm_sq(x, d), cos_form)
    assert torch.allclose(A.grad_norm_sq(x, d), ((d.T @ x) ** 2).sum())
    with pytest.raises(ValueError, match="must agree"):
        A.grad_norm_sq(x, d[:5])


# ---------------------------------------------------------------------------------------- concentration

def test_segment_sums_equal_explicit_blocks():
    torch.manual_seed(2)
    states = torch.randn(4, 19, 16)
    fast = A.concentration(states, (0, 8), (9, 17), inter_weight=3.0)
    slow = A.concentration_explicit(states, (0, 8), (9, 17), inter_weight=3.0)
    for k in ("intra", "inter", "total"):
        assert torch.allclose(fast[k], slow[k], atol=1e-6)


def test_concentration_known_cases():
    d = 5
    e = torch.eye(d)
    same = e[0].repeat(6, 1) * torch.arange(1, 7)[:, None]  # one direction, any lengths
    c = A.concentration(same, (0, 3), (3, 6), inter_weight=8.0)
    assert float(c["intra"]) == pytest.approx(1.0) and float(c["inter"]) == pytest.approx(1.0)
    assert float(c["total"]) == pytest.approx(9.0)
    orth = torch.cat([e[:2], e[2:5]])  # all mutually orthogonal
    c = A.concentration(orth, (0, 2), (2, 5))
    assert float(c["intra"]) == pytest.approx(0.0, abs=1e-7) and float(c["inter"]) == pytest.approx(0.0, abs=1e-7)


def test_concentration_bad_spans():
    x = torch.randn(10, 4)
    with pytest.raises(ParameterError, match="prefix"):
        A.concentration(x, (0, 0), (2, 6))
    with pytest.raises(ParameterError, match="question"):
        A.concentration(x, (0, 2), (4, 4))
    with pytest.raises(ParameterError, match="question"):
        A.concentration(x, (0, 2), (3, 4))  # one token: no pairs
    with pytest.raises(ParameterError, match="prefix"):
        A.concentration(x, (0, 5), (3, 8))  # overlapping
    with pytest.raises(ParameterError):
        P.segments("", "12+34")
    with pytest.raises(ParameterError):
        P.segments(P.PREFIX, "")


def _released_literal(h, p, s, w):
    # data_processor.py, written out as released
    nrm = F.normalize(h.float(), p=2, dim=1)
    cos = nrm @ nrm.T
    cos = cos * torch.tril(torch.ones_like(cos), diagonal=1)
    return cos[p:-s][p:-s].mean() + w * cos[p:-s][:p].mean()


@pytest.mark.parametrize("T", [300, 260])
def test_released_metric_matches_formula(T):
    torch.manual_seed(3)
    h = torch.randn(T, 12)
    got = A.released_metric(h)
    want = _released_literal(h, 110, 6, 8)
    assert torch.allclose(got, want)
    first, second, val = A.released_metric(h, parts=True)
    assert torch.allclose(val, first + 8 * second)
    sl = A.released_slices(T)
    assert sl["intra"] == (220, T - 12) and sl["inter"] == (110, 220)


def test_released_metric_nan_for_short_question():
    # a question of fewer than 117 tokens leaves the first slice empty: the released value is NaN
    h = torch.randn(110 + 80 + 6, 8)
    assert math.isnan(float(A.released_metric(h)))
    assert math.isnan(float(_released_literal(h, 110, 6, 8)))
    sl = A.released_slices(196)
    assert sl["intra"][0] >= sl["intra"][1]
    with pytest.raises(ParameterError, match="suffix_len"):
        A.released_metric(h, suffix_len=0)


def test_online_angle_matches_masked_matrix():
    torch.manual_seed(4)
    x = torch.randn(3, 12, 9)
    lengths = torch.tensor([12, 7, 2])
    fast = A.online_angle(x, lengths)
    for b in range(3):
        assert float(fast[b]) == pytest.approx(float(A.online_angle_explicit(x[b, :lengths[b]])), abs=1e-6)
    with pytest.raises(ValueError, match="lengths"):
        A.online_angle(x, torch.tensor([0, 3, 3]))


def test_hook_captures_up_proj_input_and_lists_names():
    model = P.char_lm(d=16, layers=2, heads=2)
    ids = P.make_problems(3, 0).prompts
    name = A.hook_name(model)
    assert name == "layers.1.mlp.up_proj"
    with A.capture_inputs(model, name) as store:
        model(ids)
    # the input of up_proj is the post-attention norm's output of the last block
    with A.capture_inputs(model, "layers.1.post_attention_layernorm") as s2:
        pass
    seen = {}
    h = model.layers[1].post_attention_layernorm.register_forward_hook(lambda m, i, o: seen.setdefault("o", o))
    model(ids)
    h.remove()
    assert torch.allclose(store[name], seen["o"])
    assert s2 == {}
    with pytest.raises(ParameterError, match="layers.0.mlp.up_proj"):
        with A.capture_inputs(model, "model.layers.23.mlp.up_proj"):
            pass
    with pytest.raises(ParameterError, match="layer"):
        A.hook_name(model, 5)


# --------------------------------------------------------------------------------------------- sampler

def test_gaussian_sample_distinct_in_range_and_tiny_sigma():
    rng = np.random.default_rng(0)
    for mu, sigma, k in [(0, 64, 64), (500, 1.0, 100), (511, 0.1, 512), (250, 1e4, 10)]:
        r = S.gaussian_sample(512, k, mu, sigma, rng)
        assert len(r) == k == len(np.unique(r)) and r.min() >= 0 and r.max() < 512


def test_gaussian_sample_law_and_uniform_limit():
    p = S.gaussian_probs(50, 10.0, 4.0)
    assert p.sum() == pytest.approx(1.0) and p.argmax() == 10
    # one draw (k = 1) follows p
    rng = np.random.default_rng(1)
    draws = np.array([S.gaussian_sample(50, 1, 10.0, 4.0, rng)[0] for _ in range(4000)])
    freq = np.bincount(draws, minlength=50) / 4000
    assert np.abs(freq - p).max() < 0.03
    # sigma -> infinity: uniform
    assert np.allclose(S.gaussian_probs(50, 0.0, 1e6), 1 / 50, rtol=1e-6)


def test_mu_step_formula_and_clip():
    adj = S.mu_step(1.4, 0.3, n=500, alpha=2, beta=0.5, adj_min=-1e9, adj_max=1e9, reward_scale=2.0)
    assert adj == pytest.approx(500 * math.tanh(2 * (0.7 - 0.5)) + 500 * math.tanh(2 * 0.3))
    assert S.mu_step(0.0, 0.0, n=500, alpha=2, beta=0.5, adj_min=0, adj_max=1000) == 0.0  # clipped at 0
    assert S.mu_step(1.0, 5.0, n=500, alpha=2, beta=0.5, adj_min=0, adj_max=800) == 800.0  # 880.8 clipped
    g = S.mu_step(0.5, 0.2, n=10, alpha=2, beta=0.5, gamma=1.0, adj_min=-99, adj_max=99)
    assert g == pytest.approx(10 * math.tanh(0.2))


@pytest.mark.parametrize("kw,name", [
    ({"sigma": 0.0}, "sigma"), ({"subset": 600}, "subset"), ({"adj_min": 5.0, "adj_max": 1.0}, "adj_min"),
    ({"beta": 1.5}, "beta"), ({"n": -1.0}, "n"), ({"reward_scale": 0.0}, "reward_scale")])
def test_sampler_bad_input(kw, name):
    args = {"order": np.arange(512), "subset": 64, "sigma": 64.0, "n": 32.0, **kw}
    with pytest.raises(ParameterError, match=name):
        S.GainSampler(**args)


def test_mu_monotone_moves_right_and_stays_in_pool():
    smp = S.GainSampler(np.arange(100), 10, sigma=8.0, n=30.0, adj_min=0.0, adj_max=60.0, seed=0)
    rng = np.random.default_rng(0)
    mus = [smp.mu]
    for _ in range(30):
        smp.draw()
        smp.update(float(rng.uniform()), float(rng.uniform(-1, 1)))
        mus.append(smp.mu)
    assert np.all(np.diff(mus) >= 0) and mus[-1] <= 99.0 and mus[-1] == 99.0
    smp2 = S.GainSampler(np.arange(100), 10, sigma=8.0, n=30.0, beta=0.5, adj_min=-100.0, adj_max=100.0)
    smp2.draw()
    assert smp2.update(0.9, 0.0) > 0  # accuracy above beta -> toward harder (higher) ranks


def test_updated_mu_draws_next_subset_and_lag_flag():
    order = np.arange(400)[::-1].copy()
    fresh = S.GainSampler(order, 20, sigma=5.0, n=100.0, adj_max=200.0, seed=0)
    lagged = S.GainSampler(order, 20, sigma=5.0, n=100.0, adj_max=200.0, seed=0, lag=True)
    for smp in (fresh, lagged):
        smp.draw()
        smp.update(1.0, 0.5)
        smp.draw()
    assert fresh.history[1]["mu_used"] == fresh.history[0]["mu_after"] > 0
    assert lagged.history[1]["mu_used"] == 0.0 and lagged.mu > 0
    # the items come from the sorted order at the drawn ranks
    assert np.all(fresh.draw() == order[fresh.history[-1]["ranks"]])


def test_replay_reproduces_sampler_trajectory():
    sched = dict(n=20.0, alpha=2.0, beta=0.5, gamma=None, adj_min=0.0, adj_max=40.0, reward_scale=1.0)
    smp = S.GainSampler(np.arange(300), 8, sigma=10.0, **sched)
    sig = [(0.3, 0.5), (0.8, 0.1), (0.6, 0.9)]
    for r, a in sig:
        smp.draw()
        smp.update(r, a)
    assert S.replay_mu(sig, 300, **sched)[-1] == pytest.approx(smp.mu)


def test_uniform_and_filter_samplers():
    u = S.UniformSampler(50, 10, seed=0)
    d = u.draw()
    assert len(np.unique(d)) == 10
    f = S.FilterSampler(50, 10, seed=0, oversample=2.0)
    assert len(np.unique(f.draw())) == 20
    with pytest.raises(ParameterError, match="subset"):
        S.UniformSampler(5, 6)


# ------------------------------------------------------------------------------------------------ GRPO

def test_grpo_loss_clipped_form_reduces_on_policy_and_clips():
    """With ``old_logp = logp.detach()`` the clipped objective is the unclipped one in value and gradient; off-policy,
    a token whose ratio is past the clip on the advantage's side gets no gradient. (TRL's own loss is compared in
    test_gain_rl_trl.py.)"""
    torch.manual_seed(5)
    logits = torch.randn(8, 4, 15)
    toks = torch.randint(0, 15, (8, 4))
    ref = torch.log_softmax(torch.randn(8, 4, 15), -1).gather(-1, toks[..., None]).squeeze(-1)
    adv = G.group_advantages(torch.tensor([1., 0, 0, 1, 1, 1, 0, 0]) * 2, 4)
    mask = G.completion_mask(toks)
    outs = []
    for clipped in (False, True):
        lg = logits.clone().requires_grad_(True)
        logp = torch.log_softmax(lg, -1).gather(-1, toks[..., None]).squeeze(-1)
        old = logp.detach() if clipped else None
        loss = G.grpo_loss(logp, ref, adv, mask, 0.005, old_logp=old)
        loss.backward()
        outs.append((loss.detach(), lg.grad))
    assert torch.allclose(outs[0][0], outs[1][0]) and torch.allclose(outs[0][1], outs[1][1])
    lg = logits.clone().requires_grad_(True)
    logp = torch.log_softmax(lg, -1).gather(-1, toks[..., None]).squeeze(-1)
    old = logp.detach().clone()
    old[0, 0] -= 1.0  # ratio e > 1.2 on a positive-advantage row: clipped
    assert adv[0] > 0 and mask[0, 0] == 1
    G.grpo_loss(logp, ref, adv, mask, 0.0, old_logp=old).backward()
    assert float(lg.grad[0, 0].abs().max()) == 0 and float(lg.grad[0, 1].abs().max()) > 0
    with pytest.raises(ParameterError, match="epsilon_low"):
        G.grpo_loss(logp, ref, adv, mask, old_logp=old, epsilon_low=-0.1)


def test_advantages_and_mask():
    adv = G.group_advantages(torch.tensor([1., 1, 1, 1, 0, 1, 0, 1]), 4)
    assert torch.allclose(adv[:4], torch.zeros(4))
    assert adv[5] > 0 > adv[4] and float(adv[4:].sum()) == pytest.approx(0, abs=1e-6)
    E = P.END_ID
    comps = torch.tensor([[1, 2, E, E], [3, E, E, E], [1, 2, 3, 4]])
    assert G.completion_mask(comps).tolist() == [[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
    with pytest.raises(ParameterError, match="group"):
        G.group_advantages(torch.ones(4), 1)


def test_steps_to_target():
    assert G.steps_to_target([0.1, 0.3, 0.5], 0.3) == 2
    assert G.steps_to_target([0.1, 0.2], 0.3) is None


# --------------------------------------------------------------------------------------------- policy

def test_problems_prompts_and_rewards():
    pr = P.make_problems(20, 0)
    assert pr.prompts.shape == (20, len(P.PREFIX) + 5 + len(P.SUFFIX))
    i = 3
    assert P.decode(pr.prompts[i]) == P.prompt_text(pr.a[i], pr.b[i])
    assert P.decode(pr.targets[i]).rstrip("$") == str(pr.a[i] + pr.b[i])
    assert P.reward(pr.targets, pr.targets, 2.0).tolist() == [2.0] * 20
    sp = P.segments()
    assert P.decode(pr.prompts[i])[sp["question"][0]:sp["question"][1]] == pr.question(i)
    with pytest.raises(ValueError, match="vocabulary"):
        P.encode("x")


def test_cached_generation_equals_full_forward():
    torch.manual_seed(0)
    model = P.char_lm(d=32, layers=2, heads=4).eval()
    pr = P.make_problems(6, 1)
    comp = P.generate(model, pr.prompts, greedy=True)
    seq = pr.prompts
    for t in range(P.ANSWER_LEN):
        nxt = model(seq)[:, -1].argmax(-1)
        done = (comp[:, :t] == P.END_ID).any(1) if t else torch.zeros(6, dtype=torch.bool)
        assert torch.equal(torch.where(done, torch.full_like(nxt, P.END_ID), nxt), comp[:, t])
        seq = torch.cat([seq, comp[:, t:t + 1]], 1)
    grouped = P.generate(model, pr.prompts, greedy=True, group=3)
    assert torch.equal(grouped, comp.repeat_interleave(3, 0))


def test_one_grpo_epoch_runs_and_moves_mu():
    from companion.gain_rl.experiments import make_sampler

    torch.manual_seed(0)
    model = P.char_lm(d=16, layers=1, heads=2)
    pool, ev = P.make_problems(32, 0), P.make_problems(16, 1)
    smp = make_sampler("GAIN", order=np.arange(32), subset=4, seed=0, sigma=4.0, n=2.0, alpha=2.0, beta=0.0,
                       adj_min=0.0, adj_max=4.0)
    res = G.run_curriculum(model, model, pool, ev, smp, epochs=2, group=4, minibatches=2, snapshot_epoch=1)
    assert len(res["eval_acc"]) == 3 and res["rollouts"] == 2 * 4 * 4 and res["snapshot"] is not None
    assert smp.mu > 0 and res["mu_used"][1] == smp.history[0]["mu_after"]
    assert res["mu_after"] == [h["mu_after"] for h in smp.history] and res["mu_after"][-1] == smp.mu
    assert all(-1 <= a <= 1 for a in res["ang"])
    # the result is numbers and lists (and the snapshot's tensors), never the trained model object
    assert "model" not in res and not any(isinstance(v, torch.nn.Module) for v in res.values())
    uni = G.run_curriculum(model, model, pool, ev, make_sampler("uniform", order=np.arange(32), subset=4, seed=0,
                                                                sigma=4.0, n=2.0, alpha=2.0, beta=0.0, adj_min=0.0,
                                                                adj_max=4.0), epochs=1, group=4)
    assert uni["mu_used"] == [] and uni["mu_after"] == []


def test_end_of_pool_epoch_and_the_angle_term_outrunning_the_accuracy_brake():
    """The GPU run's case: with γ = α the update stops only below acc = β − ang; above it μ runs to the end."""
    N, ang = 400, 0.37
    for acc, end in ((0.2, True), (0.5 - ang - 0.02, False)):
        smp = S.GainSampler(np.arange(N), 10, sigma=50.0, n=100.0, alpha=2.0, beta=0.5, adj_min=0.0, adj_max=50.0)
        for _ in range(100):
            smp.draw()
            smp.update(acc, ang)
        arrival = S.end_of_pool_epoch([h["mu_after"] for h in smp.history], N)
        if end:
            mus = [h["mu_after"] for h in smp.history]
            assert arrival == 1 + next(t for t, m in enumerate(mus) if m == N - 1) and mus[arrival - 2] < N - 1
            assert all(h["mu_used"] == N - 1 for h in smp.history[arrival:])  # it never moves back (adj_min = 0)
        else:
            assert arrival is None and smp.mu == 0.0  # below the break-even accuracy the clip holds μ at 0
    assert S.end_of_pool_epoch([], 5) is None and S.end_of_pool_epoch([1.0, 4.0, 4.0], 5) == 2


def test_mu_drift_reads_old_and_new_runs():
    from companion.gain_rl.study import mu_drift

    run = {"eval_acc": [0.1] * 6, "mean_reward": [0.3] * 5, "ang": [0.4] * 5}
    old = {"profile": {"pool": 64}, "grpo": {"runs": {"GAIN": [{**run, "mu_used": [0.0, 30.0, 63.0, 63.0, 63.0]}]}}}
    new = {"profile": {"pool": 64}, "grpo": {"runs": {"GAIN": [{**run, "mu_after": [30.0, 63.0, 63.0, 63.0, 63.0],
                                                                "mu_end_epoch": 2}]}}}
    for gpu in (old, new):
        d = mu_drift(gpu)
        assert d["seeds"][0]["end_epoch"] == 2 and d["seeds"][0]["epochs"] == 5
        assert d["break_even"] == pytest.approx(0.5 - 0.4) and 0.9 < d["tail_share"] < 1.0
    assert mu_drift({"profile": {"pool": 64}, "grpo": {"runs": {"uniform": [run]}}}) is None and mu_drift(None) is None
    assert mu_drift({"profile": {"pool": 64}, "stages": {"grpo": {"state": "skipped"}}}) is None


def test_released_metric_batched_equals_single():
    torch.manual_seed(6)
    h = torch.randn(3, 260, 8)
    batched = A.released_metric(h, parts=True)
    for b in range(3):
        single = A.released_metric(h[b], parts=True)
        for x, y in zip(batched, single):
            assert torch.allclose(x[b], y)


def test_multi_term_problems_and_spans():
    from companion.gain_rl.experiments import prompt_spans

    pr = P.make_problems(5, 2, terms=3)
    sp = prompt_spans(3)
    i = 1
    text = P.decode(pr.prompts[i])
    assert text[sp["question"][0]:sp["question"][1]] == pr.question(i)
    assert P.decode(pr.targets[i]).rstrip("$") == str(pr.answers[i])
    with pytest.raises(ParameterError, match="terms"):
        P.make_problems(5, 0, terms=11)


# --------------------------------------------------------------------------------- signals and explorer

@pytest.fixture(scope="module")
def explorer_data():
    from companion.gain_rl.experiments import pool_signals

    torch.manual_seed(0)
    model = P.char_lm(d=16, layers=2, heads=2)
    pool = P.make_problems(24, 0)
    sig = pool_signals(model, pool)
    return {"signals": {"initial": sig, "mid-training": sig}, "prompts": pool.prompts.tolist(), "n_pool": 24,
            "schedule": {"sigma": 3.0, "n": 1.5, "alpha": 2.0, "beta": 0.5, "adj_min": 0.0, "adj_max": 3.0},
            "gain": {"signals": [(0.2, 0.5), (0.6, 0.4)], "eval_acc": [0.1, 0.2, 0.3], "mu_used": [0.0, 1.0]}}


def test_pool_signals_match_direct_computation(explorer_data):
    sig = explorer_data["signals"]["initial"]
    L = sig["layers"][-1]
    sp = sig["spans"]
    c = A.concentration_explicit(torch.as_tensor(L["states"]), sp["prefix"], sp["question"])
    assert np.allclose(L["C"], c["total"].numpy(), atol=1e-5)
    assert np.isnan(L["released"]).all() and np.isfinite(L["released_second"]).all()
    assert (L["grad_norm"] > 0).all() and -1 <= L["spearman"] <= 1


def test_explorer_view_pure_and_replays(explorer_data):
    from companion.gain_rl.explorer import explorer_controls, explorer_view

    f1, r1 = explorer_view(explorer_data, prompt=3, layer=1, checkpoint="mid-training", epoch=2)
    f2, r2 = explorer_view(explorer_data, prompt=3, layer=1, checkpoint="mid-training", epoch=2)
    assert f1.to_json() == f2.to_json() and r1 == r2
    assert "C_intra" in r1 and "NaN" in r1
    mus = S.replay_mu(explorer_data["gain"]["signals"], 24, n=1.5, alpha=2.0, beta=0.5, adj_min=0.0, adj_max=3.0)
    assert f"μ_t = {mus[2]:.1f}" in r1
    f3, r3 = explorer_view(explorer_data, prompt=3, layer=1, checkpoint="mid-training", epoch=2, n=0.0)
    assert "μ_t = 0.0" in r3
    controls = explorer_controls(explorer_data)
    assert set(controls) == {"prompt", "layer", "checkpoint", "sigma", "n", "alpha", "beta", "adj_min", "adj_max",
                             "epoch"}
    # a negative adj_min lets mu move back (replayed, kept inside the pool)
    _, r4 = explorer_view(explorer_data, prompt=0, epoch=2, n=1.5, beta=1.0, alpha=5.0, adj_min=-3.0)
    mus = S.replay_mu(explorer_data["gain"]["signals"], 24, n=1.5, alpha=5.0, beta=1.0, adj_min=-3.0, adj_max=3.0)
    assert f"μ_t = {mus[2]:.1f}" in r4
    explorer_view(explorer_data, **{k: w.value for k, w in controls.items()})


@pytest.mark.parametrize("kw,name", [({"prompt": 24}, "prompt"), ({"layer": 2}, "layer"), ({"checkpoint": "x"}, "checkpoint"),
                                     ({"sigma": 0.0}, "sigma"), ({"beta": 1.2}, "beta"), ({"n": -1.0}, "n"),
                                     ({"adj_max": -1.0}, "adj_max"), ({"adj_min": 5.0}, "adj_max"),
                                     ({"epoch": 3}, "epoch")])
def test_explorer_bad_values(explorer_data, kw, name):
    from companion.gain_rl.explorer import explorer_view

    with pytest.raises(ParameterError, match=name):
        explorer_view(explorer_data, **kw)


def test_fixture_loads_with_default_recipe():
    model, info = P.load_or_train_sft(P.SFTRecipe(), P.FIXTURE)
    assert info["source"].startswith("fixture") and 0.2 <= info["held_out_acc"] <= 0.6
    acc = P.greedy_accuracy(model, P.make_problems(128, 10_000, 10, 99))
    assert acc > 0.1


def test_grpo_stage_records_mu_arrival(monkeypatch):
    """The study's grpo stage stores μ after every update and the epoch μ reached the end of the pool (a fake
    curriculum; the warm start and the ranking as earlier stages hand them over in ``ctx.shared``)."""
    from companion.core.stages import StageContext
    from companion.gain_rl import scale as SC
    from companion.gain_rl import study as ST

    def fake_run(policy, ref, pool, ev, smp, *, epochs, **kw):
        out = {"eval_acc": [0.1], "mean_reward": [], "ang": [], "mu_used": [], "mu_after": [], "prompts_trained": [],
               "trained": [], "rollouts": 0, "seconds": 0.0, "epoch_seconds": []}
        for _ in range(epochs):
            out["trained"].append(smp.draw().tolist())
            smp.update(0.9, 0.9)
            out["eval_acc"].append(0.1)
            out["mean_reward"].append(0.9)
            out["ang"].append(0.9)
            out["epoch_seconds"].append(0.01)
            if hasattr(smp, "mu"):
                out["mu_used"].append(smp.history[-1]["mu_used"])
                out["mu_after"].append(smp.mu)
        return out

    N = 64
    monkeypatch.setattr(ST, "run_curriculum", fake_run)
    cfg = {**SC.SMOKE_PROFILE, "pool": N, "epochs": 12, "n_seeds": 2}
    ctx = StageContext(profile=cfg, device="cpu", log=lambda *a: None, results={},
                       shared={"policy": None, "order": np.arange(N)})
    out = ST.grpo(ctx)
    ends = out["summary"]["GAIN"]["mu_end_epoch"]
    assert ends == [r["mu_end_epoch"] for r in out["runs"]["GAIN"]] and all(e is not None and 1 <= e <= 12 for e in ends)
    assert all(r["mu_after"][ends[0] - 1] == N - 1 for r in out["runs"]["GAIN"])
    assert out["summary"]["uniform"]["epochs"] == [12, 12]
    assert ST.mu_drift({"profile": cfg, "grpo": out})["seeds"][0]["end_epoch"] == ends[0]
    assert out["summary"]["GAIN"]["mu_reach"] == [1.0, 1.0] and out["schedule"] == ST.gpu_schedule(cfg["subset"])
    assert all(len(r["mean_rank"]) == 12 for rs in out["runs"].values() for r in rs)
    with pytest.raises(ParameterError, match="layer_correlation"):
        ST.grpo(StageContext(profile=cfg, device="cpu", log=print, results={}, shared={"policy": None}))


def test_gpu_schedule_is_the_papers_per_subset():
    from companion.gain_rl.study import gpu_schedule

    assert gpu_schedule(256) == dict(sigma=1000.0, n=500.0, alpha=2.0, beta=0.5, adj_min=0.0, adj_max=1000.0)
    half = gpu_schedule(128)
    assert half["sigma"] == 500.0 and half["n"] == 250.0 and half["adj_max"] == 500.0


def test_gpu_profile_recipe_and_mu_room():
    """The GPU profile runs the current GRPO recipe (lr 1e-4 · 64 / d, the rate the d-64 pilot learns at) and leaves
    μ inside the pool for the whole run even at a high training reward (0.8) and the recorded angle signal (0.38)."""
    from companion.gain_rl.scale import GPU_PROFILE as gp
    from companion.gain_rl.study import GRPO_RECIPE, gpu_schedule

    assert gp["recipe"] == GRPO_RECIPE and gp["lr"] == pytest.approx(1e-4 * 64 / gp["d"])
    schedule = {k: v for k, v in gpu_schedule(gp["subset"]).items() if k != "sigma"}
    step = S.mu_step(0.8, 0.38, **schedule)
    assert 70 < step < 80 and step * gp["epochs"] < 0.95 * (gp["pool"] - 1)


def test_mean_ranks_of_trained_prompts():
    from companion.gain_rl.study import mean_ranks

    order = np.array([3, 0, 2, 1])  # item 3 has rank 0, item 1 rank 3
    assert mean_ranks(order, [[3], [1, 3], [0, 2, 1]]) == [0.0, 1.5, 2.0]
    assert np.isnan(mean_ranks(order, [[]])[0])  # an epoch that filtering left empty


def test_brake_holds_mu_at_the_papers_accuracy():
    """At the paper's scale (acc near β, ang ~0.2 as the CPU pilot measures) the brake engages: an epoch at 20 %
    moves μ by nothing, one at 50 % by n·tanh(0.4)."""
    sch = S.GainSampler(np.arange(1000), 8, sigma=31.25, n=15.625, adj_min=0.0, adj_max=31.25)
    sch.draw()
    assert sch.update(0.2, 0.2) == 0.0  # 15.6·(tanh(−0.6) + tanh(0.4)) < 0, clipped at adj_min
    sch.draw()
    assert sch.update(0.5, 0.2) == pytest.approx(15.625 * np.tanh(0.4))

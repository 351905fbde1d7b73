"""Paper 03, ScaleKV: known truths of the library (companion.scalekv).

Exact answers on hand cases (window positions, ASI factors, z-scores, budgets, selection through the
cache), invariants (retained bytes == the budget, the cached generation equals the parallel
block-causal forward, a 100 % budget equals the full cache bit for bit), the planted drafters, and the
bad inputs the issue names. The fused selection kernel has its own tests in tests/kernels/.
"""

import math

import pytest
import torch

from companion.core import ParameterError
from companion.scalekv import (
    INFINITY_1024,
    INFINITY_2B,
    CachePolicy,
    TinyVAR,
    VARConfig,
    asi_from_probs,
    block_causal_mask,
    calibrate,
    check_schedule,
    compressed_scales,
    cumulative_tokens,
    dequantise,
    expected_retained,
    fit_integer_budgets,
    generate,
    hidden_error,
    kv_bytes,
    load_digit_tokens,
    map_sizes,
    memory_summary,
    method_budgets,
    planted_experiment,
    plan,
    psnr,
    pyramid_budgets,
    quantise,
    run_policy,
    scalekv_budgets,
    select_drafters,
    sweep,
    token_agreement,
    train_var,
    uniform_budget,
    uniform_budgets,
    window_positions,
    zscores,
)
from companion.scalekv.bench import _compressed_lengths, analytic_memory
from companion.scalekv.data import image_to_tokens

SIDES = (1, 2, 3, 4, 6, 8)  # 130 tokens; N_{K-2} = 66
METHODS = ("scalekv", "uniform", "pyramid", "streaming", "window")


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = TinyVAR(VARConfig(sides=SIDES, layers=3, dim=32, heads=2, mlp_ratio=2))
    with torch.no_grad():  # larger random weights: attention that is not uniform
        for blk in m.blocks:
            blk.attn.qkv.weight.normal_(0, 0.3)
    return m.eval()


@pytest.fixture(scope="module")
def z(model):
    return calibrate(model, torch.arange(4), seed=1).z


# ---------------------------------------------------------------- schedules and memory
def test_infinity_schedule_token_counts():
    """The paper: 13 scales at 1024^2, 10,521 tokens; the cache before the last map holds 6,425."""
    cum = cumulative_tokens(INFINITY_1024)
    assert cum[-1] == 10521 and cum[-2] == 6425
    assert map_sizes((1, 2, 3)) == [1, 4, 9] and cumulative_tokens((1, 2, 3)) == [1, 5, 14]


def test_kv_bytes_formula():
    # Infinity-2B, one image without guidance, full cache, bf16: 2 * 32 * 10521 * 16 * 128 * 2 bytes
    assert kv_bytes(10521, INFINITY_2B["heads"], INFINITY_2B["head_dim"], layers=32) == 2 * 32 * 10521 * 16 * 128 * 2
    assert kv_bytes(1, 1, 1, bytes_per_element=4, batch=3) == 24


@pytest.mark.parametrize("bad", [(1, 2, 2, 4), (1, 3, 2), (4,), (1, 2.0, 3), (0, 1, 2), "123", (1, True, 3)])
def test_schedule_must_increase(bad):
    with pytest.raises(ParameterError, match="scales"):
        check_schedule(bad)
    with pytest.raises(ParameterError):
        VARConfig(sides=bad)


@pytest.mark.parametrize("fraction", [0, 0.0, -0.1, 1.0001, 2, float("nan"), float("inf"), "10%", None, True])
def test_budget_outside_unit_interval_is_rejected(fraction):
    with pytest.raises(ParameterError, match=r"fraction=.*a number in \(0, 1\]"):
        uniform_budget(fraction, INFINITY_1024)
    with pytest.raises(ParameterError):
        uniform_budgets(4, fraction, INFINITY_1024)


def _entry_points(model, z):
    """Every public call a user makes with a budget fraction, a refiner decay or a scale schedule."""
    from companion.scalekv import planted_model
    from companion.scalekv.bench import attention_latency

    d = _drafters(3, SIDES, (0,))
    lab = torch.arange(2)
    latency = dict(geometry=dict(layers=1, heads=2, head_dim=8), batch=1, budget=6, dtype=torch.float32, log=lambda *a: None)
    fraction = {
        "uniform_budget": lambda f: uniform_budget(f, SIDES),
        "uniform_budgets": lambda f: uniform_budgets(3, f, SIDES, window_size=4),
        "pyramid_budgets": lambda f: pyramid_budgets(3, f, SIDES, window_size=4),
        "scalekv_budgets": lambda f: scalekv_budgets(d, f, SIDES, window_size=4),
        "method_budgets": lambda f: method_budgets("streaming", 3, f, SIDES),
        "plan": lambda f: plan("scalekv", model, f, SIDES, z=z, window_size=4),
        "sweep": lambda f: sweep(model, lab, z, [0.3, f], window_size=4),
        "planted_experiment": lambda f: planted_experiment((1, 2, 3, 4), layers=3, drafters=(1,), fractions=(f,), n_cal=1, n_eval=1),
        "analytic_memory": lambda f: analytic_memory(fraction=f),
    }
    delta = {
        "scalekv_budgets": lambda x: scalekv_budgets(d, 0.3, SIDES, delta=x, window_size=4),
        "method_budgets": lambda x: method_budgets("scalekv", 3, 0.3, SIDES, drafters=d, delta=x, window_size=4),
        "plan": lambda x: plan("scalekv", model, 0.3, SIDES, z=z, delta=x, window_size=4),
        "sweep": lambda x: sweep(model, lab, z, [0.3], delta=x, window_size=4),
        "planted_experiment": lambda x: planted_experiment((1, 2, 3, 4, 6), layers=3, drafters=(1,), fractions=(0.3,), delta=x,
                                                           n_cal=1, n_eval=1),
        "analytic_memory": lambda x: analytic_memory(delta=x),
    }
    schedule = {
        "check_schedule": lambda s: check_schedule(s),
        "VARConfig": lambda s: VARConfig(sides=s),
        "load_digit_tokens": lambda s: load_digit_tokens(s),
        "cumulative_tokens": lambda s: cumulative_tokens(s),
        "uniform_budgets": lambda s: uniform_budgets(3, 0.3, s),
        "scalekv_budgets": lambda s: scalekv_budgets(torch.zeros(3, len(s), dtype=torch.bool), 0.3, s),
        "plan": lambda s: plan("uniform", 3, 0.3, s),
        "planted_model": lambda s: planted_model(s, layers=3, drafters=(1,)),
        "planted_experiment": lambda s: planted_experiment(s, layers=3, drafters=(1,)),
        "analytic_memory": lambda s: analytic_memory(sides=s),
        "attention_latency": lambda s: attention_latency("cpu", sides=s, **latency),
    }
    return fraction, delta, schedule


def test_the_issues_bad_inputs_are_named_at_every_entry_point(model, z):
    """Budget outside (0, 1], a delta that makes a refiner budget negative, a schedule that does not increase:
    each public entry point raises ParameterError naming the parameter, the value and what is allowed."""
    fraction, delta, schedule = _entry_points(model, z)
    for name, call in fraction.items():
        for bad in (0.0, 1.5, -0.1):
            with pytest.raises(ParameterError, match=rf"fraction={bad!r} is not allowed: expected .*\(0, 1\]"):
                call(bad)
    # B_r(j) = (600/650 - delta * j) * B: SIDES at 30 % compresses 2 scales before the last (j <= 1, limit 0.923),
    # Infinity at 10 % compresses 5 (j <= 4, limit 0.231).
    for name, call in delta.items():
        too_big, limit = (0.3, "0.2308") if name == "analytic_memory" else (1.0, "0.9231")
        with pytest.raises(ParameterError, match=rf"delta={too_big} is not allowed: expected delta <= {limit} so that the refiner "
                                                 r"budget stays >= 0"):
            call(too_big)
        with pytest.raises(ParameterError, match=r"delta=-0\.1 is not allowed: expected a number >= 0"):
            call(-0.1)
    for name, call in schedule.items():
        with pytest.raises(ParameterError, match=r"scales=\(1, 3, 2\) is not allowed: expected a strictly increasing schedule"):
            call((1, 3, 2))


def test_uniform_budget_is_a_fraction_of_the_cache_before_the_last_map():
    """The paper's 10 % is 650 tokens on Infinity; round(0.1 * 6425) = 642 here (the 650 is rounded up)."""
    assert uniform_budget(0.1, INFINITY_1024) == 642
    assert uniform_budget(1.0, SIDES) == 66
    assert compressed_scales(642, INFINITY_1024) == [7, 8, 9, 10, 11, 12]  # the official code starts at scale index 7


# ---------------------------------------------------------------- data, model
def test_quantise_round_trip_and_multiscale_tokens():
    x = torch.tensor([0.0, 0.49, 0.5, 1.0, 1.3, -0.2])
    assert quantise(x, 3).tolist() == [0, 1, 1, 2, 2, 0]
    assert torch.allclose(dequantise(torch.tensor([0, 7]), 8), torch.tensor([0.0, 1.0]))
    img = torch.full((2, 8, 8), 4 / 7)
    tok = image_to_tokens(img, (1, 2, 4, 8), 8)
    assert tok.shape == (2, 85) and (tok == 4).all()


def test_digit_tokens_shapes_and_levels():
    d = load_digit_tokens((1, 2, 4, 8), levels=4)
    assert d.tokens.shape == (1797, 85) and d.labels.shape == (1797,)
    assert d.tokens.min() >= 0 and d.tokens.max() == 3
    with pytest.raises(ParameterError):
        load_digit_tokens((1, 2, 2, 8))


def test_block_causal_mask():
    m = block_causal_mask((1, 2))
    want = torch.tensor([[1, 0, 0, 0, 0]] + [[1, 1, 1, 1, 1]] * 4, dtype=torch.bool)
    assert torch.equal(m, want)


def test_cached_generation_equals_the_parallel_block_causal_forward(model):
    """Teacher-forced generation through the (full) KV cache gives the same logits as one block-causal
    forward pass over the whole sequence: the cache and the mask implement the same attention."""
    d = load_digit_tokens(SIDES)
    tokens, labels = d.tokens[:3], d.labels[:3]
    with torch.no_grad():
        want = model(tokens, labels)
    gen = generate(model, labels, force_tokens=tokens)
    torch.testing.assert_close(gen.logits, want, atol=2e-5, rtol=1e-4)
    with torch.no_grad():  # and the grouped attention used in training equals one masked SDPA call
        x = model.sequence_input(tokens, labels)
        blk = model.blocks[0]
        q, k, v = blk.attn.split(blk.ln1(x))
        masked = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=model.mask)
        ref = x + blk.attn.merge(masked)
        ref = ref + blk.mlp(blk.ln2(ref))
        lo, hi = model._group_bounds[0]
        got = blk(x, [(lo, hi, model.mask[lo:hi, :hi])] + [(a, b, None) for a, b in model._group_bounds[1:]])
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


def test_training_lowers_the_loss():
    d = load_digit_tokens((1, 2, 4))
    torch.manual_seed(0)
    m = TinyVAR(VARConfig(sides=(1, 2, 4), layers=1, dim=16, heads=2, mlp_ratio=1))
    losses = train_var(m, d.tokens, d.labels, steps=40, batch_size=32, lr=1e-2)
    assert sum(losses[-5:]) / 5 < 0.8 * losses[0]
    with pytest.raises(ParameterError):
        train_var(m, d.tokens, d.labels, steps=0)


def test_sampling_is_seeded_and_guidance_zero_is_plain(model):
    a = generate(model, torch.arange(3), seed=5)
    b = generate(model, torch.arange(3), seed=5)
    c = generate(model, torch.arange(3), seed=6)
    assert torch.equal(a.tokens, b.tokens) and not torch.equal(a.tokens, c.tokens)
    g = generate(model, torch.arange(3), seed=5, guidance=1.5)
    assert g.tokens.shape == a.tokens.shape and g.hidden.shape == a.hidden.shape
    assert int(g.retained_bytes[0, 0]) == 2 * int(a.retained_bytes[0, 0])  # the guided batch is doubled in the cache
    with pytest.raises(ParameterError):
        generate(model, torch.arange(3), temperature=-1.0)


# ---------------------------------------------------------------- ASI, z-scores, drafters
def test_asi_factors_on_a_hand_case():
    p = torch.tensor([0.1, 0.2, 0.3, 0.15, 0.25]).view(1, 1, 1, 5)  # 3 history keys, 2 current
    cur, conc = asi_from_probs(p, 2)  # K' = |r_k| = 2
    assert math.isclose(cur, 0.4, rel_tol=1e-6)
    assert math.isclose(conc, 0.5 / 0.6, rel_tol=1e-6)  # top-2 history weights over the history mass
    _, raw = asi_from_probs(p, 2, normalize=False)
    assert math.isclose(raw, 0.5, rel_tol=1e-6)
    _, top1 = asi_from_probs(p, 2, topk_prime=1)
    assert math.isclose(top1, 0.5, rel_tol=1e-6)
    assert asi_from_probs(torch.ones(1, 1, 1, 3) / 3, 3) == pytest.approx((1.0, 0.0))  # no history


def test_zscores_and_drafter_selection():
    asi = torch.tensor([[float("nan"), 0.1, 0.5], [float("nan"), 0.3, 0.1], [float("nan"), 0.5, 0.3]], dtype=torch.float64)
    zz = zscores(asi)
    sd = math.sqrt(((0.1 - 0.3) ** 2 + 0 + (0.5 - 0.3) ** 2) / 3)
    assert torch.isnan(zz[:, 0]).all()
    assert zz[0, 1].item() == pytest.approx(-0.2 / sd, rel=1e-4)
    per = select_drafters(zz, [1, 2], 1, mode="per_scale")
    assert per.nonzero().tolist() == [[0, 1], [1, 2]]
    glob = select_drafters(zz, [1, 2], 1, mode="global")
    assert glob.sum() == 1 and (glob[0, 1] or glob[1, 2])
    with pytest.raises(ParameterError):
        select_drafters(zz, [0], 1)
    with pytest.raises(ParameterError):
        select_drafters(zz, [1], 4, mode="per_scale")


def test_global_drafter_selection_picks_the_lowest_pairs_over_every_scale():
    """Global mode: the n lowest (layer, scale) pairs over all candidate scales, with distinct values so that a
    flattened index read back with rows and scales swapped (or a wrong stride) picks other pairs."""
    nan = float("nan")
    z = torch.tensor([[nan, 0.5, -2.0, 0.1], [nan, 0.2, 0.3, 0.4], [nan, -1.0, 0.9, 0.6]], dtype=torch.float64)
    assert select_drafters(z, [1, 2], 2, mode="global").nonzero().tolist() == [[0, 2], [2, 1]]
    assert select_drafters(z, [1, 2, 3], 3, mode="global").nonzero().tolist() == [[0, 2], [0, 3], [2, 1]]
    assert select_drafters(z, [2, 3], 1, mode="global").nonzero().tolist() == [[0, 2]]


def test_planted_drafters_are_ranked_as_drafters():
    out = planted_experiment((1, 2, 3, 4, 6), layers=4, drafters=(2,), fractions=(0.2,), n_cal=2, n_eval=3, window_size=4)
    assert out["found"], out["lowest"]
    assert out["lowest"] == [[2]] * 4
    assert out["errors"]["scalekv"][0.2] < out["errors"]["uniform"][0.2]


# ---------------------------------------------------------------- budgets (Eq. 3)
def _drafters(layers, sides, rows):
    d = torch.zeros(layers, len(sides), dtype=torch.bool)
    d[list(rows)] = True
    return d


def test_scalekv_budgets_sum_to_the_uniform_total_and_decay():
    """Infinity-2B at 10 % with the shipped drafters {0, 23}: every compressed scale sums to L*B, refiners
    follow (600/650 - delta j) B, drafters get the rest but never more than their cache holds (the JSON's
    'Max' <= 'Limit'); the last scale reuses the previous budgets."""
    sides, nl = INFINITY_1024, 32
    b = scalekv_budgets(_drafters(nl, sides, (0, 23)), 0.1, sides, delta=70 / 650, window_size=16)
    base, first = b.base, b.first
    assert first == 7 and base == 642
    cum = cumulative_tokens(sides)
    for k in range(first, len(sides)):
        assert int(b.table[:, k].sum()) == nl * base
    assert torch.equal(b.table[:, -1], b.table[:, -2])
    assert int(b.table[0, first]) == cum[first]  # capped at the cache length (the JSON's Limit 921)
    kept = expected_retained(b)
    sizes = map_sizes(sides)
    for j, k in enumerate(range(first, len(sides) - 1)):
        refiner, drafter = float(b.table[1, k]), int(b.table[0, k])
        decay = (600 / 650 - 70 / 650 * j) * base
        drafter_cap = (int(kept[0, k - 1]) if k > first else cum[k - 1]) + sizes[k]
        assert drafter <= drafter_cap
        if drafter < drafter_cap:  # drafters take the rest: refiners get exactly the decay (integer rounding)
            assert abs(refiner - decay) <= 1.0, (k, refiner, decay)
        else:  # a drafter cannot hold more than its cache: what it cannot use goes to the refiners
            assert refiner >= decay - 1.0
        assert drafter > refiner
    assert (b.table[1, first + 1:-1] < b.table[1, first:-2]).all()  # refiner budgets shrink with the scale
    assert b.drafters[[0, 23], first:].all() and not b.drafters[:, :first].any()


def test_delta_that_makes_a_refiner_budget_negative_is_rejected():
    d = _drafters(4, SIDES, (0,))
    steps = [k for k in compressed_scales(uniform_budget(0.1, SIDES), SIDES) if k < len(SIDES) - 1]
    ok = (600 / 650) / (len(steps) - 1)
    scalekv_budgets(d, 0.1, SIDES, delta=ok, window_size=1)
    with pytest.raises(ParameterError, match="delta"):
        scalekv_budgets(d, 0.1, SIDES, delta=ok * 1.01, window_size=1)
    with pytest.raises(ParameterError, match="delta"):
        scalekv_budgets(d, 0.1, SIDES, delta=-0.01, window_size=1)


def test_budget_below_the_window_is_rejected():
    with pytest.raises(ParameterError, match="observation window"):
        uniform_budgets(3, 0.04, SIDES, window_size=16)


def test_pyramid_decreases_with_depth_at_the_same_total():
    b = pyramid_budgets(5, 0.3, INFINITY_1024)
    k = b.first + 1
    col = b.table[:, k]
    assert int(col.sum()) == 5 * b.base and (col[1:] <= col[:-1]).all() and col[0] > 3 * col[-1]


def test_fit_integer_budgets_honours_caps_floors_and_total():
    x = fit_integer_budgets([10.0, 2.0, 2.0], 12, lo=[1, 3, 1], hi=[6, 9, 9])
    assert x.sum() == 12 and x[0] == 6 and (x >= [1, 3, 1]).all()
    with pytest.raises(ParameterError):
        fit_integer_budgets([1, 1], 1, lo=1, hi=5)


# ---------------------------------------------------------------- the cache policy
def test_window_positions_are_the_official_patch_centroids():
    glob, local = window_positions(8, 100, 164, 16)  # 8x8 map: patches of 2, centres 0, 2, 4, 6
    assert local.tolist() == [r * 8 + c for r in (0, 2, 4, 6) for c in (0, 2, 4, 6)] and torch.equal(glob, local + 100)
    _, local48 = window_positions(48, 0, 2304, 16)  # Infinity's 48x48 map: patches of 12, centres 5, 17, 29, 41
    assert local48[:4].tolist() == [5 * 48 + c for c in (5, 17, 29, 41)] and local48[4].item() == 17 * 48 + 5
    glob3, local3 = window_positions(3, 5, 14, 16)  # smaller than the 4x4 grid: the last 14 cache entries
    assert glob3.tolist() == list(range(0, 14)) and local3.min() == 0 and local3.max() == 8
    # Sides not divisible by 4 floor the patch (H // 4): 6x6 -> patches of 1, centres 0-3 (the top-left 4x4 block);
    # 20x20 (Infinity) -> patches of 5, centres 2, 7, 12, 17 (h = i * 5 + (5 - 1) // 2).
    _, local6 = window_positions(6, 21, 57, 16)
    assert local6.tolist() == [r * 6 + c for r in range(4) for c in range(4)]
    _, local20 = window_positions(20, 0, 400, 16)
    assert local20.tolist() == [r * 20 + c for r in (2, 7, 12, 17) for c in (2, 7, 12, 17)]
    # A 3x3 map inside a longer cache: the last 16 entries (13..28), queries clamped to the map as the code does.
    glob3b, local3b = window_positions(3, 20, 29, 16)
    assert glob3b.tolist() == list(range(13, 29)) and local3b.tolist() == [0] * 7 + list(range(9))
    g2, l2 = window_positions(6, 30, 66, 4)  # 2x2 grid on a 6x6 map: centres 1 and 4
    assert l2.tolist() == [7, 10, 25, 28]
    with pytest.raises(ParameterError):
        window_positions(8, 0, 64, 10)


def test_selection_through_the_cache_on_a_hand_case():
    """One layer, maps 1x1 and 3x3 (cache positions 0 and 1-9), B = 5, capacity 6, a 2x2 window grid.

    After the 3x3 step the cache (10 > B) is compressed to 6: the window is the centroids of 1x1
    patches, local (0, 1, 3, 4) -> positions {1, 2, 4, 5}. With unit queries (D = 1) the scores are
    4 k_i: k_0 = 7 -> 28, k_7 = 1 -> 4, the rest 0, window keys -inf. Max-pool (radius 2): position 0
    pools 28; 6, 7, 8, 9 pool 4 (from key 7); 3 pools 0. Top-2 = {0, 6} (ties by position), plus the window.
    """
    from companion.scalekv.budgets import Budgets
    from companion.scalekv.model import LayerCache

    sides = (1, 3, 4)
    b = Budgets("uniform", 0.5, sides, 5, torch.tensor([[0, 6, 6]]), torch.zeros(1, 3, dtype=torch.bool), "snapkv", 1)
    pol = CachePolicy(b, window_size=4, impl="reference")
    pol.reset(1)
    k = torch.zeros(1, 1, 10, 1)
    k[0, 0, 0, 0], k[0, 0, 7, 0] = 7.0, 1.0
    cache = LayerCache(k=k, v=torch.arange(10.0).view(1, 1, 10, 1), pos=torch.arange(10).view(1, 1, 10))
    pol.compress(0, 1, cache, torch.ones(1, 1, 9, 1))
    assert cache.pos.flatten().tolist() == [0, 1, 2, 4, 5, 6]
    assert cache.v.flatten().tolist() == [0.0, 1.0, 2.0, 4.0, 5.0, 6.0]
    small = LayerCache(k=k[:, :, :5], v=k[:, :, :5], pos=torch.arange(5).view(1, 1, 5))
    pol.reset(1)
    pol.compress(0, 1, small, torch.ones(1, 1, 4, 1))  # 5 <= B: nothing happens
    assert small.length == 5


def test_compression_starts_above_base_and_the_last_scale_reuses_the_previous_budget(model):
    b = method_budgets("uniform", 3, 0.3, SIDES, window_size=4)  # B = 20: compressed from the 4x4 map (cum 30)
    assert b.base == 20 and b.first == 3
    gen = run_policy(model, torch.arange(2), b, window_size=4)
    assert gen.retained[:, :3].tolist() == [[1, 5, 14]] * 3  # untouched while the cache is <= B
    assert (gen.retained[:, 3:] == 20).all()
    assert torch.equal(gen.retained, expected_retained(b))
    assert gen.attended[:, 4].tolist() == [20 + 36] * 3  # step 4 attends to the kept 20 plus its own map


def test_policy_rule_base_capacity_last_scale_and_flag_on_a_hand_case():
    """The official ``update_kv`` rule, one layer, maps 1, 2, 3 (cache 1, 5, 14), base capacity 3, sliding
    window so only the lengths matter. The table's last column (9) is never read: the last scale uses the
    previous column (2). After the last scale the flag is cleared without a ``reset``, so the next image's
    short caches are left alone, while within an image a cache below base is still cut once it has been."""
    from companion.scalekv.budgets import Budgets
    from companion.scalekv.model import LayerCache

    def cache(n):
        t = torch.arange(float(n)).view(1, 1, n, 1)
        return LayerCache(k=t, v=t.clone(), pos=torch.arange(n).view(1, 1, n))

    b = Budgets("window", 0.5, (1, 2, 3), 3, torch.tensor([[0, 2, 9]]), torch.zeros(1, 3, dtype=torch.bool), "recent", 1)
    pol = CachePolicy(b)
    pol.reset(1)
    c = cache(1)
    pol.compress(0, 0, c, None)
    assert c.length == 1 and pol.reached == [False]  # 1 <= base: untouched
    c = cache(3)
    pol.compress(0, 1, c, None)
    assert c.length == 3 and pol.reached == [False]  # key_len == base: still untouched (compress only above)
    c = cache(5)
    pol.compress(0, 1, c, None)
    assert c.pos.flatten().tolist() == [3, 4] and pol.reached == [True]  # 5 > base: cut to the scale's capacity 2
    c = cache(3)
    pol.compress(0, 1, c, None)
    assert c.length == 2  # once reached, a cache of 3 <= base is cut too
    c = cache(11)
    pol.compress(0, 2, c, None)
    assert c.pos.flatten().tolist() == [9, 10] and pol.reached == [False]  # last scale: previous capacity, flag cleared
    c = cache(3)
    pol.compress(0, 1, c, None)
    assert c.length == 3  # the next image starts uncompressed


@pytest.mark.parametrize("fraction", [0.1, 0.3, 0.6])
@pytest.mark.parametrize("method", METHODS)
def test_retained_bytes_equal_the_budget(model, z, method, fraction):
    b = plan(method, model, fraction, SIDES, z=z, window_size=4)
    full = run_policy(model, torch.arange(3), None)
    gen = run_policy(model, torch.arange(3), b, window_size=4)
    per_token = 2 * 3 * 2 * 16 * 4  # K and V, batch 3, 2 heads of 16, float32
    assert int(gen.retained_bytes[:, len(SIDES) - 2].sum()) == 3 * b.base * per_token
    assert torch.equal(gen.retained, expected_retained(b))
    mem = memory_summary(gen, full)
    assert mem["memory_fraction"] == pytest.approx(b.base / cumulative_tokens(SIDES)[-2])
    assert mem["full_bytes"] == 3 * cumulative_tokens(SIDES)[-2] * per_token


def test_full_budget_is_exactly_the_full_cache(model, z):
    full = run_policy(model, torch.arange(4), None, seed=3)
    for method in METHODS:
        gen = run_policy(model, torch.arange(4), plan(method, model, 1.0, SIDES, z=z, window_size=4), seed=3, window_size=4)
        assert torch.equal(gen.tokens, full.tokens) and torch.equal(gen.hidden, full.hidden), method


def test_streaming_and_window_keep_sinks_and_recent_tokens(model):
    n = cumulative_tokens(SIDES)[-1]
    gs = run_policy(model, torch.arange(1), method_budgets("streaming", 3, 0.3, SIDES))
    gw = run_policy(model, torch.arange(1), method_budgets("window", 3, 0.3, SIDES))
    # after the last scale both keep 20 entries: 4 sinks + the 16 most recent, or the 20 most recent
    assert gs.kept_positions[0][0, 0].tolist() == [0, 1, 2, 3] + list(range(n - 16, n))
    assert gw.kept_positions[0][0, 0].tolist() == list(range(n - 20, n))


def test_metrics_known_values():
    a, b = torch.zeros(2, 4, 4), torch.full((2, 4, 4), 0.1)
    assert psnr(a, b) == pytest.approx(20.0)
    assert psnr(a, a) == math.inf
    assert token_agreement(torch.tensor([1, 2, 3, 4]), torch.tensor([1, 0, 3, 0])) == 0.5
    h = torch.ones(2, 3)
    assert hidden_error(2 * h, h) == pytest.approx(1.0)


def test_cache_policy_rejects_bad_arguments(model):
    with pytest.raises(TypeError):
        CachePolicy({"table": 1})
    b = method_budgets("uniform", 3, 0.3, SIDES, window_size=4)
    with pytest.raises(ParameterError):
        CachePolicy(b, window_size=5)
    pol = CachePolicy(b, window_size=4)
    with pytest.raises(ValueError, match="layers"):
        pol.reset(5)
    with pytest.raises(ParameterError):
        plan("scalekv", model, 0.3, SIDES, z=None)
    with pytest.raises(ParameterError):
        plan("h2o", model, 0.3, SIDES)


# ---------------------------------------------------------------- scale-up arithmetic
def test_analytic_memory_matches_the_budget():
    am = analytic_memory()
    per_token = kv_bytes(1, 28, 128, batch=16)
    last = am["rows"][-1]
    assert last["full_bytes"] == 40 * 10521 * per_token
    assert last["scalekv_bytes"] == 40 * 642 * per_token
    assert am["drafter_budget_range"][1] > am["refiner_budget_range"][1]
    assert _compressed_lengths(INFINITY_1024, 650) == [1, 5, 21, 57, 121, 265, 521, 921, 650 + 576, 650 + 1024, 650 + 1600,
                                                        650 + 2304, 650 + 4096]


def test_raw_asi_misranks_planted_drafters_and_the_concentration_reading_does_not():
    """Why the history factor is normalised: on the planted model (drafters put ~95 % of their attention
    on earlier scales, refiners ~1 %) the literal product c * TopK(raw alpha) ranks the drafters *high*."""
    from companion.scalekv import planted_model

    sides = (1, 2, 3, 4, 6)
    model, bias = planted_model(sides, layers=4, drafters=(2,), seed=0)
    norm = calibrate(model, torch.arange(2), bias=bias).z
    raw = calibrate(model, torch.arange(2), bias=bias, normalize=False).z
    assert all(int(torch.argmin(norm[:, k])) == 2 for k in range(1, len(sides)))
    assert all(raw[2, k] > 0.9 and int(torch.argmin(raw[:, k])) != 2 for k in range(1, len(sides)))  # ranked as a refiner


def test_study_stages_on_the_smoke_profile():
    """The latency stage sums its rows; the selection stage starts a batch only while time is left (the first
    always runs) and labels its rows with the batch; a wrong dtype is refused naming the profile key."""
    from companion.core.stages import StageContext
    from companion.scalekv.bench import latency_stage, selection_stage
    from companion.scalekv.scale import SMOKE_PROFILE

    ctx = StageContext(profile=SMOKE_PROFILE, device="cpu", log=lambda *a: None, results={})
    lat = latency_stage(ctx)
    assert len(lat["rows"]) == len(SMOKE_PROFILE["latency"]["sides"])
    assert lat["total"]["full_ms"] == pytest.approx(sum(r["full_ms"] for r in lat["rows"]), abs=1e-4)
    late = StageContext(profile={**SMOKE_PROFILE, "selection": {**SMOKE_PROFILE["selection"], "batches": [1, 2]}},
                        device="cpu", log=lambda *a: None, results={}, until=0.0)  # no time left
    rows = selection_stage(late)
    assert {r["batch"] for r in rows} == {1} and all(r["label"].startswith("B=1, ") for r in rows)
    bad = StageContext(profile={**SMOKE_PROFILE, "latency": {**SMOKE_PROFILE["latency"], "dtype": "int8"}},
                       device="cpu", log=lambda *a: None, results={})
    with pytest.raises(ParameterError, match="latency.dtype"):
        latency_stage(bad)

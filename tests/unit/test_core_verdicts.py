"""companion.core.judge: the one rule behind every verdict, at each of its edges, and its refusals."""

import math

import pytest

from companion.core import MIN_SEEDS, VERDICTS, ParameterError, inconclusive, judge, not_run


def verdict(*args, **kw):
    return judge(*args, **kw).verdict


def test_the_verdicts():
    assert VERDICTS == ("reproduced", "partly reproduced", "not reproduced", "inconclusive", "not run here")


def test_exact_claims_are_judged_on_one_run():
    assert judge(3e-16, 1e-10, kind="exact") == judge(3e-16, 1e-10, kind="exact", direction="lower")
    assert verdict(1e-10, 1e-10, kind="exact") == "reproduced"  # within means ≤
    assert verdict(1.01e-10, 1e-10, kind="exact") == "not reproduced"
    assert verdict([1e-12, 2e-10], 1e-10, kind="exact") == "not reproduced"  # every error must be within
    assert judge([1e-12, 5e-11], 1e-10, kind="exact").evidence == "max error 5e-11 vs ≤ 1e-10"
    assert verdict(math.inf, 1e-10, kind="exact") == "not reproduced"


def test_an_exact_claim_rests_on_its_worst_error_and_a_bit_exact_one_has_tolerance_zero():
    """Errors 0 and 1.5e-10 have a mean (7.5e-11) within 1e-10 but a worst error outside it; a tolerance of 0 (a
    bit-exact round trip) is allowed, and only an error of exactly 0 meets it."""
    assert verdict([0.0, 1.5e-10], 1e-10, kind="exact") == "not reproduced"
    assert verdict(0.0, 0.0, kind="exact") == "reproduced"
    assert verdict([0.0, 5e-324], 0, kind="exact") == "not reproduced"


def test_effects_need_three_seeds():
    assert MIN_SEEDS == 3
    one = judge([0.50], 0.5, direction="lower")
    assert one.verdict == "inconclusive" and one.evidence == "n=1: 0.5 vs ≤ 0.5; fewer than 3 seeds"
    assert verdict([0.1, 0.1], 0.5, direction="lower") == "inconclusive"  # far past the target, still two seeds
    assert verdict([0.1, 0.1, 0.1], 0.5, direction="lower") == "reproduced"


@pytest.mark.parametrize("sign", [1, -1])
def test_effect_rule_at_each_edge_in_both_directions(sign):
    d = "higher" if sign > 0 else "lower"

    def v(values, target, weaker=None):
        return verdict([sign * x for x in values], sign * target, direction=d,
                       weaker=None if weaker is None else sign * weaker)

    assert v([2.0, 2.1, 2.2], 2.0) == "reproduced"  # every seed past (equality counts)
    assert v([1.99, 2.6, 2.6], 2.0) == "reproduced"  # one seed short, the mean past by more than the std
    assert v([1.5, 2.3, 2.4], 2.0) == "partly reproduced"  # mean past, not every seed, within the std
    assert v([1.6, 1.7, 1.8], 2.0, weaker=1.5) == "partly reproduced"  # mean past the weaker bar only
    # misses the weaker bar (by 0.05, less than s) and the target by more than s
    assert v([1.6, 1.7, 1.8], 2.0, weaker=1.75) == "not reproduced"
    assert v([1.0, 1.9, 2.4], 2.0) == "inconclusive"  # mean misses, mean ± std straddles the target
    assert v([1.0, 1.1, 1.2], 2.0) == "not reproduced"


@pytest.mark.parametrize("sign", [1, -1])
def test_a_bar_met_exactly_is_past_and_a_margin_of_exactly_the_std_is_not_more_than_it(sign):
    """Seeds 0, 4, 4, 4 have mean 3 and sample std 2 exactly (variance (9 + 1 + 1 + 1) / 3 = 4), so every edge of
    the rule is hit without rounding: "past" includes equality, "by more than s" excludes it."""
    d = "higher" if sign > 0 else "lower"

    def v(target, weaker=None):
        return verdict([sign * x for x in (0.0, 4.0, 4.0, 4.0)], sign * target, direction=d,
                       weaker=None if weaker is None else sign * weaker)

    assert v(1.0) == "partly reproduced"  # the mean is past by exactly s (not more), and one seed is short
    assert v(3.0) == "partly reproduced"  # the mean is exactly on the target
    assert v(3.0, weaker=3.0) == "partly reproduced"  # a weaker bar may equal the target
    assert v(6.0, weaker=3.0) == "partly reproduced"  # the mean is exactly on the weaker bar
    assert v(5.0) == "inconclusive"  # the mean misses by exactly s: m + s reaches the target


def test_timing_claims_are_judged_on_one_run_of_ratios():
    assert verdict(1.4, 1.0, kind="timing", direction="higher") == "reproduced"
    assert verdict(0.9, 1.0, kind="timing", direction="higher", weaker=0.8) == "partly reproduced"
    assert verdict(0.56, 1.0, kind="timing", direction="higher") == "not reproduced"
    assert judge([1.1, 1.3], 1.0, kind="timing", direction="higher").evidence == "n=2: 1.2 ± 0.141 (1.1–1.3) vs ≥ 1"


def test_a_sign_flip_is_not_a_reduction_in_magnitude():
    """Judge |bias| where the claim is a smaller bias: +0.32 → -0.28 per seed is no 50 % reduction."""
    before, after = [0.32, 0.31, 0.33], [-0.28, -0.29, -0.27]
    assert verdict([a - b for a, b in zip(after, before)], 0.0, direction="lower") == "reproduced"  # the trap
    ratios = [abs(a) / abs(b) for a, b in zip(after, before)]
    assert verdict(ratios, 0.5, direction="lower") == "not reproduced"


def test_infinite_values_are_shown_and_judged_by_their_meaning():
    diverged = judge([0.4, 0.45, math.inf], 0.5, direction="lower")
    assert "inf" in diverged.evidence and diverged.verdict == "inconclusive"
    assert verdict([2.0, 2.5, math.inf], 1.0, direction="higher") == "reproduced"
    assert verdict([math.inf] * 3, 0.5, direction="lower") == "not reproduced"  # every seed diverged
    assert verdict([-math.inf, 0.2, 0.1], 1.0, direction="higher") == "not reproduced"
    assert verdict([math.inf, -math.inf, 0.0], 1.0, direction="higher") == "inconclusive"
    assert judge([math.inf, -math.inf, 0.0], 1.0, direction="higher").evidence.endswith(
        "; values diverge to both +inf and -inf")


def test_custom_number_format():
    assert judge([1.0, 2.0, 3.0], 1.5, direction="higher", fmt=lambda x: f"{x:.1f}x").evidence == \
        "n=3: 2.0x ± 1.0x (1.0x–3.0x) vs ≥ 1.5x"


@pytest.mark.parametrize("kwargs, message", [
    (dict(values=[], target=1.0, direction="higher"), "values=.*expected at least one measurement"),
    (dict(values=[1.0, float("nan"), 2.0], target=1.0, direction="higher"), "values=.*expected no NaN"),
    (dict(values=["a"], target=1.0, direction="higher"), "values=.*expected numbers"),
    (dict(values=[1.0], target=float("nan"), direction="higher"), "target=nan.*a finite number"),
    (dict(values=[1.0], target=1.0), "direction"),
    (dict(values=[1.0], target=1.0, direction="up"), "direction"),
    (dict(values=[1.0], target=1.0, kind="timing"), "direction"),  # only an exact claim has a default direction
    (dict(values=[1.0], target=1.0, kind="exact", direction="higher"), "direction=.*for an exact claim"),
    (dict(values=[1.0], target=-1.0, kind="exact"), "target=-1.0.*tolerance >= 0"),
    (dict(values=[0.0, -5.0], target=0.0, kind="exact"), r"values=\[0.0, -5.0\].*errors >= 0"),  # a signed difference
    (dict(values=[1.0], target=1.0, kind="exact", weaker=2.0), "weaker=2.0.*None for an exact claim"),
    (dict(values=[1.0], target=2.0, direction="higher", weaker=2.5), "weaker=.*easy side of target"),
    (dict(values=[1.0], target=0.5, direction="lower", weaker=0.4), "weaker=.*easy side of target"),
    (dict(values=[1.0], target=1.0, direction="higher", weaker=math.inf), "weaker=inf.*a finite number"),
    (dict(values=[1.0], target=1.0, kind="seeds", direction="higher"), "kind"),
])
def test_bad_input_names_the_argument(kwargs, message):
    with pytest.raises(ParameterError, match=message):
        judge(**kwargs)


def test_not_run_says_why():
    assert not_run("needs a GPU").verdict == "not run here" and not_run("needs a GPU").evidence == "needs a GPU"
    with pytest.raises(ParameterError, match="why=''"):
        not_run("")


def test_inconclusive_says_what_cannot_be_judged():
    row = inconclusive("every seed's ESS is below the floor of 2")
    assert row.verdict == "inconclusive" and row.evidence == "every seed's ESS is below the floor of 2"
    with pytest.raises(ParameterError, match="why=''"):
        inconclusive("")


def test_per_seed_and_seeds_text():
    from companion.core import per_seed, seeds_text

    run = {"loss": 1.0}
    assert per_seed(run) == [run] and per_seed([run, run]) == [run, run] and per_seed((run,)) == [run]
    assert seeds_text(1) == "one seed" and seeds_text(3) == "3 seeds"


def test_mean_std_writes_the_sample_spread_and_no_spread_for_one_value():
    from companion.core import mean_std

    assert mean_std([1.0, 2.0, 3.0]) == "2.000 ± 1.000"  # sample std (ddof 1)
    assert mean_std([0.5], "{:.1f}".format) == "0.5"
    assert mean_std(iter([1, 3]), lambda x: f"{x:g}") == "2 ± 1.41421"

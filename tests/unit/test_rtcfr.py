"""Paper 18 (RTCFR+): the sequence-form engine, the solvers and their known truths."""

from __future__ import annotations

import numpy as np
import pytest

pyspiel = pytest.importorskip("pyspiel")

from companion.core import ParameterError  # noqa: E402
from companion.rtcfr import CompiledGame, Solver, compile_game, nash_conv, sequence_form, solve  # noqa: E402
from companion.rtcfr.batched import BatchedSolver  # noqa: E402
from companion.rtcfr.games import data_path, openspiel_game  # noqa: E402
from companion.rtcfr.policy import from_tabular_policy, openspiel_nash_conv, to_tabular_policy  # noqa: E402
from companion.rtcfr.seqform import (  # noqa: E402
    TreeplexOps,
    best_response,
    best_response_gains,
    counterfactual_values,
    exploitability,
    random_behavioural,
)

SMALL = ["kuhn_poker", "leduc_poker", "liars_dice_3", "goofspiel_3", "battleship_2x2"]


# ------------------------------------------------------------------ compilation
@pytest.mark.parametrize("name,histories,infosets", [("kuhn_poker", 58, 12), ("leduc_poker", 9457, 936)])
def test_sizes_match_the_paper(name, histories, infosets):
    game = compile_game(name)
    assert game.n_histories == histories and game.n_infosets == infosets


@pytest.mark.parametrize("name", SMALL)
def test_treeplex_is_consistent(name):
    game = compile_game(name)
    rng = np.random.default_rng(1)
    for tp in game.players:
        assert tp.seq_infoset[0] == -1 and (np.diff(tp.infoset_start) == tp.infoset_size[:-1]).all()
        assert tp.infoset_start[-1] + tp.infoset_size[-1] == tp.n_seq
        x = sequence_form(tp, random_behavioural(tp, rng))
        # flow conservation: x(p(I)) = Σ_a x(I, a) at every infoset
        sums = np.add.reduceat(x[1:], tp.infoset_starts0)
        np.testing.assert_allclose(sums, x[tp.infoset_parent], atol=1e-12)
    # chance-weighted payoffs of a zero-sum game: uniform play's value is within the payoff range
    assert game.payoff.shape == (game.players[0].n_seq, game.players[1].n_seq)


def test_npz_round_trip(tmp_path):
    game = compile_game("leduc_poker")
    loaded = CompiledGame.load(game.save(tmp_path / "leduc.npz"))
    a = solve(game, "rtcfr+", 30, eval_every=10, mu=1e-3, T_u=10)
    b = solve(loaded, "rtcfr+", 30, eval_every=10, mu=1e-3, T_u=10)
    np.testing.assert_allclose(a.last, b.last, rtol=0, atol=0)
    assert sorted(f.name for f in tmp_path.iterdir()) == ["leduc.npz"]  # atomic: no temporary file left, no ".npz.npz"
    with pytest.raises(FileNotFoundError, match="make_games|CompiledGame.save"):
        CompiledGame.load(tmp_path / "missing.npz")


# ------------------------------------------------------------------ metrics against OpenSpiel
@pytest.mark.parametrize("name", SMALL)
def test_nash_conv_equals_openspiel_on_random_policies(name):
    game = compile_game(name)
    rng = np.random.default_rng(0)
    s0, s1 = random_behavioural(game.players[0], rng), random_behavioural(game.players[1], rng)
    ours = nash_conv(game, sequence_form(game.players[0], s0), sequence_form(game.players[1], s1))
    assert ours == pytest.approx(openspiel_nash_conv(game, s0, s1), abs=1e-9)
    assert exploitability(game, sequence_form(game.players[0], s0), sequence_form(game.players[1], s1)) == pytest.approx(ours / 2)
    r0, r1 = from_tabular_policy(game, to_tabular_policy(game, s0, s1))
    np.testing.assert_array_equal(r0[1:], s0[1:])
    np.testing.assert_array_equal(r1[1:], s1[1:])


def test_openspiel_exploitability_is_half_nash_conv():
    from open_spiel.python.algorithms import exploitability as os_exp

    game = compile_game("kuhn_poker")
    rng = np.random.default_rng(3)
    s0, s1 = random_behavioural(game.players[0], rng), random_behavioural(game.players[1], rng)
    pol = to_tabular_policy(game, s0, s1)
    x0, x1 = sequence_form(game.players[0], s0), sequence_form(game.players[1], s1)
    assert os_exp.exploitability(openspiel_game("kuhn_poker"), pol) == pytest.approx(exploitability(game, x0, x1), abs=1e-12)


def test_best_response_is_pure_and_attains_its_value():
    game = compile_game("leduc_poker")
    rng = np.random.default_rng(5)
    x1 = sequence_form(game.players[1], random_behavioural(game.players[1], rng))
    g0 = game.payoff @ x1
    value, br = best_response(game.players[0], g0)
    assert set(np.unique(br)) <= {0.0, 1.0}
    assert value == pytest.approx(float(sequence_form(game.players[0], br) @ g0), abs=1e-12)
    x0 = sequence_form(game.players[0], random_behavioural(game.players[0], rng))
    assert min(best_response_gains(game, x0, x1)) >= -1e-12


def test_fast_passes_equal_the_reference_passes():
    game = compile_game("liars_dice_3")
    rng = np.random.default_rng(2)
    for tp in game.players:
        sigma, g = random_behavioural(tp, rng), rng.standard_normal(tp.n_seq)
        v_ref, ev_ref = counterfactual_values(tp, g.copy(), sigma)
        ops = TreeplexOps(tp)
        v = ops.values(g.copy(), sigma)
        m = ops.regrets(v)
        np.testing.assert_allclose(v, v_ref, atol=1e-12)
        np.testing.assert_allclose(m, v_ref[1:] - ev_ref[tp.seq_infoset[1:]], atol=1e-12)
        x = np.empty(tp.n_seq)
        np.testing.assert_allclose(ops.forward(sigma, x), sequence_form(tp, sigma), atol=0)


# ------------------------------------------------------------------ solvers: known truths
@pytest.mark.parametrize("name,iterations", [("kuhn_poker", 60), ("leduc_poker", 20), ("goofspiel_3", 30)])
def test_cfr_plus_matches_openspiel_cpp_iterate_for_iterate(name, iterations):
    game, os_game = compile_game(name), openspiel_game(name)
    cpp, ours = pyspiel.CFRPlusSolver(os_game), Solver(game, "cfr+")
    for _ in range(iterations):
        cpp.evaluate_and_update_policy()
        ours.step()
    assert ours.nash_conv("average") == pytest.approx(pyspiel.nash_conv(os_game, cpp.average_policy()), abs=1e-9)
    assert ours.nash_conv("last") == pytest.approx(pyspiel.nash_conv(os_game, cpp.current_policy()), abs=1e-9)


@pytest.mark.parametrize("algorithm", ["cfr", "dcfr"])
@pytest.mark.parametrize("name,iterations", [("kuhn_poker", 30), ("leduc_poker", 6)])
def test_cfr_and_dcfr_match_openspiel_iterate_for_iterate(algorithm, name, iterations):
    """The baselines the claims compare against, against OpenSpiel's Python solvers (alternating updates; DCFR with
    α = 1.5, β = 0, γ = 2): the last and the average iterate's NashConv after every few iterations. The order of
    DCFR's discount and the new regret matters here, not in a convergence band."""
    from open_spiel.python.algorithms import cfr as os_cfr
    from open_spiel.python.algorithms import discounted_cfr
    from open_spiel.python.algorithms import exploitability as os_exp

    game, os_game = compile_game(name), openspiel_game(name)
    peer = (os_cfr.CFRSolver(os_game) if algorithm == "cfr"
            else discounted_cfr.DCFRSolver(os_game, alpha=1.5, beta=0.0, gamma=2.0))
    ours = Solver(game, algorithm)
    for t in range(1, iterations + 1):
        peer.evaluate_and_update_policy()
        ours.step()
        if t % 3 == 0 or t == iterations:
            assert ours.nash_conv("last") == pytest.approx(os_exp.nash_conv(os_game, peer.current_policy()), abs=1e-9), t
            assert ours.nash_conv("average") == pytest.approx(os_exp.nash_conv(os_game, peer.average_policy()), abs=1e-9), t


def test_rtcfr_plus_kuhn_last_iterate_reaches_nash():
    tr = solve("kuhn_poker", "rtcfr+", 500, eval_every=50, average=False, mu=0.1, T_u=10)
    assert tr.at(500) < 1e-6
    solver = Solver("kuhn_poker", "rtcfr+", mu=0.1, T_u=10)
    for _ in range(500):
        solver.step()
    from companion.rtcfr import expected_value

    assert expected_value(solver.game, *solver.last_iterate()) == pytest.approx(-1 / 18, abs=1e-6)  # Kuhn's value


def test_rtcfr_plus_leduc_bands_and_reset_theta_does_not_converge():
    tr = solve("leduc_poker", "rtcfr+", 2000, eval_every=100, average=False, mu=1e-3, T_u=100)
    assert tr.at(1000) < 1e-2 and tr.at(2000) < 1e-3
    reset = solve("leduc_poker", "rtcfr+", 1000, eval_every=10, average=False, mu=1e-3, T_u=100, reset_theta=True)
    assert reset.min_after(900) > 0.03  # even its best point in the last cycle stays far away


def test_fixed_reference_converges_in_last_iterate():
    """Thm 4.1: with r fixed (T_u beyond the horizon) CFR+ on the perturbed regularised game converges."""
    solver = Solver("kuhn_poker", "rtcfr+", mu=0.1, T_u=10**9, gamma=1e-3)
    snaps = []
    for t in range(1, 3001):
        solver.step()
        if t in (2000, 3000):
            snaps.append(solver.players[0].x.copy())
    assert np.abs(snaps[1] - snaps[0]).max() < 1e-8
    assert solver.nash_conv() > 1e-3  # the regularised game's equilibrium is not the original one
    assert (solver.players[0].sigma_hat[1:] >= 1e-3 - 1e-15).all()  # the perturbation floor γ


@pytest.mark.parametrize("algorithm", ["cfr", "pcfr+", "dcfr", "rtpcfr+"])
def test_other_algorithms_converge_on_kuhn(algorithm):
    tr = solve("kuhn_poker", algorithm, 400, eval_every=100, mu=0.1, T_u=10)
    metric = tr.last if algorithm == "rtpcfr+" else tr.average
    assert metric[-1] < 0.5 * metric[1] and metric[-1] < 0.02  # iterations 100 -> 400


def test_freeze_alpha_matches_the_paper_form_at_small_gamma():
    a = solve("kuhn_poker", "rtcfr+", 100, eval_every=100, mu=0.1, T_u=10)
    b = solve("kuhn_poker", "rtcfr+", 100, eval_every=100, mu=0.1, T_u=10, freeze_alpha=True, v2=True)
    np.testing.assert_allclose(a.last, b.last, rtol=1e-6)


@pytest.mark.parametrize("algorithm,hyper", [("rtcfr+", dict(mu=0.1, T_u=7)), ("dcfr", {}), ("pcfr+", {}),
                                             ("rtcfr+", dict(mu=0.05, T_u=3, reset_theta=True))])
@pytest.mark.parametrize("name", ["kuhn_poker", "leduc_poker"])
def test_batched_torch_solver_equals_numpy_solver(name, algorithm, hyper):
    game = compile_game(name)
    ref = Solver(game, algorithm, **hyper)
    batched = BatchedSolver(game, algorithm, mu=[hyper.get("mu", 1e-3)] * 2, T_u=[hyper.get("T_u", 100)] * 2,
                            reset_theta=hyper.get("reset_theta", False))
    for _ in range(25):
        ref.step()
        batched.step()
    for which in ("last", "average"):
        got = batched.nash_conv(which).numpy()
        np.testing.assert_allclose(got, ref.nash_conv(which), rtol=1e-7, atol=1e-12)


def test_batched_columns_are_independent():
    game = compile_game("kuhn_poker")
    batched = BatchedSolver(game, "rtcfr+", mu=[0.1, 0.01], T_u=[10, 5])
    _, last, _ = batched.run(40, eval_every=20)
    for k, (mu, tu) in enumerate([(0.1, 10), (0.01, 5)]):
        np.testing.assert_allclose(last[:, k], solve(game, "rtcfr+", 40, eval_every=20, mu=mu, T_u=tu).last, rtol=1e-9)


# ------------------------------------------------------------------ bad input
def test_unknown_game_lists_examples():
    with pytest.raises(ParameterError, match="kuhn_poker.*leduc_poker"):
        compile_game("no_such_game")


@pytest.mark.parametrize("name", ["kuhn_poker(players=3)", "matrix_pd"])
def test_not_two_player_zero_sum_is_refused(name):
    with pytest.raises(ParameterError, match="two-player zero-sum"):
        compile_game(name)


@pytest.mark.parametrize("kwargs,param", [(dict(mu=0.0), "mu"), (dict(mu=-1.0), "mu"), (dict(T_u=0), "T_u"),
                                          (dict(T_u=2.5), "T_u"), (dict(gamma=-1e-3), "gamma"),
                                          (dict(gamma=0.6), "gamma"), (dict(algorithm="cfr++"), "algorithm")])
def test_bad_hyperparameters(kwargs, param):
    with pytest.raises(ParameterError, match=param):
        Solver("kuhn_poker", **kwargs)
    if param in ("mu", "T_u"):
        with pytest.raises(ParameterError, match=param):
            BatchedSolver(compile_game("kuhn_poker"), "rtcfr+", **kwargs)


def test_batched_gather_matmul_equals_csr():
    game = compile_game("leduc_poker")
    a = BatchedSolver(game, "rtcfr+", mu=[1e-3, 1e-2], T_u=[10, 3], matmul="csr")
    b = BatchedSolver(game, "rtcfr+", mu=[1e-3, 1e-2], T_u=[10, 3], matmul="gather")
    for _ in range(15):
        a.step()
        b.step()
    np.testing.assert_allclose(a.nash_conv().numpy(), b.nash_conv().numpy(), rtol=1e-9)


def test_solver_iterates_convert_to_openspiel_policies():
    from open_spiel.python.algorithms import exploitability as os_exp

    from companion.rtcfr.policy import solver_policy

    solver = Solver("leduc_poker", "cfr+")
    for _ in range(10):
        solver.step()
    os_game = openspiel_game("leduc_poker")
    for which in ("last", "average"):
        assert os_exp.nash_conv(os_game, solver_policy(solver, which)) == pytest.approx(solver.nash_conv(which), abs=1e-9)


@pytest.mark.parametrize("T_u", [1, 3, 7])
def test_reference_moves_exactly_at_multiples_of_T_u_and_gamma_halves_there(T_u):
    """Alg. 1: at iterations t = k·T_u (before that iteration's updates) r ← x̂ and γ ← γ/2; never in between."""
    game = CompiledGame.load(data_path("kuhn_poker"))
    solver = Solver(game, "rtcfr+", mu=0.1, T_u=T_u, gamma=1e-3)
    assert solver.gamma == 1e-3
    for t in range(1, 4 * T_u + 3):
        before_x = [p.x.copy() for p in solver.players]
        before_ref = [p.ref.copy() for p in solver.players]
        before_gamma = solver.gamma
        solver.step()
        assert solver.t == t
        if t % T_u == 0:
            assert solver.gamma == before_gamma / 2, t
            for p, x in zip(solver.players, before_x):
                np.testing.assert_array_equal(p.ref, x)  # the profile the previous iteration left
        else:
            assert solver.gamma == before_gamma, t
            for p, r in zip(solver.players, before_ref):
                np.testing.assert_array_equal(p.ref, r)
    assert solver.gamma == 1e-3 / 2 ** ((4 * T_u + 2) // T_u)


# ------------------------------------------------------------------ the studies' stages
def _stage_ctx(profile, **results):
    from companion.core.stages import StageContext

    payload = {"profile": profile, "stages": {n: {"state": "done"} for n in results}, **results}
    return StageContext(profile=profile, device="cpu", log=lambda *a: None, results=payload)


def test_gpu_study_stages_check_the_batched_solver_first():
    """On the CPU the correctness stage agrees with numpy and validates no CUDA graph (graph_steps 0); a later stage
    run alone (``--stages throughput``) checks it itself instead of assuming a graph."""
    from companion.rtcfr.scale import SMOKE_PROFILE
    from companion.rtcfr.study import correctness_stage, throughput_stage

    check = correctness_stage(_stage_ctx(SMOKE_PROFILE))
    assert check["eager_ok"] and not check["graph_ok"] and check["graph_steps"] == 0
    assert check["eager"] == pytest.approx(check["numpy"], rel=1e-9)
    ctx = _stage_ctx({**SMOKE_PROFILE, "throughput": {**SMOKE_PROFILE["throughput"], "batches": [2]}})
    (row,) = throughput_stage(ctx)
    assert ctx.shared["graph_steps"] == 0 and row["batch"] == 2 and "graph_ms_per_step" not in row
    assert row["speedup_vs_numpy_cpu"] == pytest.approx(row["config_iterations_per_s"] * row["numpy_cpu_ms_per_iter"] / 1e3)


def test_cpu_target_needs_both_wall_speedups():
    from companion.rtcfr.scale_cpu import SMOKE_PROFILE
    from companion.rtcfr.study import CPU_SPEEDUP_TARGET, target_stage

    def leduc(cfr, rtcfr):
        return {"game": "leduc_poker", "ours_cfr_plus": {"speedup_wall": cfr, "speedup_cpu": 1.0},
                "ours_rtcfr_plus": {"speedup_wall": rtcfr, "speedup_cpu": 1.0}}

    assert target_stage(_stage_ctx(SMOKE_PROFILE, games=[leduc(CPU_SPEEDUP_TARGET, 2 * CPU_SPEEDUP_TARGET)]))["met"]
    out = target_stage(_stage_ctx(SMOKE_PROFILE, games=[leduc(2 * CPU_SPEEDUP_TARGET, 0.99 * CPU_SPEEDUP_TARGET)]))
    assert not out["met"] and out["leduc_speedup_cfr_plus_wall"] == 2 * CPU_SPEEDUP_TARGET
    with pytest.raises(RuntimeError, match="games stage"):
        target_stage(_stage_ctx(SMOKE_PROFILE, games=[{**leduc(1, 1), "game": "kuhn_poker"}]))

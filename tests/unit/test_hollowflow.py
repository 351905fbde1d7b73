"""companion.hollowflow: graphs, hollowness, exact divergences, likelihoods, peers, data, explorer."""

import math

import numpy as np
import plotly.graph_objects as go
import pytest
import torch

from companion.core import ParameterError, limit_threads
from companion.hollowflow import (
    EGNN,
    PAPER,
    NoBGNN,
    build_graph,
    divergence_bruteforce,
    divergence_hollow,
    divergence_hutchinson,
    jacobian,
    knn_adjacency,
    rk4_likelihood,
)
from companion.hollowflow.experiments import (
    block_mask,
    construction_check,
    cost_scaling,
    equivariance,
    paper_config,
    peer_likelihood,
    self_dependence,
    toy_flow,
)
from companion.hollowflow.divergence import gaussian_log_prob
from companion.hollowflow.explorer import ExplorerData, clamped_view, explorer_controls, explorer_view
from companion.hollowflow.hollownet import HollowMLP
from companion.hollowflow.lj import (
    align,
    bootstrap_interval,
    energy,
    ess_rem,
    kish_ess,
    load_samples,
    log_weights,
    mala,
    ot_pairs,
    train_cfm,
)


@pytest.fixture(autouse=True)
def _one_thread():
    with limit_threads(1):
        yield


def _model(n=9, k=3, steps=3, prune=True, attention=False, seed=0):
    torch.manual_seed(seed)
    return NoBGNN(d=3, hidden=12, steps=steps, k=k, prune=prune, attention=attention).double()


def test_identity():
    assert PAPER.notebook == "13_hollowflow"


# --- graphs -----------------------------------------------------------------------------------------------

def test_spec_line_edge_counts():
    g = build_graph(paper_config(9, 3, 0), 3, 3)
    assert g.counts() == [100, 40, 26]
    assert g.leaks() == 0


def test_line_graph_matches_brute_enumeration():
    x = paper_config(10, 3, 1)
    g = build_graph(x, 3, 1, prune=False)
    edges = list(zip(g.src.tolist(), g.dst.tolist()))
    expect = {(a, b) for a, (i, j) in enumerate(edges) for b, (j2, k) in enumerate(edges) if j == j2 and k != i}
    assert {tuple(e) for e in g.line_edges.tolist()} == expect


@pytest.mark.parametrize("case", ["knn", "full", "ties"])
def test_line_edges_are_sorted_by_receiver_so_the_plans_need_no_sort(case):
    """The builder lists L(G) sorted by (receiver, sender), so each pruned list is sorted by receiver: NoBGNN's
    sort-free plans (perm None) equal the sorting plans (whose perm is then the identity), and the readout's plan
    (rev, ptr) is the stable sort of the receivers dst. A batch of 3, k-NN, fully connected, coincident particles."""
    from companion.hollowflow.graph import line_graph
    from companion_kernels.segment_sum import csr_plan

    x = {"knn": torch.randn(3, 11, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64),
         "full": paper_config(6, 3, 1), "ties": torch.zeros(3, 6, 3, dtype=torch.float64)}[case]
    k = {"knn": 4, "full": None, "ties": 2}[case]
    g = build_graph(x, k, 3)
    E = g.src.numel()
    send, recv = g.line_edges[:, 0], g.line_edges[:, 1]
    key = recv * E + send
    assert bool((key[1:] > key[:-1]).all())
    assert torch.equal(line_graph(g.src, g.dst, g.samples * g.n), g.line_edges)
    model = NoBGNN(hidden=4, steps=3, k=k, aggregate="segment_sum", segment_impl="reference")
    plans = model.plans(g)
    for p, le in zip(plans, g.kept):
        ref = csr_plan(le[:, 1], E)
        assert p.perm is None and torch.equal(p.offsets, ref.offsets)
        assert torch.equal(ref.perm, torch.arange(le.shape[0]))  # the sort would leave the list as it is
    ref = csr_plan(g.dst, g.samples * g.n)
    assert torch.equal(plans[-1].perm, ref.perm) and torch.equal(plans[-1].offsets, ref.offsets)


def test_line_graph_of_a_path_and_refused_edge_lists():
    """The path 0 – 1 – 2: edges (0,1), (1,0), (1,2), (2,1); its line edges (2,1)→(1,0) and (0,1)→(1,2), by
    receiver. An asymmetric, unsorted or self-looped edge list is refused."""
    from companion.hollowflow.graph import line_graph

    t = lambda *v: torch.tensor(v, dtype=torch.long)  # noqa: E731
    assert line_graph(t(0, 1, 1, 2), t(1, 0, 2, 1), 3).tolist() == [[3, 1], [0, 2]]
    assert line_graph(t(), t(), 3).shape == (0, 2)
    for src, dst in ((t(0, 1), t(1, 2)), (t(1, 0), t(0, 1)), (t(0, 0, 1), t(0, 1, 0))):
        with pytest.raises(ValueError, match="symmetric graph without self-loops"):
            line_graph(src, dst, 3)


def test_knn_is_symmetric_without_self_loops_and_contains_knn():
    x = paper_config(12, 3, 2)
    adj = knn_adjacency(x, 4)[0]
    assert torch.equal(adj, adj.T) and not adj.diagonal().any()
    d = torch.cdist(x, x).fill_diagonal_(math.inf)
    nn = d.argsort(1)[:, :4]
    assert all(adj[i, nn[i]].all() for i in range(12))


def test_pruning_matches_a_dependence_oracle():
    """B(t) from the schedule equals the dependence sets computed by explicit set propagation."""
    x = paper_config(9, 3, 0)
    g = build_graph(x, 3, 3, keep_B=True)
    src, dst = g.src.tolist(), g.dst.tolist()
    dep = [{s} for s in src]
    for t, kept in enumerate(g.kept):
        all_le = g.line_edges.tolist()
        ok = [(s, r) for s, r in all_le if dst[r] not in dep[s]]
        assert sorted(map(tuple, kept.tolist())) == sorted(ok)
        new = [set(d) for d in dep]
        for s, r in ok:
            new[r] |= dep[s]
        dep = new
        B = g.B[t + 1]
        assert all(set(torch.nonzero(B[e]).flatten().tolist()) == dep[e] for e in range(len(src)))


def test_ties_are_deterministic():
    x = torch.zeros(6, 3, dtype=torch.float64)  # all particles coincide: every distance ties
    a = knn_adjacency(x, 2)[0]
    assert torch.equal(a, knn_adjacency(x.clone(), 2)[0])
    expect = torch.zeros(6, 6, dtype=torch.bool)
    for i in range(6):
        nb = [j for j in range(6) if j != i][:2]  # lowest indices first
        expect[i, nb] = True
    assert torch.equal(a, expect | expect.T)
    m = _model(6, 2, 2)
    _, d1 = divergence_hollow(m, x + 1e-3 * paper_config(6, 3, 0) * 0, 0.5)
    _, d2 = divergence_bruteforce(m, x, 0.5)
    assert torch.allclose(d1, d2, atol=1e-10)


@pytest.mark.parametrize("bad", [dict(k=0), dict(k=9), dict(k=2.0), dict(steps=0)])
def test_bad_graph_input(bad):
    args = dict(x=paper_config(9, 3, 0), k=3, steps=2) | bad
    with pytest.raises(ParameterError):
        build_graph(**args)


@pytest.mark.parametrize("x", [torch.zeros(9), torch.zeros(1, 3), torch.full((5, 3), math.nan), np.zeros((5, 3))])
def test_bad_coordinates(x):
    with pytest.raises(ParameterError):
        _model(5, 2, 2)(x, 0.5)


def test_wrong_dimension_and_model_args():
    with pytest.raises(ParameterError, match="d = 3"):
        _model(5, 2, 2)(torch.zeros(5, 2, dtype=torch.float64), 0.5)
    with pytest.raises(ParameterError):
        NoBGNN(steps=0)
    with pytest.raises(ParameterError):
        NoBGNN(k=0)
    with pytest.raises(ParameterError):
        _model(5, 7, 2)(paper_config(5, 3, 0), 0.5)  # k >= n


# --- Theorem 1 ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("attention", [False, True])
def test_hollow_divergence_is_the_exact_trace(attention):
    x = paper_config(9, 3, 0)
    m = _model(attention=attention)
    J = jacobian(m, x, 0.3)
    _, dh = divergence_hollow(m, x, 0.3)
    _, db = divergence_bruteforce(m, x, 0.3)
    _, dv = divergence_bruteforce(m, x, 0.3, vectorize=True, chunk=7)
    assert abs(float(dh[0]) - float(torch.trace(J))) < 1e-10
    assert abs(float(db[0]) - float(torch.trace(J))) < 1e-10 and abs(float(dv[0]) - float(db[0])) < 1e-10


def test_segment_sum_aggregation_builds_plans_once_and_matches_index_add():
    """aggregate='segment_sum' (reference path here; the kernel under the interpreter is checked in
    tests/kernels/test_segment_sum.py) gives the same b and divergence, with the CSR plans kept on the graph."""
    x = paper_config(9, 3, 0)
    a = _model()
    b = NoBGNN(hidden=a.blocks.hidden, steps=a.steps, k=a.k, aggregate="segment_sum", segment_impl="reference").double()
    b.load_state_dict(a.state_dict())
    g = b.graph(x)
    assert g.plans is None
    (ba, da), (bb, db) = divergence_hollow(a, x, 0.3, graph=g), divergence_hollow(b, x, 0.3, graph=g)
    assert len(g.plans) == g.steps + 1 and g.plans[0].offsets.numel() == g.src.numel() + 1
    assert g.plans[0].perm is None and g.plans[-1].perm is g.rev  # sort-free: the lists are sorted by receiver
    first = g.plans[0]
    _, dv = divergence_bruteforce(b, x, 0.3, graph=g, vectorize=True)
    assert g.plans[0] is first  # reused, not rebuilt
    assert (ba - bb).abs().max() < 1e-10 and (da - db).abs().max() < 1e-10 and (dv - da).abs().max() < 1e-10
    with pytest.raises(ParameterError, match="aggregate"):
        NoBGNN(aggregate="scatter")
    with pytest.raises(ParameterError, match="segment_impl"):
        NoBGNN(aggregate="segment_sum", segment_impl="cuda")


def test_block_structure_and_no_self_dependence():
    x = paper_config(9, 3, 0)
    m = _model()
    J, Jt = jacobian(m, x, 0.3), jacobian(m, x, 0.3, detach_h=True)
    mask = block_mask(9, 3)
    assert float(Jt[~mask].abs().max()) == 0.0
    assert float((J - Jt)[mask].abs().max()) < 1e-12
    assert float(J[~mask].abs().max()) > 1e-6  # the hollow part is not trivially zero
    assert self_dependence(m, x) == 0.0


def test_pruning_off_leaks_and_breaks_the_divergence():
    c = construction_check(hidden=12)
    assert c["pruned"]["div_error"] < 1e-10
    u = c["unpruned"]
    assert u["leaks"] > 0 and u["self_dependence"] > 1e-8 and u["div_error"] > 1e-6 and u["diag_block_diff"] > 1e-8


def test_batched_divergences_agree_and_hutchinson_is_unbiased():
    torch.manual_seed(1)
    x = torch.randn(4, 7, 3, dtype=torch.float64)
    m = _model(7, 3, 2)
    _, dh = divergence_hollow(m, x, 0.7)
    _, db = divergence_bruteforce(m, x, 0.7)
    assert torch.allclose(dh, db, atol=1e-10)
    _, est = divergence_hutchinson(m, x, 0.7, probes=400, generator=torch.Generator().manual_seed(0))
    scale = float(db.abs().max()) + 1.0
    assert torch.allclose(est, db, atol=0.25 * scale)
    with pytest.raises(ParameterError):
        divergence_hutchinson(m, x, 0.7, probes=0)


def test_equivariance():
    r = equivariance(hidden=12)
    assert max(r.values()) < 1e-10


def test_baseline_egnn_is_equivariant_and_not_hollow():
    torch.manual_seed(0)
    e = EGNN(hidden=8, steps=2).double()
    x = paper_config(6, 3, 0)
    Q, _ = torch.linalg.qr(torch.randn(3, 3, dtype=torch.float64))
    assert float((e(x @ Q.T + 1.0, 0.2) - e(x, 0.2) @ Q.T).abs().max()) < 1e-10
    with pytest.raises(ValueError):
        divergence_hollow(e, x, 0.2)
    _, d = divergence_bruteforce(e, x, 0.2)
    assert abs(float(d[0]) - float(torch.trace(jacobian(e, x, 0.2)))) < 1e-10


def test_hollownet_mlp_one_vjp():
    torch.manual_seed(0)
    m = HollowMLP(D=5).double()
    x = torch.randn(3, 5, dtype=torch.float64)
    for b in range(3):
        J = torch.autograd.functional.jacobian(lambda y: m(y[None])[0], x[b])
        assert abs(float(torch.trace(J)) - float(m.divergence(x[b:b + 1])[0])) < 1e-12
    with pytest.raises(ParameterError):
        HollowMLP(D=1)


# --- likelihoods ------------------------------------------------------------------------------------------

def test_rk4_round_trip_and_paths_agree():
    m = _model(6, 3, 2)
    x0 = torch.randn(3, 6, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    x1, lq = rk4_likelihood(m, x0, steps=8)
    x0b, lq2 = rk4_likelihood(m, x1, direction="density", steps=8)
    assert torch.allclose(x0b, x0, atol=1e-5) and torch.allclose(lq, lq2, atol=1e-5)
    _, lqb = rk4_likelihood(m, x0, steps=8, method="bruteforce")
    assert torch.allclose(lq, lqb, atol=1e-10)


class _LinearField(torch.nn.Module):
    """b(x, t) = cos(2t) · A x on the n·d coordinates: x(1) = expm(α A) x(0) and ∫₀¹ ∇·b = α tr A, α = sin(2)/2."""

    d = 3

    def __init__(self, A):
        super().__init__()
        self.A = A

    def forward(self, x, t, graph=None):
        return math.cos(2 * t) * (x.flatten(1) @ self.A.T).reshape(x.shape)


@pytest.mark.parametrize("scheme, direction", [("classic", "sample"), ("3/8", "density")])  # sampling; the peer check
def test_rk4_fourth_order_against_matrix_exp(scheme, direction):
    """The review's item 18: an independent truth for the integrator. On a linear field the exact flow is a matrix
    exponential, so both x and log q have closed forms; each halving of the step must divide the error by ≈ 16
    (a second-order scheme gives 4, a wrong RK weight or stage time 2 or nothing)."""
    n, d = 2, 3
    g = torch.Generator().manual_seed(0)
    A = torch.randn(n * d, n * d, generator=g, dtype=torch.float64)
    A = 1.5 * A / torch.linalg.matrix_norm(A, ord=2)
    field = _LinearField(A)
    x = torch.randn(4, n, d, generator=g, dtype=torch.float64)
    alpha = math.sin(2.0) / 2
    sign = 1.0 if direction == "sample" else -1.0
    x_end = (x.flatten(1) @ torch.linalg.matrix_exp(sign * alpha * A).T).reshape(x.shape)
    x0 = x if direction == "sample" else x_end
    log_p0 = -0.5 * (x0.flatten(1) ** 2).sum(-1) - 0.5 * n * d * math.log(2 * math.pi)  # N(0, I) prior
    log_q = log_p0 - alpha * torch.trace(A)
    errs = []
    for steps in (16, 32, 64, 128):
        y, lq = rk4_likelihood(field, x, direction=direction, steps=steps, scheme=scheme, method="bruteforce")
        errs.append((float((y - x_end).abs().max()), float((lq - log_q).abs().max())))
    for part in (0, 1):  # x, then log q: the observed order log2(error / error at half the step) per halving
        orders = [math.log2(a[part] / b[part]) for a, b in zip(errs, errs[1:])]
        assert all(3.6 < o < 4.4 for o in orders) and abs(orders[-1] - 4) < 0.2, (part, orders, errs)
    assert errs[-1][0] < 1e-7 and errs[-1][1] < 1e-7


@pytest.mark.parametrize("bad", [dict(steps=0), dict(method="exact"), dict(scheme="rk5"), dict(direction="up")])
def test_rk4_bad_input(bad):
    with pytest.raises(ParameterError):
        rk4_likelihood(_model(5, 2, 2), paper_config(5, 3, 0), **bad)


def test_flow_matching_peer():
    pytest.importorskip("flow_matching")
    r = peer_likelihood(n=5, samples=2, ode_steps=6, hidden=8)
    assert r["max_abs_diff"] < 1e-8 and r["x0_diff"] < 1e-8


def test_ot_pairs_match_pots_exact_plan():
    """Our minibatch OT pairing against POT's exact earth mover's plan (``ot.emd``) on the squared Euclidean cost
    of the flattened configurations, uniform weights, as torchcfm's ``OTPlanSampler(method="exact")`` builds it."""
    import ot

    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        x0, x1 = torch.randn(12, 4, 3, generator=g), torch.randn(12, 4, 3, generator=g)
        cost = (torch.cdist(x0.flatten(1).double(), x1.flatten(1).double()) ** 2).numpy()
        plan = ot.emd(np.full(12, 1 / 12), np.full(12, 1 / 12), cost)
        assert np.array_equal(plan.argmax(0), ot_pairs(x0, x1))


def test_align_undoes_permutation_and_small_rotation():
    """Hungarian permutation first, then Kabsch (as Klein et al.): exact for a permuted copy rotated by a small
    angle (the permutation is found before the rotation); never worse than no alignment."""
    g = torch.Generator().manual_seed(0)
    x1 = torch.randn(2, 5, 3, generator=g, dtype=torch.float64)
    x1 = x1 - x1.mean(1, keepdim=True)
    a = 0.05
    Q = torch.tensor([[math.cos(a), -math.sin(a), 0], [math.sin(a), math.cos(a), 0], [0, 0, 1]], dtype=torch.float64)
    x0 = (x1 @ Q.T)[:, torch.tensor([3, 1, 4, 0, 2])]
    assert torch.allclose(align(x0, x1), x1, atol=1e-10)
    y0 = torch.randn(4, 5, 3, generator=g, dtype=torch.float64)
    y1 = torch.randn(4, 5, 3, generator=g, dtype=torch.float64)
    assert float(((align(y0, y1) - y1) ** 2).sum()) <= float(((y0 - y1) ** 2).sum()) + 1e-12


def test_rk4_stops_a_diverging_trajectory_and_gives_it_zero_weight():
    """ẋ = c·x² blows up in finite time for c = 50 (sample 0) and is still for c = 0 (sample 1): the first row is
    stopped at a finite state with log q = +inf (zero importance weight), the second is untouched (x₁ = x₀,
    log q = the prior's log density, exactly)."""
    class Blow(torch.nn.Module):
        d = 3

        def forward(self, x, t, graph=None, types=None, detach_h=False):
            return torch.tensor([50.0, 0.0], dtype=x.dtype)[:, None, None] * x**2

    x0 = torch.full((2, 4, 3), 1.0, dtype=torch.float64)
    for method in ("bruteforce", "hutchinson"):
        x1, lq = rk4_likelihood(Blow(), x0, steps=10, method=method)
        assert torch.isfinite(x1).all() and lq[0] == math.inf
        assert torch.equal(x1[1], x0[1]) and float(lq[1]) == pytest.approx(float(gaussian_log_prob(x0[1:])[0]))
        lw = log_weights("LJ13", torch.randn(2, 13, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0)), lq)
        assert lw[0] == -math.inf and kish_ess(lw) == 0.5  # the blown-up sample: a zero weight, still in N


def test_batched_align_is_per_pair_and_a_proper_rotation():
    """The batched alignment gives each pair what aligning it alone gives, keeps every pairwise distance (a
    permutation and a rotation) and never reflects: a mirror image is not mapped onto the original."""
    g = torch.Generator().manual_seed(1)
    x0 = torch.randn(6, 7, 3, generator=g, dtype=torch.float64)
    x1 = torch.randn(6, 7, 3, generator=g, dtype=torch.float64)
    out = align(x0, x1)
    for b in range(6):
        assert torch.allclose(out[b], align(x0[b:b + 1], x1[b:b + 1])[0], atol=1e-12)
    assert torch.allclose(torch.cdist(out, out).flatten(1).sort(1).values,
                          torch.cdist(x0, x0).flatten(1).sort(1).values, atol=1e-10)
    mirror = x1 * torch.tensor([1.0, 1.0, -1.0], dtype=torch.float64)  # a reflection is not a rotation
    assert float((align(mirror, x1) - x1).abs().max()) > 1e-3


def test_train_cfm_budget_and_schedule():
    """A time budget stops training early but never before one step; the cosine schedule with lr_final = lr is the
    constant rate exactly, and decaying it changes the run; one Adam state throughout."""
    data = torch.randn(32, 5, 3, generator=torch.Generator().manual_seed(0))

    def run(**kw):
        torch.manual_seed(0)
        m = _model(5, 2, 2)
        losses = train_cfm(m, data, batch=8, seed=0, **kw)
        return losses, torch.cat([q.detach().flatten() for q in m.parameters()])

    assert len(run(iterations=50, seconds=1e-9)[0]) == 1
    assert len(run(iterations=3, seconds=60.0)[0]) == 3
    const, same = run(iterations=4, lr=1e-2), run(iterations=4, lr=1e-2, lr_final=1e-2)
    assert const[0] == same[0] and torch.equal(const[1], same[1])
    assert not torch.equal(const[1], run(iterations=4, lr=1e-2, lr_final=1e-4)[1])
    with pytest.raises(ParameterError):
        train_cfm(_model(5, 2, 2), data, iterations=2, seconds=0)


# --- data and metrics ---------------------------------------------------------------------------------------

def test_energies_known_values():
    two = torch.tensor([[[0.0, 0, 0], [1.0, 0, 0]] + [[10.0 * i, 50.0, 0] for i in range(2, 13)]], dtype=torch.float64)
    # a pair at the LJ minimum r_m = 1 contributes -1; far pairs ~0; plus the CoM oscillator
    osc = 0.25 * float(((two - two.mean(1, keepdim=True)) ** 2).sum())
    assert float(energy("LJ13", two)[0]) == pytest.approx(-1.0 + osc, abs=1e-4)
    dw = torch.tensor([[[0.0, 0], [4.0, 0], [0, 40.0], [40.0, 40.0]]], dtype=torch.float64)
    assert float(energy("DW4", dw)[0]) == pytest.approx(0.5 * sum(-4 * u**2 + 0.9 * u**4 for u in (
        math.dist(a, b) - 4 for i, a in enumerate(dw[0].tolist()) for b in dw[0].tolist()[i + 1:])), rel=1e-10)
    with pytest.raises(ParameterError):
        energy("LJ7", two)


def test_mala_adapts_its_step_and_centres_the_samples():
    r = mala("DW4", chains=16, steps=100, burn_in=400, thin=5, seed=0)
    assert 0.4 < r["acceptance"] < 0.8 and r["samples"].shape == (16 * 20, 4, 2)
    assert torch.allclose(r["samples"].mean(1), torch.zeros(2, dtype=torch.float64), atol=1e-12)
    with pytest.raises(ParameterError):
        mala("DW4", chains=0)


def test_load_samples(tmp_path):
    p = tmp_path / "lj13.npy"
    np.save(p, np.random.default_rng(0).normal(size=(3, 39)))
    x = load_samples(p, "LJ13")
    assert x.shape == (3, 13, 3) and float(x.mean(1).abs().max()) < 1e-12
    with pytest.raises(ParameterError):
        load_samples(tmp_path / "missing.npy", "LJ13")


def test_ess_metrics():
    assert kish_ess(np.zeros(100)) == pytest.approx(1.0)
    lw = np.log([1.0, 1.0, 0.0 + 1e-300, 1e-300])
    assert kish_ess(lw) == pytest.approx(0.5)
    lw = np.zeros(200)
    lw[0] = 50.0  # one huge weight: ESS ~ 1/N; ESS_rem drops it (2 of 200 at each end)
    assert kish_ess(lw) == pytest.approx(1 / 200, rel=1e-6) and ess_rem(lw) == pytest.approx(1.0)
    lo, hi = bootstrap_interval(np.random.default_rng(0).normal(size=300), resamples=200)
    assert 0 < lo < hi <= 1
    with pytest.raises(ParameterError):
        bootstrap_interval(lw, resamples=0)


def test_ess_non_finite_log_weights_by_their_meaning():
    """The review's item 2: +inf is a sample that carries all the weight, −inf a zero weight; neither is dropped,
    and a NaN raises (the old code dropped all three and returned 1.0 for the first two)."""
    assert kish_ess([0.0, 0.0, 0.0, np.inf]) == pytest.approx(1 / 4)  # one sample carries everything: 1/N
    assert kish_ess([0.0, np.inf, 5.0, np.inf]) == pytest.approx(2 / 4)  # two equal overwhelming weights
    assert kish_ess([0.0, 0.0, 0.0, -np.inf]) == pytest.approx(3 / 4)  # (1+1+1)² / (4 · 3): N counts the zero
    assert kish_ess([-np.inf] * 3) == 0.0  # no sample has weight
    lw = np.zeros(200)
    lw[0] = np.inf  # an overflowing weight drives the ESS down to 1/N, never up
    assert kish_ess(lw) == pytest.approx(1 / 200) and ess_rem(lw) == pytest.approx(1.0)  # ESS_rem trims it
    for bad in ([0.0, 0.0, np.nan], [np.nan]):
        with pytest.raises(ParameterError, match="NaN"):
            kish_ess(bad)
    with pytest.raises(ParameterError, match="NaN"):
        ess_rem(np.r_[np.zeros(300), np.nan])  # trimmed by the sort, it would go unseen
    with pytest.raises(ParameterError):
        kish_ess([])


def test_training_lowers_the_loss_and_toy_runs():
    r = toy_flow(iterations=10, n_samples=4, ode_steps=2, check_samples=2, check_steps=1, train_size=64, batch=8,
                 resamples=20, baseline=True, burn_in=20)
    assert r["hollow"]["path_diff"] < 1e-8
    for name in ("hollow", "baseline"):
        assert 0 < r[name]["ess"] <= 1 and 0 < r[name]["ess_rem"] <= 1
    with pytest.raises(ParameterError):
        toy_flow(k=13)
    with pytest.raises(ParameterError):
        train_cfm(_model(5, 2, 2), torch.zeros(4, 5, 3), iterations=0)


def test_cost_scaling_shape():
    c = cost_scaling((4, 8), k=2, hidden=4, reps=1, vjp_sample=4)
    assert len(c["hollow_s"]) == 2 and all(t > 0 for t in c["brute_s"]) and np.isfinite(c["slope_brute"])
    with pytest.raises(ParameterError):
        cost_scaling((2, 4))


# --- explorer -----------------------------------------------------------------------------------------------

def test_explorer_is_pure_and_shows_the_numbers():
    data = ExplorerData(seed=0, hidden=8)
    fig, readout = explorer_view(data, n=9, k=3, steps=3, step=3, particle=2)
    fig2, readout2 = explorer_view(data, n=9, k=3, steps=3, step=3, particle=2)
    assert isinstance(fig, go.Figure) and fig.to_json() == fig2.to_json() and readout == readout2
    assert "100 → 40 → 26" in readout and "their own x_j: 0" in readout
    _, off = explorer_view(data, n=9, k=3, steps=3, step=3, particle=2, prune=False)
    assert "their own x_j: 0" not in off
    fig0, _ = explorer_view(data, n=5, k=1, steps=1, step=0, particle=4)
    assert isinstance(fig0, go.Figure)


@pytest.mark.parametrize("bad", [dict(n=3), dict(n=17), dict(k=9), dict(step=4), dict(particle=9), dict(prune=1)])
def test_explorer_bad_input(bad):
    with pytest.raises(ParameterError):
        explorer_view(ExplorerData(hidden=8), **(dict(n=9, k=3, steps=3, step=3, particle=0) | bad))


def test_clamped_view_and_controls():
    fig, _ = clamped_view(ExplorerData(hidden=8), n=4, k=15, steps=1, step=4, particle=15)
    assert isinstance(fig, go.Figure)
    controls = explorer_controls(ExplorerData())
    assert set(controls) == {"n", "k", "steps", "step", "particle", "prune"}

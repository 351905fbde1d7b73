"""CFR-family solvers and RTCFR+ batched over hyperparameters in torch (paper 18; GPU path).

Paper: Meng et al., *Efficient Last-Iterate Convergence in Solving Extensive-Form Games*
(NeurIPS 2025), Eq. 3 and Alg. 1. The mathematics is that of :mod:`companion.rtcfr.solvers`
(read its docstring); here every per-sequence vector is a ``[n_seq, B]`` tensor, one column per
hyperparameter point (μ, T_u, γ), so one pass over the treeplex solves B perturbed games at once:

* the utility gradient is one sparse-dense product ``A @ X`` (CSR on the CPU; on the GPU a gather,
  a multiply and an ``index_add_`` over the nonzeros, plain kernels that a CUDA graph can capture);
* the bottom-up counterfactual pass is one ``index_add_`` per depth (sequences -> parent sequence),
  the infoset sums ``<v(I), σ(I)>`` one ``index_add_`` over all sequences;
* the reference update is a per-column mask ``t % T_u == 0`` (no host synchronisation), so
  :meth:`BatchedSolver.step` can be captured in a CUDA graph.

Deviation from :class:`~companion.rtcfr.solvers.Solver`: all columns run the same algorithm;
``freeze_alpha`` and ``v2`` are not offered (they do not change the dynamics measurably). With float64
and the same inputs the trajectories agree with the numpy solver to rounding (tested on the CPU).
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import torch

from companion.core.timing import cuda_graph, limit_threads
from companion.core.validation import ParameterError, check_bool, check_choice, check_int
from companion.rtcfr.games import CompiledGame
from companion.rtcfr.solvers import ALGORITHMS, _AVG_POWER, as_game, check_hyper


def _csr(matrix, device, dtype):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
        return torch.sparse_csr_tensor(
            torch.from_numpy(matrix.indptr.astype(np.int64)), torch.from_numpy(matrix.indices.astype(np.int64)),
            torch.from_numpy(matrix.data).to(dtype), size=matrix.shape, check_invariants=False,
        ).to(device)


class _Tree:
    """Index tensors of one treeplex on a device."""

    def __init__(self, tp, device, dtype):
        def t(a):
            return torch.as_tensor(np.asarray(a), dtype=torch.long, device=device)

        self.n_seq, self.n_inf = tp.n_seq, tp.n_infosets
        self.levels = [(lv.lo, lv.hi, lv.p_lo, lv.p_hi, t(lv.seq_parent - lv.p_lo), t(lv.seq_parent),
                        t(tp.seq_infoset[lv.lo:lv.hi] - lv.a), lv.a, lv.b, t(lv.parent_local))
                       for lv in tp.levels]
        self.seq_inf = t(tp.seq_infoset[1:])
        self.seq_size = torch.as_tensor(tp.seq_size[1:], dtype=dtype, device=device)[:, None]
        self.inf_size = torch.as_tensor(tp.infoset_size, dtype=dtype, device=device)[:, None]


class BatchedSolver:
    """B copies of one algorithm on one game, column b with hyperparameters (mu[b], T_u[b], gamma[b])."""

    def __init__(self, game, algorithm: str = "rtcfr+", mu=1e-3, T_u=100, gamma=1e-10, *, reset_theta: bool = False,
                 track_average: bool = True, device="cpu", dtype=torch.float64, matmul: str = "auto",
                 dcfr_alpha: float = 1.5, dcfr_beta: float = 0.0, dcfr_gamma: float = 2.0):
        self.game: CompiledGame = as_game(game)
        self.algorithm = check_choice("algorithm", algorithm, ALGORITHMS)
        self.reset_theta = check_bool("reset_theta", reset_theta)
        self.track_average = check_bool("track_average", track_average)
        mu, T_u, gamma = (np.atleast_1d(np.asarray(v)) for v in (mu, T_u, gamma))
        B = max(len(mu), len(T_u), len(gamma))
        mu, T_u, gamma = (np.broadcast_to(v, (B,)) for v in (mu, T_u, gamma))
        for m, tu, g in zip(mu, T_u, gamma):
            check_hyper(float(m), int(tu) if float(tu) == int(tu) else float(tu), float(g))
        self.B, self.device, self.dtype = B, torch.device(device), dtype
        self.rt = self.algorithm.startswith("rt")
        max_size = max(int(tp.infoset_size.max()) for tp in self.game.players)
        if self.rt and float(np.max(gamma)) * max_size >= 1:
            raise ParameterError("gamma", float(np.max(gamma)), "gamma * max |A(I)| < 1")
        dev = self.device
        self.mu = torch.as_tensor(mu.astype(np.float64), dtype=dtype, device=dev)
        self.T_u = torch.as_tensor(T_u.astype(np.int64), device=dev)
        self.gamma = torch.as_tensor(gamma.astype(np.float64) if self.rt else np.zeros(B), dtype=dtype, device=dev)
        self.params = {"mu": mu.tolist(), "T_u": [int(v) for v in T_u], "gamma": gamma.tolist()}
        self.dcfr = (dcfr_alpha, dcfr_beta, dcfr_gamma)
        self.predictive = self.algorithm in ("pcfr+", "rtpcfr+")
        self.avg_power = dcfr_gamma if self.algorithm == "dcfr" else _AVG_POWER[self.algorithm]
        self.matmul = check_choice("matmul", matmul, ("auto", "csr", "gather"))
        if self.matmul == "auto":  # gather/index_add_ kernels are plain and CUDA-graph safe; CSR on the CPU
            self.matmul = "gather" if self.device.type == "cuda" else "csr"
        self.A = _csr(self.game.payoff, dev, dtype)
        self.At = _csr(self.game.payoff_t, dev, dtype)
        coo = self.game.payoff.tocoo()
        self.rows = torch.as_tensor(coo.row.astype(np.int64), device=dev)
        self.cols = torch.as_tensor(coo.col.astype(np.int64), device=dev)
        self.vals = torch.as_tensor(coo.data, dtype=dtype, device=dev)[:, None]
        self.trees = [_Tree(tp, dev, dtype) for tp in self.game.players]
        self.t = torch.zeros((), dtype=torch.long, device=dev)
        self.avg_weight = torch.zeros((), dtype=dtype, device=dev)
        self.state = []
        for tr in self.trees:
            sigma = torch.cat([torch.ones(1, 1, dtype=dtype, device=dev), 1.0 / tr.seq_size]).expand(-1, B).contiguous()
            x = self._forward(tr, sigma, torch.empty_like(sigma))
            self.state.append({
                "sigma": sigma, "sigma_hat": sigma.clone(), "x": x, "ref": x.clone(),
                "theta": torch.zeros(tr.n_seq - 1, B, dtype=dtype, device=dev),
                "avg": torch.zeros(tr.n_seq, B, dtype=dtype, device=dev),
            })

    # ------------------------------------------------------------------ passes
    @staticmethod
    def _forward(tr, sigma, x):
        x[0] = 1.0
        for lo, hi, _pl, _ph, _pseq, seq_parent, *_ in tr.levels:
            x[lo:hi] = x[seq_parent] * sigma[lo:hi]
        return x

    @staticmethod
    def _values(tr, v, sigma):
        """Bottom-up counterfactual values in place; returns (v, ev[I])."""
        w = torch.empty_like(v)
        for lo, hi, p_lo, p_hi, pseq, *_ in reversed(tr.levels):
            w[lo:hi] = sigma[lo:hi] * v[lo:hi]
            v[p_lo:p_hi].index_add_(0, pseq, w[lo:hi])
        ev = torch.zeros(tr.n_inf, v.shape[1], dtype=v.dtype, device=v.device).index_add_(0, tr.seq_inf, w[1:])
        return v, ev

    @staticmethod
    def _normalise(tr, pos):
        tot = torch.zeros(tr.n_inf, pos.shape[1], dtype=pos.dtype, device=pos.device).index_add_(0, tr.seq_inf, pos)
        zero = (tot <= 0).to(pos.dtype)
        tot = tot + zero * tr.inf_size
        return (pos + zero[tr.seq_inf]) / tot[tr.seq_inf]

    def _utility(self, i, y):
        """Player i's utility gradient against the opponent's sequence-form columns y: A y or -Aᵀ y."""
        if self.matmul == "csr":
            return (self.A @ y) if i == 0 else -(self.At @ y)
        n = self.trees[i].n_seq
        src, dst = (self.cols, self.rows) if i == 0 else (self.rows, self.cols)
        g = torch.zeros(n, y.shape[1], dtype=y.dtype, device=y.device).index_add_(0, dst, self.vals * y[src])
        return g if i == 0 else g.neg_()

    def _gradient(self, i):
        me, opp = self.state[i], self.state[1 - i]
        g = self._utility(i, opp["x"])
        if self.rt:
            g[1:] -= self.mu * (me["x"][1:] - me["ref"][1:])
        return g

    def _update(self, i, w):
        tr, me = self.trees[i], self.state[i]
        g = self._gradient(i)
        if self.track_average:
            me["avg"] += w * me["x"]
        v, ev = self._values(tr, g, me["sigma"])
        m = v[1:] - ev[tr.seq_inf]
        theta = me["theta"]
        alg = self.algorithm
        if alg in ("cfr+", "rtcfr+", "pcfr+", "rtpcfr+"):
            theta.add_(m).clamp_(min=0.0)
            pos = (theta + m).clamp(min=0.0) if self.predictive else theta
        elif alg == "cfr":
            theta.add_(m)
            pos = theta.clamp(min=0.0)
        else:  # dcfr
            a, b, _ = self.dcfr
            tf = self.t.to(self.dtype)
            theta.add_(m)
            theta.mul_(torch.where(theta > 0, tf**a / (tf**a + 1.0), tf**b / (tf**b + 1.0)))
            pos = theta.clamp(min=0.0)
        sigma = self._normalise(tr, pos)
        me["sigma"][1:] = sigma
        if self.rt:
            me["sigma_hat"][1:] = (1.0 - self.gamma * tr.seq_size) * sigma + self.gamma
        else:
            me["sigma_hat"][1:] = sigma
        self._forward(tr, me["sigma_hat"], me["x"])

    def step(self) -> None:
        """One alternating iteration for all B columns (no host synchronisation)."""
        self.t += 1
        if self.rt:
            mask = (self.t % self.T_u) == 0  # [B]
            self.gamma.copy_(torch.where(mask, self.gamma * 0.5, self.gamma))
            for me in self.state:
                me["ref"].copy_(torch.where(mask[None, :], me["x"], me["ref"]))
                if self.reset_theta:
                    me["theta"].mul_((~mask).to(self.dtype)[None, :])
        w = self.t.to(self.dtype) ** self.avg_power
        if self.track_average:
            self.avg_weight += w
        for i in (0, 1):
            self._update(i, w)

    # ------------------------------------------------------------------ metrics
    def _br_value(self, i, g):
        tr = self.trees[i]
        v = g.clone()
        for lo, hi, p_lo, p_hi, _pseq, _sp, seq_inf_local, a, b, parent_local in reversed(tr.levels):
            best = torch.full((b - a, v.shape[1]), -torch.inf, dtype=v.dtype, device=v.device)
            best.scatter_reduce_(0, seq_inf_local[:, None].expand(-1, v.shape[1]), v[lo:hi], "amax", include_self=True)
            v[p_lo:p_hi].index_add_(0, parent_local, best)
        return v[0]

    def nash_conv(self, which: str = "last") -> torch.Tensor:
        """[B] NashConv (sum of both best-response gains) of the last or average iterate."""
        check_choice("which", which, ("last", "average"))
        if which == "last":
            x0, x1 = self.state[0]["x"], self.state[1]["x"]
        else:
            wsum = torch.clamp(self.avg_weight, min=1e-300)
            x0, x1 = self.state[0]["avg"] / wsum, self.state[1]["avg"] / wsum
        return self._br_value(0, self._utility(0, x1)) + self._br_value(1, self._utility(1, x0))

    def last_iterate(self, b: int = 0):
        """Column b of the last iterate as numpy sequence-form vectors."""
        return tuple(s["x"][:, b].detach().cpu().numpy() for s in self.state)

    def run(self, iterations: int, eval_every: int = 10, average: bool = False, graph_steps: int = 0):
        """Run and return (iterations evaluated [n], last NashConv [n, B], average NashConv [n, B] or None).

        ``graph_steps`` > 0 captures that many steps in one CUDA graph and replays it (CUDA only;
        ``eval_every`` must be a multiple of it).
        """
        iterations = check_int("iterations", iterations, lo=1)
        eval_every = check_int("eval_every", eval_every, lo=1)
        with limit_threads(1 if self.device.type == "cpu" else None):
            return self._run(iterations, eval_every, average, graph_steps)

    def _run(self, iterations, eval_every, average, graph_steps):
        from companion.rtcfr.solvers import eval_schedule

        sched = eval_schedule(iterations, eval_every)
        last, avg = [], []
        runner = self.step
        if graph_steps:
            runner = self.graphed(graph_steps)
        done = 0
        for target in sched:
            while done < target:
                if graph_steps and target - done >= graph_steps:
                    runner()
                    done += graph_steps
                else:
                    self.step()
                    done += 1
            last.append(self.nash_conv("last"))
            if average:
                avg.append(self.nash_conv("average"))
        last = torch.stack(last).cpu().numpy()
        avg = torch.stack(avg).cpu().numpy() if average else None
        return sched, last, avg

    def _mutable(self):
        return [self.t, self.avg_weight, self.gamma] + [v for me in self.state for v in me.values()]

    def graphed(self, steps: int):
        """A callable replaying ``steps`` iterations captured in one CUDA graph.

        One warm-up run of the ``steps`` iterations goes on a side stream before capture
        (:func:`companion.core.cuda_graph`); the state is restored in place afterwards (the graph reads and writes
        the same tensors), so the solver has advanced by zero steps.
        """
        if self.device.type != "cuda":
            raise ParameterError("graph_steps", steps, "0 on a non-CUDA device")
        saved = [v.clone() for v in self._mutable()]
        replay = cuda_graph(lambda: [self.step() for _ in range(steps)], warmup=1)
        for v, s in zip(self._mutable(), saved):
            v.copy_(s)
        torch.cuda.synchronize()
        return replay


def sweep(game, mus, T_us, iterations: int, *, algorithm: str = "rtcfr+", gamma: float = 1e-10, eval_every: int = 50,
          average: bool = False, device="cpu", dtype=torch.float64, graph_steps: int = 0) -> dict:
    """Solve the game at every (μ, T_u) of the grid ``mus x T_us`` in one batch.

    Returns a dict: ``mu``/``T_u`` (the grid, flattened row-major, μ outer), ``iterations`` [n],
    ``last`` [n, B] NashConv of the last iterate (``average`` [n, B] too if asked), ``seconds`` and
    ``config_iterations_per_s`` (B x iterations / seconds, evaluations included).
    """
    mus = np.atleast_1d(np.asarray(mus, dtype=np.float64))
    T_us = np.atleast_1d(np.asarray(T_us, dtype=np.int64))
    grid_mu = np.repeat(mus, len(T_us))
    grid_tu = np.tile(T_us, len(mus))
    solver = BatchedSolver(game, algorithm, mu=grid_mu, T_u=grid_tu, gamma=gamma, track_average=average,
                           device=device, dtype=dtype)
    if solver.device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    sched, last, avg = solver.run(iterations, eval_every=eval_every, average=average, graph_steps=graph_steps)
    seconds = time.perf_counter() - start
    return {"game": solver.game.name, "algorithm": algorithm, "mu": grid_mu.tolist(), "T_u": grid_tu.tolist(),
            "mus": mus.tolist(), "T_us": T_us.tolist(), "gamma": gamma, "iterations": sched, "last": last,
            "average": avg, "seconds": seconds, "config_iterations_per_s": len(grid_mu) * iterations / seconds}

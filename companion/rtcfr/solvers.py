"""CFR-family solvers with alternating updates, and RTCFR+ (paper 18, Eq. 3 and Alg. 1; numpy).

Paper: Meng et al., *Efficient Last-Iterate Convergence in Solving Extensive-Form Games*
(NeurIPS 2025); official code github.com/menglinjian/NeurIPS-2025-RTCFR (``main.py``, LiteEFG).

RTCFR+ (Eq. 3, Alg. 1). With reference profile r (sequence form), γ, μ > 0 and η = 1, player i at
iteration t, against the opponent's current *perturbed* strategy:

    g(I, a)   = [A_i x̂_{-i}](I, a) − μ (x̂_i(I, a) − r_i(I, a))        reward-transformed gradient
    v̂(I, a)   = g(I, a) + Σ_{I' ∈ C(I, a)} <v̂(I'), σ(I')>               unperturbed σ in <.,.>
    m̂(I)      = v̂(I) − <v̂(I), σ(I)> 1
    θ_I       ← [θ_I + m̂(I)]⁺,   σ(I) = θ_I / ‖θ_I‖₁ (uniform if θ_I = 0)  (RM+, CFR+)
    σ̂(I)      = (1 − γ|A(I)|) σ(I) + γ 1                                  (perturbation)

Players update alternately (0 then 1). Every T_u iterations, *before* that iteration's updates,
γ ← γ/2 and r ← x̂ (the current perturbed profile); θ is kept (``reset_theta=True`` zeroes it,
the variant the paper's Fig. 3 shows does not converge). The reference starts at the uniform
profile, θ at 0. The last iterate is x̂ (the perturbed profile), as in the official code.

Baselines, all with alternating updates: CFR (regret matching, uniform average), CFR+ (RM+,
linear average), PCFR+ (predictive RM+ with the last instantaneous regret as the prediction,
quadratic average), DCFR (α = 1.5, β = 0, γ = 2). RTPCFR+ is RTCFR+ with PCFR+ as the inner solver
(the line commented out in the official code). Averages are taken in sequence form, i.e.
reach-weighted, over the strategies each player used in its update.

Deviations: (1) ``alpha_I = γ|A(I)|`` follows the paper (recomputed when γ halves); the official
code computes it once from the initial γ (``freeze_alpha=True`` reproduces that; at γ = 1e-10 the
two are indistinguishable). (2) Variant V2 (μ ← μ(1 − ς), ς = 1e-16, at each reference update) is
available as ``v2=True``; in float64 it changes μ by one ulp at most, as in the paper.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from companion.core.validation import ParameterError, check_bool, check_choice, check_float, check_int
from companion.rtcfr.games import CompiledGame, compile_game
from companion.rtcfr.seqform import CSR, TreeplexOps, behavioural, nash_conv, sequence_form

ALGORITHMS = ("cfr", "cfr+", "pcfr+", "dcfr", "rtcfr+", "rtpcfr+")
LABELS = {"cfr": "CFR", "cfr+": "CFR+", "pcfr+": "PCFR+", "dcfr": "DCFR", "rtcfr+": "RTCFR+", "rtpcfr+": "RTPCFR+"}
# power p of the average weights t^p (DCFR's (t/(t+1))^γ discounting gives weights ∝ t^γ)
_AVG_POWER = {"cfr": 0.0, "cfr+": 1.0, "pcfr+": 2.0, "rtcfr+": 1.0, "rtpcfr+": 1.0}

DEFAULTS = {"mu": 1e-3, "T_u": 100, "gamma": 1e-10}  # the paper's untuned RTCFR+ (App. H)
# the paper's fine-tuned (μ, T_u) per game (Sec. 6 / App. H)
TUNED = {
    "kuhn_poker": (0.1, 10),
    "leduc_poker": (1e-3, 100),
    "battleship_3": (0.1, 50),
    "liars_dice_4": (0.01, 10),
    "liars_dice_5": (5e-4, 10),
    "liars_dice_6": (1e-4, 500),
    "goofspiel_4": (0.1, 10),
    "goofspiel_5": (0.05, 100),
    "goofspiel_6": (0.005, 50),
}


def check_hyper(mu, T_u, gamma):
    """Validate RTCFR+'s hyperparameters: μ > 0, T_u ≥ 1 (an integer), 0 ≤ γ < 1."""
    mu = check_float("mu", mu, lo=0.0, lo_open=True)
    T_u = check_int("T_u", T_u, lo=1)
    gamma = check_float("gamma", gamma, lo=0.0, hi=1.0, hi_open=True)
    return mu, T_u, gamma


def as_game(game) -> CompiledGame:
    """A CompiledGame from a CompiledGame, a preset name or an OpenSpiel game string."""
    if isinstance(game, CompiledGame):
        return game
    return compile_game(game)


def fast_ops(game: CompiledGame):
    """(CSR(A), CSR(Aᵀ), TreeplexOps of each player), built once per compiled game."""
    ops = getattr(game, "_fast_ops", None)
    if ops is None:
        ops = (CSR(game.payoff), CSR(game.payoff_t), TreeplexOps(game.players[0]), TreeplexOps(game.players[1]))
        game._fast_ops = ops
    return ops


class _Player:
    """One player's arrays; index 0 of every sequence vector is the empty sequence."""

    def __init__(self, tp, ops):
        self.tp, self.ops = tp, ops
        n = tp.n_seq
        self.sigma = 1.0 / tp.seq_size  # unperturbed σ
        self.sigma_hat = self.sigma.copy()  # perturbed σ̂
        self.x = sequence_form(tp, self.sigma_hat)  # x̂, perturbed sequence form
        self.ref = self.x.copy()  # r: the uniform profile at the start
        self.theta = np.zeros(n - 1)  # θ (regrets), over sequences 1..n-1
        self.avg = np.zeros(n)
        self.inv_size = 1.0 / tp.seq_size[1:]
        self.seq_size = tp.seq_size[1:]
        self.inf_size = tp.infoset_size.astype(np.float64)
        self.seq_inf = tp.seq_infoset[1:]
        self.g = np.empty(n)
        self.tmp = np.empty(n - 1)
        self.zeros = np.zeros(n - 1)

    def normalise(self, pos):
        """σ(I) = pos_I / ‖pos_I‖₁, uniform where pos_I = 0 (pos ≥ 0, over sequences 1..n-1)."""
        tot = self.ops.infoset_sums(pos, self.ops.tot)
        zero = tot <= 0.0
        if zero.any():
            tot += zero * self.inf_size  # sum of the "all ones" vector we put there
            pos = pos + zero[self.seq_inf]
        np.divide(pos, tot[self.seq_inf], out=self.sigma[1:])


class Solver:
    """A CFR-family solver on a compiled game; :meth:`step` runs one alternating iteration.

    ``algorithm`` is one of ``ALGORITHMS``. ``mu``, ``T_u``, ``gamma``, ``reset_theta``, ``v2`` and
    ``freeze_alpha`` apply to RTCFR+/RTPCFR+ only (validated for all). ``track_average=False`` skips
    the average accumulation (the benchmark's last-iterate speed).
    """

    def __init__(self, game, algorithm: str = "rtcfr+", *, mu: float = DEFAULTS["mu"], T_u: int = DEFAULTS["T_u"],
                 gamma: float = DEFAULTS["gamma"], reset_theta: bool = False, v2: bool = False,
                 freeze_alpha: bool = False, dcfr_alpha: float = 1.5, dcfr_beta: float = 0.0, dcfr_gamma: float = 2.0,
                 track_average: bool = True):
        self.game = as_game(game)
        self.algorithm = check_choice("algorithm", algorithm, ALGORITHMS)
        self.mu, self.T_u, self.gamma = check_hyper(mu, T_u, gamma)
        self.reset_theta = check_bool("reset_theta", reset_theta)
        self.v2 = check_bool("v2", v2)
        self.freeze_alpha = check_bool("freeze_alpha", freeze_alpha)
        self.track_average = check_bool("track_average", track_average)
        self.dcfr = (check_float("dcfr_alpha", dcfr_alpha), check_float("dcfr_beta", dcfr_beta),
                     check_float("dcfr_gamma", dcfr_gamma, lo=0.0))
        self.rt = self.algorithm.startswith("rt")
        if self.rt and self.gamma * max(int(t.infoset_size.max()) for t in self.game.players) >= 1:
            raise ParameterError("gamma", gamma, "gamma * max |A(I)| < 1 so the perturbed strategy is a distribution")
        if not self.rt:
            self.gamma = 0.0
        self.gamma0 = self.gamma
        self.predictive = self.algorithm in ("pcfr+", "rtpcfr+")
        self.avg_power = self.dcfr[2] if self.algorithm == "dcfr" else _AVG_POWER[self.algorithm]
        self.A, self.At, ops0, ops1 = fast_ops(self.game)
        self.players = [_Player(tp, ops) for tp, ops in zip(self.game.players, (ops0, ops1))]
        self.t = 0
        self.avg_weight = 0.0

    # ---------------------------------------------------------------- one iteration
    def _gradient(self, i):
        """g = A_i x̂_{-i} − μ (x̂_i − r_i): the reward-transformed utility gradient (Eq. 2-3)."""
        me, opp = self.players[i], self.players[1 - i]
        g = me.g
        g.fill(0.0)
        (self.A if i == 0 else self.At).matvec_add(opp.x, g)
        if i == 1:
            np.negative(g, out=g)
        if self.rt:
            np.subtract(me.x[1:], me.ref[1:], out=me.tmp)
            me.tmp *= self.mu
            g[1:] -= me.tmp
        return g

    def _update(self, i, w):
        me = self.players[i]
        g = self._gradient(i)
        if w:
            me.avg += w * me.x
        v = me.ops.values(g, me.sigma)  # v̂ with the unperturbed σ in <.,.>
        m = me.ops.regrets(v)  # m̂ = v̂ − <v̂, σ> 1
        alg = self.algorithm
        if alg in ("cfr+", "rtcfr+", "pcfr+", "rtpcfr+"):  # RM+: θ ← [θ + m̂]⁺
            np.add(me.theta, m, out=me.theta)
            np.maximum(me.theta, me.zeros, out=me.theta)
            if self.predictive:  # σ ∝ [θ + m̂]⁺ (prediction = last regret)
                me.normalise(np.maximum(me.theta + m, me.zeros))
            else:
                me.normalise(me.theta)
        elif alg == "cfr":
            me.theta += m
            me.normalise(np.maximum(me.theta, me.zeros))
        else:  # dcfr: discount positive regrets by t^α/(t^α+1), negative by t^β/(t^β+1)
            a, b, _ = self.dcfr
            t = float(self.t)
            me.theta += m
            me.theta *= np.where(me.theta > 0, t**a / (t**a + 1.0), t**b / (t**b + 1.0))
            me.normalise(np.maximum(me.theta, me.zeros))
        if self.gamma > 0:  # σ̂ = (1 − γ|A(I)|) σ + γ 1
            size = me.seq_size
            if self.freeze_alpha:
                alpha = self.gamma0 * size
                me.sigma_hat[1:] = ((1.0 - alpha) * me.sigma[1:] + self.gamma) / (1.0 - alpha + self.gamma * size)
            else:
                np.multiply(me.sigma[1:], 1.0 - self.gamma * size, out=me.sigma_hat[1:])
                me.sigma_hat[1:] += self.gamma
        else:
            me.sigma_hat[1:] = me.sigma[1:]
        me.ops.forward(me.sigma_hat, me.x)

    def step(self) -> None:
        """One iteration: (maybe) move the reference, then update player 0, then player 1."""
        self.t += 1
        if self.rt and self.t % self.T_u == 0:
            self.gamma *= 0.5
            for p in self.players:
                p.ref[:] = p.x
                if self.reset_theta:
                    p.theta[:] = 0.0
            if self.v2:
                self.mu *= 1.0 - 1e-16
        w = float(self.t) ** self.avg_power if self.track_average else 0.0
        self.avg_weight += w
        for i in (0, 1):
            self._update(i, w)

    # ---------------------------------------------------------------- iterates and metrics
    def last_iterate(self) -> tuple[np.ndarray, np.ndarray]:
        """The current (perturbed) profile in sequence form."""
        return self.players[0].x, self.players[1].x

    def average_iterate(self) -> tuple[np.ndarray, np.ndarray]:
        """The weighted average profile in sequence form (uniform profile before any step)."""
        if self.avg_weight == 0:
            return self.last_iterate()
        return self.players[0].avg / self.avg_weight, self.players[1].avg / self.avg_weight

    def last_behavioural(self):
        return tuple(p.sigma_hat.copy() for p in self.players)

    def average_behavioural(self):
        return tuple(behavioural(p.tp, x) for p, x in zip(self.players, self.average_iterate()))

    def nash_conv(self, which: str = "last") -> float:
        """NashConv (sum of both best-response gains) of the last or the average iterate."""
        check_choice("which", which, ("last", "average"))
        x0, x1 = self.last_iterate() if which == "last" else self.average_iterate()
        return nash_conv(self.game, x0, x1)


@dataclass
class Trajectory:
    """NashConv of the last and the average iterate at the evaluated iterations."""

    algorithm: str
    game: str
    iterations: np.ndarray
    last: np.ndarray
    average: np.ndarray
    seconds: float
    params: dict = field(default_factory=dict)

    def at(self, t: int, which: str = "last") -> float:
        """The value at the last evaluated iteration ≤ t."""
        k = int(np.searchsorted(self.iterations, t, side="right")) - 1
        if k < 0:
            raise ValueError(f"no evaluation at or before iteration {t}")
        return float((self.last if which == "last" else self.average)[k])

    def min_after(self, t: int, which: str = "last") -> float:
        vals = (self.last if which == "last" else self.average)[self.iterations >= t]
        return float(vals.min()) if len(vals) else float("nan")


def eval_schedule(iterations: int, every: int) -> np.ndarray:
    """Iterations 1, every, 2*every, ..., iterations."""
    pts = np.arange(every, iterations + 1, every)
    return np.unique(np.concatenate([[1], pts, [iterations]]))


def solve(game, algorithm: str = "rtcfr+", iterations: int = 1000, eval_every: int = 10,
          average: bool = True, **hyper) -> Trajectory:
    """Run ``iterations`` steps and record NashConv every ``eval_every`` iterations (and at 1 and the end)."""
    iterations = check_int("iterations", iterations, lo=1)
    eval_every = check_int("eval_every", eval_every, lo=1)
    solver = Solver(game, algorithm, **hyper)
    sched = eval_schedule(iterations, eval_every)
    last = np.empty(len(sched))
    avg = np.full(len(sched), np.nan)
    k = 0
    start = time.perf_counter()
    for t in range(1, iterations + 1):
        solver.step()
        if t == sched[k]:
            last[k] = solver.nash_conv("last")
            if average:
                avg[k] = solver.nash_conv("average")
            k += 1
    seconds = time.perf_counter() - start
    params = {"mu": solver.mu, "T_u": solver.T_u, "gamma": solver.gamma0} if solver.rt else {}
    return Trajectory(algorithm, solver.game.name, sched, last, avg, seconds, params)


def trace_strategy(game, algorithm: str, player: int, infoset_key: str, action: int, iterations: int, **hyper) -> dict:
    """Per iteration: the last iterate's probability of ``action`` at one infoset, and the reference's.

    The reference probability is r(I, a) / r(p(I)) (RTCFR+ only; NaN for the other algorithms).
    """
    solver = Solver(game, algorithm, **hyper)
    tp = solver.game.players[player]
    if infoset_key not in tp.key_index:
        raise ParameterError("infoset_key", infoset_key, f"one of {tp.infoset_keys[:12]}")
    inf = tp.key_index[infoset_key]
    start, size = int(tp.infoset_start[inf]), int(tp.infoset_size[inf])
    acts = list(tp.seq_action[start:start + size])
    if action not in acts:
        raise ParameterError("action", action, f"one of {acts}")
    seq = start + acts.index(action)
    parent = int(tp.infoset_parent[inf])
    prob, ref = np.empty(iterations), np.full(iterations, np.nan)
    me = solver.players[player]
    for t in range(iterations):
        solver.step()
        prob[t] = me.sigma_hat[seq]
        if solver.rt and me.ref[parent] > 0:
            ref[t] = me.ref[seq] / me.ref[parent]
    return {"t": np.arange(1, iterations + 1), "prob": prob, "ref": ref,
            "reference_updates": np.arange(solver.T_u, iterations + 1, solver.T_u) if solver.rt else np.array([])}


def snapshots(game, algorithm: str, checkpoints, **hyper) -> dict:
    """{t: (σ̂0, σ̂1)} behavioural last iterates at the given iterations (sorted, ≥ 1)."""
    checkpoints = sorted({check_int("checkpoint", int(c), lo=1) for c in checkpoints})
    solver = Solver(game, algorithm, **hyper)
    out = {}
    for t in range(1, checkpoints[-1] + 1):
        solver.step()
        if t in checkpoints:
            out[t] = solver.last_behavioural()
    return out

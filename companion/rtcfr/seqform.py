"""Vectorised sequence-form operations on a treeplex (paper 18, RTCFR+; numpy on the CPU).

Paper: Meng et al., *Efficient Last-Iterate Convergence in Solving Extensive-Form Games*
(NeurIPS 2025), Sec. 2-3. A player's sequence-form strategy x has x[∅] = 1 and
x(I, a) = x(p(I)) σ(I, a). Counterfactual values are computed bottom-up (Eq. 3):

    v(I, a) = g(I, a) + Σ_{I' ∈ C(I, a)} <v(I'), σ(I')>,

where g is the gradient of the player's sequence-form utility (``A y`` for player 0, ``-Aᵀ x`` for
player 1, plus the regulariser term in the perturbed game). A best response replaces the inner
product by a max over actions. Each pass is one loop over *depths* (a handful), never over nodes:
``np.add.reduceat`` sums the action blocks of all infosets of a depth, ``np.bincount`` scatters
the results to their parent sequences.

Metrics are named explicitly: :func:`nash_conv` is the sum of both players' best-response gains
(what the official RTCFR+ code reports, via LiteEFG) and :func:`exploitability` is NashConv / 2
(what ``open_spiel.python.algorithms.exploitability.exploitability`` returns for two players).
"""

from __future__ import annotations

import numpy as np

from companion.rtcfr.games import CompiledGame, Treeplex


def sequence_form(tp: Treeplex, sigma: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """x(I, a) = x(p(I)) σ(I, a), top-down by depth; ``sigma[0]`` is ignored (x[∅] = 1)."""
    x = np.empty(tp.n_seq) if out is None else out
    x[0] = 1.0
    for lv in tp.levels:
        np.multiply(x[lv.seq_parent], sigma[lv.lo:lv.hi], out=x[lv.lo:lv.hi])
    return x


def behavioural(tp: Treeplex, x: np.ndarray) -> np.ndarray:
    """σ(I, a) = x(I, a) / x(p(I)); uniform where the infoset is unreachable (x(p(I)) = 0)."""
    sigma = np.ones(tp.n_seq)
    parent = x[tp.seq_parent[1:]]
    safe = np.where(parent > 0, parent, 1.0)
    sigma[1:] = np.where(parent > 0, x[1:] / safe, 1.0 / tp.seq_size[1:])
    return sigma


def random_behavioural(tp: Treeplex, rng: np.random.Generator) -> np.ndarray:
    """A random behavioural strategy (each infoset an independent Dirichlet(1) draw)."""
    w = rng.exponential(size=tp.n_seq)
    w[0] = 1.0
    tot = np.add.reduceat(w[1:], tp.infoset_starts0)
    w[1:] /= tot[tp.seq_infoset[1:]]
    return w


def counterfactual_values(tp: Treeplex, g: np.ndarray, sigma: np.ndarray, ev_out: np.ndarray | None = None):
    """Bottom-up values: returns (v, ev), v[seq] counterfactual value, ev[I] = <v(I), σ(I)>.

    ``g`` is overwritten with v (pass a copy to keep it). ``v[0]`` ends as the root value.
    """
    v = g
    ev = np.empty(tp.n_infosets) if ev_out is None else ev_out
    for lv in reversed(tp.levels):
        e = np.add.reduceat(sigma[lv.lo:lv.hi] * v[lv.lo:lv.hi], lv.local_starts)
        ev[lv.a:lv.b] = e
        if lv.p_hi - lv.p_lo == 1:
            v[lv.p_lo] += e.sum()
        else:
            v[lv.p_lo:lv.p_hi] += np.bincount(lv.parent_local, e, minlength=lv.p_hi - lv.p_lo)
    return v, ev


def best_response(tp: Treeplex, g: np.ndarray) -> tuple[float, np.ndarray]:
    """The best-response value max_x <g, x> over the treeplex and a pure best response (behavioural)."""
    v = np.array(g, dtype=np.float64, copy=True)
    br = np.zeros(tp.n_seq)
    br[0] = 1.0
    for lv in reversed(tp.levels):
        block = v[lv.lo:lv.hi]
        best = np.maximum.reduceat(block, lv.local_starts)
        # argmax per block: first action achieving the max
        sizes = np.diff(np.append(lv.local_starts, lv.hi - lv.lo))
        is_best = block >= np.repeat(best, sizes)
        first = np.flatnonzero(is_best)
        inf_of = np.repeat(np.arange(lv.b - lv.a), sizes)[first]
        keep = np.concatenate([[True], inf_of[1:] != inf_of[:-1]])
        br[lv.lo + first[keep]] = 1.0
        if lv.p_hi - lv.p_lo == 1:
            v[lv.p_lo] += best.sum()
        else:
            v[lv.p_lo:lv.p_hi] += np.bincount(lv.parent_local, best, minlength=lv.p_hi - lv.p_lo)
    return float(v[0]), br


def best_response_value(tp: Treeplex, g: np.ndarray) -> float:
    """max_x <g, x> over the player's treeplex (bottom-up max over actions)."""
    v = np.array(g, dtype=np.float64, copy=True)
    for lv in reversed(tp.levels):
        best = np.maximum.reduceat(v[lv.lo:lv.hi], lv.local_starts)
        if lv.p_hi - lv.p_lo == 1:
            v[lv.p_lo] += best.sum()
        else:
            v[lv.p_lo:lv.p_hi] += np.bincount(lv.parent_local, best, minlength=lv.p_hi - lv.p_lo)
    return float(v[0])


def utility_gradients(game: CompiledGame, x0: np.ndarray, x1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(A x1, -Aᵀ x0): each player's utility gradient against the other's sequence-form strategy."""
    return game.payoff @ x1, -(game.payoff_t @ x0)


def expected_value(game: CompiledGame, x0: np.ndarray, x1: np.ndarray) -> float:
    """Player 0's expected utility x0ᵀ A x1."""
    return float(x0 @ (game.payoff @ x1))


def best_response_gains(game: CompiledGame, x0: np.ndarray, x1: np.ndarray) -> tuple[float, float]:
    """Each player's gain from deviating to a best response (both ≥ 0 up to rounding)."""
    g0, g1 = utility_gradients(game, x0, x1)
    v = float(x0 @ g0)
    return best_response_value(game.players[0], g0) - v, best_response_value(game.players[1], g1) + v


def nash_conv(game: CompiledGame, x0: np.ndarray, x1: np.ndarray) -> float:
    """NashConv of a sequence-form profile: the sum of both players' best-response gains.

    This is the metric the official RTCFR+ code reports (LiteEFG's per-player values, summed), and
    what OpenSpiel's ``exploitability.nash_conv`` returns.
    """
    g0, g1 = utility_gradients(game, x0, x1)
    return best_response_value(game.players[0], g0) + best_response_value(game.players[1], g1)


def exploitability(game: CompiledGame, x0: np.ndarray, x1: np.ndarray) -> float:
    """OpenSpiel's ``exploitability.exploitability`` for two players: NashConv / 2."""
    return 0.5 * nash_conv(game, x0, x1)


def nash_conv_behavioural(game: CompiledGame, sigma0: np.ndarray, sigma1: np.ndarray) -> float:
    """NashConv of a behavioural profile (per-sequence action probabilities)."""
    return nash_conv(game, sequence_form(game.players[0], sigma0), sequence_form(game.players[1], sigma1))


# ---------------------------------------------------------------------------- fast passes
try:  # scipy's compiled y += A x kernel; the public ``A @ x`` adds ~15 µs of dispatch per call
    from scipy.sparse._sparsetools import csr_matvec as _csr_matvec
except ImportError:  # pragma: no cover - a future scipy without the private module
    _csr_matvec = None


class CSR:
    """A CSR matrix with an in-place ``y += A x`` (the hot loop calls it ~2D + 4 times per update)."""

    def __init__(self, matrix):
        import scipy.sparse as sp

        m = sp.csr_matrix(matrix, dtype=np.float64)
        m.sort_indices()
        self.matrix = m
        self.shape = m.shape
        self.indptr, self.indices, self.data = m.indptr, m.indices, m.data

    def matvec_add(self, x, y):
        """y += A x (``y`` must be a contiguous float64 array or slice)."""
        if _csr_matvec is not None:
            _csr_matvec(self.shape[0], self.shape[1], self.indptr, self.indices, self.data, x, y)
        else:  # pragma: no cover
            y += self.matrix @ x


class TreeplexOps:
    """Precomputed sparse operators for the hot loop on one treeplex (same results as the passes above).

    * ``up[d]``: level d's sequences -> their infosets' parent sequences (the bottom-up scatter);
    * ``seg``: sequences 1..n-1 -> their infoset (segment sums); ``seq_inf`` broadcasts back.
    """

    def __init__(self, tp: Treeplex):
        import scipy.sparse as sp

        self.tp = tp
        n1 = tp.n_seq - 1
        self.up = []
        for lv in tp.levels:
            rows = lv.seq_parent - lv.p_lo
            cols = np.arange(lv.hi - lv.lo)
            up = sp.csr_matrix((np.ones(len(cols)), (rows, cols)), shape=(lv.p_hi - lv.p_lo, lv.hi - lv.lo))
            self.up.append(CSR(up))
        indptr = np.append(tp.infoset_starts0, n1)
        self.seg = CSR(sp.csr_matrix((np.ones(n1), np.arange(n1), indptr), shape=(tp.n_infosets, n1)))
        self.seq_inf = tp.seq_infoset[1:]
        self.levels = tp.levels
        self.rev_levels = list(reversed(list(zip(tp.levels, self.up))))
        self.w = np.empty(tp.n_seq)  # σ ⊙ v
        self.ev = np.empty(tp.n_infosets)
        self.tot = np.empty(tp.n_infosets)

    def values(self, v, sigma):
        """Bottom-up counterfactual values in place (v starts as the gradient g); returns v.

        Afterwards ``self.w[1:]`` holds σ ⊙ v, whose infoset sums are <v(I), σ(I)>.
        """
        w = self.w
        for lv, up in self.rev_levels:
            np.multiply(sigma[lv.lo:lv.hi], v[lv.lo:lv.hi], out=w[lv.lo:lv.hi])
            up.matvec_add(w[lv.lo:lv.hi], v[lv.p_lo:lv.p_hi])
        return v

    def infoset_sums(self, vec, out):
        """out[I] = Σ_{a ∈ A(I)} vec(I, a) over sequences 1..n-1."""
        out.fill(0.0)
        self.seg.matvec_add(vec, out)
        return out

    def regrets(self, v):
        """m(I, a) = v(I, a) − <v(I), σ(I)> (after :meth:`values`)."""
        ev = self.infoset_sums(self.w[1:], self.ev)
        return v[1:] - ev[self.seq_inf]

    def forward(self, sigma, x):
        """x(I, a) = x(p(I)) σ(I, a) top-down, in place."""
        x[0] = 1.0
        for lv in self.levels:
            np.multiply(x[lv.seq_parent], sigma[lv.lo:lv.hi], out=x[lv.lo:lv.hi])
        return x

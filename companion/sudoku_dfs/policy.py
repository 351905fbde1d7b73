"""One-level guessing: a small contextual guess policy trained with the L1 or the L2 loss (paper 06, Sec. 4).

Paper: Giannoulis, Pantis, Tzamos, NeurIPS 2025 (arXiv 2509.22023), Section 4 and App. D/E.

Setting: apply the rules; if the puzzle is stuck, sample one guess (cell, value) from a policy p;
if rules + guess do not solve it, restart. The good guesses are the puzzle's backdoors S, so the
expected number of guesses is ``1 / p(S)``. The paper trains the guess head of a GPT-2 with

* **L1** ("expected trials"): ``-log sum_{i in S} p_i`` (``loss_type='logsumexp'`` in the code), the
  log of the number of trials - it rewards putting mass on *any* backdoor;
* **L2** (multi-target cross-entropy): ``-sum_{i in S} log p_i`` - it spreads mass over all backdoors,
  and by Remark E.1 only sees their marginals, which Example E.1 shows can cost Theta(n).

**Deviation (scale).** The paper's guesser is the transformer itself (81 "thinking" tokens over the
transcript). On two CPU cores we fit the same two losses to a *linear-softmax* policy over hand-made
features of each candidate move - the contextual MSSC view of App. E needs only some scorer
``p(move | puzzle)``. Features (all computed from the board after the rules): the cell's number of
candidates, the fewest cells that can take the value in one of the cell's units, how many peers lose
the value if it is placed, the number of empty peers, how often the value is already placed, and a
one-round lookahead (how many singles fire right after the move, and whether one round of the rules
already shows a contradiction). The lookahead is one application of the same rules the transformer
imitates, not a search: whether a move is a backdoor needs the rules run to their fixpoint. Fitting
is full-batch L-BFGS (scipy) on the exact loss, so the comparison is of the losses, not of optimisers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import minimize

from companion.core import check_choice, check_float
from companion.sudoku_dfs.board import Status, board_size, geometry

FEATURES = (
    "1 / #candidates of the cell",
    "cell has 2 candidates",
    "1 / fewest places of the value in a unit",
    "value has 2 places in a unit",
    "peers losing the value / 20",
    "empty peers / 20",
    "times the value is placed / n",
    "singles right after the move / 10",
    "contradiction right after the move",
)


def move_features(fixpoint, moves) -> np.ndarray:
    """``[len(moves), len(FEATURES)]`` features of candidate moves on a stuck board (vectorised)."""
    from companion.sudoku_dfs.rules import analyze

    b = np.asarray(fixpoint, dtype=np.int64)
    n = board_size(b)
    g = geometry(n)
    if not moves:
        return np.zeros((0, len(FEATURES)))
    cells = np.array([c for c, _ in moves])
    vals = np.array([v for _, v in moves]) - 1
    cand = analyze(b[None])[0][0]  # [N, n] bool
    ncand = cand.sum(1)
    pos = g.unit_matrix.astype(np.int64) @ cand.astype(np.int64)  # [3n, n] places per unit and value
    placed = np.bincount(b[b > 0], minlength=n + 1)[1:]
    peers = np.array(g.peers)  # [N, 3n - 2 - ...] same length for every cell
    cell_units = np.array(g.cell_units)
    places = pos[cell_units[cells], vals[:, None]].min(1)
    trial = np.repeat(b[None], len(moves), 0)
    trial[np.arange(len(moves)), cells] = vals + 1
    _, forced_after, status_after = analyze(trial)  # one round of the rules after each move
    n_forced = forced_after.any(2).sum(1)
    return np.stack(
        [
            1.0 / ncand[cells],
            (ncand[cells] == 2).astype(float),
            1.0 / np.maximum(places, 1),
            (places == 2).astype(float),
            cand[peers[cells], vals[:, None]].sum(1) / 20.0,
            (b[peers[cells]] == 0).sum(1) / 20.0,
            placed[vals] / n,
            n_forced / 10.0,
            (status_after == Status.CONTRADICTION).astype(float),
        ],
        axis=1,
    )


@dataclass
class PolicyData:
    """Padded features ``X [P, M, F]``, move mask ``[P, M]`` and backdoor mask ``[P, M]``."""

    X: np.ndarray
    mask: np.ndarray
    good: np.ndarray

    def __len__(self) -> int:
        return self.X.shape[0]


def policy_data(infos) -> PolicyData:
    """Features of every stuck puzzle that has at least one backdoor (others cannot be one-guess solved)."""
    keep = [i for i in infos if i.needs_guess and i.n_backdoors > 0]
    if not keep:
        raise ValueError("no stuck puzzle with a backdoor among the inputs")
    M = max(len(i.moves) for i in keep)
    F = len(FEATURES)
    X = np.zeros((len(keep), M, F))
    mask = np.zeros((len(keep), M), dtype=bool)
    good = np.zeros((len(keep), M), dtype=bool)
    for k, info in enumerate(keep):
        m = len(info.moves)
        X[k, :m] = move_features(info.fixpoint, info.moves)
        mask[k, :m] = True
        good[k, :m] = info.backdoor
    return PolicyData(X, mask, good)


def _log_probs(theta, X, mask):
    logits = X @ theta
    logits = logits.masked_fill(~mask, float("-inf"))
    return torch.log_softmax(logits, dim=1)


def policy_loss(theta: torch.Tensor, data: PolicyData, kind: str) -> torch.Tensor:
    """Mean over puzzles of L1 = ``-log sum_S p`` or L2 = ``-sum_S log p``."""
    check_choice("kind", kind, ("l1", "l2"))
    X = torch.as_tensor(data.X)
    mask = torch.as_tensor(data.mask)
    good = torch.as_tensor(data.good)
    lp = _log_probs(theta, X, mask)
    if kind == "l1":
        return -torch.logsumexp(lp.masked_fill(~good, float("-inf")), dim=1).mean()
    return -(lp.masked_fill(~good, 0.0)).sum(1).mean()


def fit_policy(data: PolicyData, kind: str, ridge: float = 1e-3) -> np.ndarray:
    """Weights of the linear-softmax policy minimising the L1 or L2 loss (+ ridge), by L-BFGS."""
    check_float("ridge", ridge, lo=0.0)
    mu = data.X[data.mask].mean(0)
    sd = data.X[data.mask].std(0) + 1e-9
    Xs = PolicyData((data.X - mu) / sd * data.mask[..., None], data.mask, data.good)

    def f(w):
        t = torch.tensor(w, dtype=torch.float64, requires_grad=True)
        loss = policy_loss(t, Xs, kind) + ridge * (t * t).sum()
        loss.backward()
        return float(loss.detach()), t.grad.numpy().copy()

    res = minimize(f, np.zeros(data.X.shape[2]), jac=True, method="L-BFGS-B", options={"maxiter": 300})
    return np.concatenate([res.x / sd, [-(res.x / sd) @ mu]])  # weights on raw features, bias last


def success_probability(weights: np.ndarray, data: PolicyData) -> np.ndarray:
    """``p(S)`` of the policy on every puzzle of ``data``."""
    w = torch.as_tensor(weights[:-1])
    lp = _log_probs(w, torch.as_tensor(data.X), torch.as_tensor(data.mask))
    return torch.logsumexp(lp.masked_fill(~torch.as_tensor(data.good), float("-inf")), 1).exp().numpy()


def oracle_probability(data: PolicyData, which: str, n_empty=None) -> np.ndarray:
    """``p(S)`` of the lower-bound oracle (uniform over candidate moves) or, given the numbers of
    empty cells, the upper-bound oracle (a uniform empty cell with its correct value)."""
    check_choice("which", which, ("upper", "lower"))
    nb = data.good.sum(1)
    if which == "lower":
        return nb / data.mask.sum(1)
    if n_empty is None:
        raise ValueError("the upper-bound oracle needs n_empty for every puzzle")
    return nb / np.asarray(n_empty)


def n_empty_of(infos) -> np.ndarray:
    """Empty cells after the rules, for the puzzles :func:`policy_data` keeps (same order)."""
    return np.array([i.n_empty for i in infos if i.needs_guess and i.n_backdoors > 0])

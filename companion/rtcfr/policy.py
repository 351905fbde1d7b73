"""Behavioural strategies <-> OpenSpiel ``TabularPolicy`` (paper 18, RTCFR+).

The compiled treeplex keeps each infoset's OpenSpiel information-state string and each sequence's
OpenSpiel action, so a profile converts to a ``TabularPolicy`` that OpenSpiel's own
``exploitability.nash_conv`` can evaluate; this is how the library's NashConv is checked.
Needs open_spiel and a game compiled with its infoset keys (``compile_game`` keeps them; a game
loaded from an .npz saved without keys cannot be converted).
"""

from __future__ import annotations

import numpy as np

from companion.rtcfr.games import CompiledGame, openspiel_game


def _rows(pol, tp):
    if not tp.infoset_keys:
        raise ValueError("this compiled game has no infoset keys (saved without keys=True); "
                         "compile it with compile_game(name) to convert to OpenSpiel policies")
    return np.array([pol.state_lookup[k] for k in tp.infoset_keys], dtype=np.int64)


def to_tabular_policy(game: CompiledGame, sigma0: np.ndarray, sigma1: np.ndarray, os_game=None):
    """An OpenSpiel ``TabularPolicy`` holding the behavioural profile (σ0, σ1)."""
    from open_spiel.python import policy as os_policy

    os_game = os_game if os_game is not None else openspiel_game(game.name)
    pol = os_policy.TabularPolicy(os_game)
    for tp, sigma in zip(game.players, (sigma0, sigma1)):
        rows = _rows(pol, tp)
        table = pol.action_probability_array
        table[rows] = 0.0
        seq_rows = rows[tp.seq_infoset[1:]]
        table[seq_rows, tp.seq_action[1:]] = sigma[1:]
    return pol


def from_tabular_policy(game: CompiledGame, pol) -> tuple[np.ndarray, np.ndarray]:
    """The behavioural profile (σ0, σ1) stored in an OpenSpiel ``TabularPolicy``."""
    out = []
    for tp in game.players:
        rows = _rows(pol, tp)
        sigma = np.ones(tp.n_seq)
        sigma[1:] = pol.action_probability_array[rows[tp.seq_infoset[1:]], tp.seq_action[1:]]
        out.append(sigma)
    return out[0], out[1]


def openspiel_nash_conv(game: CompiledGame, sigma0: np.ndarray, sigma1: np.ndarray) -> float:
    """OpenSpiel's ``exploitability.nash_conv`` of the profile (the peer check for our NashConv)."""
    from open_spiel.python.algorithms import exploitability

    os_game = openspiel_game(game.name)
    return float(exploitability.nash_conv(os_game, to_tabular_policy(game, sigma0, sigma1, os_game)))


def solver_policy(solver, which: str = "last"):
    """The solver's last or average iterate as an OpenSpiel ``TabularPolicy``."""
    from companion.core.validation import check_choice

    check_choice("which", which, ("last", "average"))
    s0, s1 = solver.last_behavioural() if which == "last" else solver.average_behavioural()
    return to_tabular_policy(solver.game, s0, s1)

"""Compile a two-player zero-sum OpenSpiel game into sequence-form arrays (paper 18, RTCFR+).

Paper: Meng et al., *Efficient Last-Iterate Convergence in Solving Extensive-Form Games*
(NeurIPS 2025). The paper works with the sequence form of an extensive-form game: player 0 picks a
sequence-form strategy x0, player 1 picks x1, and player 0's expected utility is ``x0ᵀ A x1``
(Eq. 2 writes the min-max with ``A`` as player 0's loss; here ``A`` holds player 0's *utility*, so
player 1's utility matrix is ``-Aᵀ``). This module builds the pieces every algorithm needs:

* the **treeplex** of each player: information sets ordered by depth (the number of the player's
  own actions above them), each owning a contiguous block of sequences ``(I, a)``; sequence 0 is
  the empty sequence. ``infoset_parent[I]`` is the parent sequence of ``I``.
* the **sparse payoff** ``A`` (CSR, ``n0 x n1``): ``A[s0, s1] = Σ_z p_chance(z) u0(z)`` over the
  terminal histories ``z`` whose last sequences are ``s0`` and ``s1``.

The game tree is walked once with OpenSpiel (the real dependency for game definitions); a
simultaneous-move game is first converted with ``pyspiel.convert_to_turn_based``. Compiled games
can be written to / read from ``.npz`` so the GPU machine (no OpenSpiel) can load them.

Deviation: none in the mathematics. Games are identified either by a preset name (see ``GAMES``)
or by any OpenSpiel game string.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from companion.core.atomic import write_atomic
from companion.core.validation import ParameterError

# Preset names -> OpenSpiel game strings. The paper's games: Kuhn (58 histories / 12 infosets),
# Leduc (9,457 / 936), Liar's Dice(6) (294,883 / 24,576), Goofspiel(6) (969,523 / 34,482) and
# Battleship(3) (732,607 / 81,027); the strings below reproduce those counts exactly in OpenSpiel
# 2.0.2 (Battleship(3): a 2x3 board, one ship of size 2, 3 shots each; the ship value 2 is a guess,
# it only scales payoffs). Smaller members of each family are for the CPU.
GAMES = {
    "kuhn_poker": "kuhn_poker",
    "leduc_poker": "leduc_poker",
    "liars_dice_3": "liars_dice(dice_sides=3)",
    "liars_dice_4": "liars_dice(dice_sides=4)",
    "liars_dice_5": "liars_dice(dice_sides=5)",
    "liars_dice_6": "liars_dice(dice_sides=6)",
    "goofspiel_3": "goofspiel(num_cards=3,imp_info=True,points_order=descending)",
    "goofspiel_4": "goofspiel(num_cards=4,imp_info=True,points_order=descending)",
    "goofspiel_5": "goofspiel(num_cards=5,imp_info=True,points_order=descending)",
    "goofspiel_6": "goofspiel(num_cards=6,imp_info=True,points_order=descending)",
    "battleship_2x2": "battleship(board_width=2,board_height=2,ship_sizes=[2],ship_values=[2],num_shots=3,allow_repeated_shots=False)",
    "battleship_3": "battleship(board_width=2,board_height=3,ship_sizes=[2],ship_values=[2],num_shots=3,allow_repeated_shots=False)",
}
# how the paper names them
PAPER_NAMES = {
    "kuhn_poker": "Kuhn", "leduc_poker": "Leduc", "liars_dice_3": "Liar's Dice(3)", "liars_dice_4": "Liar's Dice(4)",
    "liars_dice_5": "Liar's Dice(5)", "liars_dice_6": "Liar's Dice(6)", "goofspiel_3": "Goofspiel(3)",
    "goofspiel_4": "Goofspiel(4)", "goofspiel_5": "Goofspiel(5)", "goofspiel_6": "Goofspiel(6)",
    "battleship_2x2": "Battleship(2x2)", "battleship_3": "Battleship(3)",
}


@dataclass(frozen=True)
class Level:
    """The infosets of one depth: sequences lo:hi, infosets a:b, and where their values go up."""

    lo: int
    hi: int
    a: int
    b: int
    local_starts: np.ndarray  # infoset block starts relative to lo (for reduceat)
    p_lo: int  # parent sequences of this level lie in p_lo:p_hi
    p_hi: int
    parent_local: np.ndarray  # parent sequence of each infoset, relative to p_lo
    seq_parent: np.ndarray  # parent sequence of each sequence lo:hi (absolute)


@dataclass
class Treeplex:
    """One player's sequence-form decision structure, infosets ordered by depth."""

    n_seq: int  # number of sequences including the empty sequence 0
    infoset_parent: np.ndarray  # [n_inf] parent sequence of each infoset
    infoset_start: np.ndarray  # [n_inf] first sequence of the infoset
    infoset_size: np.ndarray  # [n_inf] number of actions |A(I)|
    depth_starts: np.ndarray  # [n_depth + 1] infosets of depth d are depth_starts[d]:depth_starts[d+1]
    seq_action: np.ndarray  # [n_seq] OpenSpiel action of each sequence (-1 for the empty one)
    infoset_keys: list = field(default_factory=list)  # OpenSpiel information-state strings (optional)

    def __post_init__(self):
        self.infoset_parent = np.asarray(self.infoset_parent, dtype=np.int64)
        self.infoset_start = np.asarray(self.infoset_start, dtype=np.int64)
        self.infoset_size = np.asarray(self.infoset_size, dtype=np.int64)
        self.depth_starts = np.asarray(self.depth_starts, dtype=np.int64)
        self.seq_action = np.asarray(self.seq_action, dtype=np.int64)
        n_inf = len(self.infoset_start)
        # sequence -> infoset (-1 for the empty sequence) and sequence -> parent sequence of its infoset
        self.seq_infoset = np.full(self.n_seq, -1, dtype=np.int64)
        self.seq_infoset[1:] = np.repeat(np.arange(n_inf), self.infoset_size)
        self.seq_parent = np.full(self.n_seq, -1, dtype=np.int64)
        self.seq_parent[1:] = self.infoset_parent[self.seq_infoset[1:]]
        self.seq_size = np.ones(self.n_seq, dtype=np.float64)
        self.seq_size[1:] = self.infoset_size[self.seq_infoset[1:]]
        # depth ranges in sequence indices
        self.depth_seq = [
            (int(self.infoset_start[a]), int(self.infoset_start[b - 1] + self.infoset_size[b - 1]))
            for a, b in zip(self.depth_starts[:-1], self.depth_starts[1:])
        ]
        # per-depth blocks used by the vectorised passes (sequence ranges are contiguous per depth;
        # the parents of depth-d infosets are sequences of depth d-1, or the empty sequence 0)
        self.levels = []
        for d, (lo, hi) in enumerate(self.depth_seq):
            a, b = int(self.depth_starts[d]), int(self.depth_starts[d + 1])
            p_lo, p_hi = (0, 1) if d == 0 else self.depth_seq[d - 1]
            parents = self.infoset_parent[a:b]
            if parents.size and (parents.min() < p_lo or parents.max() >= p_hi):
                raise ValueError("treeplex depth order is broken: a parent sequence is not one level up")
            self.levels.append(Level(lo, hi, a, b, self.infoset_start[a:b] - lo, p_lo, p_hi, parents - p_lo,
                                     self.seq_parent[lo:hi]))
        self.infoset_starts0 = self.infoset_start - 1  # block starts within the sequences 1..n_seq-1
        self.key_index = {k: i for i, k in enumerate(self.infoset_keys)}

    @property
    def n_infosets(self) -> int:
        return len(self.infoset_start)

    @property
    def n_depths(self) -> int:
        return len(self.depth_starts) - 1


@dataclass
class CompiledGame:
    """A two-player zero-sum game in sequence form: two treeplexes and player 0's payoff matrix."""

    name: str
    players: tuple  # (Treeplex, Treeplex)
    payoff: sp.csr_matrix  # [n0, n1] chance-weighted utility of player 0
    n_histories: int = -1
    n_terminals: int = -1

    def __post_init__(self):
        self.payoff = sp.csr_matrix(self.payoff, dtype=np.float64)
        self.payoff_t = self.payoff.T.tocsr()  # [n1, n0]

    @property
    def n_infosets(self) -> int:
        return sum(t.n_infosets for t in self.players)

    @property
    def n_sequences(self) -> tuple:
        return tuple(t.n_seq for t in self.players)

    def describe(self) -> str:
        return (
            f"{self.name}: {self.n_histories} histories, {self.n_infosets} infosets, "
            f"sequences {self.players[0].n_seq}/{self.players[1].n_seq}, payoff nnz {self.payoff.nnz}"
        )

    # ---------------------------------------------------------------- npz round trip
    def save(self, path, keys: bool = False) -> Path:
        """Write the arrays to ``path`` (.npz, compressed, atomic). ``keys`` also stores infoset strings."""
        path = Path(path)
        arrays = {"name": np.array(self.name), "n_histories": np.array(self.n_histories), "n_terminals": np.array(self.n_terminals)}
        coo = self.payoff.tocoo()
        arrays.update(payoff_row=coo.row.astype(np.int32), payoff_col=coo.col.astype(np.int32),
                      payoff_val=coo.data.astype(np.float64), shape=np.array(self.payoff.shape))
        for p, t in enumerate(self.players):
            arrays[f"p{p}_n_seq"] = np.array(t.n_seq)
            arrays[f"p{p}_infoset_parent"] = t.infoset_parent.astype(np.int32)
            arrays[f"p{p}_infoset_size"] = t.infoset_size.astype(np.int16)
            arrays[f"p{p}_depth_starts"] = t.depth_starts.astype(np.int32)
            arrays[f"p{p}_seq_action"] = t.seq_action.astype(np.int32)
            if keys and t.infoset_keys:
                arrays[f"p{p}_keys"] = np.array(t.infoset_keys)
        def write(tmp):  # a file object: np.savez would append ".npz" to a name without it
            with open(tmp, "wb") as f:
                np.savez_compressed(f, **arrays)

        return write_atomic(path, write)

    @classmethod
    def load(cls, path) -> "CompiledGame":
        """Read a game written by :meth:`save` (no OpenSpiel needed)."""
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"no compiled game at {path}; write it with CompiledGame.save (needs open_spiel)")
        z = np.load(path, allow_pickle=False)
        players = []
        for p in range(2):
            size = z[f"p{p}_infoset_size"].astype(np.int64)
            start = 1 + np.concatenate([[0], np.cumsum(size)[:-1]])
            players.append(Treeplex(
                n_seq=int(z[f"p{p}_n_seq"]), infoset_parent=z[f"p{p}_infoset_parent"], infoset_start=start,
                infoset_size=size, depth_starts=z[f"p{p}_depth_starts"], seq_action=z[f"p{p}_seq_action"],
                infoset_keys=[str(k) for k in z[f"p{p}_keys"]] if f"p{p}_keys" in z else [],
            ))
        shape = tuple(int(s) for s in z["shape"])
        payoff = sp.csr_matrix((z["payoff_val"], (z["payoff_row"], z["payoff_col"])), shape=shape)
        return cls(str(z["name"]), tuple(players), payoff, int(z["n_histories"]), int(z["n_terminals"]))


# -------------------------------------------------------------------- OpenSpiel side
def _examples() -> str:
    return ", ".join(GAMES) + ", or any two-player zero-sum OpenSpiel game string such as 'liars_dice(dice_sides=4)'"


def load_openspiel_game(name: str):
    """The (turn-based) pyspiel game for a preset name or OpenSpiel game string, validated."""
    if not isinstance(name, str) or not name:
        raise ParameterError("game", name, _examples())
    try:
        import pyspiel
    except ImportError as exc:  # pragma: no cover - open_spiel is a declared extra
        raise ImportError("compiling a game needs open_spiel (pip install open-spiel); "
                          "or load a compiled game with CompiledGame.load(path)") from exc
    game_string = GAMES.get(name, name)
    try:
        game = pyspiel.load_game(game_string)
    except Exception as exc:  # pyspiel raises SpielError / RuntimeError for unknown names
        raise ParameterError("game", name, _examples()) from exc
    gtype = game.get_type()
    if game.num_players() != 2 or gtype.utility != pyspiel.GameType.Utility.ZERO_SUM:
        raise ParameterError("game", name, "a two-player zero-sum game (this one has "
                             f"{game.num_players()} players and utility {gtype.utility.name}); e.g. " + _examples())
    if gtype.dynamics == pyspiel.GameType.Dynamics.SIMULTANEOUS:
        game = pyspiel.convert_to_turn_based(game)
    if not game.get_type().provides_information_state_string:
        raise ParameterError("game", name, "a game that provides information-state strings; e.g. " + _examples())
    return game


def compile_openspiel(game, name: str | None = None) -> CompiledGame:
    """Walk the game tree once and build both treeplexes and the sparse payoff."""
    # infoset discovery: key -> [player, parent_seq_key, actions, depth]
    info = [dict(), dict()]
    order = [[], []]
    terminals = {}  # (seq0_key, seq1_key) -> value
    n_hist = 0
    n_term = 0
    # a sequence key is (infoset_key, action) or None for the empty sequence
    stack = [(game.new_initial_state(), None, None, 1.0, 0, 0)]
    while stack:
        state, s0, s1, pc, d0, d1 = stack.pop()
        n_hist += 1
        if state.is_terminal():
            n_term += 1
            key = (s0, s1)
            terminals[key] = terminals.get(key, 0.0) + pc * state.returns()[0]
            continue
        if state.is_chance_node():
            for a, p in state.chance_outcomes():
                if p > 0:
                    stack.append((state.child(a), s0, s1, pc * p, d0, d1))
            continue
        player = state.current_player()
        key = state.information_state_string(player)
        actions = state.legal_actions()
        own, depth = (s0, d0) if player == 0 else (s1, d1)
        entry = info[player].get(key)
        if entry is None:
            info[player][key] = (own, tuple(actions), depth)
            order[player].append(key)
        elif entry[0] != own or entry[1] != tuple(actions):
            raise ValueError(f"game {name!r} is not perfect-recall or its infoset {key!r} has inconsistent actions")
        for a in actions:
            child = state.child(a)
            if player == 0:
                stack.append((child, (key, a), s1, pc, d0 + 1, d1))
            else:
                stack.append((child, s0, (key, a), pc, d0, d1 + 1))
    treeplexes = []
    seq_index = []
    for p in range(2):
        keys = sorted(order[p], key=lambda k: info[p][k][2])  # stable: depth, then discovery
        index = {None: 0}
        starts, sizes, seq_action = [], [], [-1]
        nxt = 1
        for k in keys:
            acts = info[p][k][1]
            starts.append(nxt)
            sizes.append(len(acts))
            for a in acts:
                index[(k, a)] = nxt
                seq_action.append(a)
                nxt += 1
        parents = [index[info[p][k][0]] for k in keys]
        depths = np.array([info[p][k][2] for k in keys], dtype=np.int64)
        n_depth = int(depths.max()) + 1 if len(depths) else 0
        depth_starts = np.searchsorted(depths, np.arange(n_depth + 1))
        treeplexes.append(Treeplex(nxt, parents, starts, sizes, depth_starts, seq_action, keys))
        seq_index.append(index)
    rows = np.fromiter((seq_index[0][k[0]] for k in terminals), dtype=np.int64, count=len(terminals))
    cols = np.fromiter((seq_index[1][k[1]] for k in terminals), dtype=np.int64, count=len(terminals))
    vals = np.fromiter(terminals.values(), dtype=np.float64, count=len(terminals))
    payoff = sp.csr_matrix((vals, (rows, cols)), shape=(treeplexes[0].n_seq, treeplexes[1].n_seq))
    payoff.eliminate_zeros()
    return CompiledGame(name or str(game), tuple(treeplexes), payoff, n_hist, n_term)


@functools.lru_cache(maxsize=16)
def compile_game(name: str) -> CompiledGame:
    """Compile a preset name or OpenSpiel game string (cached)."""
    return compile_openspiel(load_openspiel_game(name), name)


def openspiel_game(name: str):
    """The pyspiel game object matching :func:`compile_game` (cached), for OpenSpiel's own tools."""
    return _openspiel_game(name)


@functools.lru_cache(maxsize=16)
def _openspiel_game(name):
    return load_openspiel_game(name)


def data_path(name: str) -> Path:
    """Where the compiled arrays of a preset live in the repository (``data/rtcfr/<name>.npz``)."""
    from companion.core.paths import repo_path

    return repo_path("data", "rtcfr", f"{name}.npz")

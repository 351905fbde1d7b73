"""Write the compiled sequence-form arrays the GPU benchmark loads (the H200 machine has no OpenSpiel).

Run from the repository root (needs open_spiel, about a minute on two cores):

    .venv/bin/python data/rtcfr/make_games.py

Each ``<name>.npz`` holds both treeplexes (infoset parents, action counts, depth blocks, OpenSpiel
action ids) and player 0's chance-weighted payoff in COO form; ``CompiledGame.load`` reads it back.
Infoset strings are left out to keep the files small (about 1.1 MB in all).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from companion.rtcfr.games import compile_game, data_path  # noqa: E402

NAMES = ("kuhn_poker", "leduc_poker", "liars_dice_5", "liars_dice_6", "goofspiel_5", "goofspiel_6", "battleship_3")


def main(names=NAMES):
    for name in names:
        start = time.perf_counter()
        game = compile_game(name)
        path = game.save(data_path(name))
        print(f"{game.describe()} -> {path.name} ({path.stat().st_size / 1024:.0f} KB, {time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main(sys.argv[1:] or NAMES)

"""Make the committed SFT warm-start policy: ``python -m companion.gain_rl.make_fixture [--out PATH]``.

Runs :func:`companion.gain_rl.policy.sft` with the default :class:`~companion.gain_rl.policy.SFTRecipe` on
one CPU thread and writes ``data/gain_rl/sft_policy.safetensors`` (float32 weights; the recipe, the result
and the command in its metadata) through :func:`companion.core.checkpoints.save_state`.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from dataclasses import asdict

import torch

from companion.core import repo_path
from companion.core.checkpoints import save_state
from companion.gain_rl.policy import FIXTURE, FORMAT, SFTRecipe, sft


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(repo_path(FIXTURE)))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    recipe = SFTRecipe()
    t0 = time.perf_counter()
    model, result = sft(recipe)
    seconds = time.perf_counter() - t0
    meta = {"format": FORMAT, "recipe": asdict(recipe), "config": model.config, "result": result,
            "extra": {"seconds": round(seconds, 1), "torch": torch.__version__, "python": platform.python_version(),
                      "date": time.strftime("%Y-%m-%d", time.gmtime()),
                      "command": "python -m companion.gain_rl.make_fixture " + " ".join(sys.argv[1:])}}
    path = save_state(args.out, model.state_dict(), meta)
    print(f"wrote {path}: {result} in {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Train the notebook's tiny VAR and write it as a checkpoint (paper 03, ScaleKV).

``python -m companion.scalekv.make_checkpoint --seed 0 --out data/scalekv/tiny_var_seed0.safetensors``
runs :func:`companion.scalekv.train.train_tiny_var` (exactly what the notebook does when it trains) with
the default :class:`~companion.scalekv.checkpoint.Recipe` and writes the weights, config, recipe and
loss curve atomically (:func:`~companion.scalekv.checkpoint.save_checkpoint`). See ``data/scalekv/README.md``.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
from pathlib import Path

import torch

from companion.scalekv.checkpoint import Recipe, save_checkpoint
from companion.scalekv.train import notebook_config, train_tiny_var

__all__ = ["main"]


def main(argv=None) -> int:
    d = Recipe()
    ap = argparse.ArgumentParser(prog="python -m companion.scalekv.make_checkpoint", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="checkpoint to write (.safetensors; written atomically)")
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--steps", type=int, default=d.steps)
    ap.add_argument("--batch-size", type=int, default=d.batch_size)
    ap.add_argument("--lr", type=float, default=d.lr)
    ap.add_argument("--sides", type=str, default="1,2,3,4,6,8,12", help="comma-separated map sides")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dim", type=int, default=48)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (the notebook's CPU profile uses 1)")
    ap.add_argument("--log-every", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    config = notebook_config(tuple(int(s) for s in args.sides.split(",")), args.layers, args.dim)
    recipe = Recipe(steps=args.steps, batch_size=args.batch_size, lr=args.lr, seed=args.seed)
    model, losses, seconds = train_tiny_var(config, recipe, log_every=args.log_every)
    extra = {"date": datetime.date.today().isoformat(), "seconds": round(seconds, 1), "torch": torch.__version__,
             "python": platform.python_version(), "device": "cpu", "threads": args.threads,
             "command": "python -m companion.scalekv.make_checkpoint " + " ".join(sys.argv[1:] if argv is None else argv)}
    path = save_checkpoint(model, args.out, recipe, losses=losses, extra=extra)
    tail = losses[-20:]
    print(f"{path}: {sum(p.numel() for p in model.parameters()):,} parameters, {recipe.describe()}, loss {losses[0]:.3f} -> "
          f"{sum(tail) / len(tail):.3f} in {seconds:.0f} s; {path.stat().st_size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Train the notebook's causal recall toy and write it as a checkpoint (paper 09, Δ Attention, experiment B).

``python -m companion.delta_attention.make_checkpoint --out data/delta_attention/recall_toy_seed0.safetensors``
runs :func:`companion.delta_attention.checkpoint.train_from_recipe` (exactly what the notebook does when it
trains) for the notebook's task and the default :class:`~companion.delta_attention.checkpoint.RecallRecipe`,
and writes the weights, task, recipe and loss curve atomically. See ``data/delta_attention/README.md``.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
from pathlib import Path

import torch

from companion.delta_attention.checkpoint import RecallRecipe, save_checkpoint, train_from_recipe
from companion.delta_attention.recall import notebook_task, recall_metrics

__all__ = ["main"]


def main(argv=None) -> int:
    d = RecallRecipe()
    ap = argparse.ArgumentParser(prog="python -m companion.delta_attention.make_checkpoint", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="checkpoint to write (.safetensors; written atomically)")
    ap.add_argument("--length", type=int, default=128, help="sequence length (the notebook's RECALL_LENGTH)")
    ap.add_argument("--pairs", type=int, default=8, help="key-value pairs in the prompt (RECALL_PAIRS)")
    ap.add_argument("--steps", type=int, default=d.steps, help="training steps (RECALL_STEPS)")
    ap.add_argument("--seed", type=int, default=d.seed, help="training seed (SEED)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (the notebook's CPU profile uses 1)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    task = notebook_task(args.length, args.pairs)
    recipe = RecallRecipe(steps=args.steps, seed=args.seed)
    t0 = time.perf_counter()
    model, losses = train_from_recipe(task, recipe)
    seconds = time.perf_counter() - t0
    dense = recall_metrics(model, task, None, batch=256)
    extra = {"date": datetime.date.today().isoformat(), "seconds": round(seconds, 1), "torch": torch.__version__,
             "python": platform.python_version(), "device": "cpu", "threads": args.threads,
             "dense_recall": round(dense["accuracy"], 4),
             "command": "python -m companion.delta_attention.make_checkpoint " + " ".join(sys.argv[1:] if argv is None else argv)}
    path = save_checkpoint(model, args.out, task, recipe, losses=losses, extra=extra)
    tail = losses[-20:]
    print(f"{path}: {sum(p.numel() for p in model.parameters()):,} parameters, {recipe.describe()}, loss {losses[0]:.3f} -> "
          f"{sum(tail) / len(tail):.3f} in {seconds:.0f} s; dense recall {dense['accuracy']:.1%} "
          f"(chance {1 / task.num_values:.1%}); {path.stat().st_size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The notebook's 4x4 (Shidoku) GPT-2: its training recipe, training, and the committed checkpoint.

Paper: Giannoulis, Pantis, Tzamos, NeurIPS 2025 (arXiv 2509.22023), Section 3.2 (imitation of DFS
transcripts with label sets). The 4x4 model is this project's CPU-scale stand-in for the paper's 9x9
GPT-2 (see ``training.py`` for the deviations: one layer, lr 3e-3, 900 steps instead of 3M).

The recipe is a plain dict (JSON in the checkpoint's safetensors metadata): the model and training
configurations, the number of training puzzles (the first lines of ``data/sudoku/puzzles_4x4.txt``,
transcript *i* drawn with ``seed + i``) and a digest of those puzzles. The notebook's ``MODEL_4X4``
checkpoint is used only when its recorded recipe equals the run's; otherwise the model is trained in
the run. Make the committed checkpoint with

``python -m companion.sudoku_dfs.four_by_four --seed 0 --out data/sudoku/gpt2_4x4_seed0.safetensors``
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import platform
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

from companion.core import ParameterError, repo_path
from companion.core.checkpoints import differences
from companion.sudoku_dfs.checkpoints import load_checkpoint, resolve_checkpoint, save_checkpoint
from companion.sudoku_dfs.data import encode_transcripts
from companion.sudoku_dfs.generator import load_puzzles
from companion.sudoku_dfs.model import GPTConfig, build_model
from companion.sudoku_dfs.solver import dfs_transcript
from companion.sudoku_dfs.training import TrainConfig, train_model

__all__ = ["PUZZLES_4X4", "STORAGE_DTYPE", "load_matching", "model_for_run", "recipe", "recipe_differences", "resolve",
           "save_model", "train", "training_puzzles"]

PUZZLES_4X4 = ("data", "sudoku", "puzzles_4x4.txt")
STORAGE_DTYPE = torch.float16  # the committed file: fp16 (same held-out accuracy as fp32, see data/sudoku/README.md)
MADE_BY = "python -m companion.sudoku_dfs.four_by_four"


def training_puzzles(n_train: int) -> list[tuple]:
    """The first ``n_train`` committed 4x4 puzzles (the training set of the notebook)."""
    return load_puzzles(repo_path(*PUZZLES_4X4), n=4)[:n_train]


def _digest(puzzles) -> str:
    text = "\n".join("".join(str(v) for v in p) for p in puzzles)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def recipe(n_train: int = 2000, steps: int = 900, seed: int = 0) -> dict:
    """The notebook's 4x4 recipe: one layer of 8 heads, d = 128; AdamW lr 3e-3, batch 32, 20 warm-up
    steps, linear decay over the last 30 %; ``n_train`` committed puzzles, transcript *i* with seed
    ``seed + i``; the model initialised with ``seed``."""
    gpt = GPTConfig(n_layer=1, n_head=8, n_embd=128, n_positions=64)
    tc = TrainConfig(steps=steps, batch_size=32, lr=3e-3, warmup=20, decay_frac=0.3, seed=seed, log_every=10)
    # `compile` and `schedule` came after the committed checkpoint; at their defaults they train as it was trained
    train = {k: v for k, v in asdict(tc).items() if k not in ("compile", "schedule")}
    return {"gpt": asdict(gpt), "train": train, "n_train": n_train, "puzzles": "/".join(PUZZLES_4X4),
            "puzzles_sha256_16": _digest(training_puzzles(n_train)), "transcript_seeds": f"{seed} + i", "seed": seed}


def train(rec: dict, puzzles=None) -> tuple:
    """Train the recipe's model on the CPU: ``(model, history)`` (history as :func:`train_model`'s)."""
    puzzles = training_puzzles(rec["n_train"]) if puzzles is None else puzzles
    seed = rec["seed"]
    data = encode_transcripts([dfs_transcript(p, seed=seed + i, check_unique=False) for i, p in enumerate(puzzles)])
    model = build_model(GPTConfig(**rec["gpt"]), seed=seed)
    hist = train_model(model, data, TrainConfig(**rec["train"]))
    return model, hist


def save_model(model, hist: dict, rec: dict, path, extra: dict | None = None, dtype: torch.dtype = STORAGE_DTYPE) -> Path:
    """Write the model with its recipe, loss curve and ``extra`` (command, date, versions) as metadata."""
    meta = {"recipe": rec, "history": {k: hist[k] for k in ("step", "loss", "seconds", "steps", "sequences", "tokens")},
            **(extra or {})}
    return save_checkpoint(model, path, meta, dtype=dtype)


def recipe_differences(wanted: dict, recorded: dict | None) -> list[str]:
    """The fields in which a recorded recipe differs from the wanted one (``[]`` = equal), as
    ``"train.steps: run 4, checkpoint 3"`` (:func:`companion.core.checkpoints.differences`)."""
    if not isinstance(recorded, dict):
        return ["the file records no 4x4 recipe"]
    return differences(wanted, recorded)


def load_matching(path, rec: dict, name: str = "MODEL_4X4") -> tuple:
    """``(model, meta, [])`` when the checkpoint's recipe equals ``rec``; ``(None, meta, differences)``
    otherwise. A file that is not a Sudoku checkpoint raises :class:`ParameterError` naming ``name``."""
    try:
        model, meta = load_checkpoint(path)
    except Exception as exc:  # noqa: BLE001  (safetensors raises its own error types on a file that is not one)
        raise ParameterError(name, str(path), f"a 4x4 checkpoint made by {MADE_BY} ({type(exc).__name__}: {exc})") from exc
    diff = recipe_differences(rec, meta.get("recipe"))
    return (None if diff else model), meta, diff


def resolve(value: str, name: str = "MODEL_4X4") -> Path | None:
    """The checkpoint file the ``MODEL_4X4`` parameter names (``""`` = none; absolute as given,
    relative to the repository root; a missing file raises :class:`ParameterError` naming ``name``)."""
    return resolve_checkpoint(value, name, made_by=MADE_BY)


def model_for_run(value: str, rec: dict, name: str = "MODEL_4X4") -> tuple:
    """The 4x4 model of a run: ``(model, history, source)``. ``value`` is the notebook parameter
    (``""`` = train in this run; absolute, or relative to the repository root). The checkpoint is
    used when its recipe equals ``rec``, otherwise the model is trained here. ``source`` says which:
    ``{"kind": "checkpoint" | "trained", "path", "command", "seconds", "reason"}``."""
    path = resolve(value, name)
    reason = f"{name} is empty"
    if path is not None:
        model, meta, diff = load_matching(path, rec, name)
        if model is not None:
            shown = value if not Path(value).is_absolute() else str(path)
            return model, meta["history"], {"kind": "checkpoint", "path": shown, "command": meta.get("command", "?"),
                                            "seconds": meta["history"]["seconds"], "reason": "recipe matches",
                                            "bytes": path.stat().st_size, "torch": meta.get("torch")}
        reason = f"{name}'s recipe differs from this run's ({'; '.join(diff[:3])})"
    t0 = time.perf_counter()
    model, hist = train(rec)
    return model, hist, {"kind": "trained", "path": None, "command": None, "seconds": time.perf_counter() - t0,
                         "reason": reason}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=MADE_BY, description="Train the notebook's 4x4 GPT-2 and write it as a checkpoint.")
    ap.add_argument("--out", required=True, type=Path, help="checkpoint to write (.safetensors, written atomically)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-train", type=int, default=2000)
    ap.add_argument("--steps", type=int, default=900)
    ap.add_argument("--dtype", choices=("float16", "bfloat16", "float32"), default=str(STORAGE_DTYPE).split(".")[-1])
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (the notebook's CPU profile uses 1)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    rec = recipe(args.n_train, args.steps, args.seed)
    model, hist = train(rec)
    extra = {"command": f"{MADE_BY} " + " ".join(sys.argv[1:] if argv is None else argv),
             "date": datetime.date.today().isoformat(), "torch": torch.__version__,
             "python": platform.python_version(), "device": "cpu", "threads": args.threads, "dtype": args.dtype}
    path = save_model(model, hist, rec, args.out, extra, dtype=getattr(torch, args.dtype))
    print(f"{path}: {hist['steps']} steps in {hist['seconds']:.1f} s, loss {hist['loss'][0]:.3f} -> {hist['loss'][-1]:.3f}; "
          f"{path.stat().st_size / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The one-GPU (H200) study of paper 06 (Sudoku by DFS imitation) and the reader of its committed results. No
plotly import.

A 9x9 GPT-2 of a few million parameters trained for minutes on DFS transcripts (the paper: 42M parameters, 3M
steps, about 168 GPU-hours); the stage bodies are in :mod:`companion.sudoku_dfs.study`. Stage by stage:

1. ``data``: locally minimal 9x9 puzzles and their DFS transcripts generated on ``workers`` CPU processes for
   ``gen_seconds``, kept as the paper keeps them (a guess, ends with ``0``, at most 250 tokens);
2. ``training``: the GPT-2 of ``model`` trained for ``train_seconds`` (bf16 on the GPU), with the teacher-forced
   accuracy per token type on held-out transcripts during training;
3. ``evaluation``: greedy decoding of ``eval_puzzles`` committed held-out puzzles: board accuracy, guesses;
4. ``propagation``: batched singles to a fixpoint on the GPU (``do_bench``) vs numpy and sequential Python;
5. ``one_level_guessing``: the L1 vs L2 linear guess policy on the generated puzzles' backdoors;
6. ``checkpoint``: the model as bf16 safetensors at ``checkpoint`` (not committed, about 14 MB; the notebook's
   ``CHECKPOINT`` parameter loads it on a CPU).

Not reproduced: the paper's scale (its 98.9 % board accuracy needs far more training than minutes) and its
transformer guess head (the guess policy here is linear on hand features). Run it with
``python -m companion.bench sudoku_dfs`` (``--smoke``: a tiny CPU run).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from companion.core.stages import Stage, study_functions
from companion.sudoku_dfs import study as E

RESULTS_NAME = "sudoku_train_gpu"
DEADLINE_S = 330
GPU_PROFILE = {
    "workers": 15,  # puzzle and transcript processes (the H200 machine has 16 cores)
    "gen_seconds": 25.0,
    "max_puzzles": 1_000_000,  # a bound the time budget reaches first
    "transcripts_per_puzzle": 4,
    # what the 4x4 runs taught: many small heads, many updates (batch 64), a constant learning rate and a short
    # final decay (the last 30 % of the time budget); steps is a bound the time budget reaches first
    "model": {"n_layer": 8, "n_head": 16, "n_embd": 256, "n_inner": 1024, "n_positions": 512, "dropout": 0.0},
    "train_seconds": 240.0,
    "train": {"steps": 10_000_000, "batch_size": 64, "lr": 1.5e-3, "warmup": 100, "decay_frac": 0.3, "log_every": 250},
    "eval_puzzles": 500,
    "decode_cap": 500,  # tokens per greedy decode (the paper's cap)
    "propagation_boards": [1_000, 10_000, 100_000],
    "policy_puzzles": 3000,  # generated puzzles whose backdoors train the guess policies
    "checkpoint": "build/sudoku/sudoku_9x9_gpt2.safetensors",  # relative to the repository root
    "seed": 0,
}
SMOKE_PROFILE = {
    **GPU_PROFILE, "workers": 1, "gen_seconds": 60.0, "max_puzzles": 16,  # the same 16 puzzles on any machine
    "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "n_inner": None, "n_positions": 512, "dropout": 0.0},
    "train_seconds": 10.0, "train": {"steps": 4, "batch_size": 8, "lr": 1e-3, "warmup": 2, "decay_frac": 1.0, "log_every": 1},
    "eval_puzzles": 6, "decode_cap": 120, "propagation_boards": [200], "policy_puzzles": 60,
    "checkpoint": str(Path(tempfile.gettempdir(), "sudoku_dfs_smoke.safetensors")),
}
STAGES = (
    Stage("data", E.data_stage, needs_s=30),
    Stage("training", E.training_stage, needs_s=245),
    Stage("evaluation", E.evaluation_stage, needs_s=20),
    Stage("propagation", E.propagation_stage, needs_s=10),
    Stage("one_level_guessing", E.one_level_guessing_stage, needs_s=15),
    Stage("checkpoint", E.checkpoint_stage, needs_s=2),
)


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)


def recorded_config(rec: dict) -> str:
    """The configuration a recorded run actually used, in words, read from its ``training`` stage."""
    tr = rec["training"]
    cfg = tr["model"]["config"]
    return (f"{cfg['n_layer']} layers, {cfg['n_head']} heads, d = {cfg['n_embd']}, "
            f"{tr['model']['parameters'] / 1e6:.1f}M parameters; batch {tr['batch_size']}, lr {tr.get('lr')}, "
            f"{tr['steps']} steps in {tr['seconds']:.0f} s on {rec['device']}")

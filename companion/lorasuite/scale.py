"""The one-GPU (H200) study of paper 12 (LoRASuite) and the reader of its committed results. No plotly import.

The upgrade shares the old model's lineage, like the paper's MiniCPM-S-1B → MiniCPM-2B and Qwen 1.5 → 2.5 (same data
and tokenizer family; wider, deeper, more heads, a larger vocabulary): an old word-level Llama of ≈97M parameters
(d 768, 12 layers, 12 heads, FFN 2048, 8,192 tokens) is trained, then **grown** into the new one of ≈231M (d 1024,
16 layers, 16 heads, FFN 2816, 12,288 tokens, ≈7,500 of them shared) by a function-preserving construction
(:func:`companion.lorasuite.fixture.upgrade`) and trained further on the same text in the new vocabulary: a stated
stand-in for a real upgrade. Stages (bodies in :mod:`companion.lorasuite.study`):

1. ``vocab``: the word-level vocabularies (:mod:`~companion.lorasuite.vocab`), refused before any training when
   they share fewer than d_old = 768 tokens (W_h = E_o[c]⁺ E_n[c] would not be full rank);
2. ``pretrain_old``: the old model from scratch on the standard library's source without the task package
   (300 steps, stopped at 30 s);
3. ``grow``: the new model grown from the old one (its function gap on shared tokens recorded before training),
   then 200 steps more on the same text (stopped at 30 s);
4. ``seed0``, ``seed1``, ``seed2``: per seed on the ``email`` package, the old model's LoRA (r 32, α 32, q/k/v/o,
   the paper's setting) beside the old model alone; LoRASuite's transfer of it without and with LFT (100 windows,
   3 epochs, no warm-up, lr 3e-4 and 1e-3); LoRA(100) from scratch on the same windows and steps; LoRA(full) on
   all the task's training windows until its validation loss stops falling (patience 3 evaluations every 25
   steps, at most 450 steps or 40 s); the new model alone beside every arm; seconds and peak memory of each arm;
5. ``svd``: the SVD step at d = 2048 and 4096 (``torch.linalg.svd``, the peer, first; then ``torch.svd_lowrank``).

The seeds vary the adapters (initialisation, sample choice, batch order) on one grown model pair; each seed is a
stage of its own, so a deadline keeps the seeds that finished and ``--stages pretrain_old,grow,seed2 --resume FILE``
adds one (the models are retrained in that call, from the same seed). GQA (the earlier profile's 4 K/V heads) is
not part of the grown pair: a function-preserving growth keeps multi-head attention.

Not reproduced: the paper's pretrained pairs (MiniCPM, Qwen, Llama) and its math / commonsense benchmarks (here
validation loss on held-out source files of the task package). Run it with ``python -m companion.bench lorasuite``
(``--smoke``: a tiny CPU run).
"""

from __future__ import annotations

from functools import partial

from companion.core.stages import Stage, not_finished, study_functions
from companion.lorasuite import study as E

RESULTS_NAME = "lorasuite_gpu"
COMMAND = "python -m companion.bench lorasuite"
N_SEEDS = 3
DEADLINE_S = 320
GPU_PROFILE = {
    "old": {"hidden": 768, "layers": 12, "heads": 12, "ffn": 2048},
    "new": {"hidden": 1024, "layers": 16, "heads": 16, "ffn": 2816, "inserted": [2, 6, 10, 14]},
    "seq_len": 256, "batch": 32, "old_steps": 300, "pretrain_lr": 1e-3,
    "grow_steps": 200, "grow_lr": 5e-4, "grow_noise": 0.0,
    "lora_rank": 32, "lora_alpha": 32.0, "lora_lr": 3e-4, "lora_batch": 16, "lora_warmup": 15, "old_lora_steps": 150,
    "full_max_steps": 450, "full_eval_every": 25, "full_patience": 3,
    "task": "email", "lft_samples": 100, "lrs": [3e-4, 1e-3], "epochs": 3,
    "cka_minibatches": 8, "cka_tokens": 512, "svd_dims": [2048, 4096], "svd_rank": 32,
    # word-level vocabularies (companion.lorasuite.vocab): ~7,500 shared tokens >> d_old = 768, so W_h is full rank
    "vocab": {"old": 8192, "new": 12288}, "text_bytes": 8_000_000,
    # seconds each training may take at most (it stops early, recording the steps done and why)
    "stage_limits": {"old": 30, "grow": 30, "old_lora": 15, "full": 40},
    "seed": 0,
}
SMOKE_PROFILE = {
    **GPU_PROFILE,
    "old": {"hidden": 32, "layers": 2, "heads": 2, "ffn": 64},
    "new": {"hidden": 48, "layers": 3, "heads": 3, "ffn": 96, "inserted": [1]},
    "seq_len": 32, "batch": 8, "old_steps": 3, "grow_steps": 3, "lora_rank": 2, "lora_alpha": 2.0, "old_lora_steps": 3,
    "lora_warmup": 1, "full_max_steps": 4, "full_eval_every": 2, "full_patience": 1, "lft_samples": 16,
    "lrs": [1e-3], "epochs": 1, "cka_minibatches": 2, "cka_tokens": 32, "svd_dims": [64], "svd_rank": 4,
    "vocab": {"old": 512, "new": 768}, "text_bytes": 300_000,
}
# needs_s from the H200 run of the earlier profile (same widths): 300 old steps 20.6 s, 200 new steps 18 s,
# LoRA on the new model 0.107 s a step, the transfer 7 s, an LFT / LoRA(100) run 2 s
STAGES = (
    Stage("vocab", E.run_vocab, needs_s=8),
    Stage("pretrain_old", E.run_pretrain_old, needs_s=28),
    Stage("grow", E.run_grow, needs_s=40),  # ≈ 8 s growth on the CPU + 200 steps (≈ 22 s) + moving the models
    # old LoRA ≈ 10 s, transfer ≈ 7 s, 4 × LFT / LoRA(100) ≈ 9 s, LoRA(full) ≤ 40 s (early stop or its cap)
    *(Stage(f"seed{k}", partial(E.run_seed, k), needs_s=70) for k in range(N_SEEDS)),
    Stage("svd", E.run_svd, needs_s=15),
)
SEED_STAGES = tuple(f"seed{k}" for k in range(N_SEEDS))


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)


def missing(gpu: dict | None, stage: str) -> str | None:
    """None when the recorded payload ``gpu`` holds ``stage``'s result; else why not (no run, a run of the earlier
    layout, or the stage's state)."""
    if not gpu:
        return f"no GPU run recorded yet: {COMMAND} on one GPU"
    if "grow" not in (gpu.get("stages") or {}) and stage != "svd":
        return (f"the recorded run ({gpu.get('date', '?')}) is of the earlier study of two separately trained models "
                f"(stages {', '.join(gpu.get('stages') or {})}), not the grown upgrade: {COMMAND} on one GPU")
    left = not_finished(gpu, (stage,))
    return f"the recorded run's stage {left[0]}" if left else None


def seeds_done(gpu: dict | None) -> list[dict]:
    """The recorded seed stages' results that finished (in stage order), empty when none did."""
    return [gpu[s] for s in SEED_STAGES if missing(gpu, s) is None]

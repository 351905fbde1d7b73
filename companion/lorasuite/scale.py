"""The one-GPU (H200) study of paper 12 (LoRASuite) and the reader of its committed results. No plotly import.

An old word-level Llama of ≈97M parameters (d 768, 12 layers, 12 heads, 8,192 tokens) is upgraded to a new one of
≈205M (d 1024, 16 layers, 16 query heads, **4 K/V heads: GQA**, FFN 2816, 12,288 tokens). Stages (bodies in
:mod:`companion.lorasuite.study`):

1. ``vocab``: the word-level vocabularies (:mod:`~companion.lorasuite.vocab`; old counted on the first half of the
   pre-training text, new on all of it plus the docstrings, ≈7,400 shared tokens), refused before any training
   when they share fewer than d_old = 768 tokens (W_h = E_o[c]⁺ E_n[c] would not be full rank; the CPU fixture's
   character pair shares 91, where the first H200 run stopped);
2. ``pretrain``: both models trained from scratch on the standard library's source without the task package
   (300 and 200 steps, each stopped at 30 s);
3. ``task``: LoRA (r 32, α 32, q/k/v/o, the paper's setting, 150 steps, stopped at 12 s) on the ``email`` package
   for each model (the new one is LoRA(full)); LoRASuite carries the old adapter across (W_h, CKA + DP, Hungarian
   heads, GQA averaging, SVD); LFT over 10 and 100 samples × lr 3e-4 and 1e-3 beside LoRA(n) from scratch; wall
   time and peak memory of transfer + LFT against LoRA(full);
4. ``svd``: the SVD step at d = 2048 and 4096 (``torch.linalg.svd``, the peer, first; then ``torch.svd_lowrank``).

Not reproduced: the paper's pretrained pairs (MiniCPM, Qwen, Llama) and its math / commonsense benchmarks (here
validation loss on held-out source files), and its step counts (the planned steps are an upper bound on a slower
device; a training stopped by its cap is recorded with the steps it did, and the claim rows say so). Run it with
``python -m companion.bench lorasuite`` (``--smoke``: a tiny CPU run).
"""

from __future__ import annotations

from companion.core.stages import Stage, not_finished, study_functions
from companion.lorasuite import study as E

RESULTS_NAME = "lorasuite_gpu"
COMMAND = "python -m companion.bench lorasuite"
DEADLINE_S = 140
GPU_PROFILE = {
    "old": {"hidden": 768, "layers": 12, "heads": 12, "kv_heads": 12, "ffn": 2048},
    "new": {"hidden": 1024, "layers": 16, "heads": 16, "kv_heads": 4, "ffn": 2816},
    "seq_len": 256, "batch": 32, "old_steps": 300, "new_steps": 200, "pretrain_lr": 1e-3,
    "lora_rank": 32, "lora_alpha": 32.0, "lora_steps": 150, "lora_lr": 3e-4, "lora_batch": 16, "lora_warmup": 15,
    "task": "email", "lft_samples": [10, 100], "lrs": [3e-4, 1e-3], "epochs": 3,
    "cka_minibatches": 8, "cka_tokens": 512, "svd_dims": [2048, 4096], "svd_rank": 32,
    # word-level vocabularies (companion.lorasuite.vocab): ~7,400 shared tokens >> d_old = 768, so W_h is full rank
    "vocab": {"old": 8192, "new": 12288}, "text_bytes": 8_000_000,
    # seconds each training may take at most (it stops early, recording the steps done)
    "stage_limits": {"old": 30, "new": 30, "lora": 12},
    "seed": 0,
}
SMOKE_PROFILE = {
    **GPU_PROFILE,
    "old": {"hidden": 32, "layers": 2, "heads": 2, "kv_heads": 2, "ffn": 64},
    "new": {"hidden": 48, "layers": 3, "heads": 3, "kv_heads": 1, "ffn": 96},
    "seq_len": 32, "batch": 8, "old_steps": 3, "new_steps": 3, "lora_rank": 2, "lora_alpha": 2.0, "lora_steps": 3,
    "lora_warmup": 1, "lft_samples": [16, 32], "lrs": [1e-4, 1e-3], "epochs": 1, "cka_minibatches": 2,
    "cka_tokens": 32, "svd_dims": [64], "svd_rank": 4, "vocab": {"old": 512, "new": 768}, "text_bytes": 300_000,
}
STAGES = (
    Stage("vocab", E.run_vocab, needs_s=5),
    Stage("pretrain", E.run_pretrain, needs_s=65),
    Stage("task", E.run_task, needs_s=55),
    Stage("svd", E.run_svd, needs_s=15),
)


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)


def missing(gpu: dict | None, stage: str) -> str | None:
    """None when the recorded payload ``gpu`` holds ``stage``'s result; else why not (no run, or the stage's state)."""
    if not gpu:
        return f"no GPU run recorded yet: {COMMAND} on one GPU"
    left = not_finished(gpu, (stage,))
    return f"the recorded run's stage {left[0]}" if left else None

"""The one-GPU (H200) study of paper 11 (Low-Rank Clone) and the reader of its committed results. No plotly import.

What it runs, stage by stage (the bodies are in :mod:`companion.low_rank_clone.study`), sized to about 150 s on
one H200, on the Python standard library's source files (local bytes, split by file):

1. ``teacher``: a LLaMA-layout byte-level model (``GPU_PROFILE["teacher"]``: d 512, 8 layers, 8 heads, FFN 1408,
   about 25M parameters) trained from scratch for ``teacher_seconds``;
2. ``causal``: students at d/2 from the same batches for ``student_steps`` steps: LRC (L_LM + L_KL(T = 40) +
   0.2 L_clone), random init + KD, Minitron-style hard width pruning (activation importance) + KD; validation
   loss every ``eval_every`` steps and the tokens each needs to reach random init + KD's final loss. The paper's
   schedule (linear warm-up, then linear decay) with a warm-up of 10 % of the steps instead of 0.5 %: a run at
   a constant 2e-3 had LRC's validation loss jump to 21 within its first 50 steps;
3. ``throughput``: one training step of LRC (teacher forward included) against plain training of the same
   standalone student (merged, every weight trained, L_LM only), ``time_ms`` medians -> tokens/s; and
   ``x (W_T P)ᵀ`` with W_S materialised each call against the factored ``(x Pᵀ) W_Tᵀ``, forward + backward, at a
   3B-teacher shape (d_T 3072 -> d_S 1536, out 8192).

Not reproduced: the paper's 3B-7B teachers and 10-20B tokens; the spec's 100-200M teacher does not fit the time
with three students. Run it with ``python -m companion.bench low_rank_clone`` (``--smoke``: a tiny CPU run).
"""

from companion.core.stages import Stage, study_functions
from companion.low_rank_clone import study as S

RESULTS_NAME = "low_rank_clone_gpu"
DEADLINE_S = 150
GPU_PROFILE = {
    "teacher": {"vocab_size": 256, "hidden_size": 512, "num_layers": 8, "num_heads": 8, "intermediate_size": 1408},
    "text_max_bytes": 16_000_000,
    "seq_len": 256,
    "batch": 32,
    "teacher_seconds": 45,
    "student_steps": 300,
    "eval_every": 25,
    "val_batches": 8,
    "lr": 2e-3,
    "warmup_ratio": 0.1,
    "alpha": 0.2,
    "temperature": 40.0,
    "linear_shape": {"tokens": 8192, "d_teacher": 3072, "d_student": 1536, "out": 8192},
    "seed": 0,
}
SMOKE_PROFILE = {**GPU_PROFILE, "teacher": {"vocab_size": 256, "hidden_size": 32, "num_layers": 2, "num_heads": 2,
                                            "intermediate_size": 48},
                 "text_max_bytes": 300_000, "seq_len": 32, "batch": 4, "teacher_seconds": 0.5, "student_steps": 4,
                 "eval_every": 2, "val_batches": 2, "linear_shape": {"tokens": 64, "d_teacher": 32, "d_student": 16, "out": 48}}
STAGES = (
    Stage("teacher", S.teacher, needs_s=50),
    Stage("causal", S.causal, needs_s=70),
    Stage("throughput", S.throughput, needs_s=15),
)


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)

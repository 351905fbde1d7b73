"""The one-GPU (H200) study of paper 11 (Low-Rank Clone) and the reader of its committed results. No plotly import.

What it runs, stage by stage (the bodies are in :mod:`companion.low_rank_clone.study`), sized to about 300 s on
one H200, on the Python standard library's source files (local bytes, split by file):

1. ``teacher``: a LLaMA-layout byte-level model (``GPU_PROFILE["teacher"]``: d 512, 8 layers, 8 heads, FFN 1408,
   about 26M parameters) trained from scratch for ``teacher_seconds`` = 85 s, about 27 % of ``DEADLINE_S`` and
   four to five times the time of any one student (at 200K tokens/s, seven times its tokens), on batches of
   ``teacher_batch``, with warm-up and a linear decay to 0 over that time; its validation-loss curve and final
   validation loss are recorded;
2. ``students_0``, ``students_1``, ``students_2``: one stage per seed (profile seed + 0, 1, 2), so a deadline cut
   keeps the seeds that finished and ``--resume`` can add the rest. In each, three students at d/2 on the same
   token budget (``student_steps`` steps of ``batch`` × ``seq_len`` bytes, 2.46M tokens, the paper's warm-up of
   ``warmup_ratio`` of the steps then linear decay): LRC (L_LM + L_KL(T = 40) + 0.2 L_clone), random init + KD,
   Minitron-style hard width pruning (activation importance) + KD; validation loss every ``eval_every`` steps and
   the tokens each needs to reach the fixed ``target_loss`` (nats/byte);
3. ``throughput``: one training step of LRC (teacher forward included) against plain training of the same
   standalone student (merged, every weight trained, L_LM only), ``time_ms`` medians -> tokens/s; and
   ``x (W_T P)ᵀ`` with W_S materialised each call against the factored ``(x Pᵀ) W_Tᵀ``, forward + backward, at a
   3B-teacher shape (d_T 3072 -> d_S 1536, out 8192).

Seconds per stage on the H200 (``needs_s``), from the earlier recorded run of the same shapes (teacher steps of 32 ×
256 bytes in 41 ms; 300 student steps in 24 s for LRC, 18 s for random init + KD, 16 s for hard pruning + KD):
teacher 85 s of training plus about 10 s to read the text, import and build the model, and evaluate; each seed
about 60 s with the students' construction; throughput a few seconds (``do_bench`` for 30 ms per step kind).

Not reproduced: the paper's 3B-7B teachers and 10-20B tokens; the spec's 100-200M teacher does not fit the time
with nine students. Run it with ``python -m companion.bench low_rank_clone`` (``--smoke``: a tiny CPU run).
"""

from functools import partial

from companion.core.stages import Stage, study_functions
from companion.low_rank_clone import study as S

RESULTS_NAME = "low_rank_clone_gpu"
DEADLINE_S = 315
SEED_STAGES = ("students_0", "students_1", "students_2")  # one stage per seed: seed = profile seed + index
GPU_PROFILE = {
    "teacher": {"vocab_size": 256, "hidden_size": 512, "num_layers": 8, "num_heads": 8, "intermediate_size": 1408},
    "text_max_bytes": 16_000_000,
    "seq_len": 256,
    "teacher_batch": 64,
    "teacher_seconds": 85,
    "teacher_eval_every": 200,
    "batch": 32,
    "student_steps": 300,
    "eval_every": 20,
    "val_batches": 8,
    "lr": 2e-3,
    "warmup_ratio": 0.1,
    "alpha": 0.2,
    "temperature": 40.0,
    "target_loss": 2.0,
    "linear_shape": {"tokens": 8192, "d_teacher": 3072, "d_student": 1536, "out": 8192},
    "seed": 0,
}
SMOKE_PROFILE = {**GPU_PROFILE, "teacher": {"vocab_size": 256, "hidden_size": 32, "num_layers": 2, "num_heads": 2,
                                            "intermediate_size": 48},
                 "text_max_bytes": 300_000, "seq_len": 32, "teacher_batch": 4, "teacher_seconds": 0.3,
                 "teacher_eval_every": 20, "batch": 4, "student_steps": 4, "eval_every": 2, "val_batches": 2,
                 "linear_shape": {"tokens": 64, "d_teacher": 32, "d_student": 16, "out": 48}}
STAGES = (
    Stage("teacher", S.teacher, needs_s=100),
    *(Stage(name, partial(S.students, index=k), needs_s=65) for k, name in enumerate(SEED_STAGES)),
    Stage("throughput", S.throughput, needs_s=10),
)


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)

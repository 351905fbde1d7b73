"""The one-GPU (H200) study of paper 15 (Nemotron-Flash) and the reader of its committed results. No plotly import.

Stages (bodies in :mod:`companion.nemotron_flash.study`), every latency from one harness (CUDA graphs where capture
works), bf16, random weights:

1. ``transformer`` (the peer, measured first): a Qwen3-0.6B-shaped decoder built from our layers; time to decode
   8,192 tokens at batch 1 (the step time at 3 contexts over the decode, integrated: stated, not 8,192 real steps)
   and max-batch throughput (the batch doubles until the cache no longer fits or 1,024);
2. ``hf_generate``: the same shape as ``transformers.Qwen3ForCausalLM`` timed with HF ``generate``;
3. ``hybrid``: an NF-1B-shaped hybrid [inferred shape; Mamba2 in our PyTorch], timed as the transformer;
4. ``depth_width``: batch-1 ms/token and throughput at batch 64 of a depth × width grid at ~400M parameters;
5. ``explorer_layer_ms``: the explorer's per-operator timings on this device (the explorer's "H200" device);
6. ``operators``: one layer's decode step against context and batch at width 2048;
7. ``fla_vs_ours``: fla's Triton chunk kernels against our chunked PyTorch (bf16 agreement, prefill time); last,
   because its first call compiles Triton kernels.

Not run (beyond the budget): the 50-100M hybrids trained as search proxies, Spearman of short vs long training,
weight-normalisation and meta-token ablations. Run it with ``python -m companion.bench nemotron_flash``
(``--smoke``: tiny float32 models on the CPU, where the fla stage records that it needs CUDA).
"""

from __future__ import annotations

from companion.core.stages import Stage, study_functions
from companion.nemotron_flash import study as E

RESULTS_NAME = "nemotron_flash_latency"
DEADLINE_S = 150

GPU_PROFILE = {
    "dtype": "bfloat16",
    "n_tokens": 8192,        # tokens decoded at batch 1 (and per sequence for the throughput)
    "decode_points": 3,      # contexts at which the decode step is timed
    "throughput_start": 8,   # first batch of the doubling
    "max_batch": 1024,
    "cpu_reps": 1,           # timed repetitions on a CPU (on CUDA: do_bench for rep_ms)
    "rep_ms": 20,
    "transformer": {"blocks": 28, "pattern": [["a", "f"]], "vocab_size": 151936, "hidden_size": 1024,
                    "attn_hidden_size": 2048, "kq_head_dim": 128, "v_head_dim": 128, "num_kv_heads": 8, "kq_norm": True,
                    "ffn_hidden_size": 3072, "tie_embeddings": True, "rope_base": 1e6, "max_position": 40960},
    "hybrid": {"blocks": 12, "pattern": [["deltanet", "f", "m2", "f"], ["a", "f", "m2", "f"]], "vocab_size": 131072,
               "hidden_size": 2048, "kq_head_dim": 128, "v_head_dim": 128, "num_kv_heads": 4, "ffn_hidden_size": 2560,
               "mamba_headdim": 64, "mamba_d_state": 128, "max_position": 40960},
    "hf_generate": {"prompt": 1024, "new_tokens": 128},
    "depth_width": {"grid": [[8, 2048], [16, 1440], [32, 1024], [64, 720]], "vocab_size": 32000, "context": 1024,
                    "batch": 64},
    "operators": {"ops": ["a", "deltanet", "gdn", "m2", "f"], "width": 2048, "contexts": [1024, 4096, 16384, 32768],
                  "batches": [1, 16, 64]},
    "fla": {"shape": [1, 4096, 16, 128]},
    "seed": 0,
}
SMOKE_PROFILE = {
    **GPU_PROFILE, "dtype": "float32", "n_tokens": 64, "throughput_start": 1, "max_batch": 4,
    "transformer": {"blocks": 4, "pattern": [["a", "f"]], "vocab_size": 512, "hidden_size": 64, "attn_hidden_size": 64,
                    "kq_head_dim": 16, "v_head_dim": 16, "num_kv_heads": 2, "kq_norm": True, "ffn_hidden_size": 192,
                    "tie_embeddings": True, "max_position": 4096},
    "hybrid": {"blocks": 2, "pattern": [["deltanet", "f", "m2", "f"], ["a", "f", "m2", "f"]], "vocab_size": 512,
               "hidden_size": 64, "kq_head_dim": 16, "v_head_dim": 16, "num_kv_heads": 2, "ffn_hidden_size": 128,
               "mamba_headdim": 16, "mamba_d_state": 16, "max_position": 4096},
    "hf_generate": {"prompt": 16, "new_tokens": 8},
    "depth_width": {"grid": [[2, 64], [4, 44], [8, 32]], "vocab_size": 256, "context": 16, "batch": 4},
    "operators": {**GPU_PROFILE["operators"], "width": 64, "contexts": [16, 64], "batches": [1, 2]},
}
STAGES = (
    Stage("transformer", E.transformer, needs_s=10),
    Stage("hf_generate", E.hf_generate, needs_s=15),
    Stage("hybrid", E.hybrid, needs_s=10),
    Stage("depth_width", E.depth_width, needs_s=15),
    Stage("explorer_layer_ms", E.explorer_layer_ms, needs_s=15),
    Stage("operators", E.operators, needs_s=20),
    Stage("fla_vs_ours", E.fla_vs_ours, needs_s=60),  # compiling fla's kernels: the recorded run was killed in it
)


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)

"""SeerAttention (paper 01, arXiv 2410.13276): a learned block-sparsity gate, self-distilled from a
frozen model, and block-sparse attention with the masks it selects.

Modules (no plotly import here; ``explore`` holds the figures and the explorer):

* ``gate``: ``AttnGate`` (pooled Q/K, per-head linear maps, block RoPE, softmax), ``GateSet``
  (one gate per layer, safetensors save/load);
* ``hf``: hooks into any Hugging Face transformer's attention (pre-RoPE Q/K for the gate, post-RoPE
  Q/K/V for the target and for block-sparse runs);
* ``distill``: the teacher pass and the KL self-distillation;
* ``evaluate``: threshold / top-k masks, baselines, recall, output similarity;
* ``ops``: dispatch to ``companion_kernels.block_sparse`` for any block size, the attention-mass map,
  and the paper's R-buffer ground-truth algorithm as an independent check;
* ``data``: offline text windows; ``synthetic``: the planted long-context decoder; ``scale``: the GPU
  section (long-context distillation and kernel timing).
"""

from companion.seer_attention.data import byte_windows, text_windows
from companion.seer_attention.distill import TeacherData, collect_teacher, distill, distill_loss, heldout_kl, kl_rows
from companion.seer_attention.evaluate import (
    METHODS,
    ashape_scores,
    density,
    evaluate_blocks,
    evaluate_outputs,
    keep_per_row,
    method_selector,
    recall,
    sparse_forward,
    threshold_select,
    topk_select,
)
from companion.seer_attention.gate import AttnGate, GateSet, block_pool, block_rope, count_parameters, n_blocks
from companion.seer_attention.hf import AttentionCaptureError, AttentionLayout, attention_layout, attention_session
from companion.seer_attention.ops import block_mass_map, pooled_attention_map, pooled_attention_map_rbuffer

__all__ = [
    "METHODS",
    "AttentionCaptureError",
    "AttentionLayout",
    "AttnGate",
    "GateSet",
    "TeacherData",
    "ashape_scores",
    "attention_layout",
    "attention_session",
    "block_mass_map",
    "block_pool",
    "block_rope",
    "byte_windows",
    "collect_teacher",
    "count_parameters",
    "density",
    "distill",
    "distill_loss",
    "evaluate_blocks",
    "evaluate_outputs",
    "heldout_kl",
    "keep_per_row",
    "kl_rows",
    "method_selector",
    "n_blocks",
    "pooled_attention_map",
    "pooled_attention_map_rbuffer",
    "recall",
    "sparse_forward",
    "text_windows",
    "threshold_select",
    "topk_select",
]

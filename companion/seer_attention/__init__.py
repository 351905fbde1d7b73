"""SeerAttention (paper 01): a learned block-sparsity gate, self-distilled from a frozen model, and
block-sparse attention with the masks it selects.

Paper: *SeerAttention: Self-distilled Attention Gating for Efficient Long-context Prefilling* (Gao et al.,
NeurIPS 2025), arXiv 2410.13276; official code https://github.com/microsoft/SeerAttention.

Modules (no plotly import here; ``explorer`` holds the explorer, ``figures`` the static figures,
``claims`` the claims table, ``scale`` and ``scale_kernel`` the two GPU studies):

* ``gate``: ``AttnGate`` (pooled Q/K, per-head linear maps, block RoPE, softmax), ``GateSet``
  (one gate per layer, safetensors save/load);
* attention hooks: ``companion.models.attention`` (pre-RoPE Q/K for the gate, post-RoPE
  Q/K/V for the target and for block-sparse runs);
* ``distill``: the teacher pass and the KL self-distillation;
* ``evaluate``: threshold / top-k masks, baselines, recall, output similarity;
* ``ops``: dispatch to ``companion_kernels.block_sparse`` for any block size, the attention-mass map,
  and the paper's R-buffer ground-truth algorithm as an independent check;
* ``data``: offline text windows; ``synthetic``: the planted long-context decoder;
* ``scale`` (stages in ``study``): long-context distillation and kernel timing with the gate's masks;
  ``scale_kernel`` (stages in ``kernel_bench``): the block-sparse kernel against SDPA and FlexAttention;
  ``timing``: the timing helpers of these and of paper 09's ladder.
"""

from companion.core import Paper
from companion.models.attention import AttentionCaptureError, AttentionLayout, attention_layout, attention_session
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
from companion.seer_attention.ops import block_mass_map, pooled_attention_map, pooled_attention_map_rbuffer

PAPER = Paper(
    number="01",
    slug="seer_attention",
    title="SeerAttention: Self-distilled Attention Gating for Efficient Long-context Prefilling",
    arxiv="2410.13276",
    code="https://github.com/microsoft/SeerAttention",
)

__all__ = [
    "METHODS",
    "PAPER",
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

"""Paper 04 -- ZeroS: Zero-Sum Linear Attention for Efficient Transformers (Lu et al., NeurIPS 2025).

arXiv 2602.05230; official code https://github.com/LJC-FVNR/SequenceLab (``src/sequencelab/layers/zeros.py``).

* :mod:`.functional` -- the equations: Taylor split, zero-sum weights, the explicit O(T^2) oracle,
  the prefix scan (official path), the chunked running-max form, the 3d-key identity, ZeroS-SM, RoPE.
* :mod:`.layer` -- :class:`ZeroSAttention` (ZeroS and ZeroS-SM) as an ``nn.Module``.
* :mod:`.experiments` -- baselines (softmax, linear attention), property measurements, the
  expressivity toy and an MQAR-style recall task.
* :mod:`.bench` -- the stage bodies of the kernel study (peers first, then ours; checks, accuracy, targets).
* :mod:`.claims` -- the claims table's rows and their thresholds.
* :mod:`.scale` -- the GPU study (``python -m companion.bench zeros_attention``) and the reader of its results.
* :mod:`.explorer` -- the signed-attention explorer and the figure builders (imports plotly; not imported here).

The Triton kernel lives in ``companion_kernels/zeros_linear`` (``companion_kernels.zeros_linear``).
"""

from companion.core import Paper
from companion.zeros_attention.functional import (
    LOGIT_TYPES,
    apply_rope,
    causal_linear_attention,
    rope_cos_sin,
    rope_relative_defect,
    softmax_weights,
    step_logits,
    taylor_split,
    three_key_features,
    zeros_as_linear_attention,
    zeros_chunked,
    zeros_explicit,
    zeros_quadratic,
    zeros_scan,
    zeros_sm,
    zeros_sm_weights,
    zeros_weights,
)
from companion.zeros_attention.layer import ROPE_LAYOUTS, VARIANTS, ZEROS_IMPLS, ZeroSAttention

PAPER = Paper(number="04", slug="zeros_attention", title="ZeroS: Zero-Sum Linear Attention for Efficient Transformers",
              arxiv="2602.05230", code="https://github.com/LJC-FVNR/SequenceLab")

__all__ = [
    "PAPER",
    "LOGIT_TYPES",
    "ROPE_LAYOUTS",
    "VARIANTS",
    "ZEROS_IMPLS",
    "ZeroSAttention",
    "apply_rope",
    "causal_linear_attention",
    "rope_cos_sin",
    "rope_relative_defect",
    "softmax_weights",
    "step_logits",
    "taylor_split",
    "three_key_features",
    "zeros_as_linear_attention",
    "zeros_chunked",
    "zeros_explicit",
    "zeros_quadratic",
    "zeros_scan",
    "zeros_sm",
    "zeros_sm_weights",
    "zeros_weights",
]

"""Paper 09 · Δ Attention: Fast and Accurate Sparse Attention Inference by Delta Correction
(Willette, Lee, Hwang, NeurIPS 2025, arXiv 2505.11254; official code
https://github.com/jeffwillette/delta-attention).

Sparse prefill (sink + sliding window) shifts the distribution of attention outputs; Δ adds back, at
every γ-th row and repeated over its γ-block, the difference between dense and sparse attention.

Modules: `attention` (masks, the four modes, the official cut_n rule, compute fraction), `lemma`
(Lemma 1), `diagnostics` (cosine, Spearman), `minilm` (experiment A on the real MiniLM), `recall`
(experiment B, a causal toy trained on key→value recall), `checkpoint` / `make_checkpoint` (the toy's
committed safetensors checkpoint and the command that made it), `gpu` (block-sparse + fused Δ kernel path),
`explorer` (the explorer's view and controls) and `figures` (both import plotly), `claims` (the claims table),
`scale` (the GPU study, the prefill ladder, and its recorded results; stages in `ladder`).
"""

from companion.core import Paper
from companion.delta_attention.attention import (
    MODES,
    DeltaPlan,
    Method,
    check_sparse_config,
    compute_fraction,
    delta_attention,
    delta_plan,
    masked_attention,
    sink_window_mask,
)
from companion.delta_attention.diagnostics import cosine_rows, mean_pool_cosine, spearman_rows
from companion.delta_attention.lemma import lemma1_terms

PAPER = Paper(
    number="09",
    slug="delta_attention",
    title="Δ Attention: Fast and Accurate Sparse Attention Inference by Delta Correction",
    arxiv="2505.11254",
    code="https://github.com/jeffwillette/delta-attention",
)

__all__ = [
    "MODES",
    "PAPER",
    "DeltaPlan",
    "Method",
    "check_sparse_config",
    "compute_fraction",
    "cosine_rows",
    "delta_attention",
    "delta_plan",
    "lemma1_terms",
    "masked_attention",
    "mean_pool_cosine",
    "sink_window_mask",
    "spearman_rows",
]

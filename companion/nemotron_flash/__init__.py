"""Nemotron-Flash: Towards Latency-Optimal Hybrid Small Language Models (paper 15).

Fu, Dong, Diao, … Kautz, Lin, Molchanov (NVIDIA), *Nemotron-Flash: Towards Latency-Optimal Hybrid Small Language
Models*, NeurIPS 2025, arXiv 2511.18890. No training or search code is released; the inference code ships as
``trust_remote_code`` files with the Hugging Face models (https://huggingface.co/nvidia/Nemotron-Flash-1B).

The paper picks a small model's depth, width and operators by measured device latency rather than parameter
count: batch-1 decode latency grows with depth at fixed parameters; linear operators (DeltaNet, Gated DeltaNet,
Mamba2) decode at constant cost per token where attention's KV cache grows, which also decides the batch that fits;
an aging-evolution search over per-stage operator mixes finds hybrids on the accuracy-latency front; weight
normalisation (unit-norm rows of matrices that read the hidden state, columns of those that write it) and meta
tokens improve training. Modules:

* :mod:`~companion.nemotron_flash.operators` — DeltaNet / Gated DeltaNet (S_t = α_t S_{t-1}(I − β_t k_t k_tᵀ) +
  β_t v_t k_tᵀ) and the Mamba2-style scalar-decay SSM, recurrent and chunked; causal attention with an optional
  sliding window; fla's Triton kernels on CUDA;
* :mod:`~companion.nemotron_flash.model` — the hybrid decoder configured by ``layer_types`` like the released
  code, meta tokens, logit normalisation, the static decoding cache;
* :mod:`~companion.nemotron_flash.weightnorm` — weight normalisation after each optimiser step;
* :mod:`~companion.nemotron_flash.latency` — the one latency harness (decode ms/token, max-batch throughput);
* :mod:`~companion.nemotron_flash.depth_width` — constant-parameter depth-width grids and the law
  L(D, W, N) = L0 + a D^-α + b W^-β + c N^-γ;
* :mod:`~companion.nemotron_flash.search` — the search space and aging evolution;
* :mod:`~companion.nemotron_flash.frontier`, :mod:`~companion.nemotron_flash.explorer` — the latency-frontier
  explorer's data and view;
* :mod:`~companion.nemotron_flash.training`, :mod:`~companion.nemotron_flash.experiments` — the char-LM and the
  notebook's experiments;
* :mod:`~companion.nemotron_flash.claims`, :mod:`~companion.nemotron_flash.scale` — the Reproduce rows and the H200 run.
"""

from companion.core import Paper

PAPER = Paper(
    number='15',
    slug='nemotron_flash',
    title='Nemotron-Flash: Towards Latency-Optimal Hybrid Small Language Models',
    arxiv='2511.18890',
    code='https://huggingface.co/nvidia/Nemotron-Flash-1B',
    venue='NeurIPS 2025',
)

from companion.nemotron_flash.model import LAYER_TYPES, HybridConfig, HybridLM, load_released  # noqa: E402
from companion.nemotron_flash.operators import (  # noqa: E402
    attention,
    delta_rule,
    delta_rule_chunked,
    delta_rule_recurrent,
    scalar_decay_chunked,
    scalar_decay_recurrent,
)
from companion.nemotron_flash.weightnorm import WeightNorm, weight_roles  # noqa: E402

__all__ = ["LAYER_TYPES", "PAPER", "HybridConfig", "HybridLM", "WeightNorm", "attention", "delta_rule",
           "delta_rule_chunked", "delta_rule_recurrent", "load_released", "scalar_decay_chunked",
           "scalar_decay_recurrent", "weight_roles"]

"""Paper 03, ScaleKV: scale-aware KV-cache compression for next-scale (VAR) image models.

Li, Chen, Yang, Hwang, *Memory-Efficient Visual Autoregressive Modeling with Scale-Aware KV Cache Compression*,
NeurIPS 2025, arXiv 2505.19602; official code https://github.com/StargazerX0/ScaleKV (MIT), read at eb0615a.

Modules: ``schedule`` (scale schedules, KV bytes), ``data`` (digits as multi-scale token maps: the
offline stand-in for a VQ tokenizer), ``model`` (a tiny next-scale transformer with a KV cache),
``train``, ``checkpoint`` (the committed checkpoints of the notebook's model; ``make_checkpoint`` writes
them), ``asi`` (Attention Selectivity Index, z-scores, drafters: Eq. 1-2, the calibration the
official code does not ship), ``budgets`` (Eq. 3 and the baselines' tables), ``cache`` (when and how
a layer's cache is compressed, as ``update_kv`` does), ``metrics``, ``planted`` (a model with known
drafters), ``experiment`` (the protocol shared by notebook and GPU study), ``claims`` (the claims
table's rows and their margins), ``scale`` (the GPU study: profiles, stages, the recorded results), ``bench`` (the
study's stage bodies: larger model, attention latency per scale, kernel timing), and, imported separately because
they import plotly, ``explorer`` (the KV-cache-groups explorer) and ``figures``. The fused selection
kernel is ``companion_kernels.scalekv_select``.
"""

from companion.core import Paper
from companion.scalekv.asi import ASIStats, asi_from_probs, calibrate_asi, select_drafters, zscores
from companion.scalekv.budgets import (
    LABELS,
    METHODS,
    Budgets,
    compressed_scales,
    expected_retained,
    fit_integer_budgets,
    method_budgets,
    pyramid_budgets,
    scalekv_budgets,
    uniform_budget,
    uniform_budgets,
)
from companion.scalekv.cache import CachePolicy, window_positions
from companion.scalekv.data import DigitTokens, dequantise, load_digit_tokens, quantise
from companion.scalekv.experiment import (
    Calibration,
    Sweep,
    calibrate,
    compare,
    final_images,
    memory_summary,
    plan,
    planted_experiment,
    run_policy,
    seed_sweeps,
    sweep,
)
from companion.scalekv.metrics import hidden_error, logit_kl, psnr, token_agreement
from companion.scalekv.model import Generation, LayerCache, TinyVAR, VARConfig, block_causal_mask, generate
from companion.scalekv.planted import PlantedBias, planted_model
from companion.scalekv.schedule import INFINITY_1024, INFINITY_2B, INFINITY_8B, check_schedule, cumulative_tokens, kv_bytes, map_sizes
from companion.scalekv.train import train_var

PAPER = Paper(number="03", slug="scalekv",
              title="Memory-Efficient Visual Autoregressive Modeling with Scale-Aware KV Cache Compression",
              arxiv="2505.19602", code="https://github.com/StargazerX0/ScaleKV")

__all__ = [
    "PAPER", "ASIStats", "Budgets", "CachePolicy", "Calibration", "Sweep", "memory_summary", "planted_experiment", "DigitTokens", "Generation", "INFINITY_1024", "INFINITY_2B",
    "INFINITY_8B", "LABELS", "LayerCache", "METHODS", "PlantedBias", "TinyVAR", "VARConfig", "asi_from_probs",
    "block_causal_mask", "calibrate", "calibrate_asi", "check_schedule", "compare", "compressed_scales", "cumulative_tokens",
    "dequantise", "expected_retained", "final_images", "fit_integer_budgets", "generate", "hidden_error", "kv_bytes",
    "load_digit_tokens", "logit_kl", "map_sizes", "method_budgets", "plan", "planted_model", "psnr", "pyramid_budgets",
    "quantise", "run_policy", "scalekv_budgets", "select_drafters", "seed_sweeps", "sweep", "token_agreement", "train_var",
    "uniform_budget", "uniform_budgets", "window_positions", "zscores",
]

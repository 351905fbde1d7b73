"""End-to-end protocol shared by the notebook and ``benchmarks/scalekv_gpu.py`` (paper 03, Sec. 4).

calibrate (ASI, z-scores on a few calibration images with the full cache) -> plan (budgets of each
method at a memory fraction) -> generate with each policy from the same labels and seed -> compare
with the full-cache output (PSNR, token agreement; KL and hidden-state error under teacher forcing)
and read the retained K/V bytes off the caches.

The memory fraction reported is the paper's: retained K/V bytes summed over layers after step
``K-2`` (the cache the last, largest map attends to) over the full cache's bytes at that point.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from companion.core import check_choice, check_float, check_int
from companion.scalekv.asi import calibrate_asi, select_drafters, zscores
from companion.scalekv.budgets import LABELS, METHODS, Budgets, compressed_scales, expected_retained, method_budgets, uniform_budget
from companion.scalekv.cache import CachePolicy
from companion.scalekv.data import dequantise
from companion.scalekv.metrics import hidden_error, logit_kl, psnr, token_agreement
from companion.scalekv.model import Generation, TinyVAR, generate

__all__ = ["Calibration", "calibrate", "plan", "run_policy", "final_images", "compare", "sweep", "LABELS", "METHODS"]


@dataclass
class Calibration:
    asi: torch.Tensor  # [L, K], NaN at scale 0
    z: torch.Tensor  # [L, K]
    current: torch.Tensor  # E_i current-map share [L, K]
    history: torch.Tensor  # E_i top-K' history concentration [L, K]


def calibrate(model: TinyVAR, labels: torch.Tensor, *, seed: int = 0, temperature: float = 1.0,
              topk_prime: int | None = None, bias=None) -> Calibration:
    """ASI and its scale-wise z-scores from full-cache generation of ``labels``."""
    stats = calibrate_asi(model, labels, seed=seed, temperature=temperature, topk_prime=topk_prime, bias=bias)
    asi = stats.asi()
    cur, hist = stats.parts()
    return Calibration(asi=asi, z=zscores(asi), current=cur, history=hist)


def plan(method: str, model_or_layers, fraction: float, sides, *, z: torch.Tensor | None = None, drafters_per_scale: int = 1,
         mode: str = "global", delta: float = 70 / 650, refiner_start: float = 600 / 650, window_size: int = 16) -> Budgets:
    """Budgets of ``method`` at ``fraction``; for ScaleKV the drafters are the lowest-``z`` pairs among
    the compressed scales (``drafters_per_scale`` times their number, globally or per scale)."""
    check_choice("method", method, METHODS)
    layers = model_or_layers.config.layers if isinstance(model_or_layers, TinyVAR) else int(model_or_layers)
    drafters = None
    if method == "scalekv":
        if z is None:
            raise ValueError("ScaleKV needs the calibration z-scores (z=...)")
        check_int("drafters_per_scale", drafters_per_scale, lo=0, hi=layers)
        base = uniform_budget(fraction, sides)
        scales = [k for k in compressed_scales(base, sides) if k >= 1] or [len(sides) - 1]
        n = drafters_per_scale * (1 if mode == "per_scale" else len(scales))
        drafters = select_drafters(z, scales, n, mode=mode)
    return method_budgets(method, layers, fraction, sides, drafters=drafters, delta=delta, refiner_start=refiner_start, window_size=window_size)


def run_policy(model: TinyVAR, labels, budgets: Budgets | None, *, seed: int = 0, temperature: float = 1.0, window_size: int = 16,
               force_tokens=None, bias=None, impl: str = "auto", score: str = "logits") -> Generation:
    """One generation with ``budgets`` (None = full cache)."""
    policy = None if budgets is None else CachePolicy(budgets, window_size=window_size, impl=impl, score=score)
    return generate(model, labels, policy, seed=seed, temperature=temperature, force_tokens=force_tokens, bias=bias)


def final_images(model: TinyVAR, tokens: torch.Tensor) -> torch.Tensor:
    """Decoded final maps ``[B, s_K, s_K]`` in [0, 1]."""
    s = model.config.sides[-1]
    return dequantise(tokens[:, -s * s :], model.config.vocab).reshape(-1, s, s)


def compare(model: TinyVAR, full: Generation, gen: Generation, forced: Generation | None = None) -> dict:
    """Fidelity of ``gen`` (free-running) and ``forced`` (teacher-forced) against ``full``."""
    s2 = model.config.sides[-1] ** 2
    out = {
        "psnr": psnr(final_images(model, gen.tokens), final_images(model, full.tokens)),
        "agreement": token_agreement(gen.tokens[:, -s2:], full.tokens[:, -s2:]),
    }
    if forced is not None:
        out["kl"] = logit_kl(forced.logits, full.logits)
        out["hidden_error"] = hidden_error(forced.hidden, full.hidden)
    return out


def sweep(model: TinyVAR, labels, z: torch.Tensor, fractions, methods=METHODS, *, seed: int = 0, temperature: float = 1.0,
          delta: float = 70 / 650, refiner_start: float = 600 / 650, window_size: int = 16, drafters_per_scale: int = 1,
          mode: str = "global", bias=None, impl: str = "auto", teacher_forced: bool = True):
    """Fidelity and memory of every method at every fraction; returns (DataFrame, full-cache Generation)."""
    import pandas as pd

    sides = model.config.sides
    full = run_policy(model, labels, None, seed=seed, temperature=temperature, bias=bias)
    k_mem = len(sides) - 2
    full_bytes = int(full.retained_bytes[:, k_mem].sum())
    rows = []
    for f in fractions:
        check_float("fraction", f, lo=0.0, hi=1.0, lo_open=True)
        for m in methods:
            b = plan(m, model, f, sides, z=z, drafters_per_scale=drafters_per_scale, mode=mode, delta=delta,
                     refiner_start=refiner_start, window_size=window_size)
            gen = run_policy(model, labels, b, seed=seed, temperature=temperature, window_size=window_size, bias=bias, impl=impl)
            forced = None
            if teacher_forced:
                forced = run_policy(model, labels, b, seed=seed, temperature=temperature, window_size=window_size,
                                    force_tokens=full.tokens, bias=bias, impl=impl)
            kept = int(gen.retained_bytes[:, k_mem].sum())
            rows.append({
                "method": m,
                "label": LABELS[m],
                "fraction": float(f),
                "budget_tokens": b.base,
                **compare(model, full, gen, forced),
                "retained_bytes": kept,
                "full_bytes": full_bytes,
                "memory_fraction": kept / full_bytes,
                "peak_attended": int(gen.attended.max()),
                "retained_matches_plan": bool(torch.equal(gen.retained, expected_retained(b))),
            })
    return pd.DataFrame(rows), full

"""End-to-end protocol shared by the notebook and its GPU study (``python -m companion.bench scalekv``; paper 03, Sec. 4).

calibrate (ASI, z-scores on a few calibration images with the full cache) -> plan (budgets of each
method at a memory fraction) -> generate with each policy from the same labels and seed -> compare
with the full-cache output (PSNR, token agreement; KL and hidden-state error under teacher forcing)
and read the retained K/V bytes off the caches.

Memory, defined explicitly (the official issue #5 shows users confused by it): the bytes of the K and
V tensors a layer's cache *retains* after each step, per layer and scale (``Generation.retained_bytes``).
The fraction reported is the paper's: the retained bytes summed over layers after step ``K-2`` (the
cache the last, largest map attends to) over the full cache's bytes at that point. The peak (the last
step's cache plus its own map) is reported beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from companion.core import ParameterError, check_choice, check_int
from companion.scalekv.asi import calibrate_asi, select_drafters, zscores
from companion.scalekv.budgets import LABELS, METHODS, Budgets, check_fraction, compressed_scales, expected_retained, method_budgets, uniform_budget
from companion.scalekv.cache import CachePolicy
from companion.scalekv.data import dequantise
from companion.scalekv.metrics import hidden_error, logit_kl, psnr, token_agreement
from companion.scalekv.model import Generation, TinyVAR, generate

__all__ = ["Calibration", "Sweep", "calibrate", "plan", "run_policy", "final_images", "compare", "memory_summary", "sweep",
           "seed_sweeps", "planted_experiment", "LABELS", "METHODS"]


@dataclass
class Calibration:
    asi: torch.Tensor  # [L, K], NaN at scale 0
    z: torch.Tensor  # [L, K]
    current: torch.Tensor  # E_i current-map share [L, K]
    history: torch.Tensor  # E_i top-K' history concentration [L, K]


def calibrate(model: TinyVAR, labels: torch.Tensor, *, seed: int = 0, temperature: float = 1.0, guidance: float = 0.0,
              topk_prime: int | None = None, normalize: bool = True, bias=None) -> Calibration:
    """ASI and its scale-wise z-scores from full-cache generation of ``labels``."""
    stats = calibrate_asi(model, labels, seed=seed, temperature=temperature, guidance=guidance, topk_prime=topk_prime,
                          normalize=normalize, bias=bias)
    asi = stats.asi()
    cur, hist = stats.parts()
    return Calibration(asi=asi, z=zscores(asi), current=cur, history=hist)


def _layers(model_or_layers) -> int:
    if isinstance(model_or_layers, TinyVAR):
        return model_or_layers.config.layers
    return check_int("layers", model_or_layers, lo=1)


def plan(method: str, model_or_layers, fraction: float, sides, *, z: torch.Tensor | None = None, drafters_per_scale: int = 1,
         mode: str = "per_scale", delta: float = 70 / 650, refiner_start: float = 600 / 650, window_size: int = 16) -> Budgets:
    """Budgets of ``method`` at ``fraction``. For ScaleKV the drafters are the lowest-``z`` (layer, scale)
    pairs among the compressed scales: ``drafters_per_scale`` at each (``mode="per_scale"``, the shape of
    the shipped budgets) or that many times the number of scales over all of them (``"global"``)."""
    check_choice("method", method, METHODS)
    layers = _layers(model_or_layers)
    drafters = None
    if method == "scalekv":
        if z is None:
            raise ParameterError("z", None, "the calibration z-scores [layers, scales] (ScaleKV needs them to pick drafters)")
        check_int("drafters_per_scale", drafters_per_scale, lo=0, hi=layers)
        base = uniform_budget(fraction, sides)
        # The last scale reuses the previous scale's budgets, so its own z-scores are not candidates.
        scales = [k for k in compressed_scales(base, sides) if 1 <= k < len(sides) - 1] or [max(1, len(sides) - 2)]
        n = drafters_per_scale * (1 if mode == "per_scale" else len(scales))
        drafters = select_drafters(z, scales, n, mode=mode)
    return method_budgets(method, layers, fraction, sides, drafters=drafters, delta=delta, refiner_start=refiner_start,
                          window_size=window_size)


def run_policy(model: TinyVAR, labels, budgets: Budgets | None, *, seed: int = 0, temperature: float = 1.0, guidance: float = 0.0,
               window_size: int = 16, force_tokens=None, bias=None, impl: str = "auto", score: str = "logits") -> Generation:
    """One generation with ``budgets`` (None = full cache)."""
    policy = None if budgets is None else CachePolicy(budgets, window_size=window_size, impl=impl, score=score)
    return generate(model, labels, policy, seed=seed, temperature=temperature, guidance=guidance, force_tokens=force_tokens, bias=bias)


def final_images(model: TinyVAR, tokens: torch.Tensor) -> torch.Tensor:
    """Decoded final maps ``[B, s_K, s_K]`` in [0, 1]."""
    s = model.config.sides[-1]
    return dequantise(tokens[:, -s * s:], model.config.vocab).reshape(-1, s, s)


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


def memory_summary(gen: Generation, full: Generation) -> dict:
    """Retained K/V bytes of ``gen`` against the full cache ``full``: after step K-2 (the paper's
    fraction) and at the peak (the last step's cache plus its own map, summed over layers)."""
    k_mem = gen.retained.shape[1] - 2
    kept = int(gen.retained_bytes[:, k_mem].sum())
    full_kept = int(full.retained_bytes[:, k_mem].sum())
    per_token = full_kept / max(1, int(full.retained[:, k_mem].sum()))  # bytes per retained token and layer
    peak = int(gen.attended[:, -1].sum()) * per_token
    full_peak = int(full.attended[:, -1].sum()) * per_token
    return {"retained_bytes": kept, "full_bytes": full_kept, "memory_fraction": kept / full_kept,
            "peak_bytes": int(peak), "full_peak_bytes": int(full_peak), "peak_fraction": peak / full_peak}


@dataclass
class Sweep:
    """What :func:`sweep` measured: ``table`` (one row per method and budget), the full-cache run, and
    per (method, fraction) the budget table and the decoded final maps of the first ``keep_images``."""

    table: object  # pandas DataFrame
    full: Generation
    budgets: dict = field(default_factory=dict)
    images: dict = field(default_factory=dict)
    full_images: torch.Tensor | None = None
    params: dict = field(default_factory=dict)


def sweep(model: TinyVAR, labels, z: torch.Tensor, fractions, methods=METHODS, *, seed: int = 0, temperature: float = 1.0,
          guidance: float = 0.0, delta: float = 70 / 650, refiner_start: float = 600 / 650, window_size: int = 16,
          drafters_per_scale: int = 1, mode: str = "per_scale", bias=None, impl: str = "auto", teacher_forced: bool = True,
          keep_images: int = 0) -> Sweep:
    """Fidelity and memory of every method at every fraction against the full cache (same labels, same noise)."""
    import pandas as pd

    for m in methods:
        check_choice("method", m, METHODS)
    fractions = [check_fraction(f) for f in fractions]
    check_int("keep_images", keep_images, lo=0)
    sides = model.config.sides
    kw = dict(seed=seed, temperature=temperature, guidance=guidance, bias=bias)
    full = run_policy(model, labels, None, **kw)
    params = dict(fractions=fractions, methods=tuple(methods), delta=delta, refiner_start=refiner_start, window_size=window_size,
                  drafters_per_scale=drafters_per_scale, mode=mode, impl=impl, **kw)
    out = Sweep(table=None, full=full, full_images=final_images(model, full.tokens)[:keep_images], params=params)
    rows = []
    for f in fractions:
        for m in methods:
            b = plan(m, model, f, sides, z=z, drafters_per_scale=drafters_per_scale, mode=mode, delta=delta,
                     refiner_start=refiner_start, window_size=window_size)
            gen = run_policy(model, labels, b, window_size=window_size, impl=impl, **kw)
            forced = None
            if teacher_forced:
                forced = run_policy(model, labels, b, window_size=window_size, impl=impl, force_tokens=full.tokens, **kw)
            out.budgets[(m, f)] = b
            if keep_images:
                out.images[(m, f)] = final_images(model, gen.tokens)[:keep_images]
            rows.append({
                "method": m,
                "label": LABELS[m],
                "fraction": f,
                "budget_tokens": b.base,
                **compare(model, full, gen, forced),
                **memory_summary(gen, full),
                "retained_matches_plan": bool(torch.equal(gen.retained, expected_retained(b))),
            })
    out.table = pd.DataFrame(rows)
    return out


def seed_sweeps(models, labels, fractions, methods=("scalekv", "uniform"), *, own=None, cal_images: int = 10, temperature: float = 1.0,
                delta: float = 70 / 650, window_size: int = 16, drafters_per_scale: int = 1, impl: str = "auto"):
    """The same protocol on models trained with other seeds: ``models`` ``{seed: TinyVAR}``; each is
    calibrated on ``cal_images`` images (noise seed ``seed + 100``) and swept over ``fractions`` with
    sampling noise ``seed``, exactly as the notebook does for its own ``SEED``. ``own``: ``(seed, table)``
    of a sweep already run (its rows at ``methods`` and ``fractions`` are reused). One table with a
    ``seed`` column (what :func:`companion.scalekv.claims.seed_gains` reads)."""
    import pandas as pd

    check_int("cal_images", cal_images, lo=1)
    fractions = [check_fraction(f) for f in fractions]
    tables = []
    if own is not None:
        s, t = own
        tables.append(t[t.method.isin(list(methods)) & t.fraction.isin(fractions)].assign(seed=check_int("seed", s)))
    for s, model in models.items():
        s = check_int("seed", s)
        cal = calibrate(model, torch.arange(cal_images) % 10, seed=s + 100, temperature=temperature)
        res = sweep(model, labels, cal.z, fractions, methods, seed=s, temperature=temperature, delta=delta, window_size=window_size,
                    drafters_per_scale=drafters_per_scale, impl=impl)
        tables.append(res.table.assign(seed=s))
    if not tables:
        return pd.DataFrame(columns=["seed", "method", "fraction", "psnr", "hidden_error"])
    return pd.concat(tables, ignore_index=True)


def planted_experiment(sides=(1, 2, 3, 4, 6, 8, 12), layers: int = 6, drafters=(1, 4), *, fractions=(0.1, 0.2, 0.5),
                       methods=("scalekv", "uniform", "pyramid"), n_cal: int = 4, n_eval: int = 8, window_size: int = 4,
                       delta: float = 0.1, seed: int = 0, impl: str = "auto") -> dict:
    """Path A of the spec: a random model whose attention biases plant ``drafters`` (see ``planted.py``).

    Calibrates the ASI on ``n_cal`` images, checks that the planted layers have the lowest z-score at
    every scale with history, and measures the teacher-forced hidden-state error of each method at
    each budget (ScaleKV with as many drafters per scale as were planted).
    """
    from companion.scalekv.planted import planted_model

    check_int("n_cal", n_cal, lo=1)
    check_int("n_eval", n_eval, lo=1)
    model, bias = planted_model(sides, layers=layers, drafters=drafters, seed=seed)
    cal = calibrate(model, torch.arange(n_cal) % 10, seed=seed, bias=bias)
    planted = sorted(set(int(d) for d in drafters))
    lowest = [sorted(torch.argsort(cal.z[:, k], stable=True)[: len(planted)].tolist()) for k in range(1, len(sides))]
    labels = torch.arange(n_eval) % 10
    full = run_policy(model, labels, None, seed=seed + 1, bias=bias)
    errors = {m: {} for m in methods}
    for f in fractions:
        for m in methods:
            b = plan(m, model, f, sides, z=cal.z, drafters_per_scale=len(planted), mode="per_scale", delta=delta, window_size=window_size)
            forced = run_policy(model, labels, b, seed=seed + 1, bias=bias, window_size=window_size, force_tokens=full.tokens, impl=impl)
            errors[m][float(f)] = hidden_error(forced.hidden, full.hidden)
    return {"model": model, "bias": bias, "calibration": cal, "planted": planted, "lowest": lowest,
            "found": all(low == planted for low in lowest), "errors": errors}

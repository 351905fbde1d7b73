"""The notebook's experiments: the angle/gradient analysis over the pool and the sampler comparison.

:func:`pool_signals` runs one teacher-forced pass of every pool problem (prompt and answer) through a
checkpoint, with the inputs and output gradients of every block's ``mlp.up_proj`` captured; per problem
and layer it gives the angle concentration of the prompt (:func:`~companion.gain_rl.angle.concentration`;
causal attention makes the prompt positions' states those of a prompt-only prefill), the released
formula's two terms, and ``‖∇_W L‖_F`` of that ``up_proj`` weight for the problem's answer NLL, from the
identity ``Σ_{i,j}(δ_i·δ_j)(x_i·x_j)`` (:func:`~companion.gain_rl.angle.grad_norm_sq`: one backward pass
gives every problem's δ because the losses are summed).

:func:`compare_samplers` runs uniform, GAIN and filtered GRPO from the same warm start over seeds.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import spearmanr

from companion.core import check_int
from companion.gain_rl.angle import capture_inputs, concentration, grad_norm_sq, released_metric, released_slices
from companion.gain_rl.grpo import answer_nll, run_curriculum, steps_to_target
from companion.gain_rl.policy import PREFIX, SUFFIX, Problems, segments
from companion.gain_rl.sampler import FilterSampler, GainSampler, UniformSampler

__all__ = ["SAMPLERS", "compare_samplers", "pool_signals", "prompt_spans", "rank_pool", "released_formula_audit",
           "summarise_runs"]

SAMPLERS = ("uniform", "GAIN", "filter")


def prompt_spans(terms: int = 2) -> dict:
    """The prefix / question / suffix token spans of every pool prompt (all prompts share them)."""
    return segments(PREFIX, "+".join(["10"] * terms), SUFFIX)


def pool_signals(model, problems: Problems, inter_weight: float = 8.0) -> dict:
    """Per layer: ``states`` (prompt hidden states ``[N, P, d]``), ``C``, ``C_intra``, ``C_inter``,
    ``released`` (value, first term, second term), ``grad_norm`` (‖∇_W L‖_F per problem), ``spearman``."""
    spans = prompt_spans(problems.operands.shape[1])
    P = problems.prompts.shape[1]
    names = [f"layers.{i}.mlp.up_proj" for i in range(len(model.layers))]
    was = model.training
    model.eval()
    for p in model.parameters():
        p.requires_grad_(True)
    with capture_inputs(model, names, keep_grad=True) as store:
        nll = answer_nll(model, problems)
        model.zero_grad()
        nll.sum().backward()
    model.zero_grad()
    model.train(was)
    out = {"nll": nll.detach().cpu().numpy(), "spans": spans, "layers": []}
    for name in names:
        x = store[name].detach().float()
        delta = store[name + ":out"].grad.float()
        g = grad_norm_sq(x, delta).clamp_min(0).sqrt().cpu().numpy()
        states = x[:, :P]
        c = concentration(states, spans["prefix"], spans["question"], inter_weight)
        rel = np.stack([t.cpu().numpy() for t in released_metric(states, spans["prefix"][1], P - spans["question"][1],
                                                           inter_weight, parts=True)], 1)
        rho = spearmanr(c["total"].cpu().numpy(), g).statistic
        out["layers"].append({"name": name, "states": states.cpu().numpy(), "C": c["total"].cpu().numpy(),
                              "C_intra": c["intra"].cpu().numpy(), "C_inter": c["inter"].cpu().numpy(),
                              "released": rel[:, 2], "released_first": rel[:, 0], "released_second": rel[:, 1],
                              "grad_norm": g, "spearman": float(rho)})
    return out


def rank_pool(C: np.ndarray) -> np.ndarray:
    """Pool indices sorted by concentration, descending (rank 0 first), ties by index (stable)."""
    return np.argsort(-np.asarray(C), kind="stable")


def make_sampler(kind: str, *, order: np.ndarray, subset: int, seed: int, sigma: float, n: float, alpha: float,
                 beta: float, adj_min: float, adj_max: float, lag: bool = False, oversample: float = 2.0):
    N = len(order)
    if kind == "uniform":
        return UniformSampler(N, subset, seed=seed)
    if kind == "filter":
        return FilterSampler(N, subset, seed=seed, oversample=oversample)
    if kind == "GAIN":
        return GainSampler(order, subset, sigma=sigma, n=n, alpha=alpha, beta=beta, adj_min=adj_min,
                           adj_max=adj_max, lag=lag, seed=seed)
    raise ValueError(f"unknown sampler {kind!r}; expected one of {SAMPLERS}")


def compare_samplers(policy, pool: Problems, eval_set: Problems, order: np.ndarray, *, seeds, epochs: int,
                     subset: int, schedule: dict, samplers=SAMPLERS, snapshot_epoch: int | None = None,
                     **grpo) -> dict:
    """``{sampler: [run_curriculum result per seed]}``, every run from ``policy`` with ``ref = policy``.
    The GAIN run of the first seed keeps the snapshot at ``snapshot_epoch``."""
    check_int("subset", subset, lo=1, hi=len(pool))
    runs = {}
    for kind in samplers:
        runs[kind] = []
        for k, seed in enumerate(seeds):
            smp = make_sampler(kind, order=order, subset=subset, seed=seed, **schedule)
            snap = snapshot_epoch if (kind == "GAIN" and k == 0) else None
            res = run_curriculum(policy, policy, pool, eval_set, smp, epochs=epochs, seed=seed,
                                 snapshot_epoch=snap, **grpo)
            res["history"] = getattr(smp, "history", [])
            runs[kind].append(res)
    return runs


def summarise_runs(runs: dict, target: float) -> dict:
    """Per sampler: eval-accuracy curves ``[seeds, epochs+1]``, steps to ``target`` per seed (None = not
    reached), final and mean accuracy, rollouts generated."""
    out = {}
    for kind, rs in runs.items():
        curves = np.array([r["eval_acc"] for r in rs])
        out[kind] = {"curves": curves, "steps": [steps_to_target(r["eval_acc"][1:], target) for r in rs],
                     "final": curves[:, -1], "auc": curves[:, 1:].mean(1),
                     "rollouts": [r["rollouts"] for r in rs], "seconds": [r["seconds"] for r in rs]}
    return out


def released_formula_audit(signals: dict) -> dict:
    """What the released ``data_processor.py`` formula computes on one checkpoint's :func:`pool_signals` (last
    layer): ``nan_share``, the share of prompts whose value is NaN; ``expected_nan_share``, 1 when its first
    slice ``cos[p:-s][p:-s]`` is empty at this prompt length (every prompt here has the same length), else 0;
    ``rho_second``, Spearman(C, its second term ``cos[p:-s][:p]``). A code audit, not a claim of the paper."""
    L = signals["layers"][-1]
    spans = signals["spans"]
    T = L["states"].shape[1]
    start, stop = released_slices(T, spans["prefix"][1], T - spans["question"][1])["intra"]
    return {"nan_share": float(np.isnan(L["released"]).mean()), "expected_nan_share": float(start >= stop),
            "rho_second": float(spearmanr(L["C"], L["released_second"]).statistic), "T": int(T),
            "prefix": int(spans["prefix"][1]), "suffix": int(T - spans["question"][1])}

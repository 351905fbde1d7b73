"""The one-GPU (H200) run of paper 17 and the reader of its committed results. No plotly import.

:func:`run_scale_up` (used by ``benchmarks/gain_rl_gpu.py``):

1. **Angle metric timing** at a Qwen2.5-0.5B-like size (hidden 896, long prompts): the explicit masked
   T×T cosine matrix (the released code's way, measured first) against the segment sums of
   :func:`companion.gain_rl.angle.concentration`, with :func:`companion.core.time_ms`.
2. **Warm start**: the Qwen-shaped character policy at ~25M parameters (d 512, 6 layers, 8 heads, SwiGLU
   4d) SFT-trained on sums of ``terms`` two-digit numbers until 30 % held-out greedy accuracy (or a time
   cap). ``terms`` is 2: an H200 run with three-term sums ended its 30 s of SFT at 4.9 % held-out accuracy,
   and GRPO with a binary reward then had almost no group with a correct completion (no signal to any
   sampler), so the warm start uses the task the policy can learn within the budget.
3. **Layer-wise angle/gradient correlation**: Spearman(C, ‖∇_W L‖_F of each layer's ``up_proj``) over the pool.
4. **Sampler comparison**: ``n_seeds`` seeds × {uniform, GAIN, filter} GRPO runs from the warm start
   (group 8, β = 0.005, subset prompts per epoch), each for ``epochs`` epochs or ``run_seconds``;
   held-out accuracy per epoch, wall-clock seconds and epochs to the target (start + ``target_gain``).
   For every GAIN run, μ after each update (``mu_after``) and the epoch whose update brought μ to the
   last rank (``mu_end_epoch``, :func:`~companion.gain_rl.sampler.end_of_pool_epoch`): with ``adj_min = 0``
   μ never moves back, so from then on GAIN draws only around the least concentrated prompts.

Everything fits about 150 s on one H200 at the default :data:`GPU_PROFILE`. No vLLM: batched sampling with
the model's own key/value cache.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from companion.core import recorded_results, time_ms
from companion.gain_rl.angle import concentration, cosine_matrix
from companion.gain_rl.experiments import make_sampler, pool_signals, rank_pool
from companion.gain_rl.grpo import run_curriculum, steps_to_target
from companion.gain_rl.policy import SFTRecipe, make_problems, sft
from companion.gain_rl.sampler import end_of_pool_epoch, gaussian_probs

RESULTS_NAME = "gain_rl_gpu"

GPU_PROFILE = {
    "model": "Qwen-shaped char policy, d 512, 6 layers, 8 heads, SwiGLU 4d (~25M parameters)",
    "d": 512, "layers": 6, "heads": 8, "mlp_ratio": 4,
    "terms": 2, "pool": 4096, "eval": 1024, "subset": 128, "group": 8, "epochs": 150, "run_seconds": 10.0,
    "lr": 1e-4, "minibatches": 2, "n_seeds": 3, "sft_seconds": 40.0, "sft_batch": 256, "sft_lr": 1e-3,
    "target_gain": 0.10, "timing": {"batch": 16, "T": 1024, "d": 896},
}

SMOKE_PROFILE = {
    **GPU_PROFILE, "model": "smoke: d 32, 1 layer", "d": 32, "layers": 1, "heads": 2, "mlp_ratio": 2,
    "pool": 64, "eval": 32, "subset": 8, "epochs": 2, "run_seconds": 5.0, "n_seeds": 1, "sft_seconds": 3.0,
    "sft_batch": 32, "timing": {"batch": 2, "T": 64, "d": 32},
}


def gpu_schedule(n_pool: int) -> dict:
    """The GAIN schedule of :func:`run_scale_up` for a pool of ``n_pool`` prompts (the code's σ = 1000, n = 500,
    adj ∈ [0, 1000] of ~7,500 prompts, scaled to the pool; α = γ = 2, β = 0.5)."""
    N = float(n_pool)
    return dict(sigma=N / 8, n=N / 16, alpha=2.0, beta=0.5, adj_min=0.0, adj_max=N / 8)


def recorded() -> dict | None:
    """The committed results of ``benchmarks/gain_rl_gpu.py`` (None when not recorded yet)."""
    return recorded_results(RESULTS_NAME)


def time_angle_metric(batch: int, T: int, d: int, device) -> dict:
    """Milliseconds of the explicit masked cosine matrix vs the segment sums, on ``[batch, T, d]`` bf16 states
    (prefix = first quarter, question = the next half)."""
    x = torch.randn(batch, T, d, device=device, dtype=torch.bfloat16 if device.type == "cuda" else torch.float32)
    p, q = (0, T // 4), (T // 4, 3 * T // 4)

    def explicit():
        cos = cosine_matrix(x)
        cos = cos * torch.tril(torch.ones_like(cos), diagonal=1)
        return cos[:, q[0]:q[1], q[0]:q[1]].mean() + 8 * cos[:, q[0]:q[1], p[0]:p[1]].mean()

    def segments():
        return concentration(x, p, q)["total"]

    ms_explicit = time_ms(explicit, device)  # the peer first
    ms_segments = time_ms(segments, device)
    return {"batch": batch, "T": T, "d": d, "explicit_ms": ms_explicit, "segment_ms": ms_segments,
            "speedup": ms_explicit / ms_segments}


def run_scale_up(config: dict | None = None, device=None, seed: int = 0, log=print) -> dict:
    cfg = dict(GPU_PROFILE if config is None else config)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    out = {"config": cfg, "model": cfg["model"]}
    t0 = time.perf_counter()
    out["angle_timing"] = time_angle_metric(**cfg["timing"], device=device)
    log(f"angle metric timing: {out['angle_timing']}")

    recipe = SFTRecipe(d=cfg["d"], layers=cfg["layers"], heads=cfg["heads"], mlp_ratio=cfg["mlp_ratio"],
                       terms=cfg["terms"], seed=seed, batch=cfg["sft_batch"], lr=cfg["sft_lr"], target_acc=0.30,
                       max_steps=100_000, check_every=25, eval_n=512)
    policy, info = sft(recipe, device=device, max_seconds=cfg["sft_seconds"])
    out["sft"] = info
    log(f"SFT: {info}")
    pool = make_problems(cfg["pool"], seed, terms=cfg["terms"])
    ev = make_problems(cfg["eval"], seed + 1, terms=cfg["terms"])
    sig = pool_signals(policy, pool)
    out["layer_spearman"] = [L["spearman"] for L in sig["layers"]]
    out["layer_mean_C"] = [float(np.mean(L["C"])) for L in sig["layers"]]
    log(f"layer-wise Spearman(C, grad): {out['layer_spearman']}")
    order = rank_pool(sig["layers"][-1]["C"])
    N = cfg["pool"]
    schedule = gpu_schedule(N)
    runs = {k: [] for k in ("uniform", "GAIN", "filter")}
    for s in range(cfg["n_seeds"]):
        for kind in runs:
            smp = make_sampler(kind, order=order, subset=cfg["subset"], seed=seed + s, **schedule)
            res = run_curriculum(policy, policy, pool, ev, smp, epochs=cfg["epochs"], group=cfg["group"],
                                 lr=cfg["lr"], minibatches=cfg["minibatches"], seed=seed + s,
                                 max_seconds=cfg["run_seconds"])
            run = {k: res[k] for k in ("eval_acc", "mean_reward", "ang", "mu_used", "mu_after", "prompts_trained",
                                       "rollouts", "seconds", "epoch_seconds")}
            if kind == "GAIN":
                run["mu_end_epoch"] = end_of_pool_epoch(res["mu_after"], N)
            runs[kind].append(run)
            log(f"{kind} seed {seed + s}: acc {res['eval_acc'][0]:.3f} -> {res['eval_acc'][-1]:.3f} "
                f"in {len(res['eval_acc']) - 1} epochs, {res['seconds']:.1f} s")
    start = float(np.mean([r["eval_acc"][0] for rs in runs.values() for r in rs]))
    target = start + cfg["target_gain"]
    summary = {}
    for kind, rs in runs.items():
        steps = [steps_to_target(r["eval_acc"][1:], target) for r in rs]
        secs = [None if st is None else float(np.cumsum(r["epoch_seconds"])[st - 1]) for st, r in zip(steps, rs)]
        summary[kind] = {"epochs_to_target": steps, "seconds_to_target": secs,
                         "final": [r["eval_acc"][-1] for r in rs], "epochs": [len(r["eval_acc"]) - 1 for r in rs]}
        if kind == "GAIN":
            summary[kind]["mu_end_epoch"] = [r["mu_end_epoch"] for r in rs]
    out.update(runs=runs, summary=summary, target=target, n_seeds=cfg["n_seeds"],
               total_seconds=time.perf_counter() - t0)
    return out


def mu_drift(gpu: dict) -> dict | None:
    """Where GAIN's μ went in a recorded run (None without GAIN runs or their μ per epoch).

    Per seed: ``end_epoch``, the epoch whose update brought μ to the last rank (recorded as ``mu_end_epoch``
    by newer runs; for older payloads computed from ``mu_used``, since μ after epoch t is the μ that drew
    epoch t + 1), ``epochs`` run, the epoch's mean reward and online angle signal over the ``window`` epochs
    before arrival. Then ``break_even``: the training accuracy below which the update would stop μ at that
    angle signal, ``β − (γ/α)·ang`` (γ = α in the code); ``pool``, ``sigma``, and ``tail_share``: the share
    of a draw centred on the last rank that falls in the pool's least concentrated quarter."""
    runs = (gpu or {}).get("runs", {}).get("GAIN")
    if not runs or not all(r.get("mu_after") or r.get("mu_used") for r in runs):
        return None
    N = int(gpu["config"]["pool"])
    sch = gpu_schedule(N)
    window = 5
    seeds = []
    for r in runs:
        after = r.get("mu_after") or r["mu_used"][1:]
        end = r.get("mu_end_epoch", end_of_pool_epoch(after, N))
        lo, hi = (max(0, end - window), end) if end else (max(0, len(r["ang"]) - window), len(r["ang"]))
        seeds.append({"end_epoch": end, "epochs": len(r["eval_acc"]) - 1,
                      "reward_before": float(np.mean(r["mean_reward"][lo:hi])), "ang_before": float(np.mean(r["ang"][lo:hi]))})
    ang = float(np.mean([s_["ang_before"] for s_ in seeds]))
    p = gaussian_probs(N, N - 1.0, sch["sigma"])
    return {"seeds": seeds, "pool": N, "sigma": sch["sigma"], "alpha": sch["alpha"], "beta": sch["beta"], "ang": ang,
            "break_even": sch["beta"] - ang, "tail_share": float(p[3 * N // 4:].sum())}

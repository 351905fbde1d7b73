"""The stages of paper 12's one-GPU study (:mod:`companion.lorasuite.scale`), each ``fn(ctx) -> JSON-able result``.

* :func:`run_vocab`: the word-level vocabulary pair (:func:`companion.lorasuite.vocab.gpu_vocabs`), refused
  before any training when it shares fewer than d_old tokens (W_h = E_o[c]⁺ E_n[c] would not be full rank);
* :func:`run_pretrain`: the old and the new Llama trained from scratch on the standard library's source (the task
  package left out), each stopped at its ``stage_limits`` seconds (the steps done are recorded);
* :func:`run_task`: LoRA on the task package for both models (the new one is LoRA(full), the retraining
  LoRASuite avoids), LoRASuite's transfer of the old adapter (W_h, CKA + the DP of Alg. 1, Hungarian heads, GQA
  averaging, SVD), then LFT of the transferred adapter beside LoRA(n) from scratch over ``lft_samples`` × ``lrs``;
  wall time and peak memory of each;
* :func:`run_svd`: the SVD step alone, full ``torch.linalg.svd`` (the peer, first) against ``torch.svd_lowrank``.

The trained models pass from ``pretrain`` to ``task`` in ``ctx.shared``: the task stage needs both in the same call.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import torch

from companion.core import time_ms
from companion.lorasuite.fixture import build_model, task_text
from companion.lorasuite.lft import evaluate, train, windows
from companion.lorasuite.vocab import check_shared_tokens, gpu_vocabs

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]  # the paper's LoRA targets
TASK_RESERVE_S = 30  # seconds of the task stage a capped LoRA training leaves for the transfer and LFT
LFT_MIN_LEFT_S = 5   # an LFT / LoRA(n) setting starts only with this many seconds of the stage left


def _device(ctx) -> torch.device:
    device = torch.device(ctx.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    return device


def _timed(fn, device):
    """``(fn(), seconds, peak GB)`` (the peak is NaN off CUDA)."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    out = fn()
    peak = float("nan")
    if device.type == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() / 2 ** 30
    return out, time.perf_counter() - t, peak


def _cap(ctx, stage: str, reserve: float = 0.0) -> float:
    """The seconds a training may take: its ``stage_limits`` cap, less when the stage's time runs short."""
    return max(1.0, min(ctx.profile["stage_limits"][stage], ctx.left() - reserve))


def _vocabs(ctx):
    """The profile's vocabulary pair and pre-training text, built (and its shared tokens checked) once a call."""
    if "vocab_old" not in ctx.shared:
        vo, vn, text = gpu_vocabs(ctx.profile)
        shared = check_shared_tokens(vo, vn, ctx.profile["old"]["hidden"])
        ctx.shared.update(vocab_old=vo, vocab_new=vn, text=text, shared_tokens=shared)
    return ctx.shared["vocab_old"], ctx.shared["vocab_new"]


def run_vocab(ctx) -> dict:
    """Stage ``vocab``: the sizes of the word-level pair and the tokens they share (at least d_old)."""
    vo, vn = _vocabs(ctx)
    return {"kind": "word-level (companion.lorasuite.vocab)", "old": len(vo), "new": len(vn),
            "shared": ctx.shared["shared_tokens"], "d_old": ctx.profile["old"]["hidden"]}


def run_pretrain(ctx) -> dict:
    """Stage ``pretrain``: both models trained from scratch (AdamW, 50 warm-up steps, ``old_steps`` /
    ``new_steps`` or until ``stage_limits``); per model the steps done, seconds, peak memory, final loss; and
    their parameter counts."""
    P, device = ctx.profile, _device(ctx)
    vocabs = dict(zip(("old", "new"), _vocabs(ctx)))
    out = {}
    params = {}
    for i, name in enumerate(("old", "new")):
        spec, steps = P[name], P[f"{name}_steps"]
        model = build_model(len(vocabs[name]), spec["hidden"], spec["layers"], spec["heads"], spec["ffn"],
                            seed=ctx.seed + i, kv_heads=spec["kv_heads"]).to(device)
        params[name] = sum(p.numel() for p in model.parameters())
        data = windows(vocabs[name].encode(ctx.shared["text"]), P["seq_len"] + 1, seed=1)
        h, sec, peak = _timed(lambda: train(model, data, lr=P["pretrain_lr"], steps=steps, batch=P["batch"], warmup=50,
                                            weight_decay=0.01, time_limit_s=_cap(ctx, name)), device)
        out[name] = {"steps": len(h["train"]), "planned_steps": steps, "seconds": round(sec, 1), "peak_gb": round(peak, 3),
                     "final_loss": round(sum(h["train"][-20:]) / len(h["train"][-20:]), 4)}
        ctx.shared[f"{name}_model"] = model
        ctx.log(f"[pretrain] {name}: {out[name]}")
    out["parameters"] = params
    return out


def run_task(ctx) -> dict:
    """Stage ``task``: on ``task``'s source (every 5th file held out), LoRA (``lora_rank``, α ``lora_alpha``,
    q/k/v/o) for the old model and LoRA(full) for the new one, each stopped at ``stage_limits["lora"]``;
    LoRASuite's transfer (timed with its peak memory); the transferred adapter's loss alone; then, per
    ``lft_samples`` × ``lrs``, LFT of the transferred adapter and LoRA(n) from scratch, ``epochs`` epochs without
    warm-up (an LFT's seconds and peak include the transfer's). ``skipped`` lists a capped LoRA and the settings
    the time left did not cover."""
    from peft import get_peft_model_state_dict

    from companion.lorasuite.pipeline import cka_terms, fit_transfer_matrix, lorasuite, transferred_loss
    from companion.lorasuite.transfer import adapter_from_state, attach_lora, load_transferred, lora_config

    if "new_model" not in ctx.shared:
        raise RuntimeError("the task stage needs the models the pretrain stage trains in the same call "
                           "(--stages pretrain,task)")
    P, device, seed, task = ctx.profile, _device(ctx), ctx.seed, ctx.profile["task"]
    vo, vn = _vocabs(ctx)
    old, new = ctx.shared["old_model"], ctx.shared["new_model"]
    T = P["seq_len"] + 1
    b_train, b_val = task_text(task)
    d = {"B_train_old": windows(vo.encode(b_train), T, seed=2), "B_train_new": windows(vn.encode(b_train), T, seed=2),
         "B_val_old": windows(vo.encode(b_val), T, seed=3)[:64], "B_val_new": windows(vn.encode(b_val), T, seed=3)[:64]}
    cfg = lora_config(P["lora_rank"], P["lora_alpha"], TARGETS)
    skipped, res = [], {}
    for name, model, key in (("old", old, "old"), ("full", new, "new")):
        pm = attach_lora(model, cfg, seed=seed)
        h, sec, peak = _timed(lambda: train(pm, d[f"B_train_{key}"], lr=P["lora_lr"], steps=P["lora_steps"],
                                            batch=P["lora_batch"], warmup=P["lora_warmup"], seed=seed,
                                            time_limit_s=_cap(ctx, "lora", TASK_RESERVE_S)), device)
        res[name] = {"val": round(evaluate(pm, d[f"B_val_{key}"]), 4), "seconds": round(sec, 2), "peak_gb": round(peak, 3),
                     "steps": len(h["train"]), "state": get_peft_model_state_dict(pm)}
        if len(h["train"]) < P["lora_steps"]:
            skipped.append(f"{task}: LoRA {name} stopped after {len(h['train'])} of {P['lora_steps']} steps")
        del pm
    fx = {"vocab_old": vo, "vocab_new": vn, "old_model": old, "new_model": new, **d,
          "recipe": SimpleNamespace(lora_rank=P["lora_rank"], lora_alpha=P["lora_alpha"]),
          "old_lora": adapter_from_state(res["old"].pop("state"))}
    res["full"].pop("state")

    suite, sec_t, peak_t = _timed(lambda: lorasuite(fx, fit_transfer_matrix(fx), cka_terms(
        fx, "task", n_minibatches=P["cka_minibatches"], tokens=P["cka_tokens"])), device)
    wh = suite["W_h"]
    pair_gaps = [sum(v.values()) / len(v) for v in suite["alg2_vs_code"].values()]
    entry = {"name": task, "old_lora_val": res["old"]["val"], "old_lora_steps": res["old"]["steps"], "full_lora": res["full"],
             "new_base": round(evaluate(new, d["B_val_new"]), 4),
             "transfer": {"seconds": round(sec_t, 2), "peak_gb": round(peak_t, 3), "W_h_r2": round(wh["r2"], 4),
                          "W_h_rank": wh["rank"], "W_h_shared_tokens": wh["n_common"],
                          "layer_pairs": suite["layer_map"]["pairs"],
                          "alg2_vs_code_mean": round(float(sum(pair_gaps) / max(1, len(pair_gaps))), 4)},
             "transferred": round(transferred_loss(fx, suite["adapter"]), 4), "lft": [], "scratch": [], "skipped": skipped}
    ctx.log(f"[{task}] base {entry['new_base']}, full LoRA {res['full']['val']}, transferred {entry['transferred']}, "
            f"transfer {sec_t:.1f} s, W_h rank {wh['rank']} from {wh['n_common']} shared tokens")
    pool = d["B_train_new"]
    for n_s in P["lft_samples"]:
        n_s = min(n_s, len(pool))
        data = pool[torch.randperm(len(pool), generator=torch.Generator().manual_seed(seed))[:n_s]]
        for lr in P["lrs"]:
            if ctx.left() < LFT_MIN_LEFT_S:
                skipped.append(f"{task}: LFT/LoRA n={n_s} lr={lr}: time budget")
                continue
            for kind in ("lft", "scratch"):
                model = load_transferred(new, suite["adapter"], cfg) if kind == "lft" else attach_lora(new, cfg, seed=seed)
                h, sec, peak = _timed(lambda: train(model, data, lr=lr, epochs=P["epochs"], batch=min(P["lora_batch"], n_s),
                                                    warmup=0, seed=seed), device)
                entry[kind].append({"n_samples": n_s, "lr": lr, "val": round(evaluate(model, d["B_val_new"]), 4),
                                    "seconds": round(sec + (sec_t if kind == "lft" else 0.0), 2),
                                    "peak_gb": round(max(peak, peak_t) if kind == "lft" else peak, 3)})
                del model
            ctx.log(f"[{task}] n={n_s} lr={lr:g}: LFT {entry['lft'][-1]['val']}, LoRA(n) {entry['scratch'][-1]['val']}")
    return entry


def run_svd(ctx) -> list[dict]:
    """Stage ``svd``: at each d of ``svd_dims``, a matrix with a decaying spectrum (like a transferred ΔW): full
    SVD and randomized rank-``svd_rank`` SVD (q = r + 8, 2 power iterations) times, and the randomized
    approximation's Frobenius error relative to the best rank-r error, minus 1. A d whose estimated time
    (≈ d³ from the last) exceeds the time left is not run."""
    P, device = ctx.profile, _device(ctx)
    rows = []
    for d in P["svd_dims"]:
        # do_bench calls each function ≥ 7 times; a full SVD costs ~(d/d_prev)³ times the last one
        need = 10.0 if not rows else 8 * (rows[-1]["full_ms"] + rows[-1]["randomized_ms"]) / 1e3 * (d / rows[-1]["d"]) ** 3 + 8
        if ctx.left() < need:
            ctx.log(f"[svd] d = {d} not run: {ctx.left():.0f} s left, ~{need:.0f} s needed")
            break
        g = torch.Generator(device="cpu").manual_seed(d)
        U, _ = torch.linalg.qr(torch.randn(d, d, generator=g))
        s = torch.logspace(0, -4, d)
        M = ((U * s) @ U.T).to(device)
        r = P["svd_rank"]
        full_ms = time_ms(lambda: torch.linalg.svd(M, full_matrices=False), device, warmup=5, rep=20, cpu_reps=1)
        rnd_ms = time_ms(lambda: torch.svd_lowrank(M, q=r + 8, niter=2), device, warmup=5, rep=20, cpu_reps=1)
        Ur, Sr, Vr = torch.svd_lowrank(M, q=r + 8, niter=2)
        approx = (Ur[:, :r] * Sr[:r]) @ Vr[:, :r].T
        best = float(torch.sqrt((s[r:].double() ** 2).sum()))
        rows.append({"d": d, "rank": r, "full_ms": round(full_ms, 3), "randomized_ms": round(rnd_ms, 3),
                     "rel_err": float(torch.linalg.norm((M - approx).double()).cpu()) / best - 1.0})
    ctx.log(f"[svd] {rows}")
    return rows

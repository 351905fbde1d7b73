"""The stages of paper 12's one-GPU study (:mod:`companion.lorasuite.scale`), each ``fn(ctx) -> JSON-able result``.

The upgrade shares the old model's lineage, as the paper's pairs do (MiniCPM-S-1B → MiniCPM-2B, Qwen 1.5 → 2.5:
the same data and tokenizer family, a wider, deeper model with more heads and a larger vocabulary): the new model is
grown *from* the old one and trained further on the same corpus with an extended vocabulary, a stated stand-in for
a real upgrade.

* :func:`run_vocab`: the word-level vocabulary pair (:func:`companion.lorasuite.vocab.gpu_vocabs`), refused
  before any training when it shares fewer than d_old tokens (W_h = E_o[c]⁺ E_n[c] would not be full rank);
* :func:`run_pretrain_old`: the old Llama trained from scratch on the standard library's source (the task
  package left out), stopped at its ``stage_limits`` seconds (the steps done are recorded);
* :func:`run_grow`: the new model grown from the old one by :func:`companion.lorasuite.fixture.upgrade` (wider
  residual stream through a random orthogonal embedding, the old heads in seeded new slots beside new ones, wider
  FFN, identity layers inserted, the new vocabulary's shared tokens mapped from the old embeddings): the same
  function on shared tokens before training (the gap is measured and recorded), then trained further on the same
  text in the new vocabulary;
* :func:`run_seed` (one stage per seed): on the task package, the old model's LoRA (its gain over the old model
  recorded), LoRASuite's transfer of it (W_h, CKA + the DP of Alg. 1, Hungarian heads, SVD) with and without LFT,
  LoRA(n) from scratch on the same n samples and steps, and LoRA(full) on all the task's training text until its
  validation loss stops falling; beside every arm the new model's own loss, and each arm's seconds and peak memory;
* :func:`run_svd`: the SVD step alone, full ``torch.linalg.svd`` (the peer, first) against ``torch.svd_lowrank``.

The models pass from ``pretrain_old`` and ``grow`` to the seed stages in ``ctx.shared``: a seed stage needs them in
the same call (``--stages pretrain_old,grow,seed2`` to redo one seed).
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
SEED_RESERVE_S = 25  # seconds of a seed stage the old model's LoRA leaves for the transfer, LFT and LoRA(n)
LFT_MIN_LEFT_S = 5   # an LFT / LoRA(n) setting starts only with this many seconds of the stage left
FULL_MIN_LEFT_S = 5  # LoRA(full) starts only with this many seconds of the stage left


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


def run_pretrain_old(ctx) -> dict:
    """Stage ``pretrain_old``: the old model trained from scratch (AdamW, 50 warm-up steps, ``old_steps`` or
    until ``stage_limits["old"]`` seconds): the steps done, seconds, peak memory, final training loss, parameters."""
    P, device = ctx.profile, _device(ctx)
    vo, _ = _vocabs(ctx)
    spec = P["old"]
    model = build_model(len(vo), spec["hidden"], spec["layers"], spec["heads"], spec["ffn"], seed=ctx.seed).to(device)
    data = windows(vo.encode(ctx.shared["text"]), P["seq_len"] + 1, seed=1)
    h, sec, peak = _timed(lambda: train(model, data, lr=P["pretrain_lr"], steps=P["old_steps"], batch=P["batch"],
                                        warmup=50, weight_decay=0.01, seed=ctx.seed, time_limit_s=_cap(ctx, "old")), device)
    ctx.shared["old_model"] = model
    out = {**_run_record(h, P["old_steps"], sec, peak), "parameters": sum(p.numel() for p in model.parameters())}
    ctx.log(f"[pretrain_old] {out}")
    return out


def _run_record(h: dict, planned: int, sec: float, peak: float) -> dict:
    tail = h["train"][-20:]
    return {"steps": len(h["train"]), "planned_steps": planned, "seconds": round(sec, 1), "peak_gb": round(peak, 3),
            "final_loss": round(sum(tail) / len(tail), 4)}


@torch.no_grad()
def function_gap(old, new, vocab_old, vocab_new, n: int = 8, length: int = 64, seed: int = 0) -> float:
    """How far ``new`` is from computing ``old``'s function: on ``n`` random sequences of ``length`` tokens both
    vocabularies share, max |logit_new − logit_old| over the shared tokens' logits, relative to max |logit_old|
    (0 for an exact function-preserving growth; fp32, no autocast)."""
    shared = [t for t in vocab_old.tokens[1:] if t in vocab_new.stoi]
    io = torch.tensor([vocab_old.stoi[t] for t in shared])
    inn = torch.tensor([vocab_new.stoi[t] for t in shared])
    pick = torch.randint(len(shared), (n, length), generator=torch.Generator().manual_seed(seed))
    dev = next(old.parameters()).device
    lo = old(input_ids=io[pick].to(dev), use_cache=False).logits[..., io.to(dev)].float()
    ln = new(input_ids=inn[pick].to(dev), use_cache=False).logits[..., inn.to(dev)].float()
    return float((ln - lo).abs().max() / lo.abs().max())


def run_grow(ctx) -> dict:
    """Stage ``grow``: the new model grown from the old one (:func:`~companion.lorasuite.fixture.upgrade` to the
    ``new`` widths, heads, FFN and depth, identity layers at ``new["inserted"]``, relative noise ``grow_noise``;
    on the CPU, then moved), its function gap to the old model before training (:func:`function_gap`), then trained
    further on the same text in the new vocabulary (``grow_steps``, lr ``grow_lr``, 20 warm-up steps, stopped at
    ``stage_limits["grow"]`` seconds). Records the growth's seconds, the gap, the training run and the parameters."""
    from companion.lorasuite.fixture import upgrade

    if "old_model" not in ctx.shared:
        raise RuntimeError("the grow stage needs the old model the pretrain_old stage trains in the same call "
                           "(--stages pretrain_old,grow)")
    P, device = ctx.profile, _device(ctx)
    vo, vn = _vocabs(ctx)
    old, spec = ctx.shared["old_model"], P["new"]
    t = time.perf_counter()
    new, truth = upgrade(old.cpu(), vo, vn, hidden=spec["hidden"], layers=spec["layers"], heads=spec["heads"],
                         ffn=spec["ffn"], inserted=spec["inserted"], noise=P["grow_noise"], seed=ctx.seed)
    old.to(device)
    new.to(device)
    grow_s = time.perf_counter() - t
    gap = function_gap(old, new, vo, vn, seed=ctx.seed)
    data = windows(vn.encode(ctx.shared["text"]), P["seq_len"] + 1, seed=1)
    h, sec, peak = _timed(lambda: train(new, data, lr=P["grow_lr"], steps=P["grow_steps"], batch=P["batch"], warmup=20,
                                        weight_decay=0.01, seed=ctx.seed + 1, time_limit_s=_cap(ctx, "grow")), device)
    ctx.shared["new_model"] = new
    out = {"grow_seconds": round(grow_s, 1), "function_gap": gap, "layer_pairs": truth["layer_pairs"],
           "train": _run_record(h, P["grow_steps"], sec, peak),
           "parameters": sum(p.numel() for p in new.parameters())}
    ctx.log(f"[grow] {out}")
    return out


def _task(ctx) -> dict:
    """The task's windows in both vocabularies, LoRASuite's inputs and both models' own task losses, once a call."""
    if "task" not in ctx.shared:
        P = ctx.profile
        vo, vn = _vocabs(ctx)
        T = P["seq_len"] + 1
        b_train, b_val = task_text(P["task"])
        fx = {"vocab_old": vo, "vocab_new": vn, "old_model": ctx.shared["old_model"], "new_model": ctx.shared["new_model"],
              "B_train_old": windows(vo.encode(b_train), T, seed=2), "B_train_new": windows(vn.encode(b_train), T, seed=2),
              "B_val_old": windows(vo.encode(b_val), T, seed=3)[:64], "B_val_new": windows(vn.encode(b_val), T, seed=3)[:64],
              "recipe": SimpleNamespace(lora_rank=P["lora_rank"], lora_alpha=P["lora_alpha"])}
        fx["old_base"] = evaluate(fx["old_model"], fx["B_val_old"])
        fx["new_base"] = evaluate(fx["new_model"], fx["B_val_new"])
        ctx.shared["task"] = fx
    return ctx.shared["task"]


def _arm(h: dict, val: float, sec: float, peak: float, **extra) -> dict:
    return {"val": round(val, 4), "seconds": round(sec, 2), "peak_gb": round(peak, 3), "steps": len(h["train"]), **extra}


def run_seed(k: int, ctx) -> dict:
    """Stage ``seed<k>`` (seed = the profile's + ``k``), on the task package (every 5th file held out):

    1. LoRA (``lora_rank``, α ``lora_alpha``, q/k/v/o, ``old_lora_steps``) on the old model, beside the old model's
       own loss (the adapter must help the model it was trained for);
    2. LoRASuite's transfer of it to the new model (W_h, CKA + Alg. 1, Hungarian heads, per-head transfer, SVD;
       timed with its peak memory) and the new model's loss with the transferred adapter alone;
    3. per lr of ``lrs``: LFT of the transferred adapter and LoRA(n) from scratch on the same ``lft_samples`` windows,
       ``epochs`` epochs, no warm-up (an LFT's seconds and peak include the transfer's);
    4. LoRA(full) on all the task's training windows (lr ``lora_lr``, ``lora_warmup``) until ``full_patience``
       evaluations every ``full_eval_every`` steps bring no lower validation loss (at most ``full_max_steps`` steps or
       ``stage_limits["full"]`` seconds); its loss is the lowest it reached, its curve is recorded.

    ``new_base`` (the new model without adapter) stands beside every arm; ``skipped`` lists what the time left did
    not cover."""
    from peft import get_peft_model_state_dict

    from companion.lorasuite.pipeline import cka_terms, fit_transfer_matrix, lorasuite, transferred_loss
    from companion.lorasuite.transfer import adapter_from_state, attach_lora, load_transferred, lora_config

    if "new_model" not in ctx.shared:
        raise RuntimeError(f"a seed stage needs the models the pretrain_old and grow stages train in the same call "
                           f"(--stages pretrain_old,grow,seed{k})")
    P, device, seed = ctx.profile, _device(ctx), ctx.seed + k
    fx = _task(ctx)
    old, new = fx["old_model"], fx["new_model"]
    cfg = lora_config(P["lora_rank"], P["lora_alpha"], TARGETS)
    skipped = []

    pm = attach_lora(old, cfg, seed=seed)
    h, sec, peak = _timed(lambda: train(pm, fx["B_train_old"], lr=P["lora_lr"], steps=P["old_lora_steps"],
                                        batch=P["lora_batch"], warmup=P["lora_warmup"], seed=seed,
                                        time_limit_s=_cap(ctx, "old_lora", SEED_RESERVE_S)), device)
    entry = {"seed": seed, "old_base": round(fx["old_base"], 4),
             "old_lora": _arm(h, evaluate(pm, fx["B_val_old"]), sec, peak, planned_steps=P["old_lora_steps"]),
             "new_base": round(fx["new_base"], 4)}
    fx_s = {**fx, "old_lora": adapter_from_state(get_peft_model_state_dict(pm))}
    del pm

    suite, sec_t, peak_t = _timed(lambda: lorasuite(fx_s, fit_transfer_matrix(fx_s), cka_terms(
        fx_s, "task", n_minibatches=P["cka_minibatches"], tokens=P["cka_tokens"])), device)
    wh = suite["W_h"]
    pair_gaps = [sum(v.values()) / len(v) for v in suite["alg2_vs_code"].values()]
    entry["transfer"] = {"seconds": round(sec_t, 2), "peak_gb": round(peak_t, 3), "W_h_r2": round(wh["r2"], 4),
                         "W_h_rank": wh["rank"], "W_h_shared_tokens": wh["n_common"],
                         "layer_pairs": suite["layer_map"]["pairs"],
                         "alg2_vs_code_mean": round(float(sum(pair_gaps) / max(1, len(pair_gaps))), 4)}
    entry["transferred"] = round(transferred_loss(fx_s, suite["adapter"]), 4)
    ctx.log(f"[seed{k}] old {entry['old_base']} → LoRA {entry['old_lora']['val']}; new {entry['new_base']}, "
            f"transferred {entry['transferred']} ({sec_t:.1f} s)")

    pool = fx["B_train_new"]
    n = min(P["lft_samples"], len(pool))
    data = pool[torch.randperm(len(pool), generator=torch.Generator().manual_seed(seed))[:n]]
    entry.update(n_samples=n, lft=[], scratch=[])
    for lr in P["lrs"]:
        if ctx.left() < LFT_MIN_LEFT_S:
            skipped.append(f"LFT / LoRA(n) at lr {lr:g}: time budget")
            continue
        for kind in ("lft", "scratch"):
            model = load_transferred(new, suite["adapter"], cfg) if kind == "lft" else attach_lora(new, cfg, seed=seed)
            h, sec, peak = _timed(lambda: train(model, data, lr=lr, epochs=P["epochs"], batch=min(P["lora_batch"], n),
                                                warmup=0, seed=seed), device)
            with_t = kind == "lft"
            entry[kind].append(_arm(h, evaluate(model, fx["B_val_new"]), sec + (sec_t if with_t else 0.0),
                                    max(peak, peak_t) if with_t else peak, lr=lr))
            del model
        ctx.log(f"[seed{k}] lr {lr:g}: LFT {entry['lft'][-1]['val']}, LoRA({n}) {entry['scratch'][-1]['val']}")

    if ctx.left() < FULL_MIN_LEFT_S:
        skipped.append("LoRA(full): time budget")
    else:
        pm = attach_lora(new, cfg, seed=seed)
        h, sec, peak = _timed(lambda: train(pm, pool, lr=P["lora_lr"], steps=P["full_max_steps"], batch=P["lora_batch"],
                                            warmup=P["lora_warmup"], seed=seed, val=fx["B_val_new"], val0=fx["new_base"],
                                            eval_every=P["full_eval_every"], patience=P["full_patience"],
                                            time_limit_s=_cap(ctx, "full")), device)
        entry["full"] = _arm(h, min(h["val"]), sec, peak, stop=h["stop"], planned_steps=P["full_max_steps"],
                             curve=[[s, round(v, 4)] for s, v in zip(h["steps"], h["val"])])
        if h["stop"] == "time":
            skipped.append(f"LoRA(full) stopped by its time cap after {len(h['train'])} steps, before converging")
        del pm
        ctx.log(f"[seed{k}] LoRA(full) {entry['full']['val']} after {entry['full']['steps']} steps ({h['stop']}, "
                f"{sec:.1f} s)")
    entry["skipped"] = skipped
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

"""The Scale-up section of paper 12 (LoRASuite): what the GPU profile runs.

On one H200 (``benchmarks/lorasuite_gpu.py --deadline 140``, at most 150 s): an old word-level Llama of
≈97M parameters (d 768, 12 layers, 12 heads, 8,192 tokens) and a new one of ≈205M (d 1024, 16 layers,
16 query heads, **4 K/V heads: GQA**, FFN 2816, 12,288 tokens) are both trained from scratch on the
standard library's source (the task packages left
out; 300 and 200 steps, to fit the device lease); a LoRA (r 32, α 32, q/k/v/o, the paper's setting,
150 steps) is trained on one task package for each model (the new one is "LoRA(full)", the retraining
LoRASuite avoids); LoRASuite carries the old adapter across (W_h, CKA + DP, Hungarian heads, GQA
averaging, SVD) and LFT is swept over 10 and 100 samples and learning rates 3e-4 and 1e-3 beside LoRA(n)
from scratch; wall time and peak memory of transfer + LFT against LoRA(full); and the SVD step is timed
at d = 2048 and 4096 (``torch.linalg.svd``, the peer, first; then ``torch.svd_lowrank``). Stages run in
that order and are skipped, and recorded as skipped, when the time budget is spent. Results go through
``companion.core.save_results("lorasuite_gpu", ...)``; :func:`recorded` reads them back (None when absent).

Vocabularies: W_h = E_o[c]⁺ E_n[c] needs at least d_old = 768 shared tokens of full rank. The CPU
fixture's character vocabularies share 91 (the first H200 run stopped there), so this profile uses the
word-level vocabularies of :mod:`~companion.lorasuite.vocab` (old counted on the first half of the
pre-training text, new on all of it plus the docstrings; ≈7,400 shared tokens), and
:func:`check_shared_tokens` refuses a pair with fewer than d_old shared tokens before any training.
Time: each training stage stops at ``stage_limits`` seconds (the steps done are recorded), so the
planned 300 / 200 / 150 steps are an upper bound on a slower device. A LoRA(full) stopped by its cap has the loss and
time of a shortened run: the claims rows say so, and compare the time saving with the planned steps at its measured
step time; :func:`recorded_summary` says in words what the recorded run showed.
"""

from __future__ import annotations

import sysconfig
import time
from pathlib import Path

import torch

from companion.core import recorded_results, seeds_text, time_ms

RESULTS_NAME = "lorasuite_gpu"

GPU_PROFILE = {
    "old": {"hidden": 768, "layers": 12, "heads": 12, "kv_heads": 12, "ffn": 2048},
    "new": {"hidden": 1024, "layers": 16, "heads": 16, "kv_heads": 4, "ffn": 2816},
    "seq_len": 256, "batch": 32, "old_steps": 300, "new_steps": 200, "pretrain_lr": 1e-3,
    "lora_rank": 32, "lora_alpha": 32.0, "lora_steps": 150, "lora_lr": 3e-4, "lora_batch": 16, "lora_warmup": 15,
    "tasks": ["email"], "lft_samples": [10, 100], "lrs": [3e-4, 1e-3], "epochs": 3,
    "cka_minibatches": 8, "cka_tokens": 512, "svd_dims": [2048, 4096], "svd_rank": 32, "budget_s": 140,
    # word-level vocabularies (companion.lorasuite.vocab): ~7,400 shared tokens >> d_old = 768, so W_h is full rank
    "vocab": {"old": 8192, "new": 12288}, "text_bytes": 8_000_000,
    # seconds each training stage may take at most (it stops early, recording the steps done)
    "stage_limits": {"old": 30, "new": 30, "lora": 12},
}

SMOKE_PROFILE = {
    **GPU_PROFILE,
    "old": {"hidden": 32, "layers": 2, "heads": 2, "kv_heads": 2, "ffn": 64},
    "new": {"hidden": 48, "layers": 3, "heads": 3, "kv_heads": 1, "ffn": 96},
    "seq_len": 32, "batch": 8, "old_steps": 3, "new_steps": 3, "lora_rank": 2, "lora_alpha": 2.0, "lora_steps": 3,
    "lora_warmup": 1, "lft_samples": [16, 32], "lrs": [1e-4, 1e-3], "epochs": 1, "cka_minibatches": 2,
    "cka_tokens": 32, "svd_dims": [64], "svd_rank": 4, "budget_s": 120,
    "vocab": {"old": 512, "new": 768}, "text_bytes": 300_000,
}


def recorded():
    """The committed GPU results (``benchmarks/results/lorasuite_gpu.json``) or None."""
    return recorded_results(RESULTS_NAME)


def recorded_summary(gpu: dict) -> str:
    """What the recorded GPU run showed, in one paragraph built from its JSON (the notebook's Scale-up text):
    how often LoRA(n) from scratch ended below LoRASuite + LFT, where the transferred adapter alone left the loss,
    and whether LoRA(full) ran its planned steps (the time comparison is against the run as recorded)."""
    pairs = [(a, b) for a in gpu.get("lft", []) for b in gpu.get("scratch", [])
             if (a["n_samples"], a["lr"], a.get("seed", 0)) == (b["n_samples"], b["lr"], b.get("seed", 0))]
    parts = []
    if pairs:
        wins = sum(b["val"] < a["val"] for a, b in pairs)
        parts.append(f"LoRA(n) from scratch ended with a lower validation loss than LoRASuite + LFT in {wins} of "
                     f"{len(pairs)} settings (n, lr)")
    t, base = gpu.get("transferred"), gpu.get("new_base")
    if t is not None and base is not None:
        parts.append(f"the transferred adapter alone left the loss at {t:.4f} against the new model's {base:.4f}"
                     + (" (exactly the same)" if t == base else f" ({t - base:+.4f})"))
    full = gpu.get("full_lora") or {}
    planned = (gpu.get("profile") or {}).get("lora_steps")
    if full.get("steps") is not None and planned:
        cap = ((gpu.get("profile") or {}).get("stage_limits") or {}).get("lora")
        if full["steps"] < planned:
            parts.append(f"LoRA(full) was stopped by its {cap} s time cap after {full['steps']} of {planned} steps "
                         f"({full['seconds']:.1f} s, loss {full['val']:.4f}), so its recorded time and loss are those of "
                         "a shortened run")
        else:
            parts.append(f"LoRA(full) ran all {planned} steps ({full['seconds']:.1f} s, loss {full['val']:.4f})")
    if not parts:
        return "The recorded run holds no LFT results."
    seeds = len({e.get("seed", 0) for e in gpu.get("lft", [])}) or 1
    return (f"In the recorded run ({gpu.get('device', 'GPU')}, {gpu.get('date', '?')}, "
            f"{seeds_text(seeds)}): " + "; ".join(parts) + ".")


def local_source(exclude=(), max_bytes: int = 30_000_000) -> str:
    """The standard library's .py source (sorted files, test folders and ``exclude`` packages left out)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    out, total = [], 0
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).parts
        if "site-packages" in rel or "test" in rel or "tests" in rel or (rel and rel[0] in exclude):
            continue
        t = p.read_text(encoding="utf-8", errors="replace").replace("\t", "    ")
        out.append(t)
        total += len(t)
        if total >= max_bytes:
            break
    return "\n".join(out)


def gpu_vocabs(P: dict):
    """The profile's (old, new) word-level vocabularies and the pre-training text they were counted on
    (:func:`companion.lorasuite.vocab.upgrade_vocabs`), without any model."""
    from companion.lorasuite.vocab import upgrade_vocabs
    from companion.models import stdlib_texts

    text = local_source(exclude=tuple(P["tasks"]), max_bytes=P["text_bytes"])
    vo, vn = upgrade_vocabs(text, P["vocab"]["old"], P["vocab"]["new"], extra_new_text="\n".join(stdlib_texts()))
    return vo, vn, text


def check_shared_tokens(vo, vn, d_old: int) -> int:
    """The number of shared tokens; a clear error (before any training) when it is below d_old, where
    W_h = E_o[c]⁺ E_n[c] cannot be full rank."""
    from companion.core import ParameterError
    from companion.lorasuite.transfer_matrix import common_tokens

    n = len(common_tokens(vo.get_vocab(), vn.get_vocab())[0])
    if n < d_old:
        raise ParameterError("shared tokens", n, f"at least d_old = {d_old} tokens in both vocabularies for a full-rank W_h")
    return n


def _peak_reset(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def _peak_gb(dev) -> float:
    if dev.type == "cuda":
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() / 2**30
    return float("nan")


def _timed(fn, dev):
    _peak_reset(dev)
    t = time.perf_counter()
    out = fn()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return out, time.perf_counter() - t, _peak_gb(dev)


def _svd_study(P, dev, left=lambda: float("inf"), skipped=None) -> list[dict]:
    rows = []
    for d in P["svd_dims"]:
        # do_bench calls each function ≥ 7 times; a full SVD costs ~(d/d_prev)³ times the last one
        need = 10.0 if not rows else 8 * (rows[-1]["full_ms"] + rows[-1]["randomized_ms"]) / 1e3 * (d / rows[-1]["d"]) ** 3 + 8
        if left() < need:
            if skipped is not None:
                skipped.append(f"svd d = {d}: time budget ({left():.0f} s left, ~{need:.0f} s needed)")
            break
        g = torch.Generator(device="cpu").manual_seed(d)
        # a transferred-delta-like matrix: a decaying spectrum
        U, _ = torch.linalg.qr(torch.randn(d, d, generator=g))
        s = torch.logspace(0, -4, d)
        M = ((U * s) @ U.T).to(dev)
        r = P["svd_rank"]
        full_ms = time_ms(lambda: torch.linalg.svd(M, full_matrices=False), dev, warmup=5, rep=20, cpu_reps=1)
        rnd_ms = time_ms(lambda: torch.svd_lowrank(M, q=r + 8, niter=2), dev, warmup=5, rep=20, cpu_reps=1)
        Ur, Sr, Vr = torch.svd_lowrank(M, q=r + 8, niter=2)
        approx = (Ur[:, :r] * Sr[:r]) @ Vr[:, :r].T
        best = float(torch.sqrt((s[r:].double() ** 2).sum()))
        rows.append({"d": d, "rank": r, "full_ms": round(full_ms, 3), "randomized_ms": round(rnd_ms, 3),
                     "rel_err": float(torch.linalg.norm((M - approx).double()).cpu()) / best - 1.0})
    return rows


def run_scale_up(smoke: bool = False, device=None, log=print, save=None, budget_s: float | None = None) -> dict:
    """The GPU study (``smoke``: a seconds-long CPU version). ``save(payload)`` is called after every stage.
    Training stages stop at ``stage_limits`` seconds (steps done recorded); later stages are skipped, and
    recorded as skipped, once ``budget_s`` is spent; a failing task stage is recorded under ``errors``."""
    from peft import get_peft_model_state_dict

    from companion.lorasuite.fixture import build_model
    from companion.lorasuite.lft import evaluate, train, windows
    from companion.lorasuite.pipeline import cka_terms, fit_transfer_matrix, lorasuite, transferred_loss
    from companion.lorasuite.transfer import adapter_from_state, attach_lora, load_transferred, lora_config

    t_start = time.perf_counter()
    P = dict(SMOKE_PROFILE if smoke else GPU_PROFILE)
    if budget_s is not None:
        P["budget_s"] = budget_s
    limits = P.get("stage_limits") or {}
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() and not smoke else "cpu"))
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    left = lambda: P["budget_s"] - (time.perf_counter() - t_start)  # noqa: E731
    save = save or (lambda p: None)
    payload = {"smoke": smoke, "profile": P, "skipped": [], "errors": []}
    o, n = P["old"], P["new"]
    vo, vn, text_a = gpu_vocabs(P)
    payload["vocab"] = {"kind": "word-level (companion.lorasuite.vocab)", "old": len(vo), "new": len(vn),
                        "shared": check_shared_tokens(vo, vn, o["hidden"]), "d_old": o["hidden"]}
    log(f"[vocab] {payload['vocab']} after {time.perf_counter() - t_start:.1f} s")
    T = P["seq_len"] + 1
    A_old, A_new = windows(vo.encode(text_a), T, seed=1), windows(vn.encode(text_a), T, seed=1)
    del text_a

    def task_data(name):
        from companion.lorasuite.fixture import task_text

        tr, va = task_text(name)
        return {"B_train_old": windows(vo.encode(tr), T, seed=2), "B_train_new": windows(vn.encode(tr), T, seed=2),
                "B_val_old": windows(vo.encode(va), T, seed=3)[:64], "B_val_new": windows(vn.encode(va), T, seed=3)[:64]}

    def limit(stage):  # pre-training keeps 60 s for the task stage, LoRA 30 s for transfer and LFT
        cap = limits.get(stage)
        return None if cap is None else max(1.0, min(cap, left() - (30 if stage == "lora" else 60)))

    torch.manual_seed(0)
    old = build_model(len(vo), o["hidden"], o["layers"], o["heads"], o["ffn"], seed=0, kv_heads=o["kv_heads"]).to(dev)
    new = build_model(len(vn), n["hidden"], n["layers"], n["heads"], n["ffn"], seed=1, kv_heads=n["kv_heads"]).to(dev)
    payload["parameters"] = {"old": sum(p.numel() for p in old.parameters()), "new": sum(p.numel() for p in new.parameters())}
    for name, model, data, steps in (("old", old, A_old, P["old_steps"]), ("new", new, A_new, P["new_steps"])):
        h, sec, peak = _timed(lambda: train(model, data, lr=P["pretrain_lr"], steps=steps, batch=P["batch"], warmup=50,
                                            weight_decay=0.01, time_limit_s=limit(name)), dev)
        done = len(h["train"])
        payload.setdefault("pretrain", {})[name] = {"steps": done, "planned_steps": steps, "seconds": round(sec, 1),
                                                    "peak_gb": round(peak, 3),
                                                    "final_loss": round(sum(h["train"][-20:]) / len(h["train"][-20:]), 4)}
        if done < steps:
            payload["skipped"].append(f"pretrain {name}: stopped after {done} of {steps} steps (stage time limit)")
        log(f"[pretrain] {name}: {payload['pretrain'][name]}")
    del A_old, A_new
    save(payload)
    cfg = lora_config(P["lora_rank"], P["lora_alpha"], ["q_proj", "k_proj", "v_proj", "o_proj"])

    class _R:  # the recipe fields the pipeline reads
        lora_rank, lora_alpha, lora_steps, lora_batch = P["lora_rank"], P["lora_alpha"], P["lora_steps"], P["lora_batch"]

    for ti, task in enumerate(P["tasks"]):
        if left() < (40 if limits else 20):
            payload["skipped"].append(f"task {task}: time budget")
            continue
        try:
            entry = _task_stage(P, ti, task, task_data(task), vo, vn, old, new, cfg, _R, dev, left, limit, log, payload,
                                evaluate, train, get_peft_model_state_dict, adapter_from_state, attach_lora,
                                load_transferred, fit_transfer_matrix, cka_terms, lorasuite, transferred_loss)
        except Exception as err:  # noqa: BLE001 - recorded; the JSON is still written
            payload["errors"].append(f"task {task}: {type(err).__name__}: {err}")
            log(f"[{task}] error: {payload['errors'][-1]}")
            save(payload)
            continue
        if ti == 0:
            payload.update({"task": task, **entry})
        else:
            payload.setdefault("other_tasks", {})[task] = entry
        save(payload)
    del old, new
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    if left() > 5:
        try:
            payload["svd"] = _svd_study(P, dev, left, payload["skipped"])
            log(f"[svd] {payload['svd']}")
        except Exception as err:  # noqa: BLE001
            payload["errors"].append(f"svd: {type(err).__name__}: {err}")
    else:
        payload["skipped"].append("svd: time budget")
    payload["total_seconds"] = round(time.perf_counter() - t_start, 1)
    save(payload)
    return payload


def _task_stage(P, ti, task, d, vo, vn, old, new, cfg, _R, dev, left, limit, log, payload, evaluate, train,
                get_peft_model_state_dict, adapter_from_state, attach_lora, load_transferred, fit_transfer_matrix,
                cka_terms, lorasuite, transferred_loss) -> dict:
    fx = {"vocab_old": vo, "vocab_new": vn, "old_model": old, "new_model": new, "recipe": _R, **d}
    res = {}
    for name, model, key in (("old", old, "old"), ("full", new, "new")):
        pm = attach_lora(model, cfg, seed=ti)
        h, sec, peak = _timed(lambda: train(pm, d[f"B_train_{key}"], lr=P["lora_lr"], steps=P["lora_steps"],
                                            batch=P["lora_batch"], warmup=P["lora_warmup"], seed=ti,
                                            time_limit_s=limit("lora")), dev)
        res[name] = {"val": round(evaluate(pm, d[f"B_val_{key}"]), 4), "seconds": round(sec, 2),
                     "peak_gb": round(peak, 3), "steps": len(h["train"]), "state": get_peft_model_state_dict(pm)}
        if len(h["train"]) < P["lora_steps"]:
            payload["skipped"].append(f"{task}: LoRA {name} stopped after {len(h['train'])} of {P['lora_steps']} steps")
        del pm
    fx["old_lora"] = adapter_from_state(res["old"].pop("state"))
    res["full"].pop("state")
    res["old"].pop("peak_gb")

    wh_box = {}

    def transfer_all():
        wh = fit_transfer_matrix(fx)
        wh_box.update(wh)
        terms = cka_terms(fx, "task", n_minibatches=P["cka_minibatches"], tokens=P["cka_tokens"])
        return lorasuite(fx, wh, terms)

    suite, sec_t, peak_t = _timed(transfer_all, dev)
    entry = {"old_lora_val": res["old"]["val"], "old_lora_steps": res["old"]["steps"], "full_lora": res["full"],
             "new_base": round(evaluate(new, d["B_val_new"]), 4),
             "transfer": {"seconds": round(sec_t, 2), "peak_gb": round(peak_t, 3), "W_h_r2": round(suite["W_h"]["r2"], 4),
                          "W_h_rank": wh_box.get("rank"), "W_h_shared_tokens": wh_box.get("n_common"),
                          "layer_pairs": suite["layer_map"]["pairs"],
                          "alg2_vs_code_mean": round(float(sum(sum(v.values()) / len(v) for v in suite["alg2_vs_code"].values())
                                                           / max(1, len(suite["alg2_vs_code"]))), 4)},
             "transferred": round(transferred_loss(fx, suite["adapter"]), 4), "lft": [], "scratch": []}
    log(f"[{task}] base {entry['new_base']}, full LoRA {res['full']['val']}, transferred {entry['transferred']}, "
        f"transfer {sec_t:.1f} s, W_h rank {wh_box.get('rank')} from {wh_box.get('n_common')} shared tokens")
    sizes = P["lft_samples"] if ti == 0 else [s for s in P["lft_samples"] if s == 100] or P["lft_samples"][:1]
    lrs = P["lrs"] if ti == 0 else [max(P["lrs"])]
    for n_s in sizes:
        n_s = min(n_s, len(d["B_train_new"]))
        data = d["B_train_new"][torch.randperm(len(d["B_train_new"]), generator=torch.Generator().manual_seed(0))[:n_s]]
        for lr in lrs:
            if left() < 5:
                payload["skipped"].append(f"{task}: LFT/LoRA n={n_s} lr={lr}: time budget")
                continue
            for kind in ("lft", "scratch"):
                model = (load_transferred(new, suite["adapter"], cfg) if kind == "lft" else attach_lora(new, cfg, seed=0))
                batch = min(16, n_s)
                h, sec, peak = _timed(lambda: train(model, data, lr=lr, epochs=P["epochs"], batch=batch,
                                                    warmup=0, seed=0), dev)
                entry[kind].append({"n_samples": n_s, "lr": lr, "val": round(evaluate(model, d["B_val_new"]), 4),
                                    "seconds": round(sec + (sec_t if kind == "lft" else 0.0), 2),
                                    "peak_gb": round(max(peak, peak_t) if kind == "lft" else peak, 3)})
                del model
            log(f"[{task}] n={n_s} lr={lr:g}: LFT {entry['lft'][-1]['val']}, LoRA(n) {entry['scratch'][-1]['val']}")
    return entry

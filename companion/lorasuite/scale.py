"""The Scale-up section of paper 12 (LoRASuite): what the GPU profile runs.

On one H200 (``benchmarks/lorasuite_gpu.py``, about 150 s): an old char-level Llama of ≈85M parameters
(d 768, 12 layers, 12 heads) and a new one of ≈180M (d 1024, 16 layers, 16 query heads, **4 K/V heads:
GQA**, FFN 2816) are both trained from scratch on the standard library's source (the task packages left
out; 300 and 200 steps, to fit the device lease); a LoRA (r 32, α 32, q/k/v/o, the paper's setting,
150 steps) is trained on one task package for each model (the new one is "LoRA(full)", the retraining
LoRASuite avoids); LoRASuite carries the old adapter across (W_h, CKA + DP, Hungarian heads, GQA
averaging, SVD) and LFT is swept over 10 and 100 samples and learning rates 3e-4 and 1e-3 beside LoRA(n)
from scratch; wall time and peak memory of transfer + LFT against LoRA(full); and the SVD step is timed
at d = 2048 and 4096 (``torch.linalg.svd``, the peer, first; then ``torch.svd_lowrank``). Stages run in
that order and are skipped, and recorded as skipped, when the time budget is spent. Results go through
``companion.core.save_results("lorasuite_gpu", ...)``; :func:`recorded` reads them back (None when absent).
"""

from __future__ import annotations

import sysconfig
import time
from pathlib import Path

import torch

from companion.core import recorded_results, time_ms

RESULTS_NAME = "lorasuite_gpu"

GPU_PROFILE = {
    "old": {"hidden": 768, "layers": 12, "heads": 12, "kv_heads": 12, "ffn": 2048},
    "new": {"hidden": 1024, "layers": 16, "heads": 16, "kv_heads": 4, "ffn": 2816},
    "seq_len": 256, "batch": 32, "old_steps": 300, "new_steps": 200, "pretrain_lr": 1e-3,
    "lora_rank": 32, "lora_alpha": 32.0, "lora_steps": 150, "lora_lr": 3e-4, "lora_batch": 16, "lora_warmup": 15,
    "tasks": ["email"], "lft_samples": [10, 100], "lrs": [3e-4, 1e-3], "epochs": 3,
    "cka_minibatches": 8, "cka_tokens": 512, "svd_dims": [2048, 4096], "svd_rank": 32, "budget_s": 140,
}

SMOKE_PROFILE = {
    **GPU_PROFILE,
    "old": {"hidden": 32, "layers": 2, "heads": 2, "kv_heads": 2, "ffn": 64},
    "new": {"hidden": 48, "layers": 3, "heads": 3, "kv_heads": 1, "ffn": 96},
    "seq_len": 32, "batch": 8, "old_steps": 3, "new_steps": 3, "lora_rank": 2, "lora_alpha": 2.0, "lora_steps": 3,
    "lora_warmup": 1, "lft_samples": [16, 32], "lrs": [1e-4, 1e-3], "epochs": 1, "cka_minibatches": 2,
    "cka_tokens": 32, "svd_dims": [64], "svd_rank": 4, "budget_s": 120,
}


def recorded():
    """The committed GPU results (``benchmarks/results/lorasuite_gpu.json``) or None."""
    return recorded_results(RESULTS_NAME)


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


def _svd_study(P, dev, left=lambda: float("inf")) -> list[dict]:
    rows = []
    for d in P["svd_dims"]:
        if left() < 15:  # a full SVD at d = 4096 takes seconds per call
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
    """The GPU study (``smoke``: a seconds-long CPU version). ``save(payload)`` is called after every stage."""
    from companion.lorasuite.fixture import build_model, new_vocab, old_vocab
    from companion.lorasuite.lft import evaluate, train, windows
    from peft import get_peft_model_state_dict

    from companion.lorasuite.pipeline import cka_terms, fit_transfer_matrix, lorasuite, transferred_loss
    from companion.lorasuite.transfer import adapter_from_state, attach_lora, load_transferred, lora_config

    t_start = time.perf_counter()
    P = dict(SMOKE_PROFILE if smoke else GPU_PROFILE)
    if budget_s is not None:
        P["budget_s"] = budget_s
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() and not smoke else "cpu"))
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    left = lambda: P["budget_s"] - (time.perf_counter() - t_start)  # noqa: E731
    save = save or (lambda p: None)
    payload = {"smoke": smoke, "profile": P, "skipped": []}
    vo, vn = old_vocab(), new_vocab()
    T = P["seq_len"] + 1
    text_a = local_source(exclude=tuple(P["tasks"]), max_bytes=300_000 if smoke else 30_000_000)
    A_old, A_new = windows(vo.encode(text_a), T, seed=1), windows(vn.encode(text_a), T, seed=1)

    def task_data(name):
        from companion.lorasuite.fixture import task_text

        tr, va = task_text(name)
        return {"B_train_old": windows(vo.encode(tr), T, seed=2), "B_train_new": windows(vn.encode(tr), T, seed=2),
                "B_val_old": windows(vo.encode(va), T, seed=3)[:64], "B_val_new": windows(vn.encode(va), T, seed=3)[:64]}

    torch.manual_seed(0)
    o, n = P["old"], P["new"]
    old = build_model(len(vo), o["hidden"], o["layers"], o["heads"], o["ffn"], seed=0, kv_heads=o["kv_heads"]).to(dev)
    new = build_model(len(vn), n["hidden"], n["layers"], n["heads"], n["ffn"], seed=1, kv_heads=n["kv_heads"]).to(dev)
    payload["parameters"] = {"old": sum(p.numel() for p in old.parameters()), "new": sum(p.numel() for p in new.parameters())}
    for name, model, data, steps in (("old", old, A_old, P["old_steps"]), ("new", new, A_new, P["new_steps"])):
        h, sec, peak = _timed(lambda: train(model, data, lr=P["pretrain_lr"], steps=steps, batch=P["batch"], warmup=50,
                                            weight_decay=0.01), dev)
        payload.setdefault("pretrain", {})[name] = {"steps": steps, "seconds": round(sec, 1),
                                                    "final_loss": round(sum(h["train"][-20:]) / len(h["train"][-20:]), 4)}
        log(f"[pretrain] {name}: {payload['pretrain'][name]}")
    save(payload)
    cfg = lora_config(P["lora_rank"], P["lora_alpha"], ["q_proj", "k_proj", "v_proj", "o_proj"])

    class _R:  # the recipe fields the pipeline reads
        lora_rank, lora_alpha, lora_steps, lora_batch = P["lora_rank"], P["lora_alpha"], P["lora_steps"], P["lora_batch"]

    for ti, task in enumerate(P["tasks"]):
        if left() < 20:
            payload["skipped"].append(f"task {task}: time budget")
            continue
        d = task_data(task)
        fx = {"vocab_old": vo, "vocab_new": vn, "old_model": old, "new_model": new, "recipe": _R, **d}
        res = {}
        for name, model, key in (("old", old, "old"), ("full", new, "new")):
            pm = attach_lora(model, cfg, seed=ti)
            h, sec, peak = _timed(lambda: train(pm, d[f"B_train_{key}"], lr=P["lora_lr"], steps=P["lora_steps"],
                                                batch=P["lora_batch"], warmup=P["lora_warmup"], seed=ti), dev)
            res[name] = {"val": round(evaluate(pm, d[f"B_val_{key}"]), 4), "seconds": round(sec, 2),
                         "peak_gb": round(peak, 3), "state": get_peft_model_state_dict(pm)}
            del pm
        fx["old_lora"] = adapter_from_state(res["old"].pop("state"))
        res["full"].pop("state")
        res["old"].pop("peak_gb")

        def transfer_all():
            wh = fit_transfer_matrix(fx)
            terms = cka_terms(fx, "task", n_minibatches=P["cka_minibatches"], tokens=P["cka_tokens"])
            return lorasuite(fx, wh, terms)

        suite, sec_t, peak_t = _timed(transfer_all, dev)
        entry = {"old_lora_val": res["old"]["val"], "full_lora": res["full"], "new_base": round(evaluate(new, d["B_val_new"]), 4),
                 "transfer": {"seconds": round(sec_t, 2), "peak_gb": round(peak_t, 3), "W_h_r2": round(suite["W_h"]["r2"], 4),
                              "layer_pairs": suite["layer_map"]["pairs"],
                              "alg2_vs_code_mean": round(float(sum(sum(v.values()) / len(v) for v in suite["alg2_vs_code"].values())
                                                               / max(1, len(suite["alg2_vs_code"]))), 4)},
                 "transferred": round(transferred_loss(fx, suite["adapter"]), 4), "lft": [], "scratch": []}
        log(f"[{task}] base {entry['new_base']}, full LoRA {res['full']['val']}, transferred {entry['transferred']}, "
            f"transfer {sec_t:.1f} s")
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
        if ti == 0:
            payload.update({"task": task, **entry})
        else:
            payload.setdefault("other_tasks", {})[task] = entry
        save(payload)
    if left() > 5:
        payload["svd"] = _svd_study(P, dev, left)
        log(f"[svd] {payload['svd']}")
    else:
        payload["skipped"].append("svd: time budget")
    payload["total_seconds"] = round(time.perf_counter() - t_start, 1)
    save(payload)
    return payload

"""The one-GPU (H200) run of paper 11 and the reader of its committed results. No plotly import.

:func:`run_scale_up` (used by ``benchmarks/low_rank_clone_gpu.py``), sized to about 150 s on one H200:

1. **Teacher**: a LLaMA-layout byte-level model (``GPU_PROFILE["teacher"]``: d 512, 8 layers, 8 heads, FFN
   1408, about 25M parameters) trained from scratch for ``teacher_seconds`` on the Python standard
   library's source files (local). The spec's 100-200M teacher does not fit the 150 s budget with three
   students; this is the deviation.
2. **Students at d/2** from the same batches for the same number of steps: LRC (L_LM + L_KL(T = 40) +
   0.2 L_clone), random init + KD, Minitron-style hard width pruning (activation importance) + KD.
   Validation loss every ``eval_every`` steps; tokens to reach random init + KD's final loss. The paper's
   schedule (linear warm-up, then linear decay) with a warm-up of 10 % of the steps instead of 0.5 %: a run
   at a constant 2e-3 had LRC's validation loss jump to 21 within its first 50 steps.
3. **Throughput**: one training step of LRC (teacher forward included) against plain training of the
   same standalone student (merged, every weight trained, L_LM only), ``time_ms`` medians -> tokens/s.
4. **Projected linear**: ``x (W_T P)ᵀ`` with W_S materialised each call against the factored
   ``(x Pᵀ) W_Tᵀ``, forward + backward, at a 3B-teacher shape (d_T 3072 -> d_S 1536, out 8192).
"""

from __future__ import annotations

import math
import sysconfig
import time
from pathlib import Path

import numpy as np
import torch

from companion.core import recorded_results, time_ms
from companion.low_rank_clone.clone import LowRankClone, LRCConfig, lm_loss, lrc_loss, merge
from companion.low_rank_clone.experiments import CAUSAL_METHODS, byte_batch, tokens_to_reach, train_causal

RESULTS_NAME = "low_rank_clone_gpu"
GPU_PROFILE = {
    "teacher": {"vocab_size": 256, "hidden_size": 512, "num_layers": 8, "num_heads": 8, "intermediate_size": 1408},
    "seq_len": 256,
    "batch": 32,
    "teacher_seconds": 45,
    "student_steps": 300,
    "eval_every": 25,
    "lr": 2e-3,
    "warmup_ratio": 0.1,
    "alpha": 0.2,
    "temperature": 40.0,
    "linear_shape": {"tokens": 8192, "d_teacher": 3072, "d_student": 1536, "out": 8192},
    "text": "Python standard-library source files (local)",
}


def recorded() -> dict | None:
    """The committed results of ``benchmarks/low_rank_clone_gpu.py`` (None when not recorded yet)."""
    return recorded_results(RESULTS_NAME)


def local_text(max_bytes: int = 16_000_000, val_fraction: float = 0.05) -> tuple[torch.Tensor, torch.Tensor]:
    """Bytes of the standard library's ``.py`` files (sorted, split by file; deterministic)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    chunks, total = [], 0
    for p in sorted(root.rglob("*.py")):
        if "site-packages" in p.parts:
            continue
        try:
            b = p.read_bytes()
        except OSError:
            continue
        chunks.append(b)
        total += len(b)
        if total >= max_bytes:
            break
    idx = np.random.default_rng(0).permutation(len(chunks))
    n_val = max(1, int(len(chunks) * val_fraction))
    as_t = lambda b: torch.frombuffer(bytearray(b), dtype=torch.uint8).long()  # noqa: E731
    return as_t(b"\n".join(chunks[i] for i in idx[n_val:])), as_t(b"\n".join(chunks[i] for i in idx[:n_val]))


def train_teacher(cfg: dict, train: torch.Tensor, *, seconds: float, batch: int, seq_len: int, lr: float, device, seed=0,
                  log=print):
    from companion.models import tiny_llama

    model = tiny_llama(**cfg, max_position=seq_len + 1, seed=seed).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(seed)
    t0, step = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        ids = byte_batch(train, batch, seq_len, gen).to(device)
        for g in opt.param_groups:
            g["lr"] = lr * min(1.0, (step + 1) / 100)
        loss = lm_loss(model(input_ids=ids).logits, ids)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 200 == 0:
            log(f"[teacher] step {step} loss {loss.item():.3f}")
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval(), step


def step_throughput(teacher, d_student: int, train: torch.Tensor, *, batch: int, seq_len: int, device) -> dict:
    """Tokens/s of one LRC training step vs one plain training step of the same (merged) student."""
    gen = torch.Generator().manual_seed(7)
    ids = byte_batch(train, batch, seq_len, gen).to(device)
    lrc = LowRankClone(teacher, LRCConfig(d_student=d_student)).to(device)
    opt = torch.optim.Adam(lrc.trainable_parameters(), lr=1e-6)

    def lrc_step():
        loss, _ = lrc_loss(lrc, ids)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    plain = merge(lrc).to(device).train()
    for p in plain.parameters():
        p.requires_grad_(True)
    opt2 = torch.optim.Adam(plain.parameters(), lr=1e-6)

    def plain_step():
        loss = lm_loss(plain(input_ids=ids).logits, ids)
        opt2.zero_grad(set_to_none=True)
        loss.backward()
        opt2.step()

    plain_ms = time_ms(plain_step, device, warmup=5, rep=30)  # the peer first
    lrc_ms = time_ms(lrc_step, device, warmup=5, rep=30)
    tokens = batch * seq_len
    return {"plain_ms": round(plain_ms, 3), "lrc_ms": round(lrc_ms, 3), "plain_tok_s": tokens / plain_ms * 1e3,
            "lrc_tok_s": tokens / lrc_ms * 1e3, "ratio": plain_ms / lrc_ms}


def projected_linear_times(shape: dict, device, dtype=torch.bfloat16) -> dict:
    """Forward + backward of a projected reader: W_S = W_T P materialised vs x Pᵀ then W_Tᵀ (factored)."""
    n, d_t, d_s, out = shape["tokens"], shape["d_teacher"], shape["d_student"], shape["out"]
    g = torch.Generator(device="cpu").manual_seed(0)
    w_t = (torch.randn(out, d_t, generator=g) * 0.02).to(device, dtype)
    p = (torch.randn(d_t, d_s, generator=g) * 0.02).to(device, dtype).requires_grad_(True)
    x = torch.randn(n, d_s, generator=g).to(device, dtype).requires_grad_(True)

    def materialised():
        y = x @ (w_t @ p).t()
        y.sum().backward()

    def factored():
        y = (x @ p.t()) @ w_t.t()
        y.sum().backward()

    with torch.no_grad():
        diff = float(((x @ (w_t @ p).t()) - (x @ p.t()) @ w_t.t()).abs().max())
    return {"materialised_ms": round(time_ms(materialised, device, warmup=5, rep=50), 4),
            "factored_ms": round(time_ms(factored, device, warmup=5, rep=50), 4), "max_abs_diff": diff, "shape": shape}


def run_scale_up(*, smoke: bool = False, seed: int = 0, device=None, deadline_s: float | None = None, log=print,
                 save=None) -> dict:
    """The four stages; ``smoke`` is a tiny CPU version. ``save(payload)`` is called after each stage."""
    t_start = time.perf_counter()
    device = torch.device(device or ("cuda" if torch.cuda.is_available() and not smoke else "cpu"))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    P = {k: (dict(v) if isinstance(v, dict) else v) for k, v in GPU_PROFILE.items()}
    if smoke:
        P.update(teacher={"vocab_size": 256, "hidden_size": 32, "num_layers": 2, "num_heads": 2, "intermediate_size": 48},
                 seq_len=32, batch=4, teacher_seconds=2, student_steps=4, eval_every=2,
                 linear_shape={"tokens": 64, "d_teacher": 32, "d_student": 16, "out": 48})
        train, val = local_text(max_bytes=300_000)
    else:
        train, val = local_text()
    left = (lambda: deadline_s - (time.perf_counter() - t_start)) if deadline_s else (lambda: math.inf)
    save = save or (lambda p: None)
    payload = {"smoke": smoke, "profile": P, "text_bytes": {"train": len(train), "val": len(val)}}

    teacher, t_steps = train_teacher(P["teacher"], train, seconds=P["teacher_seconds"], batch=P["batch"],
                                     seq_len=P["seq_len"], lr=P["lr"], device=device, seed=seed, log=log)
    d_t = P["teacher"]["hidden_size"]
    d_s = d_t // 2
    data = {"train": train, "val": val, "seq_len": P["seq_len"]}
    payload["teacher"] = {"steps": t_steps, "tokens": t_steps * P["batch"] * P["seq_len"],
                          "parameters": sum(p.numel() for p in teacher.parameters())}
    save(payload)

    runs = {}
    for m in CAUSAL_METHODS:
        if left() < 20:
            runs[m] = "skipped: time budget"
            continue
        r = train_causal(m, teacher, data, d_student=d_s, steps=P["student_steps"], batch=P["batch"], lr=P["lr"],
                         alpha=P["alpha"], temperature=P["temperature"], eval_every=P["eval_every"], seed=seed, device=device,
                         val_batches=8, warmup_ratio=P["warmup_ratio"])
        r["train_loss"] = [round(x, 4) for x in r["train_loss"][:: max(1, len(r["train_loss"]) // 200)]]
        r["curve"]["val_loss"] = [round(x, 4) for x in r["curve"]["val_loss"]]
        runs[m] = r
        log(f"[student] {m}: final val loss {r['final_val_loss']:.3f} in {r['seconds']:.0f} s")
        payload["causal"] = {"runs": {k: v for k, v in runs.items() if isinstance(v, dict)}, "d_teacher": d_t, "d_student": d_s}
        save(payload)
    from companion.low_rank_clone.experiments import causal_val_loss

    done = {k: v for k, v in runs.items() if isinstance(v, dict)}
    payload["causal"] = {"runs": done, "d_teacher": d_t, "d_student": d_s,
                         "teacher_val_loss": round(causal_val_loss(teacher, val.to(device), seq_len=P["seq_len"], n_batches=8), 4)}
    if "random init + KD" in done:
        target = done["random init + KD"]["final_val_loss"]
        payload["causal"]["target_loss"] = target
        payload["causal"]["tokens_to_target"] = {m: tokens_to_reach(r["curve"], target) for m, r in done.items()}
    save(payload)

    if left() > 15:
        thr = step_throughput(teacher, d_s, train, batch=P["batch"], seq_len=P["seq_len"], device=device)
        thr.update(projected_linear_times(P["linear_shape"], device, dtype=torch.bfloat16 if device.type == "cuda" else torch.float32))
        payload["throughput"] = thr
        log(f"[throughput] {thr}")
    else:
        payload["throughput"] = "skipped: time budget"
    payload["total_seconds"] = round(time.perf_counter() - t_start, 1)
    save(payload)
    return payload

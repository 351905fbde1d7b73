"""The stages of paper 11's one-GPU study (listed in :mod:`companion.low_rank_clone.scale`).

A byte-level LLaMA-layout teacher trained from scratch on the standard library's source
(:func:`companion.models.texts.stdlib_source_bytes`), then students at half its width built three ways
(:data:`~companion.low_rank_clone.experiments.CAUSAL_METHODS`): LRC (``W^S = W^T W^p``, Eq. 1-2, trained with
``L_LM + L_KL + α L_clone``, Eq. 4-6), random init + KD, and Minitron-style hard pruning + KD. Every stage is
``fn(ctx) -> JSON-able result`` (:class:`companion.core.stages.StageContext`) and reads its sizes from
``ctx.profile``.
"""

from __future__ import annotations

import time

import torch

from companion.core import time_ms
from companion.low_rank_clone.clone import LowRankClone, LRCConfig, lm_loss, lrc_loss, merge
from companion.low_rank_clone.experiments import CAUSAL_METHODS, byte_batch, causal_val_loss, tokens_to_reach, train_causal
from companion.models import tiny_llama
from companion.models.texts import stdlib_source_bytes

CURVE_POINTS = 200  # a training-loss curve is kept at about this many points


def _device(ctx) -> torch.device:
    device = torch.device(ctx.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    return device


def _text(ctx) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, validation) bytes, read once per call."""
    if "text" not in ctx.shared:
        ctx.shared["text"] = stdlib_source_bytes(ctx.profile["text_max_bytes"])
    return ctx.shared["text"]


def _new_teacher(profile: dict, seed: int, device):
    return tiny_llama(**profile["teacher"], max_position=profile["seq_len"] + 1, seed=seed).to(device)


def train_teacher(model, train: torch.Tensor, *, seconds: float, batch: int, seq_len: int, lr: float, device, seed=0,
                  log=print) -> int:
    """AdamW (betas 0.9/0.95, weight decay 0.1, 100 warm-up steps, gradients clipped at 1) on next-byte
    prediction for ``seconds``; freezes the model and returns the number of steps."""
    model.train()
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
    model.eval()
    return step


def teacher(ctx) -> dict:
    """The teacher (``profile["teacher"]``) trained for ``teacher_seconds``: steps, tokens, parameters. The
    model goes to ``ctx.shared["teacher"]``."""
    p, device = ctx.profile, _device(ctx)
    train, val = _text(ctx)
    model = _new_teacher(p, ctx.seed, device)
    steps = train_teacher(model, train, seconds=p["teacher_seconds"], batch=p["batch"], seq_len=p["seq_len"], lr=p["lr"],
                          device=device, seed=ctx.seed, log=ctx.log)
    ctx.shared["teacher"] = model
    return {"steps": steps, "tokens": steps * p["batch"] * p["seq_len"], "parameters": sum(x.numel() for x in model.parameters()),
            "text_bytes": {"train": len(train), "val": len(val)}}


def causal(ctx) -> dict:
    """The three students at d_T / 2 on the same batches for ``student_steps`` (the paper's warm-up + linear
    decay schedule, ``warmup_ratio`` of the steps): validation loss every ``eval_every`` steps, the teacher's,
    and the tokens each student needs to reach random init + KD's final loss. A student starts only while
    ``ctx.left()`` covers the last one's time; those left out are absent from ``runs``."""
    if "teacher" not in ctx.shared:
        raise RuntimeError("the causal stage trains students of the teacher stage's model, which this call did not "
                           "train: run the stages teacher,causal together")
    p, device, model = ctx.profile, _device(ctx), ctx.shared["teacher"]
    train, val = _text(ctx)
    d_t = p["teacher"]["hidden_size"]
    data = {"train": train, "val": val, "seq_len": p["seq_len"]}
    runs, last = {}, 0.0
    for m in CAUSAL_METHODS:
        if runs and ctx.left() < last:
            ctx.log(f"[causal] {m} and later left out: {ctx.left():.0f} s left, a student takes {last:.0f} s")
            break
        r = train_causal(m, model, data, d_student=d_t // 2, steps=p["student_steps"], batch=p["batch"], lr=p["lr"],
                         alpha=p["alpha"], temperature=p["temperature"], eval_every=p["eval_every"], seed=ctx.seed,
                         device=device, val_batches=p["val_batches"], warmup_ratio=p["warmup_ratio"])
        r["train_loss"] = [round(x, 4) for x in r["train_loss"][:: max(1, len(r["train_loss"]) // CURVE_POINTS)]]
        r["curve"]["val_loss"] = [round(x, 4) for x in r["curve"]["val_loss"]]
        runs[m], last = r, r["seconds"]
        ctx.log(f"[causal] {m}: final val loss {r['final_val_loss']:.3f} in {r['seconds']:.0f} s")
    out = {"runs": runs, "d_teacher": d_t, "d_student": d_t // 2,
           "teacher_val_loss": round(causal_val_loss(model, val.to(device), seq_len=p["seq_len"], n_batches=p["val_batches"]), 4)}
    if "random init + KD" in runs:
        out["target_loss"] = runs["random init + KD"]["final_val_loss"]
        out["tokens_to_target"] = {m: tokens_to_reach(r["curve"], out["target_loss"]) for m, r in runs.items()}
    return out


def step_throughput(model, d_student: int, train: torch.Tensor, *, batch: int, seq_len: int, device) -> dict:
    """Tokens/s of one LRC training step (the teacher's forward included) vs one plain training step of the
    same student merged (every weight trained, L_LM only); the plain step is timed first."""
    ids = byte_batch(train, batch, seq_len, torch.Generator().manual_seed(7)).to(device)
    lrc = LowRankClone(model, LRCConfig(d_student=d_student)).to(device)
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


def throughput(ctx) -> dict:
    """:func:`step_throughput` at d_T / 2 and :func:`projected_linear_times` at ``linear_shape`` (bf16 on CUDA,
    fp32 on the CPU). The teacher is the ``teacher`` stage's; in a call without it, an untrained one of the same
    shape (a step's time does not depend on the weights' values)."""
    p, device = ctx.profile, _device(ctx)
    model = ctx.shared["teacher"] if "teacher" in ctx.shared else _new_teacher(p, ctx.seed, device).requires_grad_(False).eval()
    train, _ = _text(ctx)
    out = step_throughput(model, p["teacher"]["hidden_size"] // 2, train, batch=p["batch"], seq_len=p["seq_len"], device=device)
    out.update(projected_linear_times(p["linear_shape"], device, torch.bfloat16 if device.type == "cuda" else torch.float32))
    ctx.log(f"[throughput] {out}")
    return out

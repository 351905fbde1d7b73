"""The stages of paper 11's one-GPU study (listed in :mod:`companion.low_rank_clone.scale`).

A byte-level LLaMA-layout teacher trained from scratch on the standard library's source
(:func:`companion.models.texts.stdlib_source_bytes`) for a fixed share of the study's time, then, once per seed,
students at half its width built three ways (:data:`~companion.low_rank_clone.experiments.CAUSAL_METHODS`): LRC
(``W^S = W^T W^p``, Eq. 1-2, trained with ``L_LM + L_KL + α L_clone``, Eq. 4-6), random init + KD, and
Minitron-style hard pruning + KD, each on the same token budget. Every stage is ``fn(ctx) -> JSON-able result``
(:class:`companion.core.stages.StageContext`) and reads its sizes from ``ctx.profile``.
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
TEACHER_WARMUP = 100  # the teacher's linear warm-up, in steps


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


def _thin(values: list) -> list:
    """Every k-th value, so that about :data:`CURVE_POINTS` remain, rounded for the JSON."""
    return [round(float(x), 4) for x in values[:: max(1, len(values) // CURVE_POINTS)]]


def teacher_lr_factor(step: int, elapsed_s: float, seconds: float, warmup_steps: int = TEACHER_WARMUP) -> float:
    """The teacher's learning-rate multiplier: linear warm-up over ``warmup_steps`` steps, then linear decay to 0
    at ``seconds`` of training. The students' schedule (:func:`~companion.low_rank_clone.experiments.lr_factor`,
    the paper's §4.1 warm-up + linear decay) with elapsed time in place of steps, since the teacher trains for a
    fixed time; without the decay the teacher stops at a high-learning-rate loss its students can undercut."""
    return max(0.0, min((step + 1) / warmup_steps, 1.0 - elapsed_s / seconds))


def train_teacher(model, train: torch.Tensor, val: torch.Tensor, *, seconds: float, batch: int, seq_len: int, lr: float,
                  eval_every: int, val_batches: int, seed: int = 0, log=print) -> dict:
    """AdamW (betas 0.9/0.95, weight decay 0.1, gradients clipped at 1) on next-byte prediction for ``seconds``
    (evaluations included) under :func:`teacher_lr_factor`; validation loss at step 0, every ``eval_every`` steps
    and at the end. Freezes the model and returns the steps, the validation curve and the training loss."""
    device = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(seed)
    curve = {"step": [], "tokens": [], "val_loss": []}

    def evaluate(step):
        curve["step"].append(step)
        curve["tokens"].append(step * batch * seq_len)
        curve["val_loss"].append(round(causal_val_loss(model, val, seq_len=seq_len, n_batches=val_batches), 4))

    model.train()
    evaluate(0)
    losses, step, t0 = [], 0, time.perf_counter()
    while (elapsed := time.perf_counter() - t0) < seconds:
        ids = byte_batch(train, batch, seq_len, gen).to(device)
        for g in opt.param_groups:
            g["lr"] = lr * teacher_lr_factor(step, elapsed, seconds)
        loss = lm_loss(model(input_ids=ids).logits, ids)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.detach())  # no sync per step: read once at the end
        step += 1
        if step % eval_every == 0:
            evaluate(step)
            log(f"[teacher] step {step}, {time.perf_counter() - t0:.0f} s: validation loss {curve['val_loss'][-1]:.3f}")
    if curve["step"][-1] != step:
        evaluate(step)
    for p in model.parameters():
        p.requires_grad_(False)
    model.eval()
    train_loss = torch.stack(losses).float().cpu().tolist() if losses else []
    return {"steps": step, "seconds": round(time.perf_counter() - t0, 1), "curve": curve,
            "train_loss": {"step": list(range(1, step + 1))[:: max(1, step // CURVE_POINTS)], "loss": _thin(train_loss)}}


def teacher(ctx) -> dict:
    """The teacher (``profile["teacher"]``) trained for ``teacher_seconds`` on batches of ``teacher_batch``:
    steps, tokens, parameters, its validation-loss curve and final validation loss (``val_loss``, the same
    ``val_batches`` windows the students are scored on). The model goes to ``ctx.shared["teacher"]``."""
    p, device = ctx.profile, _device(ctx)
    train, val = _text(ctx)
    model = _new_teacher(p, ctx.seed, device)
    out = train_teacher(model, train, val.to(device), seconds=p["teacher_seconds"], batch=p["teacher_batch"],
                        seq_len=p["seq_len"], lr=p["lr"], eval_every=p["teacher_eval_every"], val_batches=p["val_batches"],
                        seed=ctx.seed, log=ctx.log)
    ctx.shared["teacher"], ctx.shared["teacher_val_loss"] = model, out["curve"]["val_loss"][-1]
    return {**out, "tokens": out["steps"] * p["teacher_batch"] * p["seq_len"], "val_loss": out["curve"]["val_loss"][-1],
            "parameters": sum(x.numel() for x in model.parameters()), "text_bytes": {"train": len(train), "val": len(val)}}


def students(ctx, index: int) -> dict:
    """Seed ``ctx.seed + index``: the three students at d_T / 2 of the ``teacher`` stage's model, each trained for
    ``student_steps`` steps of ``batch`` × ``seq_len`` bytes (the same token budget; the paper's warm-up + linear
    decay, ``warmup_ratio`` of the steps), their validation loss every ``eval_every`` steps, and the tokens each
    needs to reach ``target_loss`` (None: not within the budget)."""
    if "teacher" not in ctx.shared:
        raise RuntimeError(f"students_{index} trains students of the teacher stage's model, which this call did not "
                           f"train: run the stages teacher,students_{index} together")
    p, device, model = ctx.profile, _device(ctx), ctx.shared["teacher"]
    train, val = _text(ctx)
    d_t, seed = p["teacher"]["hidden_size"], ctx.seed + index
    data = {"train": train, "val": val.to(device), "seq_len": p["seq_len"]}
    runs = {}
    for m in CAUSAL_METHODS:
        r = train_causal(m, model, data, d_student=d_t // 2, steps=p["student_steps"], batch=p["batch"], lr=p["lr"],
                         alpha=p["alpha"], temperature=p["temperature"], eval_every=p["eval_every"], seed=seed,
                         device=device, val_batches=p["val_batches"], warmup_ratio=p["warmup_ratio"])
        r["curve"]["val_loss"] = [round(x, 4) for x in r["curve"]["val_loss"]]
        runs[m] = {"curve": r["curve"], "final_val_loss": r["curve"]["val_loss"][-1], "train_loss": _thin(r["train_loss"]),
                   "seconds": round(r["seconds"], 1), "trainable": r["trainable"]}
        ctx.log(f"[students_{index}] {m}: final validation loss {r['final_val_loss']:.3f} in {r['seconds']:.0f} s")
    return {"seed": seed, "d_teacher": d_t, "d_student": d_t // 2, "teacher_val_loss": ctx.shared["teacher_val_loss"],
            "target_loss": p["target_loss"], "runs": runs,
            "tokens_to_target": {m: tokens_to_reach(r["curve"], p["target_loss"]) for m, r in runs.items()}}


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

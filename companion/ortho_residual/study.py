"""The stages of paper 10's one-GPU study (listed in :mod:`companion.ortho_residual.scale`).

A LLaMA-shaped byte-level decoder trained with the plain residual ``x_{n+1} = x_n + f`` against Orthogonal-F,
``x_{n+1} = x_n + f_perp`` with ``f_perp = f - <x_n, f> / (||x_n||^2 + eps) x_n`` per token (Sec. 3,
:mod:`~companion.ortho_residual.residual`), on the standard library's source
(:func:`companion.models.texts.stdlib_source_bytes`, test folders left out). Every stage is
``fn(ctx) -> JSON-able result`` (:class:`companion.core.stages.StageContext`) and reads its sizes from
``ctx.profile``. Training is time-boxed; the compared arms start from the same weights (the adds have no
parameters) and see the same batches, under bf16 autocast on CUDA (fp32 on the CPU), AdamW with a 100-step
warm-up.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from companion.core import check_choice, time_ms
from companion.models.texts import stdlib_source_bytes
from companion.ortho_residual.experiments import PRECISIONS, STAT_KEYS, perp_cosine
from companion.ortho_residual.models import STREAM_DTYPES, LlamaConfig, LlamaDecoder, n_parameters, recording

RULES = ("linear", "feature")  # the plain residual and Orthogonal-F, trained side by side
REPROJECTIONS = (*PRECISIONS, "bf16_fp32coef")  # the precisions a trained model's recorded (x, f) are projected in
SPIKE_FACTOR, SPIKE_WINDOW = 1.5, 50  # a loss spike: a step's loss above 1.5x the median of the previous 50
CURVE_POINTS = 400  # a loss curve is thinned to at most this many points
COMPILE_BACKENDS = ("inductor", "aot_eager", "eager")


def _device(ctx) -> torch.device:
    device = torch.device(ctx.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return device


def _config(profile: dict) -> LlamaConfig:
    return LlamaConfig(**profile["model"], max_len=profile["seq_len"] + 1)


def _text(ctx) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, validation) bytes, read once per call."""
    if "text" not in ctx.shared:
        ctx.shared["text"] = stdlib_source_bytes(ctx.profile["text_max_bytes"], skip_tests=True)
    return ctx.shared["text"]


def _amp(device: torch.device):
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast("cpu", enabled=False)


def _batch(data: torch.Tensor, batch: int, seq_len: int, gen: torch.Generator, device) -> torch.Tensor:
    starts = torch.randint(0, len(data) - seq_len - 1, (batch,), generator=gen)
    return data[starts[:, None] + torch.arange(seq_len + 1)[None]].to(device, non_blocking=True)


def _probe(val: torch.Tensor, seq_len: int, device) -> torch.Tensor:
    """The fixed validation batch the per-layer statistics are taken on."""
    return _batch(val, 8, seq_len, torch.Generator().manual_seed(5), device)[:, :-1]


def spikes(losses) -> int:
    """Steps whose loss exceeds ``SPIKE_FACTOR`` x the median of the previous ``SPIKE_WINDOW`` losses."""
    return sum(losses[i] > SPIKE_FACTOR * float(np.median(losses[i - SPIKE_WINDOW:i]))
               for i in range(SPIKE_WINDOW, len(losses)))


def _thin(xs) -> tuple[list[int], list[float]]:
    idx = np.linspace(0, len(xs) - 1, min(len(xs), CURVE_POINTS)).round().astype(int)
    return idx.tolist(), [round(float(xs[i]), 4) for i in idx]


def same_start(cfg: LlamaConfig, seed: int, arms: dict, device) -> dict:
    """``{name: LlamaDecoder(cfg, **kwargs)}`` for ``arms = {name: kwargs}``, every one with the initial weights
    of ``seed``."""
    torch.manual_seed(seed)
    init = LlamaDecoder(cfg).state_dict()
    models = {}
    for name, kwargs in arms.items():
        models[name] = LlamaDecoder(cfg, **kwargs)
        models[name].load_state_dict(init)
        models[name].to(device)
    return models


def train_timed(model, data, *, seconds, batch, seq_len, lr, seed, device, max_steps=None, log=print, tag="") -> dict:
    """AdamW (betas 0.9/0.95, weight decay 0.1, gradients clipped at 1) for ``seconds`` or ``max_steps``
    steps, whichever comes first; the batch order is set by ``seed``."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1, fused=device.type == "cuda")
    gen = torch.Generator().manual_seed(seed)
    losses, t0, step = [], time.perf_counter(), 0
    while (max_steps is None or step < max_steps) and time.perf_counter() - t0 < seconds:
        ids = _batch(data, batch, seq_len, gen, device)
        for g in opt.param_groups:
            g["lr"] = lr * min(1.0, (step + 1) / 100)
        with _amp(device):
            loss = model.loss(ids)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.detach())
        step += 1
        if step % 200 == 0:
            log(f"[{tag}] step {step} loss {losses[-1].item():.3f} ({time.perf_counter() - t0:.0f} s)")
    return {"steps": step, "seconds": time.perf_counter() - t0, "loss": [x.item() for x in losses]}


@torch.no_grad()
def evaluate(model, val, *, batch, seq_len, device, n_batches=8) -> float:
    """Mean validation loss over ``n_batches`` fixed batches."""
    gen = torch.Generator().manual_seed(999)
    model.eval()
    with _amp(device):
        out = float(np.mean([model.loss(_batch(val, batch, seq_len, gen, device)).item() for _ in range(n_batches)]))
    model.train()
    return out


@torch.no_grad()
def layer_stats(model, ids, device, precisions=False) -> list[dict]:
    """Per residual add (two per layer): the stream statistics of one forward pass on ``ids`` and, with
    ``precisions``, |cos(x, f_perp)| of the recorded (x, f) re-projected in each of ``REPROJECTIONS``."""
    model.eval()
    with recording(model, keep_inputs=precisions) as conns, _amp(device):
        model(ids)
    model.train()
    rows = []
    for i, c in enumerate(conns):
        row = {"layer": i // 2, "add": ("attn", "mlp")[i % 2], **{k: round(float(c.stats[0][k]), 8) for k in STAT_KEYS}}
        if precisions:
            x, f = c.inputs[0]
            row.update({f"cos_{p}": perp_cosine(x.float(), f.float(), precision=p) for p in REPROJECTIONS})
        rows.append(row)
    return rows


def training(ctx) -> dict:
    """Linear vs Orthogonal-F for ``train_seconds_each`` each: loss curves, spikes, validation loss and the
    per-add statistics on a fixed probe (with the precision re-projections for Orthogonal-F). The trained
    models go to ``ctx.shared["models"]`` for the step-time stages."""
    p, device = ctx.profile, _device(ctx)
    cfg, (train, val) = _config(p), _text(ctx)
    models = same_start(cfg, ctx.seed, {m: {"methods": m} for m in RULES}, device)
    probe = _probe(val, p["seq_len"], device)
    out = {"config": cfg.as_dict(), "parameters": n_parameters(models["linear"]),
           "text_bytes": {"train": len(train), "val": len(val)}}
    for mode, model in models.items():
        h = train_timed(model, train, seconds=p["train_seconds_each"], batch=p["batch"], seq_len=p["seq_len"], lr=p["lr"],
                        seed=ctx.seed, device=device, log=ctx.log, tag=mode)
        steps, loss = _thin(h["loss"])
        out[mode] = {"steps": h["steps"], "seconds": round(h["seconds"], 1), "tokens": h["steps"] * p["batch"] * p["seq_len"],
                     "curve_steps": steps, "curve_loss": loss, "final_train_loss": round(float(np.mean(h["loss"][-20:])), 4),
                     "val_loss": round(evaluate(model, val, batch=p["batch"], seq_len=p["seq_len"], device=device), 4),
                     "spikes": spikes(h["loss"]), "layers": layer_stats(model, probe, device, precisions=mode == "feature")}
        ctx.log(f"[training] {mode}: {h['steps']} steps, val loss {out[mode]['val_loss']}")
    ctx.shared["models"] = models
    return out


def step_time_ms(model, data, *, batch, seq_len, device, backend=None) -> float:
    """Median ms of one training step (forward, backward, AdamW) under bf16 autocast; ``backend``: the
    ``torch.compile`` backend of the loss (None: eager)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device.type == "cuda")
    fwd = model.loss if backend is None else torch.compile(model.loss, backend=backend)
    ids = _batch(data, batch, seq_len, torch.Generator().manual_seed(3), device)

    def step():
        with _amp(device):
            loss = fwd(ids)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):  # compile and warm up outside the timing
        step()
    return time_ms(step, device, warmup=50, rep=300)


def _step_times(ctx, backend) -> dict:
    """Step time of both rules and the overhead in percent. The models are the ``training`` stage's; in a
    call without it, fresh ones from the seed (a step's time does not depend on the weights' values)."""
    p, device = ctx.profile, _device(ctx)
    if "models" not in ctx.shared:
        ctx.shared["models"] = same_start(_config(p), ctx.seed, {m: {"methods": m} for m in RULES}, device)
    train, _ = _text(ctx)
    t = {m: round(step_time_ms(ctx.shared["models"][m], train, batch=p["batch"], seq_len=p["seq_len"], device=device,
                               backend=backend), 3) for m in RULES}
    t["overhead_pct"] = round(100 * (t["feature"] / t["linear"] - 1), 2)
    ctx.log(f"[step time] {'eager' if backend is None else f'torch.compile ({backend})'}: {t}")
    return t


def step_time_eager(ctx) -> dict:
    """Eager training-step time of linear and Orthogonal-F (ms) and the projection's overhead."""
    return _step_times(ctx, None)


def step_time_compiled(ctx) -> dict:
    """The same under ``torch.compile`` with ``compile_backend`` (last: compiling the decoder twice is the
    slowest stage)."""
    return _step_times(ctx, check_choice("compile_backend", ctx.profile["compile_backend"], COMPILE_BACKENDS))


def _arm_cosine(model, probe, device, coef: str) -> float:
    """The largest (over adds) mean |cos(x, f_perp)| of the model's recorded bf16 (x, f), with f_perp computed
    as this arm computes it: the bf16 coefficient (``"input"``) or an fp32 one (``"float32"``)."""
    key = "cos_bf16" if coef == "input" else "cos_bf16_fp32coef"
    return float(max(r[key]["mean"] for r in layer_stats(model, probe, device, precisions=True)))


def bf16_coef_training(ctx) -> dict:
    """Orthogonal-F with a ``bf16_stream`` residual stream, the projection coefficient in fp32 (``"float32"``)
    or in the stream's dtype (``"input"``: the official code's cast), per seed from the same initial weights and
    batches: loss curves, spikes, validation loss and the largest parallel residue. The fp32 arm trains for
    ``bf16_coef_seconds``, the bf16 arm for as many steps. Seeds ``seed, seed + 1, ...`` up to
    ``bf16_coef_seeds``; another seed starts only while ``ctx.left()`` covers the last one's time.

    The stream must be bf16 for the comparison to mean anything: under autocast alone it stays fp32 and
    ``coef_dtype="input"`` is an fp32 coefficient too (both arms compute the same thing)."""
    p, device = ctx.profile, _device(ctx)
    stream = check_choice("bf16_stream", p["bf16_stream"], STREAM_DTYPES)
    cfg, (train, val) = _config(p), _text(ctx)
    probe = _probe(val, p["seq_len"], device)
    runs, done, last = {"float32": [], "input": []}, [], 0.0
    for seed in range(ctx.seed, ctx.seed + p["bf16_coef_seeds"]):
        if done and ctx.left() < last:
            ctx.log(f"[bf16] seeds from {seed} left out: {ctx.left():.0f} s left, a seed takes {last:.0f} s")
            break
        t0 = time.perf_counter()
        arms = same_start(cfg, seed, {c: {"methods": "feature", "coef_dtype": c, "stream_dtype": stream} for c in runs}, device)
        steps = None
        for coef, model in arms.items():  # the fp32 arm first: it sets the steps of the bf16 arm
            h = train_timed(model, train, seconds=p["bf16_coef_seconds"] if steps is None else math.inf, batch=p["batch"],
                            seq_len=p["seq_len"], lr=p["lr"], seed=seed + 1, device=device, max_steps=steps, log=ctx.log,
                            tag=f"coef {coef}, seed {seed}")
            steps = h["steps"]
            curve_steps, curve_loss = _thin(h["loss"])
            runs[coef].append({"seed": seed, "steps": h["steps"], "curve_steps": curve_steps, "curve_loss": curve_loss,
                               "spikes": spikes(h["loss"]), "final_train_loss": round(float(np.mean(h["loss"][-20:])), 4),
                               "val_loss": round(evaluate(model, val, batch=p["batch"], seq_len=p["seq_len"], device=device), 4),
                               "cos_perp_max": _arm_cosine(model, probe, device, coef)})
            ctx.log(f"[bf16] seed {seed}, coefficient {coef}: val loss {runs[coef][-1]['val_loss']}")
        del arms
        done.append(seed)
        last = time.perf_counter() - t0
    return {"stream_dtype": stream, "seeds": done, "seconds_each": p["bf16_coef_seconds"], "runs": runs}

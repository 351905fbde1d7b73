"""The stages of paper 10's one-GPU study (listed in :mod:`companion.ortho_residual.scale`).

Linear residual ``x_{n+1} = x_n + f`` against Orthogonal-F, ``x_{n+1} = x_n + f_perp`` with
``f_perp = f - <x_n, f> / (||x_n||^2 + eps) x_n`` per token (Sec. 3, :mod:`~companion.ortho_residual.residual`):

* a small LLaMA-shaped byte-level decoder on the standard library's source
  (:func:`companion.models.texts.stdlib_source_bytes`, test folders left out), trained to **equal steps**: seed 0's
  linear run is the pilot, trained until its validation loss has flattened (:func:`flattened`), and its step count
  is every other arm's and seed's (:func:`lm_seed`);
* the same decoder with a bf16 residual stream, the official bf16 projection coefficient against an fp32 one
  (:func:`bf16_seed`);
* the pre-LN ViT on scikit-learn's digits upsampled to a larger image (:func:`vit_digits`);
* the training-step time of both rules on the decoder in SmolLM-135M's shape (:func:`step_time_eager`,
  :func:`step_time_compiled`).

Every stage is ``fn(ctx) -> JSON-able result`` (:class:`companion.core.stages.StageContext`) and reads its sizes from
``ctx.profile``. The compared arms start from the same weights (the adds have no parameters) and see the same
batches, under bf16 autocast on CUDA (fp32 on the CPU), AdamW with a 100-step warm-up and then a constant rate.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from companion.core import ParameterError, check_choice, time_ms
from companion.models.texts import stdlib_source_bytes
from companion.ortho_residual.experiments import PRECISIONS, STAT_KEYS, digits_data, perp_cosine, train_vit
from companion.ortho_residual.models import STREAM_DTYPES, LlamaConfig, LlamaDecoder, n_parameters, recording

RULES = ("linear", "feature")  # the plain residual and Orthogonal-F, trained side by side
COEF_ARMS = ("float32", "input")  # the bf16 study's projection coefficients: fp32, and the stream's dtype (official)
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


def _config(model: dict, seq_len: int) -> LlamaConfig:
    return LlamaConfig(**model, max_len=seq_len + 1)


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


def flattened(val_losses, window: int, fraction: float) -> bool:
    """Whether a validation curve (one value per evaluation) has flattened: the last value improved on the one
    ``window`` evaluations earlier by less than ``fraction`` of it, ``v[-1-window] - v[-1] < fraction * v[-1-window]``
    (False while the curve has ``window`` values or fewer)."""
    if len(val_losses) <= window:
        return False
    before = val_losses[-1 - window]
    return before - val_losses[-1] < fraction * before


def train_lm(model, data, *, steps, batch, seq_len, lr, seed, device, eval_every, val_batches, flat=None,
             max_seconds=math.inf, log=print, tag="") -> dict:
    """AdamW (betas 0.9/0.95, weight decay 0.1, gradients clipped at 1) for ``steps`` steps on ``data = (train, val)``,
    the batch order set by ``seed``, with the validation loss (:func:`evaluate`) every ``eval_every`` steps and at the
    last step. ``flat = (window, fraction)``: stop at the first evaluation where :func:`flattened` holds (``stop``
    ``"flat"``); past ``max_seconds`` stop at the next evaluation (``"time"``); else ``"steps"``."""
    train, val = data
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1, fused=device.type == "cuda")
    gen = torch.Generator().manual_seed(seed)
    losses, val_steps, val_loss, stop, t0 = [], [], [], "steps", time.perf_counter()
    for step in range(1, steps + 1):
        ids = _batch(train, batch, seq_len, gen, device)
        for g in opt.param_groups:
            g["lr"] = lr * min(1.0, step / 100)
        with _amp(device):
            loss = model.loss(ids)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.detach())
        if step % eval_every and step != steps:
            continue
        val_steps.append(step)
        val_loss.append(round(evaluate(model, val, batch=batch, seq_len=seq_len, device=device, n_batches=val_batches), 4))
        log(f"[{tag}] step {step}: val loss {val_loss[-1]:.3f} ({time.perf_counter() - t0:.0f} s)")
        if flat is not None and flattened(val_loss, *flat):
            stop = "flat"
            break
        if time.perf_counter() - t0 > max_seconds and step != steps:
            stop = "time"
            break
    return {"steps": step, "stop": stop, "seconds": time.perf_counter() - t0, "loss": [x.item() for x in losses],
            "val_steps": val_steps, "val_loss": val_loss}


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


def _lm_kwargs(p: dict, seed: int, device, log) -> dict:
    return {"batch": p["batch"], "seq_len": p["seq_len"], "lr": p["lr"], "seed": seed, "device": device,
            "eval_every": p["eval_every"], "val_batches": p["val_batches"], "log": log}


def _summary(h: dict, model, probe, device, precisions: bool) -> dict:
    """What a training run records: the thinned training curve, the validation curve and its last value, loss
    spikes and the per-add statistics on the probe."""
    curve_steps, curve_loss = _thin(h["loss"])
    return {"steps": h["steps"], "seconds": round(h["seconds"], 1), "curve_steps": curve_steps, "curve_loss": curve_loss,
            "val_steps": h["val_steps"], "val_curve": h["val_loss"], "val_loss": h["val_loss"][-1],
            "final_train_loss": round(float(np.mean(h["loss"][-20:])), 4), "spikes": spikes(h["loss"]),
            "layers": layer_stats(model, probe, device, precisions=precisions)}


def lm_seed(k: int, ctx) -> dict:
    """Seed ``seed + k``: linear vs Orthogonal-F on ``lm_model`` from the same weights and batches, to equal steps.

    ``k = 0`` is the pilot: its linear run trains until the validation loss (every ``eval_every`` steps) improves
    by less than ``flat_fraction`` over ``flat_window`` steps (:func:`flattened`), capped at ``max_steps`` steps and
    ``pilot_seconds``; its step count (``stop`` says which rule ended it) is then every arm's and seed's. ``k > 0``
    reads it from the ``lm_seed0`` result of this call or of the resumed file."""
    p, device, seed = ctx.profile, _device(ctx), ctx.seed + k
    data, kw = _text(ctx), _lm_kwargs(p, seed + 1, device, ctx.log)
    if p["flat_window"] % p["eval_every"]:
        raise ParameterError("flat_window", p["flat_window"], f"a multiple of eval_every={p['eval_every']}")
    cfg = _config(p["lm_model"], p["seq_len"])
    models = same_start(cfg, seed, {m: {"methods": m} for m in RULES}, device)
    runs = {}
    if k == 0:
        runs["linear"] = train_lm(models["linear"], data, steps=p["max_steps"], max_seconds=p["pilot_seconds"],
                                  flat=(p["flat_window"] // p["eval_every"], p["flat_fraction"]), tag="pilot: linear, seed 0", **kw)
        steps, stop = runs["linear"]["steps"], runs["linear"]["stop"]
    elif "lm_seed0" in ctx.results:
        steps, stop = ctx.results["lm_seed0"]["steps"], ctx.results["lm_seed0"]["stop"]
    else:
        raise RuntimeError("lm_seed0 (the pilot that sets the step count) has no result: run it first, or --resume "
                           "a file that holds it")
    for mode in RULES:
        if mode not in runs:
            runs[mode] = train_lm(models[mode], data, steps=steps, tag=f"{mode}, seed {seed}", **kw)
    probe = _probe(data[1], p["seq_len"], device)
    out = {"seed": seed, "steps": steps, "stop": stop, "config": cfg.as_dict(), "parameters": n_parameters(models["linear"]),
           "tokens": steps * p["batch"] * p["seq_len"], "text_bytes": {"train": len(data[0]), "val": len(data[1])}}
    for mode in RULES:
        out[mode] = _summary(runs[mode], models[mode], probe, device, precisions=mode == "feature")
        ctx.log(f"[lm seed {seed}] {mode}: {steps} steps, val loss {out[mode]['val_loss']}")
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
    """Step time of both rules on ``timing_model`` (batch ``timing_batch`` x ``timing_seq_len``) and the overhead
    in percent. The models are built from the seed once per call (a step's time does not depend on the weights'
    values) and shared by both step-time stages."""
    p, device = ctx.profile, _device(ctx)
    if "timing_models" not in ctx.shared:
        ctx.shared["timing_models"] = same_start(_config(p["timing_model"], p["timing_seq_len"]), ctx.seed,
                                          {m: {"methods": m} for m in RULES}, device)
    train, _ = _text(ctx)
    t = {m: round(step_time_ms(ctx.shared["timing_models"][m], train, batch=p["timing_batch"], seq_len=p["timing_seq_len"],
                               device=device, backend=backend), 3) for m in RULES}
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


def bf16_seed(k: int, ctx) -> dict:
    """Seed ``seed + k``: Orthogonal-F on ``lm_model`` with a ``bf16_stream`` residual stream, the projection
    coefficient in fp32 (``"float32"``) or in the stream's dtype (``"input"``: the official code's cast), from the
    same weights and batches for ``bf16_steps`` steps each: curves, spikes, validation loss, the largest parallel
    residue, and ``loss_diff_max``, the largest per-step training-loss difference of the two arms (0 would mean
    both computed the same thing).

    The stream must be bf16 for the comparison to mean anything: under autocast alone it stays fp32 and
    ``coef_dtype="input"`` is an fp32 coefficient too."""
    p, device, seed = ctx.profile, _device(ctx), ctx.seed + k
    stream = check_choice("bf16_stream", p["bf16_stream"], STREAM_DTYPES)
    data, cfg = _text(ctx), _config(p["lm_model"], p["seq_len"])
    probe = _probe(data[1], p["seq_len"], device)
    arms = same_start(cfg, seed, {c: {"methods": "feature", "coef_dtype": c, "stream_dtype": stream} for c in COEF_ARMS},
                      device)
    out, losses = {"seed": seed, "stream_dtype": stream, "steps": p["bf16_steps"]}, {}
    for coef, model in arms.items():
        h = train_lm(model, data, steps=p["bf16_steps"], tag=f"coef {coef}, seed {seed}",
                     **_lm_kwargs(p, seed + 1, device, ctx.log))
        losses[coef] = h["loss"]
        out[coef] = {**_summary(h, model, probe, device, precisions=False),
                     "cos_perp_max": _arm_cosine(model, probe, device, coef)}
        ctx.log(f"[bf16 seed {seed}] coefficient {coef}: val loss {out[coef]['val_loss']}")
    out["loss_diff_max"] = float(np.max(np.abs(np.subtract(*losses.values()))))
    return out


def vit_digits(ctx) -> dict:
    """Linear vs Orthogonal-F on the pre-LN :class:`~companion.ortho_residual.models.TinyViT` (``vit``: sizes and
    steps), digits upsampled to ``vit["image_size"]`` pixels, one split (``seed``), seeds ``seed, seed + 1, ...``
    up to ``vit["seeds"]``, the same initial weights and batch order for both rules within a seed: test accuracy
    and loss per seed. Another seed starts only while ``ctx.left()`` covers the last one's time."""
    v, device = ctx.profile["vit"], _device(ctx)
    data = digits_data(seed=ctx.seed, image_size=v["image_size"])
    runs, last = {m: [] for m in RULES}, 0.0
    for seed in range(ctx.seed, ctx.seed + v["seeds"]):
        if runs["linear"] and ctx.left() < last:
            ctx.log(f"[vit] seeds from {seed} left out: {ctx.left():.0f} s left, a seed takes {last:.0f} s")
            break
        t0 = time.perf_counter()
        for mode in RULES:
            r = train_vit(mode, data, steps=v["steps"], batch=v["batch"], lr=v["lr"], d=v["d"], depth=v["depth"],
                          heads=v["heads"], image_size=v["image_size"], patch=v["patch"], seed=seed, snapshots=1,
                          device=device)
            curve_steps, curve_loss = _thin(r["loss"])
            runs[mode].append({"seed": seed, "test_acc": round(r["test_acc"], 5), "test_loss": round(r["test_loss"], 4),
                               "curve_steps": curve_steps, "curve_loss": curve_loss, "seconds": round(r["seconds"], 1)})
            ctx.log(f"[vit seed {seed}] {mode}: test accuracy {r['test_acc']:.4f}")
        last = time.perf_counter() - t0
    return {"n_train": len(data["y_train"]), "n_test": len(data["y_test"]), "runs": runs}

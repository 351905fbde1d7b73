"""The stage bodies of paper 08's one-GPU study (:mod:`companion.dartquant.scale`).

Each stage body takes a :class:`companion.core.stages.StageContext` and returns the stage's JSON-able result:

* :func:`run_step_cost`: one Whip step (rotation, Eq. 4's loss, backward, SGD update) with QR-Orth (Alg. 1) and
  with the Cayley parametrisation, the peer measured first: median time and peak memory at each width;
* :func:`outlier_stage` (one stage per seed, :func:`outlier_study`): a byte-level LLaMA-layout model trained
  from scratch on the standard library's source, massive channels put in by two function-preserving transforms
  (:mod:`companion.dartquant.outliers`: in the norm gains, which fusing the norms undoes, and in the residual
  stream by a change of basis, which it does not), then W4A4KV4 perplexity with no rotation, fused norms only,
  and, on the residual-stream model, no rotation, QuaRot, DartQuant and end-to-end R1 training, and the
  calibration cost of DartQuant against the end-to-end training;
* :func:`run_cost`: the same two calibrations at a second width.

:func:`step_cost` also times the notebook's CPU row. The Triton kernel's study is
:mod:`companion.dartquant.scale_kernel` (bodies in :mod:`companion.dartquant.kernel_bench`).
"""

from __future__ import annotations

import copy
import time

import numpy as np
import torch

from companion.core import time_ms


def _device(ctx) -> torch.device:
    device = torch.device(ctx.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 rotations stay fp32
    return device


# ------------------------------------------------------------------------------------------ step cost

def _peak_reset(device):
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    return time.perf_counter()


def _peak_mib(device, base: int = 0) -> float:
    if device.type != "cuda":
        return float("nan")
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2 ** 20


def step_cost(n: int, tokens: int, device, log) -> dict:
    """Time and peak memory of one Whip step with QR-Orth and with the Cayley parametrisation at width n: the
    median of ``do_bench`` on a GPU, elsewhere the median process time of 5 steps (wall-clock medians at n = 256
    on a loaded 2-core machine moved the Cayley/QR-Orth ratio from 1.6 to anywhere in 0.75-3.4)."""
    from companion.dartquant.hadamard import random_hadamard
    from companion.dartquant.qr_orth import _Rotator
    from companion.dartquant.whip import whip_loss

    x = torch.randn(tokens, n, device=device)
    row = {"n": n, "tokens": tokens}
    for method, key in (("cayley", "cayley"), ("qr_orth", "qr")):  # the peer first
        rot = _Rotator(method, random_hadamard(n, 0).to(device)).to(device)
        opt = torch.optim.SGD(rot.parameters(), lr=1e-3, momentum=0.9)

        def step():
            whip_loss(x @ rot()).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        step()
        base = torch.cuda.memory_allocated() if device.type == "cuda" else 0
        _peak_reset(device)
        step()
        row[f"{key}_mib"] = round(_peak_mib(device, base), 1)
        row[f"{key}_ms"] = round(time_ms(step, device, warmup=50, rep=300, cpu_clock="process"), 3)
        del rot, opt
    log(f"[step cost] {row}")
    return row


def run_step_cost(ctx) -> dict:
    """Stage ``step_cost``: :func:`step_cost` at each width of ``step_cost_n`` (fp32, ``step_cost_tokens``
    tokens a step). Paper: (4/3)n³ for QR-Orth against ≈6n³ for Cayley SGD, ≈1.4× per iteration."""
    device, P = _device(ctx), ctx.profile
    return {"rows": [step_cost(n, P["step_cost_tokens"], device, ctx.log) for n in P["step_cost_n"]],
            "tokens": P["step_cost_tokens"]}


# ------------------------------------------------------------------------------------------ the models

def docstring_bytes() -> torch.Tensor:
    """The standard library's English docstrings as one byte tensor (the cross set)."""
    from companion.models import stdlib_texts

    return torch.frombuffer(bytearray("\n\n".join(stdlib_texts()).encode()), dtype=torch.uint8).long()


def windows(data: torch.Tensor, n: int, seq_len: int, seed: int) -> torch.Tensor:
    """``n`` windows of ``seq_len`` bytes at seeded random starts."""
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(data) - seq_len - 1, (n,), generator=g)
    return data[starts[:, None] + torch.arange(seq_len)[None]]


def train(model, data, *, seconds, batch, seq_len, lr, device, log, seed=0) -> dict:
    """AdamW (β 0.9/0.95, weight decay 0.1, 50 warm-up steps, bf16 autocast on a GPU) on next-byte loss for
    ``seconds`` (batches drawn by ``seed``); the loss every 50 steps."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    g = torch.Generator().manual_seed(1 + seed)
    amp = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")
    model.train()
    t0, step, losses = time.perf_counter(), 0, []
    while time.perf_counter() - t0 < seconds:
        ids = windows(data, batch, seq_len + 1, int(torch.randint(0, 2 ** 31, (1,), generator=g))).to(device)
        for group in opt.param_groups:
            group["lr"] = lr * min(1.0, (step + 1) / 50)
        with amp:
            out = model(input_ids=ids[:, :-1], labels=ids[:, :-1])
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 50 == 0:
            losses.append(float(out.loss.detach()))
        step += 1
        if step % 200 == 0:
            log(f"  step {step} loss {out.loss.item():.3f}")
    model.eval()
    return {"steps": step, "seconds": round(time.perf_counter() - t0, 1), "loss": losses}


def _ppl_sets(model, sets, *, w_bits=None, a_bits=None, kv_bits=None, r3=False):
    from companion.dartquant.rotation import perplexity, quantize_weights, quantized_activations

    m = model
    if w_bits is not None:
        m = quantize_weights(copy.deepcopy(model), w_bits, "rtn")
    with quantized_activations(m, a_bits, kv_bits, r3=r3):
        return {k: round(perplexity(m, v, batch=8), 4) for k, v in sets.items()}


def rotated_params(model, r1: torch.Tensor) -> dict:
    """The model's parameters with R1 applied, as differentiable tensors (for :func:`torch.func.functional_call`)."""
    from companion.dartquant.rotation import llama_parts

    p = llama_parts(model)
    out = {}
    names = {id(mod): n for n, mod in model.named_modules()}
    out[names[id(p.embed)] + ".weight"] = p.embed.weight @ r1
    out[names[id(p.lm_head)] + ".weight"] = p.lm_head.weight @ r1
    for layer in p.layers:
        for lin in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj, layer.mlp.gate_proj, layer.mlp.up_proj):
            out[names[id(lin)] + ".weight"] = lin.weight @ r1
        for lin in (layer.self_attn.o_proj, layer.mlp.down_proj):
            out[names[id(lin)] + ".weight"] = r1.T @ lin.weight
    return out


def end_to_end_r1(model, calib_ids, *, steps, lr, batch, a_bits, kv_bits, device, seed=0):
    """SpinQuant-style: R1 = B·Cayley(A) (torch's orthogonal parametrisation, B the random Hadamard start),
    Adam on A with the learning rate decayed linearly to 0 (SpinQuant's schedule), next-token loss of the
    W16A{a}KV{kv} model (straight-through rounding). The model is frozen. Returns R1, the loss of every step
    and the loss on a fixed batch (the first ``batch`` calibration windows) before and after the training,
    which says whether the training lowered its objective free of the batch-to-batch noise of the curve."""
    from companion.dartquant.hadamard import random_hadamard
    from companion.dartquant.rotation import quantized_activations

    d = model.config.hidden_size
    holder = torch.nn.Module()
    holder.weight = torch.nn.Parameter(random_hadamard(d, seed).to(device))
    torch.nn.utils.parametrizations.orthogonal(holder, "weight", orthogonal_map="cayley")
    with torch.no_grad():
        holder.weight = random_hadamard(d, seed).to(device)
    for p in model.parameters():
        p.requires_grad_(False)
    opt = torch.optim.Adam(holder.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    losses = []
    amp = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")
    probe = calib_ids[:batch].to(device)

    def loss_of(ids):
        with amp:
            return torch.func.functional_call(model, rotated_params(model, holder.weight), (),
                                              {"input_ids": ids, "labels": ids}).loss

    with quantized_activations(model, a_bits, kv_bits, r3=True, ste=True):
        with torch.no_grad():
            before = float(loss_of(probe))
        for step in range(steps):
            for group in opt.param_groups:
                group["lr"] = lr * (1 - step / steps)
            loss = loss_of(calib_ids[torch.randint(0, calib_ids.shape[0], (batch,), generator=g)].to(device))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(round(float(loss.detach()), 5))
        with torch.no_grad():
            after = float(loss_of(probe))
    for p in model.parameters():
        p.requires_grad_(True)
    return holder.weight.detach().float(), losses, (before, after)


def dartquant_calibrate(model, calib_ids, P, device, seed=0):
    """Collect the R1/R2 sites in memory and learn R1 (pooled) and each layer's R2 with Whip + QR-Orth."""
    from companion.dartquant.activations import collect_calibration
    from companion.dartquant.qr_orth import calibrate

    data = collect_calibration(model, calib_ids.to(device), tokens_per_sample=P["calib_tokens_per_sample"], seed=seed)
    x1 = data["r1"].reshape(-1, data["r1"].shape[-1])
    c1 = calibrate(x1, steps=P["r1_steps"], lr=P["rot_lr"], batch=P["rot_batch"], seed=seed)
    cfg = model.config
    r2, r2_loss = [], []
    for xl in data["r2"]:
        c2 = calibrate(xl.reshape(-1, xl.shape[-1]), steps=P["r2_steps"], lr=P["rot_lr"], batch=P["rot_batch"],
                       heads=cfg.num_attention_heads, kv_heads=cfg.num_key_value_heads, seed=seed)
        r2.append(c2.rotation)
        r2_loss.append((c2.losses[0], float(np.mean(c2.losses[-10:]))))
    return c1.rotation, r2, {"r1_loss": (c1.losses[0], float(np.mean(c1.losses[-10:]))), "r2_loss": r2_loss,
                             "r1_tokens": int(x1.shape[0])}


def _hadamard_r2(cfg, seed: int) -> list[torch.Tensor]:
    """QuaRot's R2: a random Hadamard per layer, one copy per K/V head."""
    from companion.dartquant.hadamard import random_hadamard

    hd = cfg.hidden_size // cfg.num_attention_heads
    return [random_hadamard(hd, seed + 1 + i).unsqueeze(0).repeat(cfg.num_key_value_heads, 1, 1)
            for i in range(cfg.num_hidden_layers)]




def _text(ctx) -> dict:
    """The training text, the evaluation sets (held-out source files, English docstrings) and their sizes,
    read once per call and kept in ``ctx.shared``."""
    if "text" not in ctx.shared:
        from companion.models.texts import stdlib_source_bytes

        P = ctx.profile
        train_data, val_data = stdlib_source_bytes(P["text_bytes"])
        ctx.shared["text"] = {"train": train_data, "sets": {"source": windows(val_data, P["eval_samples"], P["seq_len"], 11),
                                                            "docstrings": windows(docstring_bytes(), P["eval_samples"],
                                                                                  P["seq_len"], 12)}}
    return ctx.shared["text"]


def trained_model(spec: dict, P: dict, train_data, seed: int, device, log):
    """A byte-level LLaMA-layout model (GQA) of ``spec`` built with ``seed`` and trained for its ``train_seconds``
    (:func:`train`), in fp32 and eval mode; and its training record."""
    from companion.models import tiny_llama

    log(f"[model] {spec['name']}, seed {seed}")
    model = tiny_llama(vocab_size=256, hidden_size=spec["hidden"], num_layers=spec["layers"], num_heads=spec["heads"],
                       num_kv_heads=spec["kv_heads"], intermediate_size=spec["ffn"], max_position=P["seq_len"] + 1,
                       seed=seed).to(device)
    tr = train(model, train_data, seconds=spec["train_seconds"], batch=P["batch"], seq_len=P["seq_len"], lr=P["lr"],
               device=device, log=log, seed=seed)
    return model.float(), {"name": spec["name"], **spec, "parameters": sum(p.numel() for p in model.parameters()),
                           "train_seconds": tr["seconds"], "train_steps": tr["steps"], "train_loss": tr["loss"]}


def calibration_costs(model, calib_ids, P: dict, device, seed: int) -> tuple[dict, tuple]:
    """Wall time and peak memory (above the resident model) of the DartQuant calibration (R1 + R2, Whip +
    QR-Orth, :func:`dartquant_calibrate`) and of the end-to-end R1 training (:func:`end_to_end_r1`, the
    ``e2e_*`` recipe) of one norm-fused ``model``, with the end-to-end loss curve and its relative drop on a fixed
    batch (``e2e_loss_drop``, > 0 when the training lowered its loss); and the rotations
    ``(r1, r2, r1_e2e)``. The model is not changed."""
    from companion.dartquant.rotation import rotate_model

    b = P["bits"]
    t0 = _peak_reset(device)
    base = torch.cuda.memory_allocated() if device.type == "cuda" else 0
    r1, r2, info = dartquant_calibrate(model, calib_ids, P, device, seed)
    dq_s, dq_mib = time.perf_counter() - t0, _peak_mib(device, base)
    e2e_model = rotate_model(copy.deepcopy(model), None, _hadamard_r2(model.config, seed), r4=True)
    t0 = _peak_reset(device)
    base = torch.cuda.memory_allocated() if device.type == "cuda" else 0
    r1_e2e, losses, (before, after) = end_to_end_r1(e2e_model, calib_ids, steps=P["e2e_steps"], lr=P["e2e_lr"],
                                                    batch=P["e2e_batch"], a_bits=b["a"], kv_bits=b["kv"], device=device,
                                                    seed=seed)
    e2e_s, e2e_mib = time.perf_counter() - t0, _peak_mib(device, base)
    del e2e_model
    cost = {"dartquant_s": round(dq_s, 2), "dartquant_mib": round(dq_mib, 1), "e2e_s": round(e2e_s, 2),
            "e2e_mib": round(e2e_mib, 1), "e2e_loss": losses, "e2e_fixed_loss": [round(before, 5), round(after, 5)],
            "e2e_loss_drop": round(1 - after / before, 5), **info}
    return cost, (r1, r2, r1_e2e)


def outlier_study(ctx, seed: int) -> dict:
    """One seed of the massive-channel study: a model of ``outlier_model`` built and trained with ``seed``;
    ``outlier_channels`` channels drawn with ``seed`` (:func:`~companion.dartquant.outliers.pick_channels`);
    then FP perplexity, and W4A4KV4 perplexity (RTN weights, group 128, MSE clip; per-token asymmetric
    activations, clip 0.9; K/V per head) of

    * ``none``: each ``outlier_scales`` s injected into the norm gains
      (:func:`~companion.dartquant.outliers.inject_massive_channels`), norms not fused, no rotation (s = 1: the
      model as trained), with the injected model's largest |Δ logit| in fp32 against the trained one, its
      channel peak ratio, and how far its fused weights are from the trained model's (folding the gains cancels
      this injection, so a rotation method never sees it);
    * ``fused``: norms fused, no rotation;

    and, on the fused model with the residual stream's top directions put into those channels
    (:func:`~companion.dartquant.outliers.inject_stream_channels`, the directions taken on the calibration
    windows; its |Δ logit| and the channel RMS ratio before and after are recorded under ``stream``), the
    arms under ``ppl["stream"]``:

    * ``none``: no rotation;
    * ``quarot``: random Hadamard R1 and R2 (seeded), online R3/R4;
    * ``dartquant``: Whip + QR-Orth R1 (q/up inputs pooled) and per-layer R2 (o_proj inputs) on calibration
      windows drawn with ``seed``, R3/R4 Hadamard;
    * ``end-to-end``: R1 trained through the W16A4KV4 model (:func:`end_to_end_r1`), R2/R3/R4 Hadamard;

    and the two calibrations' wall time, peak memory and the end-to-end loss curve on that model
    (:func:`calibration_costs`)."""
    from companion.dartquant.hadamard import random_hadamard
    from companion.dartquant.outliers import (channel_peak_ratio, channel_rms_ratio, inject_massive_channels,
                                              inject_stream_channels, pick_channels)
    from companion.dartquant.rotation import fuse_norms, rotate_model

    P, device, log = ctx.profile, _device(ctx), ctx.log
    text = _text(ctx)
    sets, b = text["sets"], P["bits"]
    q = dict(w_bits=b["w"], a_bits=b["a"], kv_bits=b["kv"])
    model, entry = trained_model(P["outlier_model"], P, text["train"], seed, device, log)
    calib_ids = windows(text["train"], P["calib_samples"], P["seq_len"], 13 + 1000 * seed)
    channels = pick_channels(model.config.hidden_size, P["outlier_channels"], seed)
    probe = sets["source"][: min(8, len(sets["source"]))].to(device)
    entry.update(seed=seed, channels=channels)
    ppl = {"fp32": _ppl_sets(model, sets), "none": {}}
    fused = fuse_norms(copy.deepcopy(model))
    with torch.no_grad():
        ref = model(input_ids=probe).logits
        entry["injected"] = {}
        for s in P["outlier_scales"]:
            inj = inject_massive_channels(copy.deepcopy(model), channels, s)
            row = {"logit_diff": float((inj(input_ids=probe).logits - ref).abs().max()),
                   "peak_ratio": round(channel_peak_ratio(inj, probe), 3)}
            ppl["none"][str(s)] = _ppl_sets(inj, sets, **q)
            fuse_norms(inj)
            row["fused_weight_diff"] = max(float((a - c).abs().max() / c.abs().max().clamp_min(1e-30))
                                           for a, c in zip(inj.parameters(), fused.parameters()))
            entry["injected"][str(s)] = row
            log(f"  s={s}: none {ppl['none'][str(s)]}, {row}")
            del inj
    del model
    ppl["fused"] = _ppl_sets(fused, sets, **q)
    rms_fused = channel_rms_ratio(fused, probe)
    stream, _ = inject_stream_channels(fused, channels, calib_ids)  # in place: the fused model is not needed again
    with torch.no_grad():
        entry["stream"] = {"logit_diff": float((stream(input_ids=probe).logits - ref).abs().max()),
                           "rms_ratio_fused": round(rms_fused, 3), "rms_ratio": round(channel_rms_ratio(stream, probe), 3)}
    log(f"  residual-stream channels: {entry['stream']}")
    arms = {"none": _ppl_sets(stream, sets, **q)}
    cfg = stream.config
    quarot = rotate_model(copy.deepcopy(stream), random_hadamard(cfg.hidden_size, seed), _hadamard_r2(cfg, seed), r4=True)
    arms["quarot"] = _ppl_sets(quarot, sets, r3=True, **q)
    del quarot
    cost, (r1, r2, r1_e2e) = calibration_costs(stream, calib_ids, P, device, seed)
    dq = rotate_model(copy.deepcopy(stream), r1, r2, r4=True)
    arms["dartquant"] = _ppl_sets(dq, sets, r3=True, **q)
    del dq
    e2e = rotate_model(copy.deepcopy(stream), r1_e2e, _hadamard_r2(cfg, seed), r4=True)
    arms["end-to-end"] = _ppl_sets(e2e, sets, r3=True, **q)
    del e2e, stream, fused
    ppl["stream"] = arms
    entry.update(ppl=ppl, cost=cost)
    log(f"  fp32 {ppl['fp32']}, fused {ppl['fused']}; residual-stream channels: " + ", ".join(f"{k} {v}" for k, v in arms.items())
        + f"; DartQuant {cost['dartquant_s']} s vs end-to-end {cost['e2e_s']} s (loss drop {cost['e2e_loss_drop']})")
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return entry


def outlier_stage(offset: int):
    """The body of stage ``outliers_seed<offset>``: :func:`outlier_study` at the profile's seed + ``offset``."""
    def run(ctx):
        return outlier_study(ctx, ctx.seed + offset)

    run.__name__ = f"run_outliers_seed{offset}"
    run.__doc__ = f"Stage ``outliers_seed{offset}``: :func:`outlier_study` at seed = the profile's seed + {offset}."
    return run


def run_cost(ctx) -> list[dict]:
    """Stage ``cost``: for each model of ``cost_models`` (the second width; the first is every seed of the
    outlier stages), trained with the profile's seed, norms fused, the DartQuant calibration and the
    end-to-end R1 training with the same recipe as the outlier stages (:func:`calibration_costs`): wall time,
    peak memory, the end-to-end loss curve."""
    from companion.dartquant.rotation import fuse_norms

    P, device = ctx.profile, _device(ctx)
    text = _text(ctx)
    out = []
    for spec in P["cost_models"]:
        model, entry = trained_model(spec, P, text["train"], ctx.seed, device, ctx.log)
        fuse_norms(model)
        calib_ids = windows(text["train"], P["calib_samples"], P["seq_len"], 13 + 1000 * ctx.seed)
        entry["cost"], _ = calibration_costs(model, calib_ids, P, device, ctx.seed)
        ctx.log(f"  cost {spec['name']}: {({k: v for k, v in entry['cost'].items() if k != 'e2e_loss'})}")
        out.append(entry)
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return out

"""The one-GPU (H200) run of paper 10 and the reader of its committed results. No plotly import.

:func:`run_scale_up` (used by ``benchmarks/ortho_residual_gpu.py``):

1. **Training**: the LLaMA-shaped decoder in SmolLM-135M's shape (30 layers, d 576, 9 heads, 3 KV heads,
   FFN 1536) with a **byte vocabulary** (local text has no SmolLM tokenizer; 106M parameters instead of
   135M), linear vs Orthogonal-F, same seed, same initial weights, same batches, bf16 autocast, AdamW,
   for ``train_seconds`` each. Text: the Python standard library's own source files (local, tens of MB),
   split by file into train and validation. Loss curves, validation loss, per-layer ``||x||``, rho_par,
   |cos(x, f)| and |cos(x, update)| at the end.
2. **Step-time overhead** of the projection: one training step (forward, backward, AdamW) of each model,
   eager and under ``torch.compile``, timed with :func:`companion.core.time_ms` (``do_bench`` median).
3. **bf16 study**: on the trained orthogonal model, |cos(x, f_perp)| per layer when the projection runs
   in fp64, fp32, bf16 (the official coefficient cast) and bf16 with an fp32 coefficient; and
   (:func:`bf16_coef_study`) short training runs with the official bf16 coefficient
   (``coef_dtype="input"``) against the fp32 one, from the same start and batches, for
   ``bf16_coef_seeds`` seeds: loss curves and loss spikes (a step's loss above 1.5x the median of the
   previous 50). The decoder's residual stream is **bf16** there (``stream_dtype="bfloat16"``): under
   autocast alone the stream stays fp32 and ``coef_dtype="input"`` is an fp32 coefficient too, so the two
   arms would compute the same thing (the study recorded before this fix did exactly that).
   ``run_bf16_study`` reruns this stage alone into an existing payload
   (``benchmarks/ortho_residual_gpu.py --only bf16``).

The paper trains ViTs and ResNets on images; the LLaMA variant is the repository's OrthoLlama preset, for
which no result is published. "About 8 minutes each" in the issue is cut to what one lease allows.
"""

from __future__ import annotations

import math
import sysconfig
import time
from pathlib import Path

import numpy as np
import torch

from companion.core import recorded_results, time_ms
from companion.ortho_residual.experiments import perp_cosine
from companion.ortho_residual.models import SMOLLM_135M, LlamaConfig, LlamaDecoder, byte_config, n_parameters, recording

RESULTS_NAME = "ortho_residual_gpu"
GPU_PROFILE = {
    "model": "SmolLM-135M shape, byte vocabulary (30 layers, d=576, 9 heads, 3 KV heads, FFN 1536)",
    "seq_len": 512,
    "batch": 32,
    "lr": 1e-3,
    "train_seconds_each": 60,
    "bf16_coef_seconds": 20,
    "bf16_coef_seeds": 3,
    "bf16_stream": "bfloat16",
    "precision": "bf16 autocast, fp32 master weights",
    "text": "Python standard-library source files (local)",
}


def recorded() -> dict | None:
    """The committed results of ``benchmarks/ortho_residual_gpu.py`` (None when not recorded yet)."""
    return recorded_results(RESULTS_NAME)


def local_text(max_bytes: int = 24_000_000, val_fraction: float = 0.05) -> tuple[torch.Tensor, torch.Tensor]:
    """Bytes of the standard library's ``.py`` files (sorted, deterministic), split by file."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts and "test" not in p.parts)
    chunks, total = [], 0
    for p in files:
        try:
            b = p.read_bytes()
        except OSError:
            continue
        chunks.append(b)
        total += len(b)
        if total >= max_bytes:
            break
    n_val = max(1, int(len(chunks) * val_fraction))
    idx = np.random.default_rng(0).permutation(len(chunks))
    val = b"\n".join(chunks[i] for i in idx[:n_val])
    train = b"\n".join(chunks[i] for i in idx[n_val:])
    return torch.frombuffer(bytearray(train), dtype=torch.uint8).long(), torch.frombuffer(bytearray(val), dtype=torch.uint8).long()


def _batch(data, batch, seq_len, gen, device):
    starts = torch.randint(0, len(data) - seq_len - 1, (batch,), generator=gen)
    idx = starts[:, None] + torch.arange(seq_len + 1)[None]
    return data[idx].to(device, non_blocking=True)


def _lr(step, lr, warmup=100):
    return lr * min(1.0, (step + 1) / warmup)


def _spikes(losses, factor=1.5, window=50) -> int:
    n = 0
    for i in range(window, len(losses)):
        if losses[i] > factor * float(np.median(losses[i - window:i])):
            n += 1
    return n


def train_timed(model, data, *, seconds, batch, seq_len, lr, seed, device, max_steps=10**9, log=print, tag=""):
    """AdamW on bf16 autocast (CUDA) for ``seconds`` or ``max_steps``; the batch order is set by ``seed``."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1, fused=device.type == "cuda")
    gen = torch.Generator().manual_seed(seed)
    losses, t0, step = [], time.perf_counter(), 0
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast("cpu", enabled=False)
    while step < max_steps and time.perf_counter() - t0 < seconds:
        ids = _batch(data, batch, seq_len, gen, device)
        for g in opt.param_groups:
            g["lr"] = _lr(step, lr)
        with amp:
            loss = model.loss(ids)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.detach())
        step += 1
        if step % 200 == 0:
            log(f"[{tag}] step {step} loss {losses[-1].item():.3f} ({time.perf_counter() - t0:.0f} s)")
    losses = [x.item() for x in losses]
    return {"steps": step, "seconds": time.perf_counter() - t0, "loss": losses}


@torch.no_grad()
def evaluate(model, val, *, batch, seq_len, device, n_batches=8) -> float:
    gen = torch.Generator().manual_seed(999)
    model.eval()
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast("cpu", enabled=False)
    with amp:
        out = float(np.mean([model.loss(_batch(val, batch, seq_len, gen, device)).item() for _ in range(n_batches)]))
    model.train()
    return out


@torch.no_grad()
def layer_stats(model, ids, device, precisions=False) -> list[dict]:
    model.eval()
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast("cpu", enabled=False)
    with recording(model, keep_inputs=precisions) as conns, amp:
        model(ids)
    model.train()
    rows = []
    for i, c in enumerate(conns):
        s = c.stats[0]
        row = {"layer": i // 2, "add": ("attn", "mlp")[i % 2], **{k: round(float(s[k]), 8) for k in
               ("x_norm", "rho_par", "rho_ortho", "abs_cos_x_out", "cos_x_update", "growth_min", "shrink_share")}}
        if precisions:
            x, f = c.inputs[0]
            for p in ("fp64", "fp32", "bf16", "bf16_fp32coef"):
                row[f"cos_{p}"] = perp_cosine(x.float(), f.float(), precision=p)
        rows.append(row)
    return rows


def step_time_ms(model, data, *, batch, seq_len, device, compiled=False) -> float:
    """Median ms of one training step (forward, backward, AdamW step) under bf16 autocast."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device.type == "cuda")
    fwd = torch.compile(model.loss) if compiled else model.loss
    gen = torch.Generator().manual_seed(3)
    ids = _batch(data, batch, seq_len, gen, device)
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast("cpu", enabled=False)

    def step():
        with amp:
            loss = fwd(ids)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):  # compile / warm up outside the timing
        step()
    return time_ms(step, device, warmup=50, rep=300)


def _round(xs, k=4):
    return [round(float(x), k) for x in xs]


def _thin(xs, n=400):
    if len(xs) <= n:
        return list(range(len(xs))), _round(xs)
    idx = np.linspace(0, len(xs) - 1, n).round().astype(int)
    return idx.tolist(), _round([xs[i] for i in idx])


def _arm_cosine(model, probe, device, coef: str) -> float:
    """The largest (over adds) mean |cos(x, f_perp)| of the model's recorded bf16 (x, f), with f_perp computed
    as this arm computes it: the bf16 coefficient (``"input"``) or an fp32 one (``"float32"``)."""
    key = "cos_bf16" if coef == "input" else "cos_bf16_fp32coef"
    return float(max(r[key]["mean"] for r in layer_stats(model, probe, device, precisions=True)))


def bf16_coef_study(cfg, train, val, *, seconds, seeds, batch, seq_len, lr, device, log=print,
                    left=lambda: math.inf, max_steps: int | None = None) -> dict:
    """Orthogonal-F decoders with a bf16 residual stream, the coefficient in fp32 (``"float32"``) or in the
    stream's dtype (``"input"``, the official code), per seed from the same initial weights and batches.
    The fp32 arm trains for ``seconds``; the bf16 arm for the same number of steps. Seeds that no longer
    fit in ``left()`` are left out (the payload lists the seeds run). ``max_steps`` caps the fp32 arm too."""
    probe = _batch(val, 8, seq_len, torch.Generator().manual_seed(5), device)[:, :-1]
    runs = {"float32": [], "input": []}
    done = []
    for seed in seeds:
        if done and left() < 2 * seconds + 30:
            log(f"[bf16] seed {seed} skipped: time budget")
            break
        torch.manual_seed(seed)
        init = LlamaDecoder(cfg, methods="feature").state_dict()
        steps_cap = max_steps
        for coef in ("float32", "input"):
            model = LlamaDecoder(cfg, methods="feature", coef_dtype=coef, stream_dtype=GPU_PROFILE["bf16_stream"])
            model.load_state_dict(init)
            model.to(device)
            h = train_timed(model, train, seconds=seconds if coef == "float32" else math.inf, batch=batch,
                            seq_len=seq_len, lr=lr, seed=seed + 1, device=device, max_steps=steps_cap or 10**9, log=log,
                            tag=f"coef {coef}, seed {seed}")
            steps_cap = h["steps"]  # the bf16 arm runs exactly the fp32 arm's steps
            s_, l_ = _thin(h["loss"])
            runs[coef].append({"seed": seed, "steps": h["steps"], "curve_steps": s_, "curve_loss": l_,
                               "spikes": _spikes(h["loss"]), "final_train_loss": round(float(np.mean(h["loss"][-20:])), 4),
                               "val_loss": round(evaluate(model, val, batch=batch, seq_len=seq_len, device=device), 4),
                               "cos_perp_max": _arm_cosine(model, probe, device, coef)})
            log(f"[bf16] seed {seed}, coefficient {coef}: val loss {runs[coef][-1]['val_loss']}")
            del model
        done.append(seed)
    return {"stream_dtype": GPU_PROFILE["bf16_stream"], "seeds": done, "seconds_each": seconds, "runs": runs}


def _setup(smoke, train_seconds=None, bf16_seconds=None, bf16_seeds=None):
    P = dict(GPU_PROFILE)
    if smoke:
        cfg = LlamaConfig(vocab=256, d=48, n_layers=2, n_heads=3, n_kv_heads=1, ffn=96, max_len=65)
        P.update(seq_len=64, batch=4, train_seconds_each=2, bf16_coef_seconds=1, bf16_coef_seeds=2, model="smoke: 2 layers, d=48")
        train, val = local_text(max_bytes=400_000)
    else:
        cfg = byte_config(SMOLLM_135M, max_len=GPU_PROFILE["seq_len"] + 1)
        train, val = local_text()
    for key, value in (("train_seconds_each", train_seconds), ("bf16_coef_seconds", bf16_seconds),
                       ("bf16_coef_seeds", bf16_seeds)):
        if value is not None:
            P[key] = value
    return P, cfg, train, val


def _device(device, smoke):
    device = torch.device(device or ("cuda" if torch.cuda.is_available() and not smoke else "cpu"))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return device


def run_bf16_study(payload: dict, *, smoke=False, bf16_seconds=None, bf16_seeds=None, seed=0, device=None,
                   deadline_s=None, command="", log=print, save=None) -> dict:
    """Rerun the bf16-coefficient study alone into ``payload`` (a recorded run's results, whose other
    stages are kept as they are); the study carries its own device, date and command."""
    from companion.core.results import _environment

    t_start = time.perf_counter()
    device = _device(device, smoke)
    P, cfg, train, val = _setup(smoke, bf16_seconds=bf16_seconds, bf16_seeds=bf16_seeds)
    left = (lambda: deadline_s - (time.perf_counter() - t_start)) if deadline_s else (lambda: math.inf)
    payload = {k: v for k, v in payload.items() if k != "name"}
    payload.setdefault("profile", {}).update(bf16_coef_seconds=P["bf16_coef_seconds"], bf16_coef_seeds=P["bf16_coef_seeds"],
                                             bf16_stream=P["bf16_stream"])
    study = bf16_coef_study(cfg, train, val, seconds=P["bf16_coef_seconds"], seeds=[seed + k for k in range(P["bf16_coef_seeds"])],
                            batch=P["batch"], seq_len=P["seq_len"], lr=P["lr"], device=device, log=log, left=left)
    env = _environment()
    study.update(device=env["device"], date=env["date"], torch=env["torch"], command=command,
                 seconds=round(time.perf_counter() - t_start, 1))
    payload["bf16_coef_training"] = study
    (save or (lambda p: None))(payload)
    return payload


def run_scale_up(*, smoke=False, train_seconds=None, bf16_seconds=None, bf16_seeds=None, compile_timing=True, seed=0,
                 device=None, deadline_s=None, log=print, save=None) -> dict:
    """The three stages; ``smoke`` is a tiny CPU version (seconds). ``save(payload)`` is called after each
    stage so that a run cut short keeps what it measured."""
    t_start = time.perf_counter()
    device = _device(device, smoke)
    P, cfg, train, val = _setup(smoke, train_seconds, bf16_seconds, bf16_seeds)
    B, L, lr = P["batch"], P["seq_len"], P["lr"]
    left = (lambda: deadline_s - (time.perf_counter() - t_start)) if deadline_s else (lambda: math.inf)
    payload = {"smoke": smoke, "profile": P, "config": cfg.as_dict(), "text_bytes": {"train": len(train), "val": len(val)}}
    save = save or (lambda p: None)

    # 1. training -------------------------------------------------------------------------------------
    torch.manual_seed(seed)
    base = LlamaDecoder(cfg, methods="linear")
    init = {k: v.clone() for k, v in base.state_dict().items()}
    payload["parameters"] = n_parameters(base)
    probe = _batch(val, 8, L, torch.Generator().manual_seed(5), device)[:, :-1]
    runs = {}
    for mode in ("linear", "feature"):
        model = LlamaDecoder(cfg, methods=mode)
        model.load_state_dict(init)
        model.to(device)
        h = train_timed(model, train, seconds=P["train_seconds_each"], batch=B, seq_len=L, lr=lr, seed=seed,
                        device=device, log=log, tag=mode)
        steps, loss = _thin(h["loss"])
        runs[mode] = model
        payload.setdefault("training", {})[mode] = {
            "steps": h["steps"], "seconds": round(h["seconds"], 1), "tokens": h["steps"] * B * L,
            "curve_steps": steps, "curve_loss": loss, "final_train_loss": round(float(np.mean(h["loss"][-20:])), 4),
            "val_loss": round(evaluate(model, val, batch=B, seq_len=L, device=device), 4),
            "spikes": _spikes(h["loss"]),
            "layers": layer_stats(model, probe, device, precisions=(mode == "feature")),
        }
        log(f"[train] {mode}: {h['steps']} steps, val loss {payload['training'][mode]['val_loss']}")
        save(payload)

    # 2. step-time overhead ---------------------------------------------------------------------------
    timing = {}

    def time_steps(compiled: bool) -> None:
        """Step time of the linear and Orthogonal-F models (eager or compiled) into ``timing``."""
        key = "compiled" if compiled else "eager"
        if left() < (60 if compiled else 20):
            timing[key] = "skipped: time budget"
        else:
            try:
                t = {m: round(step_time_ms(runs[m], train, batch=B, seq_len=L, device=device, compiled=compiled), 3)
                     for m in ("linear", "feature")}
                t["overhead_pct"] = round(100 * (t["feature"] / t["linear"] - 1), 2)
                timing[key] = t
            except Exception as exc:  # noqa: BLE001 - recorded, the rest of the run goes on
                timing[key] = f"failed: {type(exc).__name__}: {str(exc)[:200]}"
        log(f"[timing] {key}: {timing[key]}")
        payload["step_time_ms"] = timing
        save(payload)

    time_steps(compiled=False)

    # 3. bf16 coefficient training (bf16 residual stream) ---------------------------------------------
    if left() > 2 * P["bf16_coef_seconds"] + 30:
        payload["bf16_coef_training"] = bf16_coef_study(
            cfg, train, val, seconds=P["bf16_coef_seconds"], seeds=[seed + k for k in range(P["bf16_coef_seeds"])],
            batch=B, seq_len=L, lr=lr, device=device, log=log, left=left)
        save(payload)
    else:
        payload["bf16_coef_training"] = "skipped: time budget"
    # 4. step time under torch.compile (last: compiling 30 layers twice is the slowest stage) --------
    if compile_timing:
        time_steps(compiled=True)

    payload["total_seconds"] = round(time.perf_counter() - t_start, 1)
    save(payload)
    return payload

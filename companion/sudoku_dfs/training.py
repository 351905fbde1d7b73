"""Imitation training on DFS transcripts (paper 06, Section 3.2), on one device or under ``torchrun``.

Paper: Giannoulis, Pantis, Tzamos, NeurIPS 2025 (arXiv 2509.22023); official code: AdamW lr 1e-4,
betas (0.9, 0.95), weight decay 0.1 on linear weights, 5 warm-up steps then linear decay, gradient
clip 1.0, batch 32, 3M steps (:data:`PAPER_TRAIN`).

**Scale (deviation).** lr and steps are set for minutes, not the paper's 168 GPU-hours: a larger
learning rate (1e-3 to 2e-3), held constant after the warm-up and decayed over the last ``decay_frac``
of the run (``schedule``: linear as the paper, or cosine), and dropout 0. In the 4x4 runs the official
loss (mean over label pairs) learned far faster than a per-position mean or L1 at the rule steps.

**Distributed.** Under ``torchrun --nproc_per_node N`` (``WORLD_SIZE > 1``) :func:`distributed` joins the
process group (NCCL on CUDA, gloo on the CPU) and :func:`train_model` wraps the model in
``DistributedDataParallel``; each rank samples its own data (its own stream shard in the GPU study). The
wall clock that stops the run and drives the schedule is the slowest rank's (an all-reduce per step), so
every rank takes the same learning rate and stops at the same step.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from companion.core import check_choice, check_float, check_int
from companion.sudoku_dfs.data import augment_batch, symmetry_maps
from companion.sudoku_dfs.loss import LOSS_KINDS, multi_target_loss

__all__ = ["PAPER_TRAIN", "SCHEDULES", "TrainConfig", "distributed", "lr_factor", "train_model"]

SCHEDULES = ("linear", "cosine")


@dataclass
class TrainConfig:
    steps: int = 300
    seconds: float | None = None  # stop early when the wall clock passes this budget
    batch_size: int = 64  # sequences per step on each rank
    lr: float = 1e-3
    warmup: int = 5  # linear warm-up steps
    weight_decay: float = 0.1
    clip: float = 1.0
    augment: bool = True
    loss: str = "l2"
    amp: bool = True  # bf16 autocast on CUDA (never on the CPU: it costs more than it saves for these sizes)
    compile: bool = False  # torch.compile the training step (on the GPU; the first steps pay the compilation)
    schedule: str = "linear"  # the shape of the decay: "linear" or "cosine"
    decay_frac: float = 1.0  # the last fraction of the steps (or seconds) decays to 0; 1.0 = all
    log_every: int = 10
    seed: int = 0


# the paper's optimiser and schedule (official code): AdamW 1e-4, 5 warm-up steps, linear decay over 3M steps of 32
PAPER_TRAIN = {"steps": 3_000_000, "batch_size": 32, "lr": 1e-4, "warmup": 5, "weight_decay": 0.1, "clip": 1.0,
               "schedule": "linear", "decay_frac": 1.0}


def lr_factor(cfg: TrainConfig, step: int, progress: float) -> float:
    """The learning rate over ``cfg.lr`` at ``step`` when ``progress`` (0..1) of the run is done: a linear
    warm-up over ``cfg.warmup`` steps, constant, then a decay to 0 over the last ``cfg.decay_frac`` (linear or
    cosine); a run bounded by seconds keeps 2 % of the rate at the end (its last step comes after the clock)."""
    warm = min(1.0, (step + 1) / max(1, cfg.warmup))
    left = min(1.0, max(0.0, 1.0 - progress) / max(cfg.decay_frac, 1e-9))
    decay = left if cfg.schedule == "linear" else 0.5 * (1.0 - math.cos(math.pi * left))
    return warm * max(0.02 if cfg.seconds is not None else 0.0, decay)


def distributed(device: str = "cpu") -> tuple[int, int, torch.device]:
    """``(rank, world_size, device)`` of this process: under ``torchrun`` (``WORLD_SIZE > 1``) it joins the
    process group (NCCL where ``device`` is CUDA, else gloo) and a CUDA device becomes ``cuda:LOCAL_RANK``;
    otherwise ``(0, 1, device)``."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    dev = torch.device(device)
    if world == 1:
        return 0, 1, dev
    if dev.type == "cuda":
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(dev)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
    return dist.get_rank(), dist.get_world_size(), dev


class _LossStep(torch.nn.Module):
    """The training forward: transcripts -> multi-target loss (the one module DDP and torch.compile wrap)."""

    def __init__(self, model, kind: str):
        super().__init__()
        self.model, self.kind = model, kind

    def forward(self, tokens, labels):
        logits = self.model(input_ids=tokens).logits
        return multi_target_loss(logits, labels, self.kind)  # positions without a label (clues, end) add nothing


def _param_groups(model, weight_decay):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.ndim >= 2 and "wte" not in name and "wpe" not in name else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _forward_backward(step_fn, batch, opt, use_amp: bool) -> torch.Tensor:
    with torch.autocast(batch.tokens.device.type, dtype=torch.bfloat16, enabled=use_amp):
        loss = step_fn(batch.tokens, batch.labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    return loss


def train_model(model, data, cfg: TrainConfig, device="cpu", progress=None) -> dict:
    """Imitation training (AdamW, warm-up then decay, clipping) on ``data``: anything with
    ``sample(batch_size, generator) -> TranscriptBatch`` (a :class:`~companion.sudoku_dfs.data.TranscriptBatch`
    pool or a :class:`~companion.sudoku_dfs.data.StreamPool`). Under an initialised process group of more than
    one rank the model trains under ``DistributedDataParallel`` (every rank calls this with its own data).

    Returns a history ``{"step": [...], "loss": [...], "seconds": float, "steps": int,
    "sequences": int, "tokens": int, "sample_ms_per_step": float, "compiled": bool, "compile_error": str | None}``
    (this rank's sequences and tokens; the host time a step spends drawing its batch from ``data``; where
    ``torch.compile`` fails, the error and the eager steps that followed). ``progress(step, loss)`` is
    called every ``log_every`` steps.
    """
    check_int("steps", cfg.steps, lo=1)
    check_int("batch_size", cfg.batch_size, lo=1)
    check_float("lr", cfg.lr, lo=0.0, lo_open=True)
    check_choice("loss", cfg.loss, LOSS_KINDS)
    check_choice("schedule", cfg.schedule, SCHEDULES)
    device = torch.device(device)
    world = dist.get_world_size() if dist.is_initialized() else 1
    rank = dist.get_rank() if world > 1 else 0
    model.to(device).train()
    opt = torch.optim.AdamW(_param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(0.9, 0.95), fused=True)
    eager = _LossStep(model, cfg.loss)
    if world > 1:
        eager = torch.nn.parallel.DistributedDataParallel(eager, device_ids=[device] if device.type == "cuda" else None)
    step_fn = torch.compile(eager) if cfg.compile else eager
    compile_error = None

    t0 = time.perf_counter()
    use_amp = cfg.amp and device.type == "cuda"
    gen = torch.Generator().manual_seed(cfg.seed + rank)
    hist = {"step": [], "loss": []}
    seen_tokens, sample_s = 0, 0.0
    clock = torch.zeros((), dtype=torch.float64, device=device)
    step = 0
    for step in range(cfg.steps):
        elapsed = time.perf_counter() - t0
        if world > 1:  # the slowest rank's clock: one schedule and one stopping step for every rank
            clock.fill_(elapsed)
            dist.all_reduce(clock, op=dist.ReduceOp.MAX)
            elapsed = float(clock)
        if cfg.seconds is not None and step > 0 and elapsed > cfg.seconds:
            step -= 1
            break
        t_sample = time.perf_counter()
        batch = data.sample(cfg.batch_size, gen)
        sample_s += time.perf_counter() - t_sample
        seen_tokens += int(batch.lengths.sum())
        batch = batch.to(device)
        if cfg.augment:  # on the device: on the host the gather over [B, T, K] labels costs more than the step
            batch = augment_batch(batch, symmetry_maps(batch.n, len(batch), gen, device=device))
        done = elapsed / cfg.seconds if cfg.seconds is not None else step / max(1, cfg.steps)
        for group in opt.param_groups:
            group["lr"] = cfg.lr * lr_factor(cfg, step, done)
        try:
            loss = _forward_backward(step_fn, batch, opt, use_amp)
        except Exception as exc:  # a torch.compile failure (any backend error): record it, train eagerly
            if step_fn is eager:
                raise
            compile_error, step_fn = f"{type(exc).__name__}: {exc}"[:400], eager
            loss = _forward_backward(step_fn, batch, opt, use_amp)
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        opt.step()
        if step % cfg.log_every == 0 or step == cfg.steps - 1:
            hist["step"].append(step)
            hist["loss"].append(float(loss.detach()))
            if progress:
                progress(step, hist["loss"][-1])
    model.eval()
    hist.update(seconds=time.perf_counter() - t0, steps=step + 1, sequences=(step + 1) * cfg.batch_size, tokens=seen_tokens,
                sample_ms_per_step=1e3 * sample_s / (step + 1), compiled=step_fn is not eager, compile_error=compile_error)
    return hist

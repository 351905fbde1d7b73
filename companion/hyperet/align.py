"""Toy multi-granularity alignment with HyperET's adapters (a CPU-scale stand-in for the paper's setting).

The paper tunes CLIP's q/v projections with HRA inside a multi-modal LLM trained by next-token loss. We
keep the mechanism and shrink the world (not from the paper; stated in the notebook):

1. **Pre-training.** A tiny ViT (:func:`companion.hyperet.vit.adaptable_vit`) and a projector to the text
   space are trained CLIP-style against the MiniLM prompt embeddings of *one* granularity level
   (``pretrain_level``): cross-entropy of cosine logits / τ over that level's prompts. Then the
   encoder is frozen — it is aligned with language at one granularity only.
2. **Alignment.** A fresh projector (same seed for every variant) is trained on all three levels at
   once (sum of the three cross-entropies), with equal steps, batches and learning rate for each
   variant of what may change inside the encoder: nothing (projector only), a Euclidean diagonal on
   q/v, HRA diagonal / block / banded on q/v, LoRA on q/v, or everything (full fine-tuning).
3. **Report.** Test accuracy per level, trainable share of the encoder, loss and accuracy curves,
   and the radius of the encoder's tokens before and after (``Rad = 2‖h‖`` of ``exp0(h)``, and the
   in-ball norm ‖exp0(h)‖ the official visualisation plots).

Everything is seeded; the Euclidean-diagonal and HRA-diagonal runs share init and data order, so
their curves coincide up to rounding (the identity ``log0(M ⊗ exp0(w)) = M w``).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from companion.core import limit_threads
from companion.core.validation import ParameterError, check_choice, check_float, check_int
from companion.hyperet.data import LEVELS, Task
from companion.hyperet.poincare import _expmap0, check_curvature
from companion.hyperet.vit import adaptable_vit, attach_adapters, encoder_param_count, trainable_params
from companion.models.tiny import TinyViT

__all__ = ["DEFAULT_VARIANTS", "VARIANTS", "AlignConfig", "align_variant", "evaluate", "pretrain", "run_alignment", "seed_spread",
           "summary_rows", "token_radius_stats"]

#: The alignment variants of the experiment: name -> keyword arguments of :func:`attach_adapters`.
VARIANTS: dict[str, dict] = {
    "projector only": {"method": "none"},
    "Euclidean diag (q,v)": {"method": "euclid", "structure": "diagonal"},
    "HRA diag (q,v)": {"method": "hra", "structure": "diagonal"},
    "HRA block 4x4 (q,v)": {"method": "hra", "structure": "block", "block_size": 4},
    "HRA banded d=2 (q,v)": {"method": "hra", "structure": "banded", "bandwidth": 2},
    "LoRA r=1 (q,v)": {"method": "lora", "rank": 1},
    "full fine-tune": {"method": "full"},
    # not in the default list: the same HRA diagonal evaluated by the fused Triton kernel (GPU run)
    "HRA diag (q,v) fused": {"method": "hra", "structure": "diagonal", "impl": "fused"},
}
#: The seven variants the notebook compares.
DEFAULT_VARIANTS = list(VARIANTS)[:7]


@dataclass
class AlignConfig:
    """Sizes and optimisation settings of one experiment (CPU defaults)."""

    dim: int = 64
    depth: int = 2
    heads: int = 4
    patch: int = 2
    mlp_ratio: int = 2
    pretrain_level: str = "fine"
    pretrain_steps: int = 300
    pretrain_lr: float = 3e-3
    align_steps: int = 150
    lr: float = 3e-3
    batch: int = 128
    tau: float = 0.05
    c: float = 0.01
    eval_every: int = 25
    seed: int = 0
    impl: str = "eager"
    amp: bool = False
    variants: list[str] = field(default_factory=lambda: list(DEFAULT_VARIANTS))

    def validate(self) -> AlignConfig:
        for name in ("dim", "depth", "heads", "patch", "mlp_ratio", "batch", "eval_every"):
            check_int(name, getattr(self, name), lo=1)
        check_int("pretrain_steps", self.pretrain_steps, lo=0)
        check_int("align_steps", self.align_steps, lo=1)
        check_int("seed", self.seed, lo=0)
        check_choice("pretrain_level", self.pretrain_level, LEVELS)
        check_float("pretrain_lr", self.pretrain_lr, lo=0, lo_open=True)
        check_float("lr", self.lr, lo=0, lo_open=True)
        check_float("tau", self.tau, lo=0, lo_open=True)
        check_curvature(self.c)
        check_choice("impl", self.impl, ("eager", "fused"))
        for v in self.variants:
            check_choice("variant", v, list(VARIANTS))
        return self


def _logits(feat: torch.Tensor, projector: nn.Module, text: torch.Tensor, tau: float) -> torch.Tensor:
    z = F.normalize(projector(feat).float(), dim=-1)
    return z @ text.T / tau


def _batches(n: int, batch: int, steps: int, seed: int, device):
    gen = torch.Generator().manual_seed(seed)
    order = torch.empty(0, dtype=torch.long)
    for _ in range(steps):
        if len(order) < batch:
            order = torch.cat([order, torch.randperm(n, generator=gen)])
        idx, order = order[:batch], order[batch:]
        yield idx.to(device)


def _cpu_threads(device):
    """One intra-op thread for the tiny CPU models (``companion.core.limit_threads``); nothing on a GPU.

    The toy encoder's matrices are 64 wide: a second intra-op thread costs more in synchronisation than
    it saves, and on a shared 2-core machine (CI runs two notebooks at once) it can be 10x slower.
    """
    return limit_threads(1 if torch.device(device).type == "cpu" else None)


def _autocast(cfg: AlignConfig, device):
    dev = torch.device(device)
    enabled = cfg.amp and dev.type == "cuda"
    return torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=enabled)


@torch.no_grad()
def evaluate(encoder: nn.Module, projector: nn.Module, task: Task, text: dict[str, torch.Tensor], tau: float = 0.05, split: str = "test", batch: int = 2048) -> dict[str, float]:
    """Accuracy per granularity level (argmax over that level's prompts)."""
    x = task.x_test if split == "test" else task.x_train
    y = task.y_test if split == "test" else task.y_train
    was = encoder.training
    encoder.eval()
    feats = torch.cat([encoder(x[i : i + batch]) for i in range(0, len(x), batch)]).float()
    encoder.train(was)
    return {lv: float((_logits(feats, projector, text[lv], tau).argmax(-1) == y[lv]).float().mean()) for lv in LEVELS if lv in text}


@torch.no_grad()
def token_radius_stats(encoder: TinyViT, x: torch.Tensor, c: float = 0.01, batch: int = 2048) -> dict[str, float]:
    """Radii of the encoder's output tokens h mapped to the ball: Rad = 2‖h‖ and ‖exp0(h)‖ (mean)."""
    c = check_curvature(c)
    h = torch.cat([encoder.tokens(x[i : i + batch]) for i in range(0, len(x), batch)]).float()
    rad = 2 * h.norm(dim=-1)
    inball = _expmap0(h, c, False).norm(dim=-1)
    return {
        "cls_rad": float(rad[:, 0].mean()),
        "patch_rad": float(rad[:, 1:].mean()),
        "cls_inball": float(inball[:, 0].mean()),
        "patch_inball": float(inball[:, 1:].mean()),
        "ball_limit": 1 / c**0.5,
    }


def pretrain(task: Task, text: dict[str, torch.Tensor], cfg: AlignConfig, device="cpu") -> tuple[TinyViT, nn.Module, list[float]]:
    """Stage 1: train encoder + projector CLIP-style on ``cfg.pretrain_level`` prompts only."""
    cfg.validate()
    torch.manual_seed(cfg.seed)
    encoder = adaptable_vit(task.image_shape, cfg.patch, cfg.dim, cfg.depth, cfg.heads, cfg.mlp_ratio).to(device)
    projector = nn.Linear(cfg.dim, text[cfg.pretrain_level].shape[1]).to(device)
    params = list(encoder.parameters()) + list(projector.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.pretrain_lr, weight_decay=0.0)
    target, t = task.y_train[cfg.pretrain_level], text[cfg.pretrain_level]
    losses = []
    for idx in _batches(len(task.x_train), cfg.batch, cfg.pretrain_steps, cfg.seed, device):
        with _autocast(cfg, device):
            loss = F.cross_entropy(_logits(encoder(task.x_train[idx]), projector, t, cfg.tau), target[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    encoder.eval()
    for p in encoder.parameters():
        p.requires_grad_(False)
    return encoder, projector, losses


def align_variant(encoder: TinyViT, task: Task, text: dict[str, torch.Tensor], variant: str, cfg: AlignConfig, device="cpu") -> dict:
    """Stage 2 for one variant, on a copy of the frozen ``encoder``; returns curves and final numbers."""
    check_choice("variant", variant, list(VARIANTS))
    enc = copy.deepcopy(encoder).to(device)
    n_encoder = encoder_param_count(enc)
    kwargs = dict(VARIANTS[variant])
    kwargs.setdefault("impl", cfg.impl if kwargs["method"] == "hra" else "eager")
    n_adapter = attach_adapters(enc, **kwargs, c=cfg.c)
    frozen = VARIANTS[variant]["method"] == "none"
    enc.train(not frozen)
    cached = None
    if frozen:  # nothing in the encoder trains: its features are computed once (same numbers, no per-step forward)
        with torch.no_grad(), _autocast(cfg, device):
            cached = torch.cat([enc(task.x_train[i : i + 2048]) for i in range(0, len(task.x_train), 2048)])
    torch.manual_seed(cfg.seed + 1)
    projector = nn.Linear(cfg.dim, text["fine"].shape[1]).to(device)
    opt = torch.optim.AdamW(trainable_params(enc) + list(projector.parameters()), lr=cfg.lr, weight_decay=0.0)
    losses, curve = [], []
    start = time.perf_counter()
    for step, idx in enumerate(_batches(len(task.x_train), cfg.batch, cfg.align_steps, cfg.seed + 1, device), start=1):
        with _autocast(cfg, device):
            feat = cached[idx] if cached is not None else enc(task.x_train[idx])
            loss = sum(F.cross_entropy(_logits(feat, projector, text[lv], cfg.tau), task.y_train[lv][idx]) for lv in LEVELS)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if step % cfg.eval_every == 0 or step == cfg.align_steps:
            curve.append({"step": step, **evaluate(enc, projector, task, text, cfg.tau)})
    seconds = time.perf_counter() - start
    enc.eval()
    return {
        "variant": variant,
        "trainable_encoder_params": n_adapter if VARIANTS[variant]["method"] != "full" else n_encoder,
        "encoder_params": n_encoder,
        "trainable_share": (n_adapter if VARIANTS[variant]["method"] != "full" else n_encoder) / n_encoder,
        "accuracy": curve[-1] | {},
        "losses": losses,
        "curve": curve,
        "radius": token_radius_stats(enc, task.x_test, cfg.c),
        "seconds": seconds,
        "step_ms": 1000 * seconds / cfg.align_steps,
        "encoder": enc,
        "projector": projector,
    }


def run_alignment(task: Task, text: dict[str, torch.Tensor], cfg: AlignConfig | None = None, device="cpu", encoder: TinyViT | None = None) -> dict:
    """Pre-train (unless ``encoder`` is given), then run every variant in ``cfg.variants``.

    Returns ``{"config", "pretrain_losses", "pretrain_accuracy", "radius_before", "results": {variant: ...}}``;
    each result holds the adapted encoder and projector (drop them before saving as JSON).
    """
    cfg = (cfg or AlignConfig()).validate()
    for lv in LEVELS:
        if lv not in text:
            raise ParameterError("text", sorted(text), f"embeddings for every level {LEVELS}")
    task = task.to(device)
    text = {k: v.to(device) for k, v in text.items()}
    projector = None
    losses: list[float] = []
    with _cpu_threads(device):
        if encoder is None:
            encoder, projector, losses = pretrain(task, text, cfg, device)
        results = {variant: align_variant(encoder, task, text, variant, cfg, device) for variant in cfg.variants}
    out = {
        "config": asdict(cfg),
        "pretrain_losses": losses,
        "pretrain_accuracy": evaluate(encoder, projector, task, {cfg.pretrain_level: text[cfg.pretrain_level]}, cfg.tau) if projector is not None else {},
        "radius_before": token_radius_stats(encoder, task.x_test, cfg.c),
        "encoder": encoder,
        "projector": projector,
        "results": results,
    }
    return out


def summary_rows(run: dict) -> list[dict]:
    """One row per variant: accuracies, trainable share, token radius before/after (JSON-friendly)."""
    before = run["radius_before"]
    rows = []
    for name, res in run["results"].items():
        rows.append(
            {
                "variant": name,
                **{f"acc_{lv}": res["accuracy"][lv] for lv in LEVELS},
                "trainable_params": res["trainable_encoder_params"],
                "trainable_share_%": 100 * res["trainable_share"],
                "cls_Rad_before": before["cls_rad"],
                "cls_Rad_after": res["radius"]["cls_rad"],
                "patch_Rad_after": res["radius"]["patch_rad"],
                "final_loss": res["losses"][-1],
                "step_ms": res["step_ms"],
            }
        )
    return rows


def seed_spread(run: dict, task: Task, text: dict[str, torch.Tensor], variants: list[str], seeds: int, device="cpu") -> dict[str, list[float]]:
    """Mean test accuracy (over the three levels) of ``variants`` aligned with ``seeds`` alignment seeds.

    The alignment seed sets the fresh projector's initialisation and the batch order (the frozen encoder
    of ``run`` stays the same); seed ``cfg.seed`` is taken from ``run``, the others are ``cfg.seed + 1000·k``.
    Returns ``{variant: [mean accuracy per seed]}``, the seeds in the same order for every variant, so
    differences between two variants can be paired.
    """
    check_int("seeds", seeds, lo=1)
    cfg = AlignConfig(**run["config"])
    for v in variants:
        check_choice("variant", v, list(VARIANTS))
    task = task.to(device)
    text = {k: v.to(device) for k, v in text.items()}
    out = {v: [] for v in variants}
    with _cpu_threads(device):
        for k in range(seeds):
            for v in variants:
                if k == 0 and v in run["results"]:
                    res = run["results"][v]
                else:
                    res = align_variant(run["encoder"], task, text, v, dataclasses.replace(cfg, seed=cfg.seed + 1000 * k), device)
                out[v].append(sum(res["accuracy"][lv] for lv in LEVELS) / len(LEVELS))
    return out

"""The cooperative loop of Alg. 2: CPMLA (and CPMLAprt) against CP-Flow alone.

One update, repeated for every data batch {x}:

1. draw y_0 ~ N(0, I) and run T mirror Langevin steps with mirror map G_ϑ on the EBM f_θ → {x̂}
   (chains re-initialised at every update: no persistent chains);
2. update ϑ by Alg. 1 on ``flow_fit`` - the paper says "using both original examples {x} and synthesized
   {x̂}"; whether that means data, samples or both is ambiguous, so it is an option (default ``"both"``,
   as CoopFlow does);
3. update θ with the contrastive-divergence gradient E_data ∇f − E_{x̂} ∇f. Adam for both.

**CPMLAprt** pre-trains the flow on the data first (``pretrain_steps``). Deviations from App. I, for a
CPU budget: one 2-hidden-layer ICNN (the paper's toy block has depth 20), a few thousand data points
instead of 50,000, so an "epoch" is a pass over the smaller set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from companion.core import ParameterError, check_choice, check_float, check_int
from companion.cpmla.cpflow import LOGDETS, fit_flow, flow_loss, flow_sample
from companion.cpmla.ebm import EBM, cd_loss
from companion.cpmla.mirror_map import HESSIANS, ConvexPotential
from companion.cpmla.samplers import mirror_langevin

FLOW_FITS = ("data", "samples", "both")


@dataclass
class CoopConfig:
    epochs: int = 10
    batch: int = 256
    T: int = 10
    eta: float = 1e-2
    temperature: float = 1.0
    hessian: str = "full"
    flow_fit: str = "both"
    logdet: str = "hutchinson"
    inverse: str = "newton"
    inverse_tol: float = 1e-6
    inverse_max_iter: int = 50
    inverse_raise: bool = True
    lr_flow: float = 5e-3
    lr_ebm: float = 5e-3
    flow_hidden: int = 32
    flow_depth: int = 2
    ebm_hidden: int = 64
    alpha: float = 1e-4
    energy_reg: float = 0.0
    pretrain_steps: int = 0
    eval_epochs: tuple = (3, 10)
    n_eval: int = 1000
    seed: int = 0

    def validate(self):
        check_int("epochs", self.epochs, lo=1)
        check_int("batch", self.batch, lo=2)
        check_int("T", self.T, lo=1)
        check_float("eta", self.eta, lo=0, lo_open=True)
        check_float("temperature", self.temperature, lo=0)
        check_choice("hessian", self.hessian, HESSIANS)
        check_choice("flow_fit", self.flow_fit, FLOW_FITS)
        check_choice("logdet", self.logdet, LOGDETS)
        check_float("alpha", self.alpha, lo=0, lo_open=True)
        check_int("pretrain_steps", self.pretrain_steps, lo=0)
        check_int("n_eval", self.n_eval, lo=2)
        for e in self.eval_epochs:
            check_int("eval_epochs", e, lo=1, hi=self.epochs)
        return self


@dataclass
class CoopResult:
    """The trained models, per-iteration losses and {epoch: samples} at ``eval_epochs``. With an EBM,
    ``history["f_data"]`` and ``history["f_samples"]`` hold, per epoch, the mean of f_θ (the negative energy) over
    that epoch's data batches and over its mirror samples: a diverging EBM shows as a gap that keeps growing."""

    flow: ConvexPotential
    ebm: EBM | None
    history: dict = field(default_factory=dict)
    samples: dict = field(default_factory=dict)
    iterations_per_epoch: int = 0


def _batches(n, batch, gen):
    perm = torch.randperm(n, generator=gen, device=gen.device)
    return [perm[i:i + batch] for i in range(0, n - batch + 1, batch)] or [perm]


def cooperative_train(data: torch.Tensor, cfg: CoopConfig, method: str = "cpmla") -> CoopResult:
    """Train CPMLA (``method="cpmla"``; CPMLAprt when ``cfg.pretrain_steps > 0``) or CP-Flow alone
    (``method="cpflow"``: the flow by maximum likelihood on the data, no EBM) on ``data`` [N, d]."""
    cfg.validate()
    check_choice("method", method, ("cpmla", "cpflow"))
    if data.ndim != 2:
        raise ParameterError("data", tuple(data.shape), "an [N, d] tensor")
    d = data.shape[1]
    dev = data.device
    gen = torch.Generator(device=dev).manual_seed(cfg.seed)
    flow = ConvexPotential(d, hidden=cfg.flow_hidden, depth=cfg.flow_depth, alpha=cfg.alpha, seed=cfg.seed, dtype=data.dtype).to(dev)
    ebm = EBM(d, hidden=cfg.ebm_hidden, depth=4, seed=cfg.seed, dtype=data.dtype).to(dev) if method == "cpmla" else None
    if ebm is not None and ebm.dim != flow.dim:
        raise ParameterError("ebm", f"dimension {ebm.dim}", f"the flow's dimension {flow.dim}")
    if cfg.pretrain_steps:
        fit_flow(flow, data, steps=cfg.pretrain_steps, batch=cfg.batch, lr=cfg.lr_flow, logdet=cfg.logdet, seed=cfg.seed + 1)
    opt_flow = torch.optim.Adam(flow.parameters(), lr=cfg.lr_flow)
    opt_ebm = torch.optim.Adam(ebm.parameters(), lr=cfg.lr_ebm) if ebm is not None else None
    history = {"flow_loss": [], "cd_loss": [], "max_residual": [], "f_data": [], "f_samples": []}
    samples = {}

    def draw(n):
        y0 = torch.randn(n, d, generator=gen, dtype=data.dtype, device=dev)
        if ebm is None:
            inv = flow.inverse(y0, x0=y0, method=cfg.inverse, tol=cfg.inverse_tol, max_iter=cfg.inverse_max_iter,
                               raise_on_fail=cfg.inverse_raise)
            return inv.x, inv.residual
        chain = mirror_langevin(ebm, flow, y0, cfg.T, cfg.eta, hessian=cfg.hessian, inverse=cfg.inverse, generator=gen,
                                inverse_tol=cfg.inverse_tol, inverse_max_iter=cfg.inverse_max_iter,
                                inverse_raise=cfg.inverse_raise, temperature=cfg.temperature)
        return chain.x, chain.max_residual

    n_per_epoch = 0
    for epoch in range(1, cfg.epochs + 1):
        batches = _batches(len(data), cfg.batch, gen)
        n_per_epoch = len(batches)
        f_sums = torch.zeros(2, dtype=data.dtype, device=dev)
        for idx in batches:
            x = data[idx]
            if ebm is not None:
                x_hat, res = draw(len(x))                       # (1) mirror Langevin from y_0 ~ N(0, I)
                fit = {"data": x, "samples": x_hat, "both": torch.cat([x, x_hat])}[cfg.flow_fit]
            else:
                x_hat, res, fit = None, 0.0, x
            loss_f = flow_loss(flow, fit, logdet=cfg.logdet, generator=gen)   # (2) Alg. 1
            opt_flow.zero_grad(set_to_none=True)
            loss_f.backward()
            opt_flow.step()
            history["flow_loss"].append(float(loss_f.detach()))
            history["max_residual"].append(res)
            if ebm is not None:                                  # (3) contrastive divergence
                loss_e = cd_loss(ebm, x, x_hat, energy_reg=cfg.energy_reg)
                if not math.isfinite(float(loss_e.detach())):
                    raise FloatingPointError(f"the CD loss became {float(loss_e)} at epoch {epoch}: lower lr_ebm or eta")
                opt_ebm.zero_grad(set_to_none=True)
                loss_e.backward()
                opt_ebm.step()
                history["cd_loss"].append(float(loss_e.detach()))
                with torch.no_grad():
                    f_sums += torch.stack([ebm(x).mean(), ebm(x_hat).mean()])
        if ebm is not None:
            history["f_data"].append(float(f_sums[0]) / n_per_epoch)
            history["f_samples"].append(float(f_sums[1]) / n_per_epoch)
        if epoch in cfg.eval_epochs:
            samples[epoch] = draw(cfg.n_eval)[0]
    return CoopResult(flow, ebm, history, samples, n_per_epoch)

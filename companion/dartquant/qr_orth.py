"""QR-Orth (paper Alg. 1) and the peer optimisers on the Stiefel manifold, on one layer's activations.

**QR-Orth.** Keep an unconstrained latent Z ∈ R^{n×n}; at every step

    R = Q(qr(Z)),   O = X_b R,   L = loss(O),   Z ← Z − η ∂L/∂Z   (any optimiser; SGD momentum 0.9)

and discard Z at the end (only R is fused into the weights). The orthogonality constraint is exact by
construction and the optimiser is an ordinary one, so nothing alternates between a Euclidean step and a
retraction. R is Q exactly as ``torch.linalg.qr`` returns it (no sign normalisation), as the official code.

**R2 per head** (``r2_base_qr.py``): Z has shape [K, b, b], one latent per KV head (b = head_dim), shared by
the g = H / K query heads of its group; a token's width-(H·b) input of ``o_proj`` is rotated head by head.
A plain R1 is the case K = H = 1, b = n.

**Peers on the same loss** (the baselines compared here):

* ``"cayley"``: ``torch.nn.utils.parametrizations.orthogonal(..., orthogonal_map="cayley")`` — R = B·Cayley(A)
  with A skew-symmetric and B the initial rotation (torch's trivialisation), the optimiser on A;
* ``"riemannian"``: ``geoopt.ManifoldParameter`` on ``geoopt.Stiefel(canonical=False)`` with
  ``geoopt.optim.RiemannianSGD`` (momentum 0.9), SpinQuant's kind of optimiser. The Euclidean metric is
  chosen so that one learning rate means the same step size for all three methods: the canonical metric's
  Riemannian gradient G − R Gᵀ R is twice the Euclidean projection for square R, and at the QR-Orth
  learning rate it overshoots (the Whip loss rose in a 100-step d = 256 trial).

**Sampling.** A 2-D ``X`` [tokens, n] is sampled token by token (Alg. 1's token sampling, ``batch`` tokens
a step); a 3-D ``X`` [samples, tokens, n] is sampled by whole samples (``batch`` samples a step), as the
official code does with its 2048-token files. Deviation: the official loop runs epochs over a 10 % subset
of files with a DataLoader; here a fixed number of ``steps`` with batches drawn by a seeded generator, so
runs are reproducible and sized for a CPU.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from companion.core import ParameterError, check_choice, check_float, check_int
from companion.dartquant.hadamard import random_hadamard, random_orthogonal
from companion.dartquant.whip import get_loss

METHODS = ("qr_orth", "cayley", "riemannian")
INITS = ("hadamard", "random", "identity")


def check_activations(x: torch.Tensor, name: str = "X") -> torch.Tensor:
    """A float tensor of rank 2 or 3 with finite entries (NaN or inf raise a ParameterError)."""
    if not isinstance(x, torch.Tensor) or x.ndim not in (2, 3) or not x.is_floating_point():
        raise ParameterError(name, getattr(x, "shape", type(x).__name__), "a float tensor [tokens, n] or [samples, tokens, n]")
    if not bool(torch.isfinite(x).all()):
        bad = int((~torch.isfinite(x)).sum())
        raise ParameterError(name, f"tensor with {bad} NaN/inf entries", "finite activations (clean or drop the bad tokens)")
    return x


def qr_rotation(z: torch.Tensor) -> torch.Tensor:
    """R = Q of the QR decomposition of the latent ``z`` ([n, n] or [K, n, n]); differentiable."""
    if not isinstance(z, torch.Tensor) or z.ndim not in (2, 3) or z.shape[-1] != z.shape[-2]:
        raise ParameterError("Z", tuple(getattr(z, "shape", ())), "a square latent matrix [n, n] (or a stack [K, n, n])")
    q, _ = torch.linalg.qr(z, mode="complete")
    return q


def rotate(x: torch.Tensor, r: torch.Tensor, heads: int = 1) -> torch.Tensor:
    """``x @ R`` for a full R [n, n], or head by head for a stack R [K, b, b] shared by ``heads / K`` heads."""
    if r.ndim == 2:
        return x @ r
    k, b, _ = r.shape
    if heads % k or x.shape[-1] != heads * b:
        raise ParameterError("heads", heads, f"a multiple of K={k} with heads * {b} = width {x.shape[-1]}")
    lead = x.shape[:-1]
    xh = x.reshape(-1, heads, b).transpose(0, 1)                      # [H, T, b]
    rr = r.repeat_interleave(heads // k, dim=0)                        # [H, b, b]
    return torch.bmm(xh, rr).transpose(0, 1).reshape(*lead, heads * b)


def orthogonality_error(r: torch.Tensor) -> float:
    """‖RᵀR − I‖_∞ (max over a stack), computed in float64."""
    r = r.detach().to(torch.float64)
    eye = torch.eye(r.shape[-1], dtype=torch.float64)
    return float((r.mT @ r - eye).abs().max())


def initial_rotation(n: int, init="hadamard", seed: int = 0, blocks: int | None = None) -> torch.Tensor:
    """The starting rotation: random Hadamard (the official default), Haar-random orthogonal, identity,
    or a given square tensor; ``blocks=K`` repeats one [n, n] init K times (as the official R2 init)."""
    if isinstance(init, torch.Tensor):
        r = init.detach().to(torch.float32).clone()
        if r.ndim not in (2, 3) or r.shape[-1] != r.shape[-2] or r.shape[-1] != n:
            raise ParameterError("init", tuple(r.shape), f"a square [{n}, {n}] matrix (or [K, {n}, {n}])")
        return r
    check_choice("init", init, INITS)
    r = {"hadamard": lambda: random_hadamard(n, seed), "random": lambda: random_orthogonal(n, seed),
         "identity": lambda: torch.eye(n)}[init]()
    return r if blocks is None else r.unsqueeze(0).repeat(blocks, 1, 1)


@dataclass
class Calibration:
    """The result of one calibration run."""

    method: str
    loss_name: str
    rotation: torch.Tensor                       # the final R ([n, n] or [K, b, b]), detached float32
    losses: list = field(default_factory=list)   # the loss at every step (before the update)
    snapshots: dict = field(default_factory=dict)  # step -> R at that step (0 = the init as the method sees it)
    seconds: float = 0.0
    steps: int = 0

    @property
    def ms_per_step(self) -> float:
        return 1e3 * self.seconds / max(self.steps, 1)


class _Rotator(torch.nn.Module):
    def __init__(self, method: str, r0: torch.Tensor):
        super().__init__()
        self.method = method
        if method == "qr_orth":
            self.z = torch.nn.Parameter(r0.clone())
        elif method == "cayley":
            self.weight = torch.nn.Parameter(r0.clone())
            torch.nn.utils.parametrizations.orthogonal(self, "weight", orthogonal_map="cayley")
            with torch.no_grad():
                self.weight = r0.clone()  # right_inverse: base = r0, skew part 0
        else:
            import geoopt

            self.weight = geoopt.ManifoldParameter(r0.clone(), manifold=geoopt.Stiefel(canonical=False))

    def forward(self) -> torch.Tensor:
        return qr_rotation(self.z) if self.method == "qr_orth" else self.weight

    def optimizer(self, name: str, lr: float, momentum: float):
        if self.method == "riemannian":
            import geoopt

            if name == "adam":
                return geoopt.optim.RiemannianAdam(self.parameters(), lr=lr)
            return geoopt.optim.RiemannianSGD(self.parameters(), lr=lr, momentum=momentum)
        if name == "adam":
            return torch.optim.Adam(self.parameters(), lr=lr)
        return torch.optim.SGD(self.parameters(), lr=lr, momentum=momentum)


def calibrate(x: torch.Tensor, *, method: str = "qr_orth", loss: str = "whip", steps: int = 200, lr: float = 1e-3,
              batch: int = 256, init="hadamard", optimizer: str = "sgd", momentum: float = 0.9, seed: int = 0,
              heads: int = 1, kv_heads: int | None = None, accumulation_steps: int = 1, snapshot_steps=()) -> Calibration:
    """Learn a rotation of the activations ``x`` by minimising ``loss`` over ``steps`` optimiser steps.

    ``heads``/``kv_heads`` > 1 learn a per-KV-head R2 ([kv_heads, b, b], b = n / heads). The defaults are
    the official code's (SGD, momentum 0.9, lr 1e-3, random-Hadamard init); the notebook uses lr 1e-2 for
    200-step CPU runs.
    """
    x = check_activations(x)
    check_choice("method", method, METHODS)
    loss_fn = get_loss(loss)
    check_int("steps", steps, lo=0)
    check_float("lr", lr, lo=0.0, lo_open=True)
    check_int("batch", batch, lo=1)
    check_choice("optimizer", optimizer, ("sgd", "adam"))
    check_float("momentum", momentum, lo=0.0, hi=1.0, hi_open=True)
    check_int("accumulation_steps", accumulation_steps, lo=1)
    n = x.shape[-1]
    check_int("heads", heads, lo=1)
    if n % heads:
        raise ParameterError("heads", heads, f"a divisor of the width {n}")
    kv_heads = heads if kv_heads is None else check_int("kv_heads", kv_heads, lo=1)
    if heads % kv_heads:
        raise ParameterError("kv_heads", kv_heads, f"a divisor of heads={heads}")
    per_head = heads > 1
    b = n // heads
    r0 = initial_rotation(b, init, seed, blocks=kv_heads if per_head else None).to(x.device)
    rot = _Rotator(method, r0).to(x.device)
    opt = rot.optimizer(optimizer, lr, momentum)
    gen = torch.Generator().manual_seed(seed + 1)
    pool = x.shape[0]
    snap = set(int(s) for s in snapshot_steps)
    out = Calibration(method=method, loss_name=loss, rotation=r0)
    t0 = time.perf_counter()
    for step in range(steps):
        idx = torch.randint(0, pool, (min(batch, pool) if x.ndim == 3 else batch,), generator=gen)
        xb = x[idx.to(x.device)].reshape(-1, n).float()
        r = rot()
        if step in snap:
            out.snapshots[step] = r.detach().clone()
        value = loss_fn(rotate(xb, r, heads if per_head else 1)) / accumulation_steps
        value.backward()
        if (step + 1) % accumulation_steps == 0:
            opt.step()
            opt.zero_grad(set_to_none=True)
        out.losses.append(float(value.detach()) * accumulation_steps)
    if x.device.type == "cuda":
        torch.cuda.synchronize()
    out.seconds = time.perf_counter() - t0
    out.steps = steps
    with torch.no_grad():
        out.rotation = rot().detach().float().clone()
    if steps in snap:
        out.snapshots[steps] = out.rotation.clone()
    return out

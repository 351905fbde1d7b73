"""The layer-level study of the notebook (the paper's Fig. 3 and Fig. 7a at one layer) and the 2-D picture.

:func:`layer_metrics` measures a rotation R on activations X (and a weight W):

* INT-b per-token asymmetric fake-quant MSE of Y = X R, mean((Q(Y) − Y)²) — the same in the original basis,
  since R is orthogonal;
* the outlier fraction |y| > 3·rms(token), the kurtosis of all entries, max |y|;
* the W-A layer output error ‖X Wᵀ − Q_a(X R) Q_w(W R)ᵀ‖_F / ‖X Wᵀ‖_F (RTN weights, group 128, scaled by the
  group max: the MSE clip search of the model-level runs costs ~1 s per rotation of a 1536×384 weight on
  a CPU, too much for an interactive readout, and does not change the comparison between rotations);
* ‖RᵀR − I‖_∞.

:func:`layer_study` runs the fixed rotations (identity, random orthogonal, random Hadamard) and the
calibrated ones (QR-Orth with each loss, Cayley and Riemannian SGD with Whip) on one activation matrix.
:func:`angle_study` rotates a 2-D Laplace cloud with one outlier direction and evaluates the three losses
against the angle: Whip has its minimum where the outlier is spread over both axes (45°), the variance is flat.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from companion.core import ParameterError, check_int
from companion.dartquant.hadamard import random_hadamard, random_orthogonal
from companion.dartquant.qr_orth import calibrate, check_activations, orthogonality_error
from companion.dartquant.quant import check_bits, quantize_activations, quantize_weight_rtn
from companion.dartquant.whip import LOSSES

FIXED = ("identity", "random", "hadamard")
LEARNED = (("qr_orth", "whip"), ("qr_orth", "variance"), ("qr_orth", "kurtosis"), ("cayley", "whip"),
           ("riemannian", "whip"))
OUTLIER_RMS = 3.0


def run_key(method: str, loss: str) -> str:
    return f"{method}/{loss}"


def kurtosis(y: torch.Tensor) -> float:
    c = y.double().flatten()
    c = c - c.mean()
    return float((c ** 4).mean() / (c ** 2).mean() ** 2)


@torch.no_grad()
def layer_metrics(x: torch.Tensor, r: torch.Tensor, bits: int = 4, w: torch.Tensor | None = None,
                  w_bits: int | None = None) -> dict:
    """The metrics above for activations ``x`` [T, n] rotated by ``r`` [n, n]."""
    check_activations(x)
    check_bits(bits)
    y = x.float() @ r.float()
    out = {
        "quant_mse": float(((quantize_activations(y, bits) - y) ** 2).mean()),
        "outlier_frac": float((y.abs() > OUTLIER_RMS * y.pow(2).mean(-1, keepdim=True).sqrt()).float().mean()),
        "kurtosis": kurtosis(y),
        "max_abs": float(y.abs().max()),
        "orth_err": orthogonality_error(r),
    }
    if w is not None:
        wb = bits if w_bits is None else check_bits(w_bits)
        ref = x.float() @ w.float().T
        wq = quantize_weight_rtn(w.float() @ r.float(), wb, 128, mse=False)
        out["layer_err"] = float(torch.linalg.norm(ref - quantize_activations(y, bits) @ wq.T) / torch.linalg.norm(ref))
    return out


def fixed_rotations(n: int, seed: int = 0) -> dict:
    return {"identity": torch.eye(n), "random": random_orthogonal(n, seed), "hadamard": random_hadamard(n, seed)}


def layer_study(x: torch.Tensor, w: torch.Tensor | None = None, *, steps: int = 100, lr: float = 2e-2,
                batch: int = 256, seed: int = 0, learned=LEARNED, n_snapshots: int = 6, bits: int = 4) -> dict:
    """Fixed and calibrated rotations of one layer's activations, with their metrics.

    Every calibrated run starts from the same random Hadamard (``seed``), draws the same batches and has
    ``n_snapshots`` snapshots of R (steps 0 … ``steps``) for the explorer."""
    check_activations(x)
    if x.ndim != 2:
        raise ParameterError("x", tuple(x.shape), "a [tokens, n] matrix")
    check_int("n_snapshots", n_snapshots, lo=2)
    n = x.shape[1]
    snaps = sorted({int(round(s)) for s in np.linspace(0, steps, n_snapshots)})
    fixed = fixed_rotations(n, seed)
    runs = {}
    for method, loss in learned:
        runs[run_key(method, loss)] = calibrate(x, method=method, loss=loss, steps=steps, lr=lr, batch=batch,
                                                seed=seed, snapshot_steps=snaps)
    metrics = {k: layer_metrics(x, r, bits, w) for k, r in fixed.items()}
    metrics.update({k: layer_metrics(x, c.rotation, bits, w) for k, c in runs.items()})
    return {"x": x, "w": w, "fixed": fixed, "runs": runs, "metrics": metrics, "snapshot_steps": snaps,
            "steps": steps, "lr": lr, "batch": batch, "n": n, "tokens": x.shape[0]}


@torch.no_grad()
def full_whip(x: torch.Tensor, r: torch.Tensor) -> float:
    """The Whip loss of all of ``x`` rotated by ``r`` (not of one batch)."""
    return float(LOSSES["whip"](x.float() @ r.float()))


def seed_comparison(make_x, seeds, *, steps: int, lr: float, batch: int, bits: int = 4) -> list[dict]:
    """Per seed: the identity, Hadamard and Whip + QR-Orth quant MSE on ``make_x(seed)`` (fresh data, or the
    same data with a fresh random-Hadamard start and batches), the full-data Whip loss at the start
    (``whip_start``, the random Hadamard) and at the end (``whip_end``) of the calibration, and the
    number of tokens of that seed's data (``tokens``)."""
    rows = []
    for s in seeds:
        x = make_x(s)
        h = random_hadamard(x.shape[1], s)
        c = calibrate(x, method="qr_orth", loss="whip", steps=steps, lr=lr, batch=batch, seed=s)
        rows.append({"seed": s, "tokens": x.shape[0],
                     "identity": layer_metrics(x, torch.eye(x.shape[1]), bits)["quant_mse"],
                     "hadamard": layer_metrics(x, h, bits)["quant_mse"],
                     "whip": layer_metrics(x, c.rotation, bits)["quant_mse"],
                     "whip_start": full_whip(x, h), "whip_end": full_whip(x, c.rotation),
                     "loss_first": c.losses[0], "loss_last": float(np.mean(c.losses[-max(1, steps // 10):])),
                     "orth_err": orthogonality_error(c.rotation)})
    return rows


def study_seed_row(study: dict, seed: int) -> dict:
    """The :func:`seed_comparison` row of a :func:`layer_study` (its Whip + QR-Orth run), so that the study's
    own seed counts as the first seed without being calibrated twice."""
    m = study["metrics"]
    run = study["runs"][run_key("qr_orth", "whip")]
    return {"seed": seed, "tokens": study["tokens"], "identity": m["identity"]["quant_mse"],
            "hadamard": m["hadamard"]["quant_mse"],
            "whip": m[run_key("qr_orth", "whip")]["quant_mse"],
            "whip_start": full_whip(study["x"], run.snapshots[0]), "whip_end": full_whip(study["x"], run.rotation),
            "loss_first": run.losses[0], "loss_last": float(np.mean(run.losses[-max(1, study["steps"] // 10):])),
            "orth_err": m[run_key("qr_orth", "whip")]["orth_err"]}


def laplace_cloud(n_points: int = 2000, outlier: float = 6.0, seed: int = 0) -> torch.Tensor:
    """A 2-D Laplace(0, 1) cloud whose first axis is scaled by ``outlier`` (one outlier direction)."""
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(n_points, 2, generator=g, dtype=torch.float64).clamp(1e-12, 1 - 1e-12) - 0.5
    x = -torch.sign(u) * torch.log1p(-2 * u.abs())
    x[:, 0] *= outlier
    return x.float()


def rotation_2d(theta_deg: float) -> torch.Tensor:
    t = math.radians(theta_deg)
    return torch.tensor([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]], dtype=torch.float32)


def angle_study(cloud: torch.Tensor, angles=None) -> dict:
    """Each loss of :data:`~companion.dartquant.whip.LOSSES` on ``cloud @ R(θ)`` for θ in ``angles`` (degrees)."""
    angles = list(np.arange(0, 181, 2.5) if angles is None else angles)
    out = {"angles": angles}
    for name, fn in LOSSES.items():
        out[name] = [float(fn(cloud @ rotation_2d(a))) for a in angles]
    return out

"""The orthogonal residual update (Oh et al., NeurIPS 2025, arXiv 2505.11881, Sec. 3).

A pre-norm residual block adds its branch output to the stream, ``x_{n+1} = x_n + f(sigma(x_n))``.
The orthogonal update splits ``f`` relative to the *raw* stream ``x_n`` and adds only the part
orthogonal to it:

    s      = <x_n, f> / (||x_n||^2 + eps)          (eps = 1e-6)
    f_par  = s * x_n,     f_perp = f - f_par
    x_{n+1} = x_n + f_perp

so ``<x_n, f_perp> = eps * <x_n, f> / (||x_n||^2 + eps)`` (zero up to eps and rounding) and
``||x_{n+1}||^2 = ||x_n||^2 + ||f_perp||^2``: a block can rotate and grow the stream, never shrink it.

Two ways to take the inner products (the official code's ``--orthogonal_method``):

* ``"feature"`` (Orthogonal-F): over one axis, the feature axis -- per token for a transformer
  (``dim=-1``), per spatial position over channels for a CNN (``dim=1``);
* ``"global"`` (Orthogonal-G): over everything after the batch axis, one projection per sample.

``"linear"`` is the plain residual ``x + f``. Precision is explicit (``coef_dtype``):

* ``"float32"`` (default): inner products, coefficient and subtraction in (at least) fp32, the result
  in the promoted dtype of the stream and the update -- the formula as written;
* ``"input"``: the official code (``src/ortho_residual/*/residual.py``): the dot product in the
  activation dtype and ``scale = (dot / (||x||^2 + eps)).to(x.dtype)`` "for amp", so under bf16 the
  coefficient is bf16;
* ``"float64"``: as vit-pytorch's ``OrthogonalResidualUpdate`` (which uses ``F.normalize``; same
  value up to the eps placement).

Deviation: the official transformer code always uses the feature axis for attention and MLP adds
(``orthogonal_method`` only reaches conv blocks); here ``"global"`` is also allowed on token streams
(flattening tokens x features), so the three rules can be compared on one ViT.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch
from torch import nn

from companion.core import ParameterError, check_choice, check_float, check_int

MODES = ("linear", "feature", "global")
COEF_DTYPES = ("float32", "input", "float64")
EPS = 1e-6
STAT_NAMES = ("x_norm2", "f_par_norm2", "f_ortho_norm2", "rho_par", "rho_ortho", "cos_x_out")


def _check_pair(x: torch.Tensor, f: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor) or not isinstance(f, torch.Tensor):
        raise TypeError(f"x and f must be tensors, got {type(x).__name__} and {type(f).__name__}")
    if x.shape != f.shape:
        raise ParameterError("f", tuple(f.shape), f"a tensor of the stream's shape {tuple(x.shape)}")


def _reduce_dims(x: torch.Tensor, mode: str, dim: int) -> tuple[int, ...]:
    """The axes the inner products run over."""
    if mode == "global":
        if x.ndim < 2:
            raise ParameterError("x", tuple(x.shape), "at least 2 dimensions (batch first) for mode='global'")
        return tuple(range(1, x.ndim))
    if isinstance(dim, bool) or not isinstance(dim, int) or not -x.ndim <= dim < x.ndim:
        raise ParameterError("dim", dim, f"an axis in [{-x.ndim}, {x.ndim - 1}] for a {x.ndim}-d stream")
    return (dim,)


def projection_coefficient(x: torch.Tensor, f: torch.Tensor, *, mode: str = "feature", dim: int = -1,
                           eps: float = EPS, coef_dtype: str = "float32") -> torch.Tensor:
    """``s = <x, f> / (||x||^2 + eps)``, with ``keepdim`` axes so that ``s * x`` broadcasts.

    The dtype of ``s`` follows ``coef_dtype`` (see the module docstring)."""
    check_choice("mode", mode, ("feature", "global"))
    check_choice("coef_dtype", coef_dtype, COEF_DTYPES)
    check_float("eps", eps, lo=0.0, lo_open=True)
    _check_pair(x, f)
    return _coefficient(x, f, _reduce_dims(x, mode, dim), eps, coef_dtype)


def _coefficient(x, f, dims, eps, coef_dtype):
    if coef_dtype == "input":  # official: dot in the activation dtype, norm upcast, scale cast back
        dot = (x * f).sum(dims, keepdim=True)
        norm2 = (x * x).sum(dims, keepdim=True).float() + eps
        return (dot / norm2).to(x.dtype)
    # "float32" means at least fp32: float64 inputs keep float64
    wide = torch.float64 if coef_dtype == "float64" else torch.promote_types(x.dtype, torch.float32)
    xw, fw = x.to(wide), f.to(wide)
    return (xw * fw).sum(dims, keepdim=True) / ((xw * xw).sum(dims, keepdim=True) + eps)


def decompose(x: torch.Tensor, f: torch.Tensor, *, mode: str = "feature", dim: int = -1, eps: float = EPS,
              coef_dtype: str = "float32") -> tuple[torch.Tensor, torch.Tensor]:
    """``(f_par, f_perp)`` of ``f`` relative to the stream ``x``, in the promoted dtype of ``x`` and ``f``."""
    s = projection_coefficient(x, f, mode=mode, dim=dim, eps=eps, coef_dtype=coef_dtype)
    return _split(x, f, s, coef_dtype)


def _split(x, f, s, coef_dtype):
    if coef_dtype == "input":
        f_par = s * x
        return f_par, f - f_par
    out = torch.promote_types(x.dtype, f.dtype)  # an fp32 stream keeps an fp32 f_perp under autocast
    xw, fw = x.to(s.dtype), f.to(s.dtype)
    f_par = s * xw
    return f_par.to(out), (fw - f_par).to(out)


def orthogonal_component(x: torch.Tensor, f: torch.Tensor, **kw) -> torch.Tensor:
    """``f_perp = f - <x, f> / (||x||^2 + eps) * x`` (the part of the update the orthogonal rule adds)."""
    return decompose(x, f, **kw)[1]


def residual_update(x: torch.Tensor, f: torch.Tensor, *, mode: str = "feature", dim: int = -1, eps: float = EPS,
                    coef_dtype: str = "float32") -> torch.Tensor:
    """``x + f`` for ``mode="linear"``, else ``x + f_perp``."""
    check_choice("mode", mode, MODES)
    if mode == "linear":
        _check_pair(x, f)
        return x + f
    return x + orthogonal_component(x, f, mode=mode, dim=dim, eps=eps, coef_dtype=coef_dtype)


def connection_stats(x: torch.Tensor, f: torch.Tensor, *, mode: str = "feature", dim: int = -1,
                     eps: float = EPS) -> dict[str, float]:
    """The per-connection statistics the official code logs (``connect.py``: ``_stats``), in fp32.

    ``x_norm2 = ||x||^2``, ``f_par_norm2 = ||f_par||^2``, ``f_ortho_norm2 = ||f_perp||^2``,
    ``rho_par = ||f_par||^2 / ||x||^2``, ``rho_ortho = ||f_perp||^2 / ||x||^2``, and
    ``cos_x_out = cos(x, f)`` (the branch output, despite the name), each averaged over tokens (or samples
    for ``"global"``; ``"linear"`` is measured per token). Added here: ``cos_x_update``, the mean |cos|
    between ``x`` and what is actually added (``f`` for linear, ``f_perp`` otherwise), and
    ``abs_cos_x_out``, the mean |cos(x, f)|.
    """
    check_choice("mode", mode, MODES)
    _check_pair(x, f)
    pmode = "global" if mode == "global" else "feature"
    dims = _reduce_dims(x, pmode, dim)
    xf, ff = x.detach().float(), f.detach().float()
    f_par, f_perp = decompose(xf, ff, mode=pmode, dim=dim, eps=eps)
    upd = ff if mode == "linear" else f_perp
    x2 = (xf * xf).sum(dims, keepdim=True).clamp_min(eps)
    par2 = (f_par * f_par).sum(dims, keepdim=True).clamp_min(eps)
    perp2 = (f_perp * f_perp).sum(dims, keepdim=True).clamp_min(eps)
    f2 = (ff * ff).sum(dims, keepdim=True).clamp_min(eps)
    u2 = (upd * upd).sum(dims, keepdim=True).clamp_min(eps)
    cos = (xf * ff).sum(dims, keepdim=True) / (x2 * f2).sqrt()
    cos_u = (xf * upd).sum(dims, keepdim=True) / (x2 * u2).sqrt()
    return {
        "x_norm2": x2.mean().item(),
        "f_par_norm2": par2.mean().item(),
        "f_ortho_norm2": perp2.mean().item(),
        "rho_par": (par2 / x2).mean().item(),
        "rho_ortho": (perp2 / x2).mean().item(),
        "cos_x_out": cos.mean().item(),
        "abs_cos_x_out": cos.abs().mean().item(),
        "cos_x_update": cos_u.abs().mean().item(),
    }


def block_methods(n_blocks: int, *, mode: str = "feature", pattern: Sequence[int] | None = None,
                  prob: float | None = None, seed: int = 0) -> list[str]:
    """Which rule each block uses, as the official ``set_connect`` decides it.

    ``pattern``: the indices of the blocks that use ``mode`` (the others are linear). ``prob``: each
    block independently uses ``mode`` with probability ``prob`` (drawn once, at construction, from a
    ``random.Random(seed)``), the paper's "update probability" ablation. Neither: every block uses ``mode``.
    ``prob=0`` gives the linear model, ``prob=1`` the full orthogonal one.
    """
    check_int("n_blocks", n_blocks, lo=1)
    check_choice("mode", mode, MODES)
    if pattern is not None and prob is not None:
        raise ParameterError("pattern", pattern, "None when prob is given (choose one of the two)")
    if pattern is not None:
        pattern = list(pattern)
        for i in pattern:
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n_blocks:
                raise ParameterError("pattern", pattern, f"block indices in [0, {n_blocks - 1}]")
        chosen = set(pattern)
        return [mode if i in chosen else "linear" for i in range(n_blocks)]
    if prob is not None:
        check_float("prob", prob, lo=0.0, hi=1.0)
        rng = random.Random(seed)
        return [mode if rng.random() < prob else "linear" for _ in range(n_blocks)]
    return [mode] * n_blocks


class OrthogonalResidual(nn.Module):
    """The residual add of one connection: ``forward(x, f) -> x + f`` or ``x + f_perp``.

    ``mode`` in ``MODES``; ``dim`` the feature axis for ``"feature"`` (``-1`` for tokens, ``1`` for
    NCHW maps); ``eps > 0`` is kept in an fp32 buffer as in the official code; ``coef_dtype`` in
    ``COEF_DTYPES``. With ``record=True`` each call appends :func:`connection_stats` and
    :func:`stream_growth` to ``self.stats`` (and ``(x, f)`` to ``self.inputs`` if ``keep_inputs``).
    """

    def __init__(self, mode: str = "feature", *, dim: int = -1, eps: float = EPS, coef_dtype: str = "float32"):
        super().__init__()
        self.mode = check_choice("mode", mode, MODES)
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise ParameterError("dim", dim, "an integer axis")
        self.dim = dim
        self.eps = check_float("eps", eps, lo=0.0, lo_open=True)
        self.coef_dtype = check_choice("coef_dtype", coef_dtype, COEF_DTYPES)
        self.register_buffer("eps_buffer", torch.tensor([self.eps], dtype=torch.float32), persistent=False)
        self.record = False
        self.keep_inputs = False
        self.stats: list[dict] = []
        self.inputs: list[tuple[torch.Tensor, torch.Tensor]] = []

    def extra_repr(self) -> str:
        return f"mode={self.mode!r}, dim={self.dim}, eps={self.eps:g}, coef_dtype={self.coef_dtype!r}"

    def forward(self, x: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
        if self.mode == "linear":
            out = x + f
        else:
            if x.shape != f.shape:
                _check_pair(x, f)
            dims = _reduce_dims(x, self.mode, self.dim)
            out = x + _split(x, f, _coefficient(x, f, dims, self.eps, self.coef_dtype), self.coef_dtype)[1]
        if self.record:
            stats = connection_stats(x, f, mode=self.mode, dim=self.dim, eps=self.eps)
            stats.update(stream_growth(x, out, mode=self.mode, dim=self.dim))
            self.stats.append(stats)
            if self.keep_inputs:
                self.inputs.append((x.detach(), f.detach()))
        return out


def stream_growth(x: torch.Tensor, out: torch.Tensor, *, mode: str = "feature", dim: int = -1) -> dict[str, float]:
    """How one residual add changed the stream norm, in float64 over the mode's unit (a token for
    ``"feature"``/``"linear"``, a sample for ``"global"``): ``growth_min`` is the smallest
    ``(||x_out||^2 - ||x||^2) / ||x||^2`` (never below rounding for an orthogonal add), ``shrink_share`` the
    share of units whose norm went down by more than 1e-5 relative, and ``x_norm`` / ``out_norm`` the
    mean norms."""
    dims = _reduce_dims(x, "global" if mode == "global" else "feature", dim)
    a = x.detach().double().pow(2).sum(dims)
    b = out.detach().double().pow(2).sum(dims)
    rel = (b - a) / a.clamp_min(1e-30)
    return {"growth_min": rel.min().item(), "shrink_share": (rel < -1e-5).double().mean().item(),
            "x_norm": a.sqrt().mean().item(), "out_norm": b.sqrt().mean().item()}

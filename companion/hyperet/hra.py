"""The Hyperbolic Radius Adjustment (HRA) module of HyperET (Peng et al., NeurIPS 2025, Eqs. 6, 9, 10).

A frozen weight ``W0`` (``[n_out, n]``) is read as ``n_out`` points, one per row. Each row is mapped
into the Poincaré ball, moved by a learnable matrix ``W_s`` under Möbius multiplication, and mapped
back::

    W = log0( W_s ⊗_c exp0(W0) )          (row-wise; only W_s trains, c = 0.01 fixed)

``W_s`` comes in the paper's parametrisations (all initialised to the identity):

=============  ==========================================  =================================
structure      W_s                                         trainable parameters
=============  ==========================================  =================================
``scalar``     ω · I, applied as ``ω ⊗_c x`` (Eq. 6)        1
``diagonal``   diag(ω)                                     n
``block``      block_diag(B_1, …, B_{n/b}), B_i ∈ R^{b×b}  n · b
``banded``     ω_ij = 0 where |i − j| > d                  n(2d + 1) − d(d + 1)
``full``       dense                                       n²
=============  ==========================================  =================================

``b`` is the block *side* (the code's ``block_size``; the paper also calls the block count r), ``d``
the bandwidth (the code's ``dim=2`` gives 5 diagonals). The banded parameter is stored as the vector of
in-band entries only, exactly as the official code stores it, so parameter counts match the paper.

Key property (checked in the tests and shown in the notebook): since every step acts radially,
``log0(M ⊗_c exp0(w)) = M w`` exactly for any c > 0 and any M, so ``W = W0 W_sᵀ`` — HRA is a structured
Euclidean re-parametrisation of ``W0`` except where the numerical guards of
:mod:`companion.hyperet.poincare` bite (√c‖M w‖ ≳ 3.8). :class:`HRA` with ``geometry="euclidean"`` is
that Euclidean twin (same parameters, same init, ``W = W0 W_sᵀ``).

Deviations from the official code: the banded variant builds its index on the module's device (the
official ``adapter_banded.py`` calls ``.cuda()`` in ``__init__`` and fails on CPU-only machines);
``impl="fused"`` evaluates the same map with the Triton kernel in :mod:`companion_kernels.hra`.
"""

from __future__ import annotations

import torch
from torch import nn

from companion.core.validation import ParameterError, check_bool, check_choice, check_int
from companion.hyperet.poincare import _expmap0, _logmap0, _mobius_matvec, _mobius_scalar_mul, check_curvature

STRUCTURES = ("scalar", "diagonal", "block", "banded", "full")
GEOMETRIES = ("hyperbolic", "euclidean")
IMPLS = ("eager", "fused")

__all__ = ["GEOMETRIES", "HRA", "IMPLS", "STRUCTURES", "banded_param_count", "hra_weight", "identity_error_grid", "structured_param_count"]


def banded_param_count(n: int, bandwidth: int) -> int:
    """Entries of an n×n matrix with |i − j| ≤ d: n(2d + 1) − d(d + 1)."""
    d = min(bandwidth, n - 1)
    return n * (2 * d + 1) - d * (d + 1)


def structured_param_count(n: int, structure: str, *, block_size: int = 4, bandwidth: int = 2) -> int:
    """Trainable parameters of one W_s of width n."""
    check_choice("structure", structure, STRUCTURES)
    return {
        "scalar": 1,
        "diagonal": n,
        "block": n * block_size,
        "banded": banded_param_count(n, bandwidth),
        "full": n * n,
    }[structure]


def hra_weight(w0: torch.Tensor, ws: torch.Tensor, c: float = 0.01, *, guards: bool = True) -> torch.Tensor:
    """``log0(W_s ⊗_c exp0(W0))`` row-wise, with the official code's formulas and guards (dense ``W_s``).

    ``w0`` is ``[..., n_out, n]`` (frozen; treated as a constant like the official ``.data``), ``ws`` is
    ``[n, n]`` (or batched ``[..., n, n]``). The result has the shape of ``w0``.
    """
    c = check_curvature(c)
    check_bool("guards", guards)
    if not isinstance(w0, torch.Tensor) or not isinstance(ws, torch.Tensor):
        raise ParameterError("w0/ws", (type(w0).__name__, type(ws).__name__), "torch tensors")
    if ws.shape[-1] != w0.shape[-1] or ws.shape[-2] != w0.shape[-1]:
        raise ParameterError("ws", tuple(ws.shape), f"a square matrix [{w0.shape[-1]}, {w0.shape[-1]}] matching w0's width")
    return _hra_dense(w0, ws, c, guards)


def _hra_dense(w0, ws, c, guards):
    x = _expmap0(w0.detach(), c, guards)
    return _logmap0(_mobius_matvec(ws.to(x.dtype), x, c, guards), c, guards)


class HRA(nn.Module):
    """Learnable ``W_s`` that re-parametrises a frozen weight: ``forward(W0) -> W``.

    Parameters
    ----------
    n : width of ``W0`` (its number of columns; each row is a point of R^n).
    structure : one of :data:`STRUCTURES`.
    c : curvature (> 0); the paper fixes 0.01.
    block_size : block side b for ``structure="block"`` (must divide n).
    bandwidth : d ≥ 0 for ``structure="banded"`` (d = 0 is the diagonal).
    geometry : ``"hyperbolic"`` (HRA) or ``"euclidean"`` (the twin ``W = W0 W_sᵀ``).
    guards : use the official numerical guards (hyperbolic geometry only).
    impl : ``"eager"`` (the official formula sequence, dense W_s) or ``"fused"`` (the Triton kernel of
        :mod:`companion_kernels.hra`; diagonal, block and banded only).
    """

    def __init__(
        self,
        n: int,
        structure: str = "diagonal",
        *,
        c: float = 0.01,
        block_size: int = 4,
        bandwidth: int = 2,
        geometry: str = "hyperbolic",
        guards: bool = True,
        impl: str = "eager",
    ):
        super().__init__()
        self.n = check_int("n", n, lo=1)
        self.structure = check_choice("structure", structure, STRUCTURES)
        self.c = check_curvature(c)
        self.geometry = check_choice("geometry", geometry, GEOMETRIES)
        self.guards = check_bool("guards", guards)
        self.impl = check_choice("impl", impl, IMPLS)
        self.block_size = check_int("block_size", block_size, lo=1)
        self.bandwidth = check_int("bandwidth", bandwidth, lo=0)
        if structure == "block" and n % block_size:
            raise ParameterError("block_size", block_size, f"a divisor of the width n={n} (e.g. 1, 2, 4 when n is a multiple of 4)")
        if structure == "banded" and bandwidth >= n:
            raise ParameterError("bandwidth", bandwidth, f"an integer in [0, {n - 1}] for width n={n}")
        if impl == "fused" and structure not in ("diagonal", "block", "banded"):
            raise ParameterError("impl", impl, "'eager' for the scalar and full structures (the fused kernel covers diagonal, block, banded)")

        if structure == "scalar":
            self.weight = nn.Parameter(torch.ones(()))
        elif structure == "diagonal":
            self.weight = nn.Parameter(torch.ones(n))
        elif structure == "block":
            self.weight = nn.Parameter(torch.eye(block_size).repeat(n // block_size, 1, 1))
        elif structure == "banded":
            d = bandwidth
            i = torch.arange(n).repeat_interleave(2 * d + 1)
            off = torch.arange(-d, d + 1).repeat(n)
            j = i + off
            keep = (j >= 0) & (j < n)
            rows, cols, offs = i[keep], j[keep], off[keep]
            self.register_buffer("band_rows", rows, persistent=False)
            self.register_buffer("band_cols", cols, persistent=False)
            self.register_buffer("band_k", offs + d, persistent=False)
            self.weight = nn.Parameter((offs == 0).float())
        else:
            self.weight = nn.Parameter(torch.eye(n))

    # ------------------------------------------------------------------------------------------ W_s
    @property
    def num_params(self) -> int:
        """Trainable parameters of W_s (the paper's count)."""
        return self.weight.numel()

    def dense(self) -> torch.Tensor:
        """``W_s`` as a dense ``[n, n]`` matrix (differentiable)."""
        w = self.weight
        if self.structure == "scalar":
            return w * torch.eye(self.n, dtype=w.dtype, device=w.device)
        if self.structure == "diagonal":
            return torch.diag(w)
        if self.structure == "block":
            return torch.block_diag(*w.unbind(0))
        if self.structure == "banded":
            z = torch.zeros(self.n, self.n, dtype=w.dtype, device=w.device)
            return z.index_put((self.band_rows, self.band_cols), w)
        return w

    def coefficients(self) -> torch.Tensor:
        """``W_s`` in the fused kernel's gather format (see :mod:`companion_kernels.hra`).

        diagonal: ``[1, n]``; block: ``[b, n]`` with ``coef[k, i] = W_s[i, b⌊i/b⌋ + k]``;
        banded: ``[2d + 1, n]`` with ``coef[k, i] = W_s[i, i + k − d]`` (0 outside the matrix).
        """
        w = self.weight
        if self.structure == "diagonal":
            return w.unsqueeze(0)
        if self.structure == "block":
            b = self.block_size
            return w.reshape(self.n, b).transpose(0, 1)
        if self.structure == "banded":
            z = torch.zeros(2 * self.bandwidth + 1, self.n, dtype=w.dtype, device=w.device)
            return z.index_put((self.band_k, self.band_rows), w)
        raise ParameterError("structure", self.structure, "diagonal, block or banded for the kernel format")

    # ------------------------------------------------------------------------------------- forward
    def forward(self, w0: torch.Tensor) -> torch.Tensor:
        if not isinstance(w0, torch.Tensor) or w0.shape[-1] != self.n:
            shape = tuple(w0.shape) if isinstance(w0, torch.Tensor) else type(w0).__name__
            raise ParameterError("w0", shape, f"a tensor [..., n_out, {self.n}]")
        w0 = w0.detach()  # W0 is frozen, as in the official code (fix_filt = attn.data)
        if self.geometry == "euclidean":
            if self.structure == "scalar":
                return w0 * self.weight.to(w0.dtype)
            if self.structure == "diagonal":
                return w0 * self.weight.to(w0.dtype)
            return w0 @ self.dense().to(w0.dtype).transpose(0, 1)
        if self.impl == "fused":
            from companion_kernels.hra import hra_fused

            kind = {"diagonal": "diagonal", "block": "block", "banded": "banded"}[self.structure]
            return hra_fused(w0, self.coefficients().to(torch.float32), kind=kind, c=self.c)
        if self.structure == "scalar":
            x = _expmap0(w0, self.c, self.guards)
            return _logmap0(_mobius_scalar_mul(self.weight.to(x.dtype), x, self.c, self.guards), self.c, self.guards)
        return _hra_dense(w0, self.dense(), self.c, self.guards)

    def extra_repr(self) -> str:
        extra = {"block": f", block_size={self.block_size}", "banded": f", bandwidth={self.bandwidth}"}.get(self.structure, "")
        return f"n={self.n}, structure={self.structure!r}{extra}, c={self.c:g}, geometry={self.geometry!r}, params={self.num_params}"


def identity_error_grid(
    structure: str = "diagonal",
    dtype: torch.dtype = torch.float64,
    curvatures=None,
    row_norms=None,
    *,
    n: int = 32,
    rows: int = 16,
    spread: float = 0.3,
    block_size: int = 4,
    bandwidth: int = 2,
    seed: int = 0,
) -> dict:
    """Relative error ‖HRA(W0) − W0 W_sᵀ‖ / ‖W0 W_sᵀ‖ over a grid of curvature c × row norm of W0.

    W_s has the given structure, identity plus N(0, spread²) entries on its pattern; the rows of W0 all
    have the given norm. With the official guards the error is at rounding level until √c‖W_s w‖
    reaches ≈ 3.8 (projection to (1 − 1e-3)/√c), and in fp32 it grows earlier with √c‖w‖ because
    artanh(tanh(·)) loses digits near the boundary. Returns ``{"c", "row_norm", "rel_error"[len(c), len(norms)]}``.
    """
    check_choice("structure", structure, ("diagonal", "block", "banded", "full"))
    if dtype not in (torch.float32, torch.float64):
        raise ParameterError("dtype", dtype, "torch.float32 or torch.float64")
    cs = torch.logspace(-3, 1, 25, dtype=torch.float64) if curvatures is None else torch.as_tensor(curvatures, dtype=torch.float64)
    norms = torch.logspace(-1, 2, 25, dtype=torch.float64) if row_norms is None else torch.as_tensor(row_norms, dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    m = HRA(n, structure, block_size=block_size, bandwidth=bandwidth)
    with torch.no_grad():
        m.weight.add_(spread * torch.randn(m.weight.shape, generator=gen))
    ws = m.dense().detach().to(torch.float64)
    direction = torch.randn(rows, n, generator=gen, dtype=torch.float64)
    direction = direction / direction.norm(dim=-1, keepdim=True)
    err = torch.empty(len(cs), len(norms), dtype=torch.float64)
    for i, c in enumerate(cs.tolist()):
        w0 = (direction[None] * norms[:, None, None]).reshape(-1, n)  # [len(norms)·rows, n]
        exact = (w0 @ ws.T).reshape(len(norms), rows, n)
        got = _hra_dense(w0.to(dtype), ws.to(dtype), c, True).to(torch.float64).reshape(len(norms), rows, n)
        err[i] = (got - exact).flatten(1).norm(dim=1) / exact.flatten(1).norm(dim=1)
    return {"c": cs.numpy(), "row_norm": norms.numpy(), "rel_error": err.numpy()}

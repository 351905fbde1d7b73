"""Hadamard matrices and the fast Walsh-Hadamard transform (the QuaRot init of R1/R2 and the online R3/R4).

A Hadamard matrix H of order n has entries ±1 and H Hᵀ = n I; H / √n is orthogonal. DartQuant
initialises its latent Z with a *random Hadamard* matrix (``get_orthogonal_matrix(n, "hadamard")`` in the
official code): the rows of H/√n multiplied by random signs, R₀ = D H / √n. R3 (Q, K after RoPE) and R4
(the ``down_proj`` input) are fixed random Hadamard rotations applied online.

Constructions:

* n = 2^k: Sylvester's H_{2n} = [[H, H], [H, −H]];
* n = m·2^k with m ∈ {12, 20}: the Kronecker product H_m ⊗ H_{2^k} (QuaRot's ``had12 ⊗ H``), where H_m
  is Paley's construction I from the quadratic residues of the prime q = m − 1 (11 and 19, both ≡ 3 mod 4).
  MiniLM's d = 384 = 12·32 and LLaMA-3's 14336 = 28·512 need such a factor; 28 is left out (Paley I needs
  a prime q ≡ 3 mod 4 and 27 is not prime).

:func:`fwht` is the O(n log n) transform on the last axis for n = 2^k (pure PyTorch, checked against
``scipy.linalg.hadamard`` in the tests); :func:`hadamard_transform` extends it to m·2^k by applying the
small factor as a matrix.
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch

from companion.core import ParameterError, check_int

SMALL_FACTORS = (1, 12, 20)  # m in n = m * 2^k


def _is_pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def _split(n: int) -> tuple[int, int]:
    """``(m, 2^k)`` with ``n = m * 2^k``, m in SMALL_FACTORS; raise for sizes with no construction."""
    check_int("n", n, lo=1)
    for m in SMALL_FACTORS[::-1]:
        if n % m == 0 and _is_pow2(n // m):
            return m, n // m
    raise ParameterError("n", n, "a width with a Hadamard construction: 2^k, 12·2^k or 20·2^k "
                         "(e.g. 64, 128, 256, 384, 640, 768, 1024, 1536, 4096, 5120)")


def supported(n: int) -> bool:
    """Whether :func:`hadamard_matrix` can build order ``n``."""
    try:
        _split(n)
    except ParameterError:
        return False
    return True


@lru_cache(maxsize=None)
def _paley(m: int) -> tuple[tuple[int, ...], ...]:
    """Paley construction I of order m = q + 1 for a prime q ≡ 3 (mod 4): H = I + S, S the skew
    Jacobsthal-bordered conference matrix (entries of the Legendre symbol χ(j − i))."""
    q = m - 1
    residues = {(x * x) % q for x in range(1, q)}

    def chi(a: int) -> int:
        a %= q
        return 0 if a == 0 else (1 if a in residues else -1)

    s = [[0] * m for _ in range(m)]
    for j in range(1, m):
        s[0][j], s[j][0] = 1, -1
    for i in range(1, m):
        for j in range(1, m):
            s[i][j] = chi(j - i)
    return tuple(tuple(s[i][j] + (1 if i == j else 0) for j in range(m)) for i in range(m))


def hadamard_matrix(n: int, dtype=torch.float32) -> torch.Tensor:
    """The ±1 Hadamard matrix of order ``n`` (not normalised): H Hᵀ = n I."""
    m, p = _split(n)
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < p:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    if m > 1:
        h = torch.kron(torch.tensor(_paley(m), dtype=torch.float64), h)
    return h.to(dtype)


def fwht(x: torch.Tensor) -> torch.Tensor:
    """Unnormalised fast Walsh-Hadamard transform on the last axis: ``x @ H_n`` for n = 2^k (Sylvester order)."""
    n = x.shape[-1]
    if not _is_pow2(n):
        raise ParameterError("x.shape[-1]", n, "a power of two for the fast Walsh-Hadamard transform")
    shape = x.shape
    y = x.reshape(-1, n)
    h = 1
    while h < n:
        y = y.reshape(-1, n // (2 * h), 2, h)
        a, b = y[:, :, 0, :], y[:, :, 1, :]
        y = torch.stack([a + b, a - b], dim=2)
        h *= 2
    return y.reshape(shape)


def hadamard_transform(x: torch.Tensor, normalize: bool = True) -> torch.Tensor:
    """``x @ H_n`` (``/ √n`` when ``normalize``) on the last axis for any supported n.

    For n = m·2^k, H = H_m ⊗ H_{2^k}: view the last axis as (m, 2^k), FWHT the 2^k axis, multiply the m
    axis by H_m (index i = a·2^k + b, (x H)_{c,d} = Σ_{a,b} x_{a,b} (H_m)_{a,c} (H_{2^k})_{b,d})."""
    n = x.shape[-1]
    m, p = _split(n)
    y = fwht(x.reshape(*x.shape[:-1], m, p))
    if m > 1:
        hm = torch.tensor(_paley(m), dtype=y.dtype, device=y.device)
        y = torch.einsum("...ab,ac->...cb", y, hm)
    y = y.reshape(x.shape)
    return y / math.sqrt(n) if normalize else y


def random_hadamard(n: int, seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    """QuaRot's random Hadamard rotation D H / √n, D = diag of random signs (drawn from ``seed``)."""
    check_int("seed", seed, lo=0)
    g = torch.Generator().manual_seed(seed)
    signs = torch.randint(0, 2, (n,), generator=g).to(torch.float64) * 2 - 1
    return (signs[:, None] * hadamard_matrix(n, torch.float64) / math.sqrt(n)).to(dtype)


def random_orthogonal(n: int, seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    """A Haar-random orthogonal matrix (QR of a Gaussian with the sign of R's diagonal fixed)."""
    check_int("n", n, lo=1)
    check_int("seed", seed, lo=0)
    g = torch.Generator().manual_seed(seed)
    q, r = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    return (q * torch.sign(torch.diagonal(r))[None]).to(dtype)

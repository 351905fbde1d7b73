"""ZeroS: Zero-Sum Linear Attention -- the mathematics, as plain PyTorch functions.

Paper: Lu et al., *ZeroS: Zero-Sum Linear Attention for Efficient Transformers*, NeurIPS 2025
(arXiv 2602.05230). Official code: LJC-FVNR/SequenceLab, ``src/sequencelab/layers/zeros.py``
(read at commit c3e0bc1). Everything here is our own implementation of the paper's equations.

Layout: time-major like the official layer, ``q, k`` ``[B, T, H, d]``, ``v`` ``[B, T, H, dv]``,
per-step scalars (logits ``s``, gates ``sigma1``, ``sigmah``, ``sigma0``) ``[B, T, H]``; weight
matrices are ``[B, H, T(query t), T(key i)]``.

Equations (paper, Sec. 3; notation of the spec ``04_zeros_attention.md``)
------------------------------------------------------------------------
* Taylor split of softmax over the keys a query may see (``n_t = t`` causal, ``T`` bidirectional)::

      softmax_t(s)_i = 1/n_t + delta_{t,i}/n_t + eps_{t,i},   delta_{t,i} = s_i - mean_{j<=t} s_j

  (:func:`taylor_split`).
* Reweighted zero-sum weights (the zero-order ``1/n_t`` dropped)::

      r_{t,i} = sigma1_t * delta_{t,i}/n_t + sigmah_t * eps_{t,i}       (+ sigma0_t / n_t, layer 1)

  ``sum_i r_{t,i} = 0`` for every t (:func:`zeros_weights`).
* Radial-angular decoupling: ``o_t = sum_{i<=t} r_{t,i} (q^_t . k^_i) v_i`` with unit ``q^, k^``
  (RoPE applied before normalising, done by the layer) (:func:`zeros_explicit`, O(T^2), the oracle).
* Prefix scan (:func:`zeros_scan`)::

      E_t = sum e^{s_i}, P_t = sum s_i, F_t = sum e^{s_i} k^_i v_i^T, G_t = sum s_i k^_i v_i^T,
      H_t = sum k^_i v_i^T,  alpha = sigmah/E, beta = (sigma1 - sigmah)/n, gamma = -(beta P + sigmah)/n
      o_t = q^_t (alpha_t F_t + beta_t G_t + gamma_t H_t)

* Chunked / streaming form with a running max rescaled like online softmax (:func:`zeros_chunked`),
  and the identity "ZeroS = one un-normalised causal linear attention with a 3d-wide key"
  (:func:`zeros_as_linear_attention`, :func:`three_key_features`).
* ZeroS-SM: the same reweighting applied to ordinary logits ``q_t . k_i / sqrt(d)``, quadratic
  cost (:func:`zeros_sm`).

Deviations from the official code, and why
------------------------------------------
1. **RoPE.** The repository's ``get_rotary_embedding`` builds cos/sin with ``repeat_interleave``
   (interleaved pairs 2j, 2j+1) but ``rotate_half`` pairs coordinate j with j + d/2, so the two
   coordinates of a rotated pair use different angles and ``<R_t q, R_s k>`` is not a function of
   ``t - s``. The paper specifies RoPE, so :func:`apply_rope` implements the standard half-split
   rotation; ``layout="official"`` reproduces the repository's tables for comparison only.
2. **Stabiliser.** The repository's scan subtracts one *global* detached max over the whole
   sequence. It is exact in exact arithmetic but uses future logits (impossible when streaming)
   and early ``E_t, F_t`` underflow when later logits are much larger (then
   ``alpha_t F_t = 0 / (0 + 1e-12) = 0``). :func:`zeros_scan` keeps that behaviour (it *is* the
   official path, ``stabilizer="global"``); :func:`zeros_chunked` and the Triton kernel use a
   running (causal) max, which never underflows this way.
3. **Bidirectional deviation logits.** The repository divides the *full* sum of ``u`` by
   ``tau + i`` (i the position) when ``is_causal=False``; we use the full mean ``(tau mu + sum u) /
   (tau + T)``, which is what a bidirectional running mean means.
4. The repository's explicit (non-associative) fallback uses ``p_{t,i}/t - 1/t^2`` as its
   "first-order" factor, which is not ``delta_{t,i}/t`` and disagrees with its own associative
   path; we follow the paper (and the associative path) everywhere.
"""

from __future__ import annotations

import math

import torch

from companion.models import rope as _rope

__all__ = [
    "rope_cos_sin",
    "apply_rope",
    "rope_relative_defect",
    "step_logits",
    "LOGIT_TYPES",
    "taylor_split",
    "zeros_weights",
    "softmax_weights",
    "zeros_explicit",
    "zeros_quadratic",
    "zeros_scan",
    "zeros_chunked",
    "three_key_features",
    "causal_linear_attention",
    "zeros_as_linear_attention",
    "zeros_sm",
    "zeros_sm_weights",
]

LOGIT_TYPES = ("deviation", "quadratic", "mean", "distance_1", "distance_rms")


# ----------------------------------------------------------------------------------------------
# Rotary position embedding
# ----------------------------------------------------------------------------------------------
# The repository's layout name -> companion.models.rope's (the one RoPE implementation of the project).
_ROPE_TABLES = {"standard": "standard", "official": "interleaved_tables"}


def rope_cos_sin(
    T: int,
    d: int,
    *,
    base: float = 10000.0,
    layout: str = "standard",
    offset: int = 0,
    device=None,
    dtype=torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables ``[T, d]`` for positions ``offset .. offset+T-1`` (:func:`companion.models.rope.rope_cos_sin`).

    ``layout="standard"``: half-split RoPE (coordinate j pairs with j + d/2, both at angle
    ``pos * base^(-2j/d)``), a true rotation. ``layout="official"``: the SequenceLab tables
    (``repeat_interleave``, ``layout="interleaved_tables"`` there), which combined with half-split
    ``rotate_half`` is *not* a rotation by one angle per pair; kept only to reproduce the official behaviour.
    """
    if d % 2 != 0:
        raise ValueError(f"RoPE needs an even head dimension, got d={d}; use an even head size or rope='none'")
    if layout not in _ROPE_TABLES:
        raise ValueError(f"layout must be 'standard' or 'official', got {layout!r}")
    positions = torch.arange(offset, offset + T, device=device)
    return _rope.rope_cos_sin(positions, d, base=base, layout=_ROPE_TABLES[layout], device=device, dtype=dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` ``[B, T, H, d]`` with tables ``[T, d]`` (:func:`companion.models.rope.apply_rope`, half-split)."""
    return _rope.apply_rope(x, cos[None, :, None, :], sin[None, :, None, :])


def rope_relative_defect(d: int = 8, offset: int = 3, positions=range(0, 40, 8), *, layout="standard",
                         base: float = 10000.0, seed: int = 0) -> torch.Tensor:
    """``<R_{t+offset} q, R_t k>`` for several ``t`` (one random q, k of size d, float64).

    For a true rotary embedding the values are all equal (a function of the offset only);
    the spread of the returned vector measures how far a RoPE variant is from that.
    """
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 1, 1, d, generator=g, dtype=torch.float64)
    k = torch.randn(1, 1, 1, d, generator=g, dtype=torch.float64)
    positions = list(positions)
    T = max(positions) + offset + 1
    cos, sin = rope_cos_sin(T, d, base=base, layout=layout, dtype=torch.float64)
    out = []
    for t in positions:
        rq = apply_rope(q, cos[t + offset:t + offset + 1], sin[t + offset:t + offset + 1])
        rk = apply_rope(k, cos[t:t + 1], sin[t:t + 1])
        out.append((rq * rk).sum())
    return torch.stack(out)


# ----------------------------------------------------------------------------------------------
# Logits that depend on the key step only
# ----------------------------------------------------------------------------------------------
def _steps(T: int, like: torch.Tensor) -> torch.Tensor:
    return torch.arange(1, T + 1, device=like.device, dtype=like.dtype)


def step_logits(
    u: torch.Tensor,
    *,
    kind: str = "deviation",
    causal: bool = True,
    mu: torch.Tensor | None = None,
    log_tau: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-step radial logits ``s_i`` ``[B, T, H]`` from ``u = x W_u`` ``[B, T, H, d]``.

    ``deviation`` (the paper's default): ``s_i = -(u_i . u_bar_i)/sqrt(d)`` with the smoothed
    running mean ``u_bar_i = (e^tau mu + sum_{j<=i} u_j) / (e^tau + i)`` (``mu`` ``[H, d]``,
    ``log_tau`` ``[H]``, both learned, init 0). The other kinds are the repository's variants.
    """
    if kind not in LOGIT_TYPES:
        raise ValueError(f"logit kind must be one of {LOGIT_TYPES}, got {kind!r}")
    B, T, H, d = u.shape
    t = _steps(T, u).view(1, T, 1, 1)
    if kind == "deviation":
        mu = torch.zeros(H, d, device=u.device, dtype=u.dtype) if mu is None else mu
        log_tau = torch.zeros(H, device=u.device, dtype=u.dtype) if log_tau is None else log_tau
        tau = torch.exp(log_tau.clamp(-50.0, 30.0)).view(1, 1, H, 1)
        if causal:
            ubar = (tau * mu.view(1, 1, H, d) + u.cumsum(dim=1)) / (tau + t)
        else:
            ubar = (tau * mu.view(1, 1, H, d) + u.sum(dim=1, keepdim=True)) / (tau + T)
        return -(u * ubar).sum(-1) / math.sqrt(d)
    if kind == "quadratic":
        return (u * u).sum(-1) / d
    if kind == "mean":
        return u.sum(-1) / d
    mean = u.cumsum(dim=1) / t if causal else u.mean(dim=1, keepdim=True)
    if kind == "distance_1":
        return (u - mean).abs().sum(-1) / d
    return torch.sqrt((u - mean).square().sum(-1) / d + 1e-8)


# ----------------------------------------------------------------------------------------------
# Explicit O(T^2) weights (the oracle)
# ----------------------------------------------------------------------------------------------
def _logit_matrix(s: torch.Tensor) -> torch.Tensor:
    """``[B, T, H]`` step logits -> ``[B, H, T, T]`` (row t, column i holds s_i); ``[B, H, T, T]`` as is."""
    if s.dim() == 3:
        B, T, H = s.shape
        return s.permute(0, 2, 1)[:, :, None, :].expand(B, H, T, T)
    if s.dim() == 4:
        return s
    raise ValueError(f"logits must be [B, T, H] (per key step) or [B, H, T, T], got shape {tuple(s.shape)}")


def _visible(T: int, causal: bool, device) -> torch.Tensor:
    if causal:
        return torch.ones(T, T, dtype=torch.bool, device=device).tril()
    return torch.ones(T, T, dtype=torch.bool, device=device)


def _row_counts(T: int, causal: bool, like: torch.Tensor) -> torch.Tensor:
    """``n_t``: number of keys query t sees, shaped ``[T, 1]``."""
    if causal:
        return _steps(T, like).view(T, 1)
    return torch.full((T, 1), float(T), device=like.device, dtype=like.dtype)


def taylor_split(s: torch.Tensor, *, causal: bool = True):
    """The paper's split of softmax: ``(softmax, zero, first, higher)`` each ``[B, H, T, T]``.

    ``zero = 1/n_t``, ``first = delta_{t,i}/n_t``, ``higher = softmax - zero - first``; all are zero
    on keys the query cannot see. ``s``: ``[B, T, H]`` (ZeroS) or ``[B, H, T, T]`` (ZeroS-SM).
    """
    S = _logit_matrix(s)
    T = S.shape[-1]
    vis = _visible(T, causal, S.device)
    n = _row_counts(T, causal, S)
    Sm = S.masked_fill(~vis, 0.0)
    mean = Sm.sum(-1, keepdim=True) / n
    p = torch.softmax(S.masked_fill(~vis, float("-inf")), dim=-1)
    zero = (vis.to(S.dtype) / n).expand_as(S)
    first = torch.where(vis, (S - mean) / n, torch.zeros((), dtype=S.dtype, device=S.device))
    higher = torch.where(vis, p - zero - first, torch.zeros((), dtype=S.dtype, device=S.device))
    return p, zero, first, higher


def _gate_rows(g: torch.Tensor) -> torch.Tensor:
    """``[B, T, H]`` gate -> ``[B, H, T, 1]`` (one value per query row)."""
    return g.permute(0, 2, 1).unsqueeze(-1)


def zeros_weights(s, sigma1, sigmah, *, causal: bool = True, sigma0=None) -> torch.Tensor:
    """Reweighted zero-sum weights ``r`` ``[B, H, T, T]`` (before the angular factor).

    ``r = sigma1 * delta/n + sigmah * eps`` (+ ``sigma0 / n`` if ``sigma0`` is given, the optional
    first-layer zero-order term). Without ``sigma0`` every row sums to zero.
    """
    _, zero, first, higher = taylor_split(s, causal=causal)
    r = _gate_rows(sigma1) * first + _gate_rows(sigmah) * higher
    if sigma0 is not None:
        r = r + _gate_rows(sigma0) * zero
    return r


def softmax_weights(s, *, causal: bool = True) -> torch.Tensor:
    """Plain (convex) softmax weights ``[B, H, T, T]`` of the same logits, for comparison."""
    return taylor_split(s, causal=causal)[0]


def zeros_explicit(q, k, v, s, sigma1, sigmah, *, causal: bool = True, sigma0=None,
                   return_weights: bool = False):
    """O(T^2) ZeroS output ``[B, T, H, dv]``: ``o_t = sum_i r_{t,i} (q^_t . k^_i) v_i``.

    The oracle every faster form is tested against. With ``return_weights`` also returns the
    signed weights ``r_{t,i} cos(theta_{t,i})`` ``[B, H, T, T]``.
    """
    r = zeros_weights(s, sigma1, sigmah, causal=causal, sigma0=sigma0)
    cos = torch.einsum("bthd,bihd->bhti", q, k)
    w = r * cos
    o = torch.einsum("bhti,bihe->bthe", w, v)
    return (o, w) if return_weights else o


def zeros_quadratic(q, k, v, s, sigma1, sigmah, *, causal: bool = True, sigma0=None):
    """O(T^2) ZeroS via the closed form ``r_{t,i} = sigmah_t p_{t,i} + beta_t s_i + gamma_t``.

    The same function as :func:`zeros_explicit` (tested equal) with fewer [T, T] temporaries:
    ``p_{t,i} = exp(s_i - logcumsumexp(s)_t)``. The fastest form for short training sequences on a CPU.
    """
    B, T, H, d = q.shape
    if causal:
        n = _steps(T, s).view(1, T, 1)
        lse, P = torch.logcumsumexp(s, dim=1), s.cumsum(1)
    else:
        n = torch.full((1, T, 1), float(T), dtype=s.dtype, device=s.device)
        lse, P = torch.logsumexp(s, dim=1, keepdim=True), s.sum(1, keepdim=True)
    beta, gamma = _coefficients(s, sigma1, sigmah, sigma0, P, n)
    row = lambda x: x.permute(0, 2, 1).unsqueeze(-1)  # noqa: E731  [B, H, T, 1]
    col = s.permute(0, 2, 1).unsqueeze(-2)  # [B, H, 1, T]
    vis = _visible(T, causal, s.device)
    expo = (col - row(lse.expand(B, T, H))).masked_fill(~vis, float("-inf"))
    w = row(sigmah) * torch.exp(expo) + row(beta) * col + row(gamma.expand(B, T, H))
    cos = torch.einsum("bthd,bihd->bhti", q, k)
    w = (w * cos).masked_fill(~vis, 0.0)
    return torch.einsum("bhti,bihe->bthe", w, v)


# ----------------------------------------------------------------------------------------------
# Prefix scan (the official associative path)
# ----------------------------------------------------------------------------------------------
def _coefficients(s, sigma1, sigmah, sigma0, P, n):
    """beta_t, gamma_t ``[B, T, H]`` from the running logit sum ``P`` and counts ``n``."""
    beta = (sigma1 - sigmah) / n
    gamma = -(beta * P + sigmah) / n
    if sigma0 is not None:
        gamma = gamma + sigma0 / n
    return beta, gamma


def zeros_scan(q, k, v, s, sigma1, sigmah, *, causal: bool = True, sigma0=None,
               stabilizer: str = "global", eps: float = 1e-12):
    """Prefix-scan ZeroS (O(T d^2) time, materialises ``[B, T, H, d, dv]`` states).

    This is the official associative path: ``stabilizer="global"`` subtracts one detached max of
    ``s`` over the whole sequence and ``alpha = sigmah / (E + eps)`` (as the repository does, eps
    1e-12); ``"none"`` uses raw ``exp(s)``. Both are exact in exact arithmetic; the global max can
    underflow early steps (see :func:`zeros_chunked` for the running-max form).
    """
    if stabilizer not in ("global", "none"):
        raise ValueError(f"stabilizer must be 'global' or 'none', got {stabilizer!r}")
    B, T, H, d = q.shape
    if stabilizer == "global":
        es = torch.exp(s - s.max(dim=1, keepdim=True).values.detach())
    else:
        es = torch.exp(s)
    kv = torch.einsum("bthd,bthe->bthde", k, v)
    if causal:
        n = _steps(T, s).view(1, T, 1)
        E, P = es.cumsum(1), s.cumsum(1)
        F = (es[..., None, None] * kv).cumsum(1)
        G = (s[..., None, None] * kv).cumsum(1)
        Hs = kv.cumsum(1)
    else:
        n = torch.full((1, T, 1), float(T), dtype=s.dtype, device=s.device)
        E = es.sum(1, keepdim=True).expand(B, T, H)
        P = s.sum(1, keepdim=True).expand(B, T, H)
        F = (es[..., None, None] * kv).sum(1, keepdim=True).expand(B, T, H, d, v.shape[-1])
        G = (s[..., None, None] * kv).sum(1, keepdim=True).expand(B, T, H, d, v.shape[-1])
        Hs = kv.sum(1, keepdim=True).expand(B, T, H, d, v.shape[-1])
    alpha = sigmah / (E + eps)
    beta, gamma = _coefficients(s, sigma1, sigmah, sigma0, P, n)
    core = alpha[..., None, None] * F + beta[..., None, None] * G + gamma[..., None, None] * Hs
    return torch.einsum("bthd,bthde->bthe", q, core)


# ----------------------------------------------------------------------------------------------
# Chunked, streaming form with a running max
# ----------------------------------------------------------------------------------------------
def zeros_chunked(q, k, v, s, sigma1, sigmah, *, causal: bool = True, sigma0=None,
                  chunk_size: int = 64, return_state: bool = False):
    """ZeroS in chunks with O(d * dv) state and a running max, like online softmax.

    Causal: each row t uses its own running max ``m_t = max_{i<=t} s_i``. The carried state after
    a chunk is ``(M, E~, F~, G, H, P, n)`` with ``E~ = sum e^{s_i - M}``, ``F~ = sum e^{s_i - M} k_i v_i^T``
    and ``M`` the running max at the chunk's end; a new chunk rescales only ``E~`` and ``F~`` by
    ``exp(M_old - M_new)``. Every exponent is <= 0 and ``E_t >= 1``, so nothing underflows to 0/0.
    Bidirectional: the same accumulation over all chunks, then every row reads the final state.
    """
    B, T, H, d = q.shape
    dv = v.shape[-1]
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    dt = q.dtype
    dev = q.device
    M = torch.full((B, H), float("-inf"), dtype=dt, device=dev)
    Et = torch.zeros(B, H, dtype=dt, device=dev)
    P = torch.zeros(B, H, dtype=dt, device=dev)
    Ft = torch.zeros(B, H, d, dv, dtype=dt, device=dev)
    G = torch.zeros_like(Ft)
    Hs = torch.zeros_like(Ft)
    outs = []
    n0 = 0
    for c0 in range(0, T, chunk_size):
        c1 = min(T, c0 + chunk_size)
        C = c1 - c0
        qc, kc, vc = q[:, c0:c1], k[:, c0:c1], v[:, c0:c1]
        sc = s[:, c0:c1].permute(0, 2, 1)  # [B, H, C]
        if causal:
            m = torch.maximum(M[..., None], torch.cummax(sc, dim=-1).values)  # [B, H, C]
            tri = torch.ones(C, C, dtype=torch.bool, device=dev).tril()
            # intra-chunk exp(s_i - m_t); masked entries get exponent -inf
            ex = torch.exp((sc[:, :, None, :] - m[..., None]).masked_fill(~tri, float("-inf")))
            scale_old = torch.exp(M[..., None] - m)  # [B, H, C], 0 for the first chunk
            E = Et[..., None] * scale_old + ex.sum(-1)
            Pt = P[..., None] + sc.cumsum(-1)
            n = (n0 + torch.arange(1, C + 1, device=dev, dtype=dt)).view(1, 1, C)
            s1 = sigma1[:, c0:c1].permute(0, 2, 1)
            sh = sigmah[:, c0:c1].permute(0, 2, 1)
            s0 = None if sigma0 is None else sigma0[:, c0:c1].permute(0, 2, 1)
            alpha = sh / E
            beta, gamma = _coefficients(sc, s1, sh, s0, Pt, n)
            cos = torch.einsum("bthd,bihd->bhti", qc, kc).masked_fill(~tri, 0.0)
            w = (alpha[..., None] * ex + beta[..., None] * sc[:, :, None, :] + gamma[..., None]) * cos
            o = torch.einsum("bhti,bihe->bthe", w, vc)
            qF = torch.einsum("bthd,bhde->bthe", qc, Ft)
            qG = torch.einsum("bthd,bhde->bthe", qc, G)
            qH = torch.einsum("bthd,bhde->bthe", qc, Hs)
            o = o + (alpha * scale_old).permute(0, 2, 1)[..., None] * qF \
                + beta.permute(0, 2, 1)[..., None] * qG + gamma.permute(0, 2, 1)[..., None] * qH
            outs.append(o)
        # update the carried state with this chunk
        Mn = torch.maximum(M, sc.max(-1).values)
        e_new = torch.exp(sc - Mn[..., None])  # [B, H, C]
        resc = torch.exp(M - Mn)
        Et = Et * resc + e_new.sum(-1)
        Ft = Ft * resc[..., None, None] + torch.einsum("bhi,bihd,bihe->bhde", e_new, kc, vc)
        G = G + torch.einsum("bhi,bihd,bihe->bhde", sc, kc, vc)
        Hs = Hs + torch.einsum("bihd,bihe->bhde", kc, vc)
        P = P + sc.sum(-1)
        M = Mn
        n0 += C
    if causal:
        out = torch.cat(outs, dim=1)
    else:
        # every row sees all T keys; rows differ only by their gates
        n = torch.full((1, 1, 1), float(T), dtype=dt, device=dev)
        s1, sh = sigma1.permute(0, 2, 1), sigmah.permute(0, 2, 1)
        s0 = None if sigma0 is None else sigma0.permute(0, 2, 1)
        alpha = sh / Et[..., None]
        beta, gamma = _coefficients(None, s1, sh, s0, P[..., None], n)
        qF = torch.einsum("bthd,bhde->bthe", q, Ft)
        qG = torch.einsum("bthd,bhde->bthe", q, G)
        qH = torch.einsum("bthd,bhde->bthe", q, Hs)
        out = alpha.permute(0, 2, 1)[..., None] * qF + beta.permute(0, 2, 1)[..., None] * qG \
            + gamma.permute(0, 2, 1)[..., None] * qH
    if return_state:
        return out, {"M": M, "E": Et, "F": Ft, "G": G, "H": Hs, "P": P, "n": n0}
    return out


# ----------------------------------------------------------------------------------------------
# The 3d-wide-key linear-attention identity
# ----------------------------------------------------------------------------------------------
def three_key_features(q, k, s, sigma1, sigmah, *, sigma0=None, causal: bool = True, m=None):
    """``(Q', K')`` ``[B, T, H, 3d]`` such that ZeroS = un-normalised linear attention on them.

    ``K'_i = [e^{s_i - m} k^_i, s_i k^_i, k^_i]``, ``Q'_t = [alpha~_t q^_t, beta_t q^_t, gamma_t q^_t]``
    with ``alpha~_t = sigmah_t / sum_{j<=t} e^{s_j - m}``. ``m`` is one constant per (batch, head)
    (default: the detached global max, as a linear attention with fixed features needs).
    """
    B, T, H, d = q.shape
    if m is None:
        m = s.max(dim=1, keepdim=True).values.detach()
    es = torch.exp(s - m)
    if causal:
        n = _steps(T, s).view(1, T, 1)
        E, P = es.cumsum(1), s.cumsum(1)
    else:
        n = torch.full((1, T, 1), float(T), dtype=s.dtype, device=s.device)
        E, P = es.sum(1, keepdim=True), s.sum(1, keepdim=True)
    alpha = sigmah / E
    beta, gamma = _coefficients(s, sigma1, sigmah, sigma0, P, n)
    Kp = torch.cat([es[..., None] * k, s[..., None] * k, k], dim=-1)
    Qp = torch.cat([alpha[..., None] * q, beta[..., None] * q, gamma[..., None] * q], dim=-1)
    return Qp, Kp


def causal_linear_attention(q, k, v, *, causal: bool = True):
    """Plain un-normalised linear attention ``o_t = sum_{i<=t} (q_t . k_i) v_i`` (explicit, O(T^2)).

    The same function as flash-linear-attention's ``chunk_linear_attn(q, k, v, scale=1.0,
    normalize=False)``.
    """
    A = torch.einsum("bthd,bihd->bhti", q, k)
    if causal:
        T = q.shape[1]
        A = A.masked_fill(~_visible(T, True, q.device), 0.0)
    return torch.einsum("bhti,bihe->bthe", A, v)


def zeros_as_linear_attention(q, k, v, s, sigma1, sigmah, *, causal: bool = True, sigma0=None):
    """ZeroS computed as one linear attention on the 3d-wide features of :func:`three_key_features`."""
    Qp, Kp = three_key_features(q, k, s, sigma1, sigmah, sigma0=sigma0, causal=causal)
    return causal_linear_attention(Qp, Kp, v, causal=causal)


# ----------------------------------------------------------------------------------------------
# ZeroS-SM: the same reweighting on ordinary softmax logits (quadratic)
# ----------------------------------------------------------------------------------------------
def zeros_sm_weights(q, k, sigma1, sigmah, *, causal: bool = True, sigma0=None, scale=None):
    """ZeroS-SM weights ``[B, H, T, T]``: :func:`zeros_weights` on logits ``q_t . k_i * scale``.

    [inferred] The paper describes ZeroS-SM as the zero-sum reweighting of standard softmax
    attention; here the logits are ``q . k / sqrt(d)`` of the (RoPE-rotated, unnormalised)
    projections and the output is ``sum_i r_{t,i} v_i`` (the angular factor is already inside
    the logits).
    """
    d = q.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    S = torch.einsum("bthd,bihd->bhti", q, k) * scale
    return zeros_weights(S, sigma1, sigmah, causal=causal, sigma0=sigma0)


def zeros_sm(q, k, v, sigma1, sigmah, *, causal: bool = True, sigma0=None, scale=None,
             return_weights: bool = False):
    """ZeroS-SM output ``[B, T, H, dv]`` (O(T^2))."""
    r = zeros_sm_weights(q, k, sigma1, sigmah, causal=causal, sigma0=sigma0, scale=scale)
    o = torch.einsum("bhti,bihe->bthe", r, v)
    return (o, r) if return_weights else o

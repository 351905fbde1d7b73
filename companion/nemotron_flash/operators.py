"""The token mixers of Nemotron-Flash in pure PyTorch: recurrent and chunked forms, and a decoding step.

Layout everywhere is flash-linear-attention's: ``q, k`` ``[B, T, H, K]``, ``v`` ``[B, T, H, V]``, ``beta`` and
the log-decay ``g`` ``[B, T, H]``, the state ``S`` ``[B, H, K, V]`` (the transpose of the paper's ``V x K``
state, so that ``o_t = S_tᵀ q_t``).

**DeltaNet** (Sec. 2 of the paper's operator study; Yang et al. 2024), in the paper's orientation

    S_t = S_{t-1} (I - β_t k_t k_tᵀ) + β_t v_t k_tᵀ,        o_t = S_t q_t,

and **Gated DeltaNet** (Yang et al. 2025) multiplies the old state by a decay α_t = exp(g_t) ∈ (0, 1]:
``S_t = α_t S_{t-1} (I - β_t k_t k_tᵀ) + β_t v_t k_tᵀ``. The recurrent form :func:`delta_rule_recurrent`
is the equation, one token at a time.

The chunked form :func:`delta_rule_chunked` is this module's own derivation (not a copy of fla's): inside a
chunk of C tokens with cumulative log-decay γ_i = Σ_{j<=i} g_j and start state S₀, the corrected values
u_i = β_i (v_i - S_{i-1}'ᵀ k_i) (S' the decayed state just before token i) satisfy the unit lower-triangular
system

    (I + A) U = β ⊙ (V - e^{γ} ⊙ K S₀),     A_ij = β_i e^{γ_i - γ_j} k_iᵀ k_j  (j < i),

solved with ``torch.linalg.solve_triangular``; then ``o_i = e^{γ_i} S₀ᵀ q_i + Σ_{j<=i} e^{γ_i - γ_j} (q_iᵀ k_j) u_j``
and ``S_C = e^{γ_C} S₀ + Σ_j e^{γ_C - γ_j} k_j u_jᵀ``. Recurrent and chunked agree to float rounding
(tested at 1e-5), and both agree with fla's naive references (``fla.ops.delta_rule.naive``,
``fla.ops.gated_delta_rule.naive``) on the CPU.

**Mamba2-style SSM** (state-space duality, Dao & Gu 2024): a scalar decay per head,
``h_t = exp(Δ_t A) h_{t-1} + Δ_t B_t x_tᵀ``, ``y_t = h_tᵀ C_t + D x_t``. Written as linear attention with
``q = C``, ``k = Δ B``, ``v = x``, ``g = Δ A`` and scale 1, it is :func:`scalar_decay_recurrent` /
:func:`scalar_decay_chunked` (fla's ``simple_gla``). mamba-ssm's CUDA kernels are not used: they do not build
here and are not installed on the GPU machine; this PyTorch SSM stands in for them everywhere (said so in
every benchmark result).

**Attention** (:func:`attention`): causal softmax attention through ``scaled_dot_product_attention``, with
an optional sliding window (token t sees t - window + 1 .. t) and grouped KV heads.

On CUDA, :func:`delta_rule` (``impl="auto"``) calls fla's Triton kernels ``chunk_delta_rule`` /
``chunk_gated_delta_rule`` (imported lazily, only there); ``impl="chunked"`` or ``"recurrent"`` forces ours.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from companion.core import ParameterError, check_choice, check_int

IMPLS = ("auto", "chunked", "recurrent", "fla")


def _check_qkv(q, k, v, beta=None, g=None):
    if q.ndim != 4 or k.shape != q.shape:
        raise ValueError(f"q and k must have the same shape [B, T, H, K]; got {tuple(q.shape)} and {tuple(k.shape)}")
    if v.ndim != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"v must be [B, T, H, V] with q's first three dims {tuple(q.shape[:3])}; got {tuple(v.shape)}")
    for name, x in (("beta", beta), ("g", g)):
        if x is not None and tuple(x.shape) != tuple(q.shape[:3]):
            raise ValueError(f"{name} must be [B, T, H] = {tuple(q.shape[:3])}; got {tuple(x.shape)}")


def _scale(scale, K):
    return K ** -0.5 if scale is None else float(scale)


# ---------------------------------------------------------------------------------------------- delta rule
def delta_rule_recurrent(q, k, v, beta, g=None, *, scale=None, initial_state=None):
    """DeltaNet (``g is None``) or Gated DeltaNet, one token at a time. Returns ``(o, S_T)``, in float32."""
    _check_qkv(q, k, v, beta, g)
    B, T, H, K = q.shape
    V = v.shape[-1]
    q, k, v, beta = (x.float() for x in (q, k, v, beta))
    S = q.new_zeros(B, H, K, V) if initial_state is None else initial_state.float().clone()
    o = q.new_empty(B, T, H, V)
    s = _scale(scale, K)
    for t in range(T):
        S = delta_rule_step(S, k[:, t], v[:, t], beta[:, t], None if g is None else g[:, t].float())
        o[:, t] = s * torch.einsum("bhk,bhkv->bhv", q[:, t], S)
    return o, S


def delta_rule_step(S, k, v, beta, g=None):
    """One step of the (gated) delta rule on ``S [B, H, K, V]``; ``k [B, H, K]``, ``v [B, H, V]``, ``beta, g [B, H]``.

    ``S ← α S``, ``u = β (v - Sᵀ k)``, ``S ← S + k uᵀ`` (the paper's S(I - βkkᵀ) + βvkᵀ, transposed).
    Returns the new state (not in place)."""
    if g is not None:
        S = S * g.exp()[..., None, None]
    u = beta[..., None] * (v - torch.einsum("bhk,bhkv->bhv", k, S))
    return S + k[..., :, None] * u[..., None, :]


def _chunks(x, C):
    B, T = x.shape[:2]
    pad = (-T) % C
    if pad:
        x = F.pad(x, (0, 0) * (x.ndim - 2) + (0, pad))
    return x.reshape(B, (T + pad) // C, C, *x.shape[2:])


def delta_rule_chunked(q, k, v, beta, g=None, *, scale=None, initial_state=None, chunk_size=64):
    """The chunked (gated) delta rule (the triangular solve in the module docstring). Returns ``(o, S_T)``, float32."""
    _check_qkv(q, k, v, beta, g)
    C = check_int("chunk_size", chunk_size, lo=1)
    B, T, H, K = q.shape
    V = v.shape[-1]
    s = _scale(scale, K)
    # [B, N, C, H, ...] -> [B, N, H, C, ...]
    qc, kc, vc = (_chunks(x.float(), C).transpose(2, 3) for x in (q, k, v))
    bc = _chunks(beta.float(), C).transpose(2, 3)  # [B, N, H, C]
    gc = None if g is None else _chunks(g.float(), C).transpose(2, 3)
    N = qc.shape[1]
    if gc is None:
        gam = torch.zeros_like(bc)
    else:
        gam = gc.cumsum(-1)
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    strict = causal.clone().fill_diagonal_(False)
    diff = (gam[..., :, None] - gam[..., None, :]).masked_fill(~causal, -math.inf)  # γ_i - γ_j, j <= i
    dec = diff.exp()                                                                # [B, N, H, C, C]
    kk = kc @ kc.transpose(-1, -2)
    A = (bc[..., None] * dec * kk).masked_fill(~strict, 0.0)
    eye = torch.eye(C, device=q.device, dtype=A.dtype)
    L = eye + A
    qk = (qc @ kc.transpose(-1, -2)) * dec  # masked by dec (zero above the diagonal)
    S = q.new_zeros(B, H, K, V, dtype=torch.float32) if initial_state is None else initial_state.float().clone()
    out = qc.new_empty(B, N, H, C, V)
    eg = gam.exp()
    tail = (gam[..., -1:] - gam).exp()  # e^{γ_C - γ_j}
    for n in range(N):
        rhs = bc[:, n, ..., None] * (vc[:, n] - eg[:, n, ..., None] * (kc[:, n] @ S))
        U = torch.linalg.solve_triangular(L[:, n], rhs, upper=False, unitriangular=True)
        out[:, n] = s * (eg[:, n, ..., None] * (qc[:, n] @ S) + qk[:, n] @ U)
        S = eg[:, n, :, -1, None, None] * S + (kc[:, n] * tail[:, n, ..., None]).transpose(-1, -2) @ U
    o = out.transpose(2, 3).reshape(B, N * C, H, V)[:, :T]
    return o, S


def delta_rule(q, k, v, beta, g=None, *, scale=None, initial_state=None, chunk_size=64, impl="auto"):
    """Dispatch: fla's Triton ``chunk_delta_rule`` / ``chunk_gated_delta_rule`` on CUDA (``impl="auto"`` or
    ``"fla"``), else ours (chunked; ``impl="recurrent"`` for the token loop). Output in ``v``'s dtype."""
    check_choice("impl", impl, IMPLS)
    if impl == "fla" or (impl == "auto" and q.is_cuda):
        if not q.is_cuda:
            raise ParameterError("impl", impl, "'fla' only on CUDA tensors (fla's Triton kernels); use 'chunked' on the CPU")
        o, S = _fla_delta(q, k, v, beta, g, scale, initial_state)
        return o, S
    fn = delta_rule_recurrent if impl == "recurrent" else delta_rule_chunked
    kw = {} if impl == "recurrent" else {"chunk_size": chunk_size}
    o, S = fn(q, k, v, beta, g, scale=scale, initial_state=initial_state, **kw)
    return o.to(v.dtype), S


def _fla_delta(q, k, v, beta, g, scale, initial_state):  # pragma: no cover - CUDA only
    try:
        if g is None:
            from fla.ops.delta_rule import chunk_delta_rule as fn
        else:
            from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fn
    except ImportError as err:
        raise ImportError("impl='fla' needs flash-linear-attention (pip install fla-core==0.6.0)") from err
    kw = dict(scale=scale, initial_state=initial_state, output_final_state=True)
    if g is None:
        return fn(q, k, v, beta, **kw)
    return fn(q, k, v, g.float(), beta, **kw)


# ------------------------------------------------------------------------------ scalar decay (Mamba2 SSD)
def scalar_decay_recurrent(q, k, v, g, *, scale=None, initial_state=None):
    """``S_t = e^{g_t} S_{t-1} + k_t v_tᵀ``, ``o_t = scale · S_tᵀ q_t`` (fla's simple GLA; Mamba2's SSD with
    q = C, k = ΔB, v = x, g = ΔA, scale = 1). Returns ``(o, S_T)`` in float32."""
    _check_qkv(q, k, v, None, g)
    B, T, H, K = q.shape
    S = q.new_zeros(B, H, K, v.shape[-1], dtype=torch.float32) if initial_state is None else initial_state.float().clone()
    o = q.new_empty(B, T, H, v.shape[-1], dtype=torch.float32)
    s = _scale(scale, K)
    for t in range(T):
        S = scalar_decay_step(S, k[:, t].float(), v[:, t].float(), g[:, t].float())
        o[:, t] = s * torch.einsum("bhk,bhkv->bhv", q[:, t].float(), S)
    return o, S


def scalar_decay_step(S, k, v, g):
    """One step ``S ← e^{g} S + k vᵀ`` (``k [B, H, K]``, ``v [B, H, V]``, ``g [B, H]``)."""
    return S * g.exp()[..., None, None] + k[..., :, None] * v[..., None, :]


def scalar_decay_chunked(q, k, v, g, *, scale=None, initial_state=None, chunk_size=64):
    """The chunked (state-space-dual) form of :func:`scalar_decay_recurrent`. Returns ``(o, S_T)`` in float32."""
    _check_qkv(q, k, v, None, g)
    C = check_int("chunk_size", chunk_size, lo=1)
    B, T, H, K = q.shape
    V = v.shape[-1]
    s = _scale(scale, K)
    qc, kc, vc = (_chunks(x.float(), C).transpose(2, 3) for x in (q, k, v))
    gam = _chunks(g.float(), C).transpose(2, 3).cumsum(-1)
    N = qc.shape[1]
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    dec = (gam[..., :, None] - gam[..., None, :]).masked_fill(~causal, -math.inf).exp()
    intra = ((qc @ kc.transpose(-1, -2)) * dec) @ vc
    S = q.new_zeros(B, H, K, V, dtype=torch.float32) if initial_state is None else initial_state.float().clone()
    out = qc.new_empty(B, N, H, C, V)
    eg = gam.exp()
    tail = (gam[..., -1:] - gam).exp()
    for n in range(N):
        out[:, n] = s * (eg[:, n, ..., None] * (qc[:, n] @ S) + intra[:, n])
        S = eg[:, n, :, -1, None, None] * S + (kc[:, n] * tail[:, n, ..., None]).transpose(-1, -2) @ vc[:, n]
    return out.transpose(2, 3).reshape(B, N * C, H, V)[:, :T], S


# ---------------------------------------------------------------------------------------------- attention
def window_mask(T_q, T_k, *, offset=0, window=None, device=None):
    """Boolean ``[T_q, T_k]``: query i (absolute position offset + i) sees key j iff j <= offset + i and, with a
    window, j > offset + i - window."""
    if window is not None:
        check_int("window", window, lo=1)
    i = torch.arange(T_q, device=device)[:, None] + offset
    j = torch.arange(T_k, device=device)[None, :]
    m = j <= i
    if window is not None:
        m &= j > i - window
    return m


def attention(q, k, v, *, window=None, scale=None, offset=0, valid=None):
    """Causal softmax attention. ``q [B, Tq, Hq, D]``, ``k, v [B, Tk, Hkv, D]`` (``Hq`` a multiple of ``Hkv``:
    grouped KV heads); query i sits at absolute position ``offset + i``. ``valid`` (optional bool ``[Tk]``) masks
    unwritten cache slots. Returns ``[B, Tq, Hq, Dv]``."""
    if window is not None:
        check_int("window", window, lo=1)
    Hq, Hkv = q.shape[2], k.shape[2]
    if Hq % Hkv:
        raise ValueError(f"query heads {Hq} must be a multiple of KV heads {Hkv}")
    mask = window_mask(q.shape[1], k.shape[1], offset=offset, window=window, device=q.device)
    if valid is not None:
        mask = mask & valid[None, :]
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    o = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, scale=scale, enable_gqa=Hq != Hkv)
    return o.transpose(1, 2)

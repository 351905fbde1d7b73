"""Angle concentration: the gradient identity, the segment metric, the released formula and the hook.

**Gradient identity** (paper, Sec. 3). For a linear layer ``y_i = W x_i`` over tokens ``i`` with upstream
gradients ``δ_i = ∂L/∂y_i``, ``∇_W L = Σ_i δ_i x_iᵀ`` and therefore, exactly,

    ‖∇_W L‖_F² = Σ_{i,j} (δ_i·δ_j)(x_i·x_j) = Σ_{i,j} (δ_i·δ_j) ‖x_i‖ ‖x_j‖ cos θ_ij.

Tokens whose hidden states point alike (large ``cos θ_ij``) give large gradients.
:func:`grad_norm_sq` computes the right-hand side (a per-sample batch of it), checked against autograd.

**Angle concentration** of a prompt made of an instruction prefix ``P`` and a question ``Q`` (paper,
"angle-based reordering"), from unit hidden states ``u_i = x_i/‖x_i‖`` at one layer:

    C_intra = mean_{i≠j∈Q} cos θ_ij = (‖s_Q‖² − |Q|) / (|Q|(|Q|−1)),   s_Q = Σ_{i∈Q} u_i
    C_inter = mean_{i∈Q, j∈P} cos θ_ij = s_Q·s_P / (|Q||P|)
    C = C_intra + w · C_inter                          (w = 8 in the released code)

:func:`concentration` uses the segment sums only (O(T·d) per prompt, no T×T matrix);
:func:`concentration_explicit` builds the cosine matrix and averages its 2-D blocks (the oracle).
Both blocks lie below the diagonal (the prefix precedes the question), so the causal ``tril`` of the
code changes nothing in them.

**Released formula** (``data_processor.py``), reproduced as it is by :func:`released_metric`::

    cos = N Nᵀ ⊙ tril(ones, diagonal=1);  val = cos[110:-6][110:-6].mean() + 8·cos[110:-6][:110].mean()

``[a:b][a:b]`` slices **rows twice**: the first term is rows ``2·110 .. T−12`` over all columns, the
second rows ``110 .. 220`` over all columns, masked zeros (everything right of the super-diagonal)
included in both means. Neither is the intra/inter block; for a question shorter than ``110 + 6 + 1``
tokens the first slice is empty and the metric is NaN (``torch.mean`` of nothing). 110 and 6 are the
Qwen chat template's prefix and suffix lengths; here they are the ``prefix_len`` / ``suffix_len``
arguments.

**Online angle signal** of the sampler update (the patched TRL trainer): the same masked matrix over the
whole sequence (prompt and completion), ``sum / count_nonzero`` — :func:`online_angle`, in O(T·d) from
``(‖Σu‖² + T)/2 + Σ_i u_i·u_{i+1}`` over ``T(T+1)/2 + T − 1`` entries (the count of the mask; it equals
``count_nonzero`` unless a cosine is exactly 0). The verl fork normalises over the token axis instead
(``F.normalize(x[None], dim=1)``), a different quantity; it is not reproduced.

**Hook** (:func:`capture_inputs`): the input of a named module (``layers.<L-1>.mlp.up_proj`` by default,
the post-attention-norm output of the last block, as in ``data_processor.py``); a name the model lacks is
an error listing the available ``up_proj`` names.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from companion.core import ParameterError, check_float, check_int

__all__ = ["capture_inputs", "concentration", "concentration_explicit", "cosine_matrix", "grad_norm_sq",
           "hook_name", "online_angle", "online_angle_explicit", "released_metric", "released_slices"]


# ----------------------------------------------------------------------------------- gradient identity

def grad_norm_sq(x: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """``Σ_{i,j} (δ_i·δ_j)(x_i·x_j)``: ``‖Σ_i δ_i x_iᵀ‖_F²`` for inputs ``x [..., T, d]`` and upstream gradients
    ``delta [..., T, m]`` (leading axes are a batch of independent samples)."""
    if x.shape[:-1] != delta.shape[:-1]:
        raise ValueError(f"x {tuple(x.shape)} and delta {tuple(delta.shape)} must agree on all but the last axis")
    gx = x @ x.transpose(-1, -2)
    gd = delta @ delta.transpose(-1, -2)
    return (gx * gd).sum((-1, -2))


# ------------------------------------------------------------------------------------------ segments

def _span(name, span, T):
    if not (isinstance(span, (tuple, list)) and len(span) == 2):
        raise ParameterError(name, span, "a (start, stop) token span")
    a, b = int(span[0]), int(span[1])
    if not (0 <= a < b <= T):
        raise ParameterError(name, span, f"a non-empty span inside 0..{T} (the sequence length)")
    return a, b


def _check_spans(prefix, question, T):
    p = _span("prefix", prefix, T)
    q = _span("question", question, T)
    if q[1] - q[0] < 2:
        raise ParameterError("question", question, "a span of at least 2 tokens (C_intra averages over pairs)")
    if p[1] > q[0]:
        raise ParameterError("prefix", prefix, f"a span that ends before the question starts ({q[0]})")
    return p, q


def concentration(states: torch.Tensor, prefix, question, inter_weight: float = 8.0) -> dict:
    """``{"intra", "inter", "total"}`` from segment sums of the unit states ``[..., T, d]`` (O(T·d)).

    ``prefix`` and ``question`` are ``(start, stop)`` token spans shared by the batch."""
    check_float("inter_weight", inter_weight, lo=0.0)
    T = states.shape[-2]
    (p0, p1), (q0, q1) = _check_spans(prefix, question, T)
    u = F.normalize(states.float(), dim=-1)
    s_q = u[..., q0:q1, :].sum(-2)
    s_p = u[..., p0:p1, :].sum(-2)
    nq, npf = q1 - q0, p1 - p0
    intra = ((s_q * s_q).sum(-1) - nq) / (nq * (nq - 1))
    inter = (s_q * s_p).sum(-1) / (nq * npf)
    return {"intra": intra, "inter": inter, "total": intra + inter_weight * inter}


def cosine_matrix(states: torch.Tensor) -> torch.Tensor:
    """``N Nᵀ`` of the row-normalised states ``[..., T, d]`` (float32)."""
    u = F.normalize(states.float(), dim=-1)
    return u @ u.transpose(-1, -2)


def concentration_explicit(states: torch.Tensor, prefix, question, inter_weight: float = 8.0) -> dict:
    """The oracle of :func:`concentration`: means of the 2-D blocks of the T×T cosine matrix."""
    T = states.shape[-2]
    (p0, p1), (q0, q1) = _check_spans(prefix, question, T)
    cos = cosine_matrix(states)
    qq = cos[..., q0:q1, q0:q1]
    nq = q1 - q0
    off = ~torch.eye(nq, dtype=torch.bool)
    intra = qq[..., off].mean(-1)
    inter = cos[..., q0:q1, p0:p1].mean((-1, -2))
    return {"intra": intra, "inter": inter, "total": intra + inter_weight * inter}


# ----------------------------------------------------------------------------------- released formula

def released_slices(T: int, prefix_len: int = 110, suffix_len: int = 6) -> dict:
    """The row ranges ``cos[p:-s][p:-s]`` and ``cos[p:-s][:p]`` select in a T×T matrix (all columns):
    ``{"intra": (start, stop), "inter": (start, stop)}`` (an empty range has ``start >= stop``)."""
    rows = list(range(T))[prefix_len:-suffix_len]
    intra = rows[prefix_len:-suffix_len]
    inter = rows[:prefix_len]
    span = lambda r: (r[0], r[-1] + 1) if r else (min(2 * prefix_len, T), min(2 * prefix_len, T))  # noqa: E731
    return {"intra": span(intra), "inter": span(inter)}


def released_metric(states: torch.Tensor, prefix_len: int = 110, suffix_len: int = 6,
                    inter_weight: float = 8.0, parts: bool = False):
    """The released ranking metric of one prompt's states ``[T, d]`` (or a batch ``[B, T, d]`` of prompts of one
    length), as ``data_processor.py`` computes it: NaN where its first slice is empty. With ``parts=True``:
    ``(first term, second term, value)``."""
    check_int("prefix_len", prefix_len, lo=0)
    check_int("suffix_len", suffix_len, lo=1)  # -0 would select nothing at all
    if states.dim() not in (2, 3):
        raise ValueError(f"states must be [T, d] or [B, T, d], got shape {tuple(states.shape)}")
    cos = cosine_matrix(states)
    cos = cos * torch.tril(torch.ones_like(cos), diagonal=1)
    rows = cos[..., prefix_len:-suffix_len, :]          # cos[110:-6]
    first = rows[..., prefix_len:-suffix_len, :].mean((-1, -2))   # ...[110:-6].mean()
    second = rows[..., :prefix_len, :].mean((-1, -2))             # ...[:110].mean()
    val = first + inter_weight * second
    return (first, second, val) if parts else val


# ----------------------------------------------------------------------------------------- online angle

def online_angle(states: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """Mean of ``cos ⊙ tril(ones, 1)`` over the mask's entries for each sequence ``[B, T, d]`` (valid tokens
    ``:lengths[b]``), in O(T·d)."""
    u = F.normalize(states.float(), dim=-1)
    B, T, _ = u.shape
    if lengths is None:
        lengths = torch.full((B,), T)
    lengths = torch.as_tensor(lengths).to(u.device)
    if lengths.shape != (B,) or int(lengths.min()) < 1 or int(lengths.max()) > T:
        raise ValueError(f"lengths must be {B} integers in 1..{T}")
    valid = (torch.arange(T, device=u.device)[None] < lengths[:, None]).float()
    u = u * valid[..., None]
    s = u.sum(1)
    n = lengths.float()
    lower = ((s * s).sum(-1) + n) / 2
    sup = (u[:, :-1] * u[:, 1:]).sum((-1, -2))
    return (lower + sup) / (n * (n + 1) / 2 + n - 1)


def online_angle_explicit(states: torch.Tensor) -> torch.Tensor:
    """The patched trainer's formula on one sequence ``[T, d]``: ``sum(cos⊙tril(1)) / count_nonzero``."""
    cos = cosine_matrix(states)
    cos = cos * torch.tril(torch.ones_like(cos), diagonal=1)
    return cos.sum() / (cos != 0).sum()


# ------------------------------------------------------------------------------------------------ hook

def hook_name(model, layer: int | None = None) -> str:
    """``layers.<layer>.mlp.up_proj`` (the last block by default; negative layers count from the end)."""
    n = len(model.layers)
    layer = n - 1 if layer is None else layer
    check_int("layer", layer, lo=-n, hi=n - 1)
    return f"layers.{layer % n}.mlp.up_proj"


@contextlib.contextmanager
def capture_inputs(model, names, keep_grad: bool = False):
    """``with capture_inputs(model, ["layers.1.mlp.up_proj"]) as store: model(ids)``: ``store[name]`` is the
    module's input ``[B, T, d]``; with ``keep_grad`` also ``store[name + ":out"]``, its output with
    ``retain_grad()``, so after ``backward()`` its ``.grad`` is δ of the identity."""
    if isinstance(names, str):
        names = [names]
    modules = dict(model.named_modules())
    for name in names:
        if name not in modules:
            avail = [k for k in modules if k.endswith("up_proj")] or [k for k in modules if k][:20]
            raise ParameterError("hook", name, "a module of the model, e.g. one of " + ", ".join(avail))
    store, handles = {}, []

    def make(name):
        def hook(_mod, inputs, output):
            store[name] = inputs[0] if keep_grad else inputs[0].detach()
            if keep_grad and output.requires_grad:
                output.retain_grad()
                store[name + ":out"] = output
        return hook

    try:
        for name in names:
            handles.append(modules[name].register_forward_hook(make(name)))
        yield store
    finally:
        for h in handles:
            h.remove()

"""Sparse prefill attention and the Δ correction (paper 09, Δ Attention), token-granular, in PyTorch.

Paper: Willette, Lee, Hwang, "Δ Attention: Fast and Accurate Sparse Attention Inference by Delta
Correction", NeurIPS 2025 (arXiv 2505.11254); official code github.com/jeffwillette/delta-attention
(`delta_attention/llama.py::delta_forward`, read at b1b2f77).

* Sparse attention A*V (the paper's "sliding window with sink tokens", StreamingLLM): key j is kept
  for query i when j < sink or the distance is below the window. Causal: j <= i and i − j < window
  (the window holds the query itself and the window − 1 keys before it). Symmetric (for a
  bidirectional encoder such as MiniLM): |i − j| < window, so the same window looks back and forward
  (2·window − 1 keys); `window = N` keeps every key in both variants. Softmax is renormalised over the
  kept keys (A* in the paper). Token granularity, as the paper's mechanism states it; the official
  code (and our GPU path) uses HiP's / our block-sparse kernel, i.e. block granularity.
* Recompute (Eq. 5): the anchor rows (i mod γ = 0) and the dense tail replaced by dense rows, no
  propagation.
* Δ (Algorithm 1, Eq. 4, 6, 7): Δ_j = (ÃV)_j − (A*V)_{jγ} added to rows jγ … jγ + γ − 1.
* Dense tail (official `cut_n` rule): cut_n = N mod γ + max(tail, γ), s_p = N − cut_n; rows ≥ s_p are
  computed fully dense. The official code hard-codes tail = 128; here it is a parameter.
  Deviations: (1) when γ does not divide max(tail, γ) we round max(tail, γ) up to a multiple of γ so
  that s_p stays a multiple of γ (the official reshape would fail there; the official default
  γ = 64, tail = 128 is unchanged); (2) when cut_n ≥ N every row is dense (s_p = 0) instead of a
  negative s_p; (3) anchor rows are written as the dense row, exactly (official: sparse + (dense −
  sparse), the same number up to rounding).

The dense rows come from the query-sparse op `companion_kernels.query_sparse` (its PyTorch reference
on a CPU, its Triton kernel on a GPU), so the library and the GPU benchmark share one code path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from companion.core import check_bool, check_choice, check_int
from companion_kernels.query_sparse import delta_rows, query_sparse_delta_

MODES = ("dense", "sparse", "recompute", "delta")


# ----------------------------------------------------------------------------------------------
# configuration and the official cut_n rule
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DeltaPlan:
    """Which rows Algorithm 1 computes densely for a sequence of n tokens."""

    n: int
    gamma: int
    tail: int
    cut_n: int       # rows at the end computed fully dense
    s_p: int         # rows 0 … s_p − 1 are sparse (+Δ); s_p is a multiple of γ

    @property
    def num_anchors(self) -> int:
        return self.s_p // self.gamma

    def anchors(self, device=None) -> torch.Tensor:
        return torch.arange(0, self.s_p, self.gamma, device=device)

    def dense_rows(self, device=None) -> torch.Tensor:
        """Anchors then tail, strictly increasing (the query-sparse op's `rows`)."""
        return delta_rows(self.n, self.gamma, self.s_p, device=device)


def delta_plan(n: int, gamma: int, tail: int = 128) -> DeltaPlan:
    """The official `cut_n = n mod γ + max(128, γ)` rule with the tail length as a parameter."""
    n = check_int("n", n, lo=1)
    gamma = check_int("gamma", gamma, lo=1, hi=n)
    tail = check_int("tail", tail, lo=0, hi=n)
    cut_n = n % gamma + gamma * math.ceil(max(tail, gamma) / gamma)
    cut_n = min(cut_n, n)
    return DeltaPlan(n=n, gamma=gamma, tail=tail, cut_n=cut_n, s_p=n - cut_n)


def check_sparse_config(n: int, *, sink: int, window: int) -> tuple[int, int]:
    """sink in [0, N], window in [1, N]: a clear error otherwise."""
    n = check_int("n", n, lo=1)
    sink = check_int("sink", sink, lo=0, hi=n)
    window = check_int("window", window, lo=1, hi=n)
    return sink, window


# ----------------------------------------------------------------------------------------------
# token-granular masks and masked softmax attention
# ----------------------------------------------------------------------------------------------

def sink_window_mask(n: int, *, sink: int, window: int, causal: bool = True, device=None) -> torch.Tensor:
    """Bool [N, N]: True where query i keeps key j (see the module docstring for the two variants)."""
    sink, window = check_sparse_config(n, sink=sink, window=window)
    i = torch.arange(n, device=device)[:, None]
    j = torch.arange(n, device=device)[None, :]
    if causal:
        return (j <= i) & ((j < sink) | (i - j < window))
    return (j < sink) | ((i - j).abs() < window)


def dense_mask(n: int, *, causal: bool = True, device=None) -> torch.Tensor:
    i = torch.arange(n, device=device)[:, None]
    j = torch.arange(n, device=device)[None, :]
    return j <= i if causal else torch.ones(n, n, dtype=torch.bool, device=device)


def _expand_kv(x: torch.Tensor, hq: int) -> torch.Tensor:
    return x if x.shape[1] == hq else x.repeat_interleave(hq // x.shape[1], dim=1)


def masked_attention(q, k, v, mask: torch.Tensor, *, sm_scale: float | None = None,
                     return_probs: bool = False):
    """softmax(q kᵀ · scale, restricted to `mask`) v, renormalised over the kept keys.

    q [B, Hq, N, D], k/v [B, Hkv, N, D] (GQA), mask bool [N, N] (or broadcastable). Without
    `return_probs` this is ``torch.nn.functional.scaled_dot_product_attention`` with the bool mask
    (the same numbers up to rounding, ~7x faster on a CPU than materialising the masked scores).
    """
    d = q.shape[-1]
    scale = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
    k, v = _expand_kv(k, q.shape[1]), _expand_kv(v, q.shape[1])
    if not return_probs:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.matmul(probs, v)
    return (out, probs) if return_probs else out


# ----------------------------------------------------------------------------------------------
# the four modes
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Method:
    """How every attention layer is computed: mode in MODES, sink/window of the sparse pass, γ and
    tail of the Δ / recompute step, causal or symmetric (bidirectional) masks."""

    mode: str = "delta"
    sink: int = 4
    window: int = 32
    gamma: int = 16
    tail: int = 32
    causal: bool = True

    def __post_init__(self):
        check_choice("mode", self.mode, MODES)
        check_int("sink", self.sink, lo=0)
        check_int("window", self.window, lo=1)
        check_int("gamma", self.gamma, lo=1)
        check_int("tail", self.tail, lo=0)
        check_bool("causal", self.causal)

    def label(self) -> str:
        if self.mode == "dense":
            return "dense"
        base = f"sparse (s={self.sink}, w={self.window})"
        if self.mode == "sparse":
            return base
        return base + (" + recompute" if self.mode == "recompute" else " + Δ") + f" γ={self.gamma}"


def delta_attention(q, k, v, method: Method, *, sm_scale: float | None = None, impl: str = "auto"):
    """One attention layer under `method`. q [B, Hq, N, D], k/v [B, Hkv, N, D] -> [B, Hq, N, D].

    dense: full (causal or bidirectional) softmax attention. sparse: A*V. recompute: A*V with anchor
    and tail rows dense. delta: Algorithm 1 (A*V + repeated Δ, dense tail).
    """
    n = q.shape[2]
    if method.mode == "dense":
        return masked_attention(q, k, v, dense_mask(n, causal=method.causal, device=q.device), sm_scale=sm_scale)
    mask = sink_window_mask(n, sink=method.sink, window=method.window, causal=method.causal, device=q.device)
    out = masked_attention(q, k, v, mask, sm_scale=sm_scale)              # A*V
    if method.mode == "sparse":
        return out
    plan = delta_plan(n, method.gamma, method.tail)
    return query_sparse_delta_(out, q, k, v, gamma=plan.gamma, num_delta_rows=plan.s_p,
                               propagate=method.mode == "delta", causal=method.causal,
                               sm_scale=sm_scale, impl=impl)


def compute_fraction(n: int, method: Method) -> float:
    """Attention score entries a method computes, as a share of dense attention's.

    Counts every kept entry of the sparse pass (all N rows, as the official code runs the sparse
    kernel over the whole sequence), plus the full rows of the anchors and the tail.
    Causal: dense = N(N+1)/2; bidirectional: N².
    """
    if method.mode == "dense":
        return 1.0
    sink, window = check_sparse_config(n, sink=method.sink, window=method.window)
    i = torch.arange(n, dtype=torch.float64)
    lo = torch.clamp(i - window + 1, min=0)                     # the window band [lo, hi]
    hi = i if method.causal else torch.clamp(i + window - 1, max=n - 1)
    visible = hi + 1 if method.causal else torch.full_like(i, float(n))
    sinks = torch.minimum(visible, torch.full_like(i, float(sink)))   # sink keys the row may see
    overlap = torch.clamp(torch.minimum(hi, sinks - 1) - lo + 1, min=0)  # ... already in the band
    sparse = (hi - lo + 1) + sinks - overlap
    full = i + 1 if method.causal else torch.full_like(i, float(n))
    total = full.sum()
    cost = sparse.sum()
    if method.mode in ("recompute", "delta"):
        plan = delta_plan(n, method.gamma, method.tail)
        cost = cost + full[plan.dense_rows()].sum()
    return float(cost / total)

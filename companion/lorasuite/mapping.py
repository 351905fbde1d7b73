"""Layer and head allocation of LoRASuite (paper §3.2-3.3, Alg. 1; code ``max_layer_similarity_mapping``,
``max_head_similarity_mapping``).

**Layers.** Given the similarity matrix S ∈ R^{l_o × l_n} (S_ij = CKA of old layer i and new layer j,
:mod:`~companion.lorasuite.cka`), Alg. 1 picks an order-preserving, one-to-one map m from the shallower
model's layers into the deeper one's that maximises Σ_i S[i, m(i)], with m(i) − i ≤ offset, by dynamic
programming::

    dp[0, j] = S[0, j]                                     (j ≤ offset)
    dp[i, j] = S[i, j] + max_{i-1 ≤ k < j} dp[i-1, k]       (i ≤ j ≤ i + offset)

The official code fixes offset = |l_n − l_o|, which for a strictly increasing map is no restriction at
all (m(i) ≤ i + l_n − l_o always holds); here the offset is a parameter in [0, ∞) and values above
|l_n − l_o| act as |l_n − l_o|. When the old model is deeper (MiniCPM-S-1B, 52 layers → MiniCPM-2B, 40),
the code transposes S and maps each *new* layer to an old one; :func:`layer_mapping` does the same and
always returns ``(old, new)`` pairs. Two comparison rules for the explorer: ``"greedy"`` (each layer in
order takes the most similar still-allowed partner) and ``"proportional"`` (relative depth, S unused).

**Heads.** Each head is represented by its input-independent bilinear forms W_QK^h = W_Q^hᵀ W_K^h and
W_VO^h = W_V^hᵀ W_O^hᵀ (nn.Linear layout, d × d), the old ones moved into the new space by the transfer
matrix W_h: W_hᵀ W_QK^a W_h. The similarity of old head a and new head b is the cosine of the
concatenated flattened pair, and the heads are matched one-to-one by the Hungarian algorithm
(``scipy.optimize.linear_sum_assignment`` on −sim). The d × d matrices are never formed here: with
⟨X, Y⟩ the Frobenius product,

    ⟨W_hᵀ Q_aᵀ K_a W_h, Q_bᵀ K_b⟩ = ⟨Q_a W_h Q_bᵀ, K_a W_h K_bᵀ⟩,
    ⟨W_hᵀ V_aᵀ O_aᵀ W_h, V_bᵀ O_bᵀ⟩ = ⟨V_a W_h V_bᵀ, O_aᵀ W_h O_b⟩,

(and the norms alike), which costs O(d_h² d) per head pair instead of O(d²) memory; it equals the
explicit form to rounding (:func:`head_similarity_explicit`, tested). GQA: K and V heads are repeated to
the query-head count before this (as the code's ``repeat_kv``).
"""

from __future__ import annotations

import itertools

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from companion.core import ParameterError, check_choice, check_int

LAYER_RULES = ("dp", "greedy", "proportional")


def _check_matrix(name, S) -> np.ndarray:
    S = np.asarray(S, dtype=float)
    if S.ndim != 2 or min(S.shape) < 1 or not np.all(np.isfinite(S)):
        raise ParameterError(name, getattr(S, "shape", S), "a finite 2-D matrix with at least one row and column")
    return S


def _check_offset(offset, n, m) -> int:
    if offset is None:
        return m - n
    check_int("offset", offset, lo=0)
    return min(offset, m - n)


def _dp(S: np.ndarray, offset: int) -> tuple[list[int], float]:
    """Alg. 1 on S (n ≤ m rows ≤ columns): the strictly increasing map with j − i ≤ offset of largest sum."""
    n, m = S.shape
    dp = np.full((n, m), -np.inf)
    back = np.zeros((n, m), dtype=int)
    dp[0, : offset + 1] = S[0, : offset + 1]
    for i in range(1, n):
        for j in range(i, min(m, i + offset + 1)):
            prev = dp[i - 1, i - 1:j]
            k = int(np.argmax(prev))
            if np.isfinite(prev[k]):
                dp[i, j] = prev[k] + S[i, j]
                back[i, j] = i - 1 + k
    j = int(np.argmax(dp[n - 1]))
    total = float(dp[n - 1, j])
    path = [0] * n
    for i in range(n - 1, -1, -1):
        path[i] = j
        j = back[i, j]
    return path, total


def _greedy(S: np.ndarray, offset: int) -> list[int]:
    n, m = S.shape
    path, prev = [], -1
    for i in range(n):
        lo, hi = prev + 1, min(i + offset, m - n + i)  # keep room for the layers still to place
        j = lo + int(np.argmax(S[i, lo:hi + 1]))
        path.append(j)
        prev = j
    return path


def _proportional(n: int, m: int) -> list[int]:
    if n == 1:
        return [0]
    return [int(round(i * (m - 1) / (n - 1))) for i in range(n)]


def layer_mapping(S, rule: str = "dp", offset: int | None = None) -> dict:
    """Map layers by similarity ``S`` (old × new). Returns ``{"pairs": [(old, new), ...], "total": Σ S,
    "rule", "offset", "transposed"}``; ``offset=None`` means |l_n − l_o| (the official code)."""
    S = _check_matrix("S", S)
    check_choice("rule", rule, LAYER_RULES)
    transposed = S.shape[0] > S.shape[1]
    T = S.T if transposed else S
    n, m = T.shape
    off = _check_offset(offset, n, m)
    if rule == "dp":
        path, _ = _dp(T, off)
    elif rule == "greedy":
        path = _greedy(T, off)
    else:
        path = _proportional(n, m)
    pairs = sorted((int(j), int(i)) if transposed else (int(i), int(j)) for i, j in enumerate(path))
    total = float(sum(S[a, b] for a, b in pairs))
    return {"pairs": pairs, "total": total, "rule": rule, "offset": off, "transposed": transposed}


def brute_force_layer_mapping(S, offset: int | None = None) -> tuple[list[tuple[int, int]], float]:
    """Exhaustive search over all strictly increasing maps with m(i) − i ≤ offset (the DP's oracle)."""
    S = _check_matrix("S", S)
    transposed = S.shape[0] > S.shape[1]
    T = S.T if transposed else S
    n, m = T.shape
    off = _check_offset(offset, n, m)
    best, best_path = -np.inf, None
    for cols in itertools.combinations(range(m), n):
        if any(j - i > off for i, j in enumerate(cols)):
            continue
        s = float(sum(T[i, j] for i, j in enumerate(cols)))
        if s > best:
            best, best_path = s, cols
    pairs = sorted((int(j), int(i)) if transposed else (int(i), int(j)) for i, j in enumerate(best_path))
    return pairs, best


# ------------------------------------------------------------------------------------------ heads

def _heads_rows(W: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(H·d_h, d) → (H, d_h, d): one block of rows per head (q/k/v_proj weights)."""
    return W.reshape(n_heads, W.shape[0] // n_heads, W.shape[1])


def _heads_cols(W: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(d, H·d_h) → (H, d, d_h): one block of columns per head (o_proj weight)."""
    return W.reshape(W.shape[0], n_heads, W.shape[1] // n_heads).permute(1, 0, 2)


def repeat_kv_heads(W: torch.Tensor, n_kv: int, n_rep: int) -> torch.Tensor:
    """(H_kv·d_h, d) → (H_kv·n_rep·d_h, d), K/V head g's rows repeated for query heads g·n_rep … g·n_rep+n_rep−1."""
    check_int("n_kv", n_kv, lo=1)
    check_int("n_rep", n_rep, lo=1)
    if W.shape[0] % n_kv:
        raise ParameterError("n_kv", n_kv, f"a divisor of the weight's {W.shape[0]} rows")
    blocks = W.reshape(n_kv, W.shape[0] // n_kv, W.shape[1])
    return blocks.repeat_interleave(n_rep, dim=0).reshape(-1, W.shape[1])


def head_similarity(old: dict, new: dict, W_h: torch.Tensor, n_heads_old: int, n_heads_new: int) -> torch.Tensor:
    """sim[a, b] = cos(vec(W_hᵀ W_QK^a W_h ‖ W_hᵀ W_VO^a W_h), vec(W_QK^b ‖ W_VO^b)), via the factorised
    Frobenius products of the module docstring. ``old``/``new``: ``{"q", "k", "v", "o"}`` nn.Linear weights
    with K/V already repeated to the query-head count."""
    dev = old["q"].device
    W_h = W_h.to(dev, torch.float64)
    f = {k: v.to(dev, torch.float64) for k, v in old.items()}
    g = {k: v.to(dev, torch.float64) for k, v in new.items()}
    Qa, Ka, Va = (_heads_rows(f[k], n_heads_old) for k in "qkv")
    Qb, Kb, Vb = (_heads_rows(g[k], n_heads_new) for k in "qkv")
    Oa, Ob = _heads_cols(f["o"], n_heads_old), _heads_cols(g["o"], n_heads_new)   # (H, d, d_h)
    QaW, KaW, VaW = Qa @ W_h, Ka @ W_h, Va @ W_h                                  # (H_o, d_h, d_n)
    OaW = Oa.transpose(1, 2) @ W_h                                                # (H_o, d_h, d_n)

    def cross(X, Y):  # X: (H_o, d_h, d_n), Y: (H_n, d_h, d_n) → (H_o, H_n, d_h, d_h) = X_a Y_bᵀ
        return torch.einsum("aid,bjd->abij", X, Y)

    num = (cross(QaW, Qb) * cross(KaW, Kb)).sum((-1, -2)) + (cross(VaW, Vb) * cross(OaW, Ob.transpose(1, 2))).sum((-1, -2))

    def gram(X):  # (H, d_h, d) → X Xᵀ
        return X @ X.transpose(1, 2)

    n_old = (gram(QaW) * gram(KaW)).sum((-1, -2)) + (gram(VaW) * gram(OaW)).sum((-1, -2))
    n_new = (gram(Qb) * gram(Kb)).sum((-1, -2)) + (gram(Vb) * gram(Ob.transpose(1, 2))).sum((-1, -2))
    denom = torch.sqrt(n_old.clamp_min(0))[:, None] * torch.sqrt(n_new.clamp_min(0))[None, :]
    return (num / denom.clamp_min(1e-300)).to(torch.float32).cpu()


def head_similarity_explicit(old: dict, new: dict, W_h: torch.Tensor, n_heads_old: int, n_heads_new: int) -> torch.Tensor:
    """The official code's form, with the d × d matrices built explicitly (the oracle for tests)."""
    W_h = W_h.to(torch.float64)
    f = {k: v.to(torch.float64) for k, v in old.items()}
    g = {k: v.to(torch.float64) for k, v in new.items()}
    dho, dhn = f["q"].shape[0] // n_heads_old, g["q"].shape[0] // n_heads_new
    sim = torch.zeros(n_heads_old, n_heads_new, dtype=torch.float64)
    for a in range(n_heads_old):
        r = slice(a * dho, (a + 1) * dho)
        qk1 = W_h.T @ f["q"][r].T @ f["k"][r] @ W_h
        vo1 = W_h.T @ f["v"][r].T @ f["o"][:, r].T @ W_h
        v1 = torch.cat([qk1.reshape(-1), vo1.reshape(-1)])
        for b in range(n_heads_new):
            s = slice(b * dhn, (b + 1) * dhn)
            v2 = torch.cat([(g["q"][s].T @ g["k"][s]).reshape(-1), (g["v"][s].T @ g["o"][:, s].T).reshape(-1)])
            sim[a, b] = (v1 @ v2) / (v1.norm() * v2.norm())
    return sim.to(torch.float32)


def head_mapping(sim) -> dict:
    """The Hungarian assignment maximising Σ sim[a, π(a)] (``linear_sum_assignment(-sim)``). With more old
    heads than new ones only min(H_o, H_n) old heads are matched (the official code raises instead).
    Returns ``{"pairs": [(a, b), ...], "total": Σ sim}``."""
    S = _check_matrix("sim", np.asarray(sim, dtype=float))
    rows, cols = linear_sum_assignment(-S)
    pairs = sorted(zip(rows.tolist(), cols.tolist()))
    return {"pairs": pairs, "total": float(S[rows, cols].sum())}


def brute_force_head_mapping(sim) -> tuple[list[tuple[int, int]], float]:
    """Exhaustive search over injective maps of the smaller side (the Hungarian oracle, H ≤ 7)."""
    S = _check_matrix("sim", np.asarray(sim, dtype=float))
    n, m = S.shape
    best, best_pairs = -np.inf, None
    if n <= m:
        for cols in itertools.permutations(range(m), n):
            s = float(sum(S[i, j] for i, j in enumerate(cols)))
            if s > best:
                best, best_pairs = s, [(i, j) for i, j in enumerate(cols)]
    else:
        for rows in itertools.permutations(range(n), m):
            s = float(sum(S[i, j] for j, i in enumerate(rows)))
            if s > best:
                best, best_pairs = s, sorted((i, j) for j, i in enumerate(rows))
    return sorted(best_pairs), best

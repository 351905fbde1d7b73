"""Minibatch centered kernel alignment between the layers of two models (paper §3.2; Nguyen et al. 2021).

For one minibatch k of n examples, X_k (n × d_o) the outputs of old layer i and Y_k (n × d_n) those of
new layer j, the linear Gram matrices K = X Xᵀ, L = Y Yᵀ get their diagonals zeroed (K̃, L̃) and

    HSIC₁(K, L) = [ tr(K̃ L̃) + (1ᵀK̃1)(1ᵀL̃1) / ((n−1)(n−2)) − 2/(n−2) · 1ᵀK̃L̃1 ] / (n(n−3)),

the unbiased estimator of HSIC. Across minibatches

    CKA(i, j) = mean_k HSIC₁(K_k, L_k) / sqrt( mean_k HSIC₁(K_k, K_k) · mean_k HSIC₁(L_k, L_k) ).

CKA(X, X) = 1, and CKA is invariant to orthogonal maps and isotropic scaling of either side (K is).

**Not in the official code.** The repository ships only the precomputed matrices (``tmp/*_CKA.pt``); which
texts, tokens and minibatches produced them is unstated. Here it is a parameter: a *minibatch* is a batch
of text windows run through each model; its *examples* are ``tokens`` token positions drawn (seeded)
from all positions of the batch; the features are the residual-stream outputs of each decoder layer
(captured with forward hooks, before any final norm). :func:`hsic_terms` keeps the per-minibatch HSIC
values so that the CKA of the first k minibatches (the explorer's control) is a prefix mean.
"""

from __future__ import annotations

import numpy as np
import torch

from companion.core import ParameterError, check_int


def _centered_stats(feats: torch.Tensor):
    """feats: (L, n, d) → flattened Gram matrices with zero diagonal (L, n²), their row sums (L, n), totals (L,)."""
    K = feats @ feats.transpose(1, 2)
    n = K.shape[-1]
    K = K * (1 - torch.eye(n, dtype=K.dtype))
    rows = K.sum(-1)
    return K.reshape(K.shape[0], -1), rows, rows.sum(-1)


def hsic1_matrix(X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """HSIC₁ between every layer of ``X`` (L_x, n, d_x) and every layer of ``Y`` (L_y, n, d_y): (L_x, L_y)."""
    if X.ndim != 3 or Y.ndim != 3 or X.shape[1] != Y.shape[1]:
        raise ParameterError("features", (tuple(X.shape), tuple(Y.shape)), "(layers, n, d) tensors with the same n")
    n = X.shape[1]
    check_int("n (examples per minibatch)", n, lo=4)
    X, Y = X.to(torch.float64), Y.to(torch.float64)
    kx, rx, sx = _centered_stats(X)
    ky, ry, sy = _centered_stats(Y)
    trace = kx @ ky.T
    return (trace + sx[:, None] * sy[None, :] / ((n - 1) * (n - 2)) - 2.0 / (n - 2) * (rx @ ry.T)) / (n * (n - 3))


def hsic1(K: torch.Tensor, L: torch.Tensor) -> float:
    """The unbiased HSIC₁ of two n × n Gram matrices, written out literally (the oracle for tests)."""
    n = K.shape[0]
    K = K.double().clone().fill_diagonal_(0)
    L = L.double().clone().fill_diagonal_(0)
    one = torch.ones(n, dtype=torch.float64)
    value = torch.trace(K @ L) + (one @ K @ one) * (one @ L @ one) / ((n - 1) * (n - 2)) - 2.0 / (n - 2) * (one @ K @ L @ one)
    return float(value / (n * (n - 3)))


def hsic_terms(old_feats, new_feats) -> dict:
    """Per-minibatch HSIC terms. ``old_feats``/``new_feats``: lists (one per minibatch) of (L, n, d) tensors.
    Returns ``{"xy": (k, L_o, L_n), "xx": (k, L_o), "yy": (k, L_n)}`` as numpy arrays."""
    if len(old_feats) != len(new_feats) or not old_feats:
        raise ParameterError("minibatches", (len(old_feats), len(new_feats)), "the same number (>= 1) for both models")
    xy, xx, yy = [], [], []
    for X, Y in zip(old_feats, new_feats):
        xy.append(hsic1_matrix(X, Y).numpy())
        xx.append(np.array([hsic1_matrix(X[i:i + 1], X[i:i + 1])[0, 0].item() for i in range(X.shape[0])]))
        yy.append(np.array([hsic1_matrix(Y[j:j + 1], Y[j:j + 1])[0, 0].item() for j in range(Y.shape[0])]))
    return {"xy": np.stack(xy), "xx": np.stack(xx), "yy": np.stack(yy)}


def cka_from_terms(terms: dict, n_minibatches: int | None = None) -> np.ndarray:
    """CKA (L_o × L_n) from the first ``n_minibatches`` minibatches' HSIC terms (all when None)."""
    k = terms["xy"].shape[0]
    n_minibatches = k if n_minibatches is None else check_int("n_minibatches", n_minibatches, lo=1, hi=k)
    xy = terms["xy"][:n_minibatches].mean(0)
    xx = terms["xx"][:n_minibatches].mean(0)
    yy = terms["yy"][:n_minibatches].mean(0)
    return xy / np.sqrt(np.clip(xx[:, None] * yy[None, :], 1e-300, None))


def linear_cka(X: torch.Tensor, Y: torch.Tensor) -> float:
    """CKA of two single-minibatch feature matrices X (n × d_x), Y (n × d_y)."""
    t = hsic_terms([X[None]], [Y[None]])
    return float(cka_from_terms(t)[0, 0])


@torch.no_grad()
def layer_outputs(model, ids: torch.Tensor) -> torch.Tensor:
    """The residual-stream output of every decoder layer for token ids (B, T): (L, B·T, d), float32."""
    layers = model.model.layers
    outs = []
    hooks = [layer.register_forward_hook(lambda _m, _i, o: outs.append(o[0] if isinstance(o, tuple) else o))
             for layer in layers]
    try:
        model(input_ids=ids.to(next(model.parameters()).device), use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    return torch.stack([o.reshape(-1, o.shape[-1]).float().cpu() for o in outs])


def layer_cka_terms(old_model, new_model, old_batches, new_batches, tokens: int = 256, seed: int = 0) -> dict:
    """HSIC terms of minibatch CKA between all layers of two models. ``old_batches``/``new_batches``: the same
    text windows tokenised for each model (lists of (B, T) id tensors); ``tokens`` positions per minibatch."""
    check_int("tokens", tokens, lo=4)
    gen = torch.Generator().manual_seed(seed)
    old_feats, new_feats = [], []
    for a, b in zip(old_batches, new_batches):
        if a.shape != b.shape:
            raise ParameterError("batches", (tuple(a.shape), tuple(b.shape)), "the same windows for both models")
        X, Y = layer_outputs(old_model, a), layer_outputs(new_model, b)
        n = X.shape[1]
        if tokens > n:
            raise ParameterError("tokens", tokens, f"at most the {n} positions of one minibatch")
        pick = torch.randperm(n, generator=gen)[:tokens]
        old_feats.append(X[:, pick])
        new_feats.append(Y[:, pick])
    return {**hsic_terms(old_feats, new_feats), "tokens": tokens}

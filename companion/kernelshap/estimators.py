"""The paper's estimator family: regression (LS) and matrix-vector (MV) sketches (Sec. 2, Thm 2.1).

With α = (v([d]) - v(∅))/d, Q an orthonormal basis of 1^⊥, Shapley kernel weights k(S) and a sketch
S (rows = sampled coalitions, diagonal of SᵀS = the sample weights w):

- regression:     φ^R_λ = α1 + Q argmin_x Σ_i w_i k(S_i) (z_iᵀQx − (v(S_i) − v(∅) − λ|S_i|))²
- matrix-vector:  φ^M_λ = α1 + d/(d−1) · (I − 11ᵀ/d) Σ_i w_i k(S_i) z_i (v(S_i) − v(∅) − λ|S_i|)

(the paper writes them as Q argmin ‖S(Ux − b_λ)‖ and Q UᵀSᵀS b_λ with U = √W Z Q / √((d−1)/d), which
is the same thing). Both satisfy efficiency exactly: 1ᵀφ = dα = v([d]) − v(∅).

Named instances: KernelSHAP = LS + kernel sampling, λ = α; LeverageSHAP = LS + leverage, λ = α;
unbiased KernelSHAP (Covert & Lee) = MV + kernel sampling, λ = 0. The paper runs everything paired.

The LS solve is O(m d² + d³): the weighted Gram ``Zᵀ diag(wk) Z`` and ``Zᵀ diag(wk) y`` are accumulated
once (NumPy on the CPU, torch in float64 on a GPU with ``device="cuda"``), then the (d−1)×(d−1)
system in 1^⊥ is solved. MV is O(m d). Sample weights are handled in log space (see sampling.py).

Deviation: when a paired sample has fewer than d−1 pairs the sketched regression is underdetermined;
we return its minimum-norm solution (the estimate nearest α1), which the paper does not specify but
needs for its m = 500 runs at d = 784 and 3072.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.linalg import cho_solve
from scipy.special import gammaln

from companion.kernelshap.games import InterventionalGame
from companion.kernelshap.sampling import Sample, sample_subsets

ESTIMATORS = {
    # name: (kind, distribution, λ rule)
    "KernelSHAP (LS, kernel)": ("LS", "kernel", "alpha"),
    "LeverageSHAP (LS, leverage)": ("LS", "leverage", "alpha"),
    "LS, modified ℓ2": ("LS", "modified", "alpha"),
    "unbiased KernelSHAP (MV, kernel, λ=0)": ("MV", "kernel", "zero"),
    "MV, leverage": ("MV", "leverage", "alpha"),
}


def log_shapley_kernel(d: int, sizes) -> np.ndarray:
    """log k(S) = log(d−1) − log C(d,s) − log(s(d−s)) for 0 < s < d (log space: C(d,s) overflows at large d)."""
    s = np.asarray(sizes, dtype=float)
    return np.log(d - 1) - (gammaln(d + 1) - gammaln(s + 1) - gammaln(d - s + 1)) - np.log(s * (d - s))


def shapley_kernel(d: int, sizes) -> np.ndarray:
    """k(S) = (d−1) / (C(d,s) s (d−s)) for 0 < s < d."""
    return np.exp(log_shapley_kernel(d, sizes))


def orthonormal_complement(d: int) -> np.ndarray:
    """Q ∈ R^{d×(d−1)} with orthonormal columns spanning 1^⊥ (a Helmert basis, no factorisation)."""
    j = np.arange(1, d)
    q = np.where(np.arange(d)[:, None] < j, 1.0, 0.0) - np.where(np.arange(d)[:, None] == j, j, 0.0)
    return q / np.sqrt(j * (j + 1))


def _lambda(lam, alpha: float) -> float:
    if lam == "alpha":
        return alpha
    if lam == "zero":
        return 0.0
    if isinstance(lam, str):
        raise ValueError(f"lam {lam!r} must be 'alpha', 'zero' or a number")
    return float(lam)


PINV_RTOL = 1e-10  # eigenvalues below this share of the largest are treated as zero (minimum-norm solve)
RIDGE_RTOL = 1e-9  # torch: the minimum norm through a tiny ridge (eigh of a 3071×3071 matrix is slow)


def _solve_psd(gram, rhs, determined: bool):
    """x with gram x = rhs for the PSD reduced Gram: Cholesky when the sample determines x, else (or
    when Cholesky meets a numerically singular matrix) the minimum-norm solution.

    NumPy: the pseudo-inverse through eigh. Torch (a GPU at d = 3072): Cholesky of gram + εI with
    ε = 1e-9 · mean diagonal, which converges to the minimum-norm solution as ε → 0 because rhs lies
    in the range of gram; the sample's nonzero eigenvalues are orders of magnitude above ε.
    """
    if isinstance(gram, torch.Tensor):
        if determined:
            chol, info = torch.linalg.cholesky_ex(gram)
            if int(info) == 0 and float(chol.diagonal().min() ** 2) > PINV_RTOL * float(gram.diagonal().max()):
                return torch.cholesky_solve(rhs[:, None], chol)[:, 0]
        ridge = RIDGE_RTOL * float(gram.diagonal().mean().clamp_min(1e-300))
        chol = torch.linalg.cholesky(gram + ridge * torch.eye(len(gram), dtype=gram.dtype, device=gram.device))
        return torch.cholesky_solve(rhs[:, None], chol)[:, 0]
    if determined:
        try:
            chol = np.linalg.cholesky(gram)
            if chol.diagonal().min() ** 2 > PINV_RTOL * gram.diagonal().max():
                return cho_solve((chol, True), rhs)
        except np.linalg.LinAlgError:
            pass
    vals, vecs = np.linalg.eigh(gram)
    keep = vals > PINV_RTOL * max(vals.max(), 1e-300)
    return vecs[:, keep] @ ((vecs[:, keep].T @ rhs) / vals[keep])


def solve(sample: Sample, values, v_empty: float, v_full: float, *, kind: str = "LS",
          lam: str | float = "alpha", device=None, chunk: int = 8192) -> np.ndarray:
    """φ from a sample, the game's values on it and v(∅), v([d]) (the formulas in the module docstring).

    NumPy masks on the CPU: the algebra runs in NumPy (torch's thread pool only adds overhead at these
    sizes). Torch masks (drawn on a device), or ``device="cuda"``: the weighted Gram ``Zᵀ diag(wk) Z``
    and ``Zᵀ diag(wk) y`` are accumulated in float64 on the device, ``chunk`` rows at a time, and the
    (d−1)×(d−1) system is solved there. The regression solve is a Cholesky solve when the sample has
    at least d−1 equations (a pair (S, S^c) counts once: z_S + z_{S^c} = 1, so it adds one direction
    in 1^⊥) and the minimum-norm solution otherwise (m < 2(d−1) paired: the sketched problem is
    underdetermined, as in the paper's m = 500 runs at d = 784; the minimum norm keeps φ nearest α1).
    """
    if kind not in ("LS", "MV"):
        raise ValueError(f"kind {kind!r} must be 'LS' (regression) or 'MV' (matrix-vector)")
    masks = sample.masks
    d = masks.shape[1]
    alpha = (v_full - v_empty) / d
    lam_value = _lambda(lam, alpha)
    use_torch = isinstance(masks, torch.Tensor) or (device is not None and torch.device(device).type != "cpu")
    if device is None:
        device = masks.device if isinstance(masks, torch.Tensor) else "cpu"
    wk = np.exp(sample.log_weights + log_shapley_kernel(d, sample.sizes))  # w_i k(S_i): the binomials cancel
    if not use_torch:
        z = np.asarray(masks).astype(np.float64)
        values = values.cpu().numpy() if isinstance(values, torch.Tensor) else np.asarray(values, np.float64)
        y = values - v_empty - lam_value * sample.sizes
        rhs = z.T @ (wk * y)
        if kind == "MV":
            return d / (d - 1) * (rhs - rhs.mean()) + alpha
        q = orthonormal_complement(d)
        gram = z.T @ (wk[:, None] * z)
        x = _solve_psd(q.T @ gram @ q, q.T @ rhs, sample.equations >= d - 1)
        return q @ x + alpha
    as_t = lambda a: torch.as_tensor(a, dtype=torch.float64, device=device)  # noqa: E731
    masks = torch.as_tensor(masks, device=device)
    wk_t, y = as_t(wk), as_t(values) - v_empty - lam_value * as_t(sample.sizes)
    rhs = torch.zeros(d, dtype=torch.float64, device=device)
    gram = torch.zeros((d, d), dtype=torch.float64, device=device) if kind == "LS" else None
    for start in range(0, masks.shape[0], chunk):
        z = masks[start:start + chunk].to(torch.float64)
        w = wk_t[start:start + chunk]
        rhs += z.T @ (w * y[start:start + chunk])
        if gram is not None:
            gram += z.T @ (w[:, None] * z)
    if kind == "MV":
        phi = d / (d - 1) * (rhs - rhs.mean()) + alpha
    else:
        q = as_t(orthonormal_complement(d))
        phi = q @ _solve_psd(q.T @ gram @ q, q.T @ rhs, sample.equations >= d - 1) + alpha
    return phi.cpu().numpy()


def _game_device(game):
    device = getattr(game, "device", None)
    return torch.device(device) if device is not None else torch.device("cpu")


def estimate(game, m: int, estimator: str | None = None, *, kind: str = "LS",
             distribution="leverage", lam: str | float = "alpha", replacement: bool = True, paired: bool = True,
             seed: int = 0, device=None) -> np.ndarray:
    """Estimate the Shapley values of ``game`` from (about) m model evaluations.

    ``estimator`` names one of :data:`ESTIMATORS` (overriding kind, distribution and λ); otherwise
    the framework's pieces are chosen directly. One predict call evaluates the whole sample.
    ``device`` defaults to the game's (a :class:`~companion.kernelshap.polynomial.PolynomialGame` on
    CUDA): there the coalitions are drawn (with replacement), evaluated and solved on the device.
    m counts the sampled coalitions; v(∅) and v([d]) are two further evaluations, as in the paper.
    """
    if estimator is not None:
        if estimator not in ESTIMATORS:
            raise ValueError(f"estimator {estimator!r} is not one of: {', '.join(ESTIMATORS)}")
        kind, distribution, lam = ESTIMATORS[estimator]
    if kind not in ("LS", "MV"):
        raise ValueError(f"kind {kind!r} must be 'LS' (regression) or 'MV' (matrix-vector)")
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 2:
        raise ValueError(f"m = {m!r} is too small: every estimator needs an integer sample budget m >= 2 "
                         f"(for the regression estimator to be determined, m >= {2 * (game.d - 1)} paired)")
    device = torch.device(device) if device is not None else _game_device(game)
    on_device = device.type != "cpu"
    sample = sample_subsets(game.d, m, distribution, replacement=replacement, paired=paired,
                            rng=np.random.default_rng(seed), device=device if on_device and replacement else None)
    values = game(sample.masks) if len(sample.sizes) else np.zeros(0)
    return solve(sample, values, game.empty, game.full, kind=kind, lam=lam, device=device)


def kernel_explainer(game: InterventionalGame, m: int, seed: int = 0) -> np.ndarray:
    """shap's KernelExplainer on exactly the same game (mask function trick, ``l1_reg=False``)."""
    import shap

    def on_masks(z):
        return game(np.asarray(z) > 0.5)

    explainer = shap.KernelExplainer(on_masks, np.zeros((1, game.d)))
    np.random.seed(seed)  # KernelExplainer samples with NumPy's global generator
    values = explainer.shap_values(np.ones((1, game.d)), nsamples=m, l1_reg=False, silent=True)
    return np.asarray(values, dtype=float).reshape(-1)


def normalised_error(estimate_: np.ndarray, truth: np.ndarray) -> float:
    """‖φ̂ − φ*‖² / ‖φ*‖² (the paper's normalised MSE)."""
    return float(np.sum((estimate_ - truth) ** 2) / np.sum(truth**2))

"""The claims table of the HyperET notebook (paper 02), built from the run's result objects.

Every verdict threshold is a named constant below, tested just inside and just outside in
``tests/unit/test_hyperet_claims.py``. The CPU run aligns every variant once; the banded-vs-diagonal
comparison (the paper's smallest gap) is repeated over several alignment seeds and shown with its
spread. The other comparisons say "one seed" in their scale column and require a stated margin.
"""

from __future__ import annotations

from companion.core import Claim
from companion.hyperet.data import LEVELS

__all__ = ["BANDED_MARGIN", "EUCLID_MARGIN", "GAIN_MARGIN", "THEOREM_TOL", "VIT_L_DIAG_PARAMS", "banded_vs_diagonal", "claim_rows", "loss_gap", "mean_accuracy"]

#: HRA-diagonal must beat "projector only" by at least this mean accuracy (fraction, over the three
#: levels; one seed, so the margin stands in for a spread: 0.005 is three of the 599 test digits per level).
GAIN_MARGIN = 0.005
#: Möbius multiplication "beats" the Euclidean twin only by at least this mean accuracy (one seed).
EUCLID_MARGIN = 0.005
#: banded W_s "beats" diagonal only if the mean paired gain over the alignment seeds is at least this
#: mean accuracy (0.5 points, three of the 599 test digits per level) and every seed's gain is positive.
#: The paper's gap is 0.17 points.
BANDED_MARGIN = 0.005
#: Theorems 1 and 2 hold when the radius identities agree to this relative error (fp64).
THEOREM_TOL = 1e-10
#: the paper's count for diagonal W_s on CLIP ViT-L/14's q and v: 24 blocks x 2 x 1024.
VIT_L_DIAG_PARAMS = 49_152

VIT_L_PARAMS = 304e6  # CLIP ViT-L/14 vision tower, for the share in the measured text


def mean_accuracy(row: dict) -> float:
    """Mean test accuracy over the three granularity levels of one ``summary_rows`` row."""
    return sum(row[f"acc_{lv}"] for lv in LEVELS) / len(LEVELS)


def loss_gap(losses: dict, a: str = "HRA diag (q,v)", b: str = "Euclidean diag (q,v)") -> float:
    """Largest per-step difference of two variants' training losses."""
    return max(abs(x - y) for x, y in zip(losses[a], losses[b]))


def banded_vs_diagonal(spread: dict[str, list[float]], banded: str = "HRA banded d=2 (q,v)",
                       diagonal: str = "HRA diag (q,v)") -> tuple[float, float, list[float]]:
    """Paired per-seed gains of ``banded`` over ``diagonal`` (``align.seed_spread`` output): mean, sample
    standard deviation (0 for one seed) and the list of gains."""
    gains = [b - d for b, d in zip(spread[banded], spread[diagonal], strict=True)]
    mean = sum(gains) / len(gains)
    std = (sum((g - mean) ** 2 for g in gains) / (len(gains) - 1)) ** 0.5 if len(gains) > 1 else 0.0
    return mean, std, gains


def claim_rows(rows: list[dict], losses: dict, spread: dict[str, list[float]], *, thm1_err: float, thm2_err: float, n_points: int, dim: int,
               vit_l_diag: int, curvature: float, scale: str, recorded: dict | None = None) -> list[Claim]:
    """The rows of the Reproduce table.

    ``rows``: ``align.summary_rows(run)``; ``spread``: ``align.seed_spread(...)`` for the HRA diagonal and
    banded variants; ``losses``: ``{variant: per-step losses}``; ``thm1_err`` /
    ``thm2_err``: max relative errors of Theorems 1 and 2 on ``n_points`` random points of R^``dim``;
    ``vit_l_diag``: the module's parameter count for diagonal W_s on ViT-L's q/v; ``scale``: the run's
    scale text; ``recorded``: the committed GPU results (``scale.recorded()``) or None.
    """
    by = {r["variant"]: r for r in rows}
    hra, euc, proj = (by[v] for v in ("HRA diag (q,v)", "Euclidean diag (q,v)", "projector only"))
    one_seed = scale + ", one seed"
    gain = mean_accuracy(hra) - mean_accuracy(proj)
    euclid_gap = mean_accuracy(hra) - mean_accuracy(euc)
    band_gain, band_std, band_gains = banded_vs_diagonal(spread)
    n_seeds = len(band_gains)
    band_ok = band_gain >= BANDED_MARGIN and min(band_gains) > 0
    gap = loss_gap(losses)
    thm = max(thm1_err, thm2_err)
    out = [
        Claim(
            claim="HRA on q/v improves alignment with < 1 % extra parameters",
            paper="ScienceQA +0.96 (LaVIN-13B), +0.94 (MemVP-13B) with 0.05 M parameters",
            measured=(f"HRA-diag vs projector only: {100 * gain:+.1f} pts mean accuracy over 3 levels (margin required: "
                      f"{100 * GAIN_MARGIN:.1f} pts), {hra['trainable_share_%']:.2f} % of the encoder; a toy, so at most partly"),
            scale=one_seed,
            verdict="partly reproduced" if gain >= GAIN_MARGIN else "not reproduced",
        ),
        Claim(
            claim="Möbius multiplication beats the plain (Euclidean) matrix product",
            paper="+0.81 points (Table 3)",
            measured=(f"HRA-diag − Euclidean-diag: {100 * euclid_gap:+.2f} pts (margin required: {100 * EUCLID_MARGIN:.1f} pts); "
                      f"loss curves differ by ≤ {gap:.1e} (identity log0(M⊗exp0 w) = Mw)"),
            scale=one_seed + f", c = {curvature:g}, fp32",
            verdict="reproduced" if euclid_gap >= EUCLID_MARGIN else "not reproduced",
        ),
        Claim(
            claim="banded W_s is slightly better than diagonal",
            paper="+0.17 points",
            measured=(f"banded d=2 − diagonal: {100 * band_gain:+.2f} ± {100 * band_std:.2f} pts mean accuracy over {n_seeds} "
                      f"alignment seed{'s' if n_seeds > 1 else ''} (per seed: {', '.join(f'{100 * g:+.2f}' for g in band_gains)}; "
                      f"required: mean ≥ {100 * BANDED_MARGIN:.1f} pts and every seed positive"
                      + ("" if band_ok else "; not resolved at this scale") + ")"),
            scale=scale + f", {n_seeds} seed{'s' if n_seeds > 1 else ''} (mean ± s.d.)",
            verdict="partly reproduced" if band_ok else "not reproduced",
        ),
        Claim(
            claim="Theorems 1 and 2: Möbius (matrix) multiplication scales the hyperbolic radius",
            paper="Rad(s⊗x) = s·Rad x; Rad(M⊗x) = ‖Mx‖/‖x‖·Rad x",
            measured=f"max relative error {thm:.1e} on {n_points} random points (fp64; tolerance {THEOREM_TOL:.0e})",
            scale=f"c = {curvature:g}, R^{dim}",
            verdict="reproduced" if thm < THEOREM_TOL else "not reproduced",
        ),
        Claim(
            claim="diagonal HRA on CLIP ViT-L q/v is 0.05 M parameters (< 1 %)",
            paper=f"24 × 2 × 1024 = {VIT_L_DIAG_PARAMS:,}",
            measured=(f"{vit_l_diag:,} by the module's count ({100 * vit_l_diag / VIT_L_PARAMS:.3f} % of ViT-L's 304 M); "
                      f"toy encoder {hra['trainable_share_%']:.2f} %"),
            scale="parameter count",
            verdict="reproduced" if vit_l_diag == VIT_L_DIAG_PARAMS else "not reproduced",
        ),
        Claim(
            claim="LLaVA-1.5 pre-training gains with a full W_s",
            paper="Vicuna-7B VQAv2 78.5 → 80.3, GQA 62.0 → 63.7, MMBench 64.3 → 66.8",
            measured="needs Vicuna/CLIP weights and the data sets: not runnable offline",
            scale="—",
            verdict="not run here",
        ),
    ]
    out.append(_kernel_row(recorded))
    return out


def _kernel_row(recorded: dict | None) -> Claim:
    if not recorded or "kernel" not in recorded:
        return Claim(claim="fused HRA kernel (teaching kernel; not a paper claim)", paper="—",
                     measured="no GPU results recorded yet", scale="24 × {q, v} × 1024², bf16", verdict="not run here")
    k = recorded["kernel"]
    fused = [r for r in k["rows"] if r["impl"] == "triton fused"]
    eager = {r["structure"]: r for r in k["rows"] if r["impl"].startswith("eager")}
    speed = ", ".join(f"{r['structure']} ×{eager[r['structure']]['fwd_bwd_ms'] / r['fwd_bwd_ms']:.1f}" for r in fused if r["structure"] in eager)
    ok = recorded.get("kernel_matches_reference")
    return Claim(
        claim="fused HRA kernel (teaching kernel; not a paper claim)",
        paper="—",
        measured=f"fwd+bwd speed-up over the eager chain: {speed}; matches the fp32 reference: {ok} (see Scale up)",
        scale=f"{k['layers']} × {{q, v}} × {k['width']}², {k['dtype']}, {recorded.get('device', 'GPU')}",
        verdict="recorded on GPU",
    )

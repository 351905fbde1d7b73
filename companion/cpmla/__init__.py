"""Paper 14 - Convex Potential Mirror Langevin Algorithm for Efficient Sampling of Energy-Based Models.

Zitao Yang, Amin Ullah, Shuai Li, Li Fuxin, Jun Li, NeurIPS 2025 (poster; OpenReview ``KWFnxtO78b``; no
arXiv id). No official code was released; the mirror map re-implements CP-Flow's convex potential
(Huang et al. 2021, https://github.com/CW-Huang/CP-Flow, ``lib/flows/cpflows.py``).

CPMLA (short title: "CPMLA: Convex Potential Mirror Langevin Algorithm") samples an energy-based model
p_θ ∝ exp(f_θ) by Langevin dynamics in the *dual* space of a learned convex potential G: the chain moves
y_{k+1} = y_k + η∇f(∇G*(y_k)) + √(2η) N(0, ∇²G), so a step follows the geometry ∇²G learned by a CP-Flow.

Modules, named after the paper's concepts:

- :mod:`~companion.cpmla.mirror_map` - the ICNN / CP-Flow potential G, ∇G, ∇²G (full, diagonal,
  Hutchinson-diagonal) and the inverse ∇G* (Newton or L-BFGS); quadratic and Newton maps.
- :mod:`~companion.cpmla.cpflow` - CP-Flow training (Alg. 1): log det ∇²G by Hutchinson + conjugate gradients.
- :mod:`~companion.cpmla.samplers` - ULA, MALA and the mirror Langevin discretisation of Alg. 2.
- :mod:`~companion.cpmla.ebm` - the EBM f_θ (negative energy) and its contrastive-divergence loss.
- :mod:`~companion.cpmla.cooperative` - the cooperative loop of Alg. 2 (CPMLA, CPMLAprt) and CP-Flow alone.
- :mod:`~companion.cpmla.targets` - 8 Gaussians, the κ = 100 Gaussian, upsampled digits.
- :mod:`~companion.cpmla.metrics` - energy distance, sliced W2, MMD / KID on fixed random features.
- :mod:`~companion.cpmla.experiments` - the fixed-target comparison against T.
"""

from companion.core import Paper

PAPER = Paper(
    number="14",
    slug="cpmla",
    title="CPMLA: Convex Potential Mirror Langevin Algorithm for Efficient Sampling of Energy-Based Models",
    arxiv=None,
    code=None,
)

from companion.cpmla.mirror_map import (  # noqa: E402
    ConvexPotential,
    InverseNotConverged,
    QuadraticPotential,
    gaussian_softplus,
)
from companion.cpmla.samplers import NonFiniteChain, mala, mirror_langevin, ula  # noqa: E402

__all__ = [
    "PAPER",
    "ConvexPotential",
    "InverseNotConverged",
    "NonFiniteChain",
    "QuadraticPotential",
    "gaussian_softplus",
    "mala",
    "mirror_langevin",
    "ula",
]

"""DartQuant: Efficient Rotational Distribution Calibration for LLM Quantization (paper 08).

Shao, Chen, Wang, Yu, Lin, Yao, Wei, Cheng, *DartQuant: Efficient Rotational Distribution Calibration for LLM
Quantization*, NeurIPS 2025, arXiv 2511.04063; official code https://github.com/CAS-CLab/DartQuant.

Rotations R (orthogonal) make LLM activations easier to quantize without changing the model,
Y = X Wᵀ = (X R)(Rᵀ Wᵀ). DartQuant calibrates R1 (residual stream) and R2 (per KV head, between W_v and
W_o) layer-locally: it minimises the Whip loss Σ_i exp(−|(xR)_i|) of the rotated activations (Eq. 4) with
QR-Orth (Alg. 1: R = Q(qr(Z)) of a free latent Z, any optimiser on Z), instead of training R end to end
through the model; R3/R4 stay random Hadamard. Modules:

* :mod:`~companion.dartquant.whip` — the Whip loss (Eq. 4) and the variance / kurtosis ablation losses;
* :mod:`~companion.dartquant.qr_orth` — QR-Orth (Alg. 1), per-head R2, and the Cayley (torch) and
  Riemannian-SGD (geoopt) peers on the same loss;
* :mod:`~companion.dartquant.hadamard` — Hadamard matrices (2^k, 12·2^k, 20·2^k), the FWHT, random Hadamard;
* :mod:`~companion.dartquant.quant` — per-token asymmetric activation, RTN and GPTQ weight fake quantizers;
* :mod:`~companion.dartquant.rotation` — norm fusion, placing R1–R4 in a LLaMA-layout model, W-A-KV runs,
  perplexity;
* :mod:`~companion.dartquant.activations` — synthetic, MiniLM and LLaMA calibration activations (all samples
  kept, tokens subsampled in memory);
* :mod:`~companion.dartquant.experiment` — the layer-level study and the 2-D angle picture;
* :mod:`~companion.dartquant.explorer`, :mod:`~companion.dartquant.figures`,
  :mod:`~companion.dartquant.claims` — the notebook's explorer, figures and claim rows;
* :mod:`~companion.dartquant.scale` — the one-GPU study (no plotly) and its recorded results; its stages'
  bodies in :mod:`~companion.dartquant.study`.
"""

from companion.core import Paper

PAPER = Paper(
    number='08',
    slug='dartquant',
    title='DartQuant: Efficient Rotational Distribution Calibration for LLM Quantization',
    arxiv='2511.04063',
    code='https://github.com/CAS-CLab/DartQuant',
    venue='NeurIPS 2025',
)

from companion.dartquant.hadamard import hadamard_matrix, hadamard_transform, random_hadamard  # noqa: E402
from companion.dartquant.qr_orth import calibrate, orthogonality_error, qr_rotation  # noqa: E402
from companion.dartquant.quant import gptq_quantize, quantize_activations, quantize_weight_rtn  # noqa: E402
from companion.dartquant.rotation import fuse_norms, quantized_activations, rotate_model  # noqa: E402
from companion.dartquant.whip import LOSSES, kurtosis_loss, variance_loss, whip_loss  # noqa: E402

__all__ = ["PAPER", "LOSSES", "calibrate", "fuse_norms", "gptq_quantize", "hadamard_matrix", "hadamard_transform",
           "kurtosis_loss", "orthogonality_error", "qr_rotation", "quantize_activations", "quantize_weight_rtn",
           "quantized_activations", "random_hadamard", "rotate_model", "variance_loss", "whip_loss"]

"""4DGCPro: Efficient Hierarchical 4D Gaussian Compression for Progressive Volumetric Video Streaming (paper 05).

Paper: *4DGCPro: Efficient Hierarchical 4D Gaussian Compression for Progressive Volumetric Video Streaming*, NeurIPS 2025, arXiv 2509.17513; official code https://github.com/zihanzheng-sjtu/4DGC.

4DGCPro ranks Gaussians by a perceptual significance Ψ = α + λ_Ψ·S and splits them into L layers so
that any prefix of the bitstream renders (c^l over layers ≤ l); inter-frames carry rigid motion and
additive residuals, grouped by motion (a new keyframe when mean‖Δμ_t‖ > τ_μ); training is end-to-end
rate–distortion optimised per layer (KDE rate for keyframes, Gaussian rate for residuals). This package
is a 2-D CPU analogue that keeps every mechanism, plus two 3-D studies for one GPU (decode + render; training).

* :mod:`~companion.gaussian_video.splat` — the differentiable PyTorch splatter (depth order, front-to-back
  compositing, transmittance exp(cumsum(log1p(−α)))) and the EWA projection Σ' = J W Σ Wᵀ Jᵀ;
* :mod:`~companion.gaussian_video.scene` — the warped ``china.jpg`` frames and the 2-D Gaussian model;
* :mod:`~companion.gaussian_video.significance` — Ψ (sum / opacity / volume / product), the layer split,
  progressive render, λ_l;
* :mod:`~companion.gaussian_video.rate` — uniform-noise quantisation, the FFT Gaussian-KDE rate
  (Silverman) and the Gaussian residual rate;
* :mod:`~companion.gaussian_video.bitstream` — quantisation (uint16 positions, uint8 others), constriction's
  ANS coder under the rate models, keyframe / inter-frame chunks per layer with exact size accounting, the
  H.264 path;
* :mod:`~companion.gaussian_video.pipeline` — keyframe fit, layer-wise RD, inter-frames, grouping, the
  bit-exact decoder;
* :mod:`~companion.gaussian_video.bd` — BD-PSNR and BD-rate (PCHIP);
* :mod:`~companion.gaussian_video.experiments` — the ablations behind the Reproduce section;
* :mod:`~companion.gaussian_video.explorer`, :mod:`~companion.gaussian_video.claims` — the notebook's explorer
  and rows;
* the two GPU studies (``python -m companion.bench gaussian_video`` and ``gaussian_video_train3d``):
  :mod:`~companion.gaussian_video.scale` (progressive decode + render, stages in
  :mod:`~companion.gaussian_video.decode`) and :mod:`~companion.gaussian_video.scale_train3d` (the 3-D pipeline
  trained, :mod:`~companion.gaussian_video.train3d`), both on the synthetic scene of
  :mod:`~companion.gaussian_video.scene3d`.

The Triton tile rasteriser lives in ``companion_kernels/gaussian_splat`` (``companion_kernels.gaussian_splat``).
"""

from companion.core import Paper

PAPER = Paper(
    number='05',
    slug='gaussian_video',
    title='4DGCPro: Efficient Hierarchical 4D Gaussian Compression for Progressive Volumetric Video Streaming',
    arxiv='2509.17513',
    code='https://github.com/zihanzheng-sjtu/4DGC',
    venue='NeurIPS 2025',
)

from companion.gaussian_video.bd import bd_psnr, bd_rate  # noqa: E402
from companion.gaussian_video.pipeline import Config, decode_sequence, encode_sequence, motion_groups  # noqa: E402
from companion.gaussian_video.rate import gaussian_rate, kde_rate, noisy  # noqa: E402
from companion.gaussian_video.scene import Gaussians2D, make_frames  # noqa: E402
from companion.gaussian_video.significance import (  # noqa: E402
    PSI_MODES, layer_weights, progressive_render, significance, split_layers)

__all__ = ["PAPER", "PSI_MODES", "Config", "Gaussians2D", "bd_psnr", "bd_rate", "decode_sequence", "encode_sequence",
           "gaussian_rate", "kde_rate", "layer_weights", "make_frames", "motion_groups", "noisy", "progressive_render",
           "significance", "split_layers"]

"""Fidelity and memory metrics against the full-cache model (paper 03, Table 1's "consistency" framing).

The paper scores a compressed model by how close its images stay to the *full-cache* model's images
with the same prompt and seed (FID, LPIPS and PSNR against the original outputs, not real images).
FID and LPIPS need Inception/VGG weights, which are not available offline; here:

* ``psnr``: ``10 log10(1 / MSE)`` of the decoded final map (grey levels in [0, 1]), with the MSE
  pooled over all images (so identical outputs give +inf, not an average of infinities);
* ``token_agreement``: share of final-map tokens equal to the full-cache run's;
* ``logit_kl`` and ``hidden_error``: with the full-cache tokens forced through the compressed cache
  (teacher forcing isolates the error of one step from the drift of earlier ones): mean
  ``KL(p_full || p_compressed)`` per token and the relative L2 error of the final-layer states.
* memory: bytes of retained K/V (see ``schedule.kv_bytes``), read off the cache tensors.
"""

from __future__ import annotations

import math

import torch

__all__ = ["psnr", "token_agreement", "logit_kl", "hidden_error"]


def psnr(images: torch.Tensor, reference: torch.Tensor) -> float:
    """PSNR in dB of ``images`` against ``reference`` (both in [0, 1]); MSE pooled over everything."""
    mse = torch.mean((images.float() - reference.float()) ** 2).item()
    return math.inf if mse == 0 else 10.0 * math.log10(1.0 / mse)


def token_agreement(tokens: torch.Tensor, reference: torch.Tensor) -> float:
    """Fraction of equal tokens."""
    return (tokens == reference).float().mean().item()


def logit_kl(logits: torch.Tensor, reference: torch.Tensor) -> float:
    """Mean ``KL(softmax(reference) || softmax(logits))`` over tokens."""
    lp_ref = torch.log_softmax(reference.double(), -1)
    lp = torch.log_softmax(logits.double(), -1)
    return (lp_ref.exp() * (lp_ref - lp)).sum(-1).mean().item()


def hidden_error(hidden: torch.Tensor, reference: torch.Tensor) -> float:
    """``||h - h_full|| / ||h_full||``."""
    return (torch.linalg.vector_norm(hidden.double() - reference.double()) / torch.linalg.vector_norm(reference.double())).item()

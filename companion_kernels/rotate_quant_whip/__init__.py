"""Fused rotate + per-token fake-quant + Whip sums (paper 08, DartQuant): ``Y = X R``, the b-bit per-token
asymmetric fake quantization of Y (clip ratio 0.9) and ``Σ_channels exp(−|Y|)`` per token (Eq. 4) in one
pass over X. Reference, Triton kernels (three schedules, ``VARIANTS``) and a validated entry point; import as
``companion_kernels.rotate_quant_whip``."""

from .api import IMPLS, VARIANTS, rotate_quant_whip
from .reference import rotate_quant_whip_reference

__all__ = ["IMPLS", "VARIANTS", "rotate_quant_whip", "rotate_quant_whip_reference"]

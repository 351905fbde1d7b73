"""ZeroS chunked linear attention (paper 04): reference, Triton kernels (forward + backward) and a
validated entry point. Import as ``companion_kernels.zeros_linear``."""

from .api import zeros_linear
from .reference import zeros_linear_reference, zeros_weights_reference

__all__ = ["zeros_linear", "zeros_linear_reference", "zeros_weights_reference"]

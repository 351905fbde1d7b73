"""Triton kernels of the companion (reference, kernel, api per op), imported as ``companion_kernels``."""

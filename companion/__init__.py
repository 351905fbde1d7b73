"""An interactive, notebook-first companion to 19 NeurIPS 2025 papers.

The science lives here, one package per paper (``companion.<slug>``); ``companion.core`` holds what
every notebook needs (profiles, seeding, parameter validation, claims, recorded results),
``companion.viz`` the plotly theme and the widget binding, ``companion.models`` the shared model
pieces. Triton kernels live in the top-level ``companion_kernels/`` folder, imported as ``companion_kernels``.
"""

__version__ = "0.1.0"

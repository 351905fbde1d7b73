"""Shared pytest setup: GPU tests are skipped where CUDA is not available, and the repository root is
taken off ``sys.path``.

``python -m pytest`` puts the current folder on ``sys.path``; from the repository root its ``kernels/``
folder (installed as ``companion_kernels``) would then shadow Hugging Face's ``kernels`` package, which
transformers imports.
"""

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT]


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)

"""Profiles (``cpu`` / ``gpu``), seeding, devices, and CPU worker processes that see no GPU.

``PROFILE = "auto"`` in a notebook means the GPU profile where CUDA is available and the CPU profile
elsewhere. The CPU profile is the default everywhere CI runs: meaningful results within 120 s on two
cores. The GPU profile is for one GPU and may take minutes.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator

import numpy as np
import torch

from companion.core.validation import ParameterError, check_choice, check_int

PROFILES = ("auto", "cpu", "gpu")


def resolve_profile(profile: str) -> str:
    """Map ``"auto" | "cpu" | "gpu"`` to ``"cpu"`` or ``"gpu"``; ``"gpu"`` needs CUDA."""
    check_choice("PROFILE", profile, PROFILES)
    has_cuda = torch.cuda.is_available()
    if profile == "auto":
        return "gpu" if has_cuda else "cpu"
    if profile == "gpu" and not has_cuda:
        raise ParameterError("PROFILE", profile, "'cpu' or 'auto' on a machine without CUDA")
    return profile


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and PyTorch's generators (all devices)."""
    check_int("SEED", seed, lo=0, hi=2**32 - 1)
    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def device_for(profile: str) -> torch.device:
    """The torch device of a resolved profile."""
    return torch.device("cuda" if resolve_profile(profile) == "gpu" else "cpu")


def check_common(PROFILE: str, SEED: int) -> str:  # noqa: N803 - the notebooks' parameter names
    """Validate the two parameters every notebook has, seed everything, return the resolved profile."""
    profile = resolve_profile(PROFILE)
    seed_everything(SEED)
    return profile


@contextlib.contextmanager
def gpu_hidden_from_children() -> Iterator[None]:
    """Processes started inside the block see no GPU (``CUDA_VISIBLE_DEVICES`` empty in the environment they
    inherit); the environment is restored after it. For the CPU worker pools of a GPU study: a spawned worker then
    never creates a CUDA context. (A child forked from a process that has initialised CUDA fails in torch's
    optimisers, which query the CUDA stream even for CPU tensors, so such workers are spawned.) This process must
    not initialise CUDA inside the block: it would find no device."""
    saved = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    try:
        yield
    finally:
        if saved is None:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved

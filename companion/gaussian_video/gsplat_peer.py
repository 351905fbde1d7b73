"""gsplat (https://github.com/nerfstudio-project/gsplat), the GPU peer and ground truth of the 3-D path.

gsplat ships as source and compiles its CUDA extension on first import (about 80 s on 16 cores with nvcc
13.0 and torch 2.11 on an H200). A machine that cannot compile (no nvcc) or should not wait can load an
extension built earlier on the same image: point ``COMPANION_GSPLAT_SO`` at its ``gsplat_cuda.so``, which is
then imported as ``gsplat.csrc`` (the name gsplat looks for before compiling). Build one with

    TORCH_CUDA_ARCH_LIST=9.0 TORCH_EXTENSIONS_DIR=/tmp/ext python -c "from gsplat.cuda._backend import _C"

and take ``/tmp/ext/gsplat_cuda/gsplat_cuda.so``.
"""

from __future__ import annotations

import importlib.util
import os
import sys

GSPLAT_SO_ENV = "COMPANION_GSPLAT_SO"


class GsplatUnavailable(RuntimeError):
    """gsplat cannot run here (no CUDA, not installed, or its extension neither prebuilt nor compilable)."""


def load_gsplat():
    """The ``gsplat`` module with a working CUDA extension, or :class:`GsplatUnavailable` saying why not."""
    import torch

    if not torch.cuda.is_available():
        raise GsplatUnavailable("gsplat has no CPU path: it needs a CUDA device")
    so = os.environ.get(GSPLAT_SO_ENV)
    if so and "gsplat.csrc" not in sys.modules:
        if not os.path.isfile(so):
            raise GsplatUnavailable(f"{GSPLAT_SO_ENV}={so!r} is not a file")
        spec = importlib.util.spec_from_file_location("gsplat_cuda", so)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules["gsplat.csrc"] = module
    try:
        import gsplat
        from gsplat.cuda._backend import _C
    except ImportError as err:
        raise GsplatUnavailable(f"gsplat is not installed ({err})") from err
    if _C is None:
        raise GsplatUnavailable("gsplat is installed but its CUDA extension is neither prebuilt nor compilable here")
    return gsplat

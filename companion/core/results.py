"""Benchmark and GPU-run results committed under ``benchmarks/results/<name>.json``.

``save_results`` stamps the payload with the device, the torch and triton versions and the date, so a
notebook running on a CPU can show a GPU result with its provenance (``recorded_results``).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
from pathlib import Path

from companion.core.atomic import write_json_atomic
from companion.core.paths import repo_path

_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def device_name() -> str:
    """The name results record for this machine: the first CUDA device's, else the CPU's."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return f"CPU ({platform.machine()}, {os.cpu_count()} cores)"


def _environment() -> dict:
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {
        "device": device_name(),
        "torch": torch.__version__,
        "triton": triton_version,
        "python": platform.python_version(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def _path(name: str, folder=None) -> Path:
    if not isinstance(name, str) or not _NAME.match(name) or name.startswith("."):
        raise ValueError(f"results name {name!r} must be letters, digits, '_', '-' or '.' (not leading)")
    return Path(folder or repo_path("benchmarks", "results")) / f"{name}.json"


def save_results(name: str, payload: dict, out_dir=None):
    """Write ``payload`` plus environment metadata to ``benchmarks/results/<name>.json`` (or ``out_dir``)."""
    if not isinstance(payload, dict):
        raise TypeError(f"payload must be a dict, got {type(payload).__name__}")
    path = _path(name, out_dir)
    write_json_atomic(path, {"name": name, **_environment(), **payload})
    return path


def recorded_results(name: str) -> dict | None:
    """The committed results called ``name``, or None when none are recorded yet."""
    path = _path(name)
    if not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8"))

"""Write files atomically: a temporary file in the same folder, then a rename.

The file gets the permissions an ordinary ``open(path, "w")`` would give it (``0o666`` less the
process umask), not the owner-only ``0o600`` of :func:`tempfile.mkstemp`, so a shared results
folder stays readable by the people it is shared with.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _umask() -> int:
    """The process umask, read without changing it where Linux shows it (``os.umask`` alone must set it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: Path, write: Callable[[str], None]) -> Path:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then rename it over ``path``.

    A failed write leaves no temporary file and an earlier ``path`` untouched. The result has mode
    ``0o666 & ~umask``, like a file created with ``open``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: Path, text: str) -> Path:
    return write_atomic(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def write_json_atomic(path: Path, payload: Any) -> Path:
    return write_text_atomic(path, json.dumps(payload, indent=2, sort_keys=False, default=str) + "\n")

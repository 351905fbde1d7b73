"""Paths inside the repository (data/, benchmarks/results/, notebooks/)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def repo_path(*parts: str) -> Path:
    """A path relative to the repository root, e.g. ``repo_path("data", "sudoku", "puzzles.txt")``."""
    return REPO_ROOT.joinpath(*parts)


def repo_commit() -> str | None:
    """The checked-out commit, with ``+uncommitted changes`` when the tracked files differ from it (None outside
    git). ``git status`` runs without optional locks, so it never holds ``.git/index.lock`` against a commit."""
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}

    def git(*args):
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10, env=env).stdout.strip()

    try:
        head = git("rev-parse", "HEAD")
        return (head + (" +uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else "")) or None
    except (OSError, subprocess.SubprocessError):
        return None


def resolve_path_parameter(value, name: str, *, made_by: str | None = None, allow_empty: bool = True) -> Path | None:
    """The existing file a path parameter names, for notebooks and CLIs.

    ``""`` means none (returns ``None``) where ``allow_empty``; an absolute path is taken as given; a
    relative one is relative to the repository root (never to the notebook's folder). Anything else,
    or a path that is not an existing file, raises :class:`ParameterError` naming the parameter, the
    value, the resolved path and (``made_by``) the command that makes such a file.
    """
    from companion.core.validation import ParameterError

    alt = ", or '' for none" if allow_empty else ""
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise ParameterError(name, value, f"a file path string (absolute, or relative to the repository root){alt}")
    if not value.strip():
        return None
    path = Path(value).expanduser()
    path = path if path.is_absolute() else repo_path(*path.parts)
    if not path.is_file():
        made = f"; made by {made_by}" if made_by else ""
        raise ParameterError(name, value, f"an existing file ({path} does not exist; absolute, or relative to the "
                                          f"repository root{made}){alt}")
    return path

"""Paths inside the repository (data/, benchmarks/results/, notebooks/)."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def repo_path(*parts: str) -> Path:
    """A path relative to the repository root, e.g. ``repo_path("data", "sudoku", "puzzles.txt")``."""
    return REPO_ROOT.joinpath(*parts)

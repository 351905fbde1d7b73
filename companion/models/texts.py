"""Real text that ships offline: the Python standard library's docstrings and source files.

Both corpora are deterministic for a given Python version: :func:`stdlib_texts` imports modules in sorted
order from a fixed list, de-duplicates and filters docstrings by length, and ``seed`` shuffles the result;
:func:`stdlib_source_bytes` reads the library's ``.py`` files in sorted order and splits them by file with
one seeded permutation (the byte-level corpus of the language-model studies).
"""

from __future__ import annotations

import importlib
import inspect
import random
import sysconfig
import warnings
from pathlib import Path

import numpy as np

_MODULES = (
    "argparse", "ast", "asyncio", "base64", "bisect", "calendar", "collections", "configparser", "contextlib",
    "copy", "csv", "dataclasses", "datetime", "decimal", "difflib", "email", "enum", "fractions", "functools",
    "heapq", "hashlib", "html", "http.client", "inspect", "io", "ipaddress", "itertools", "json", "logging",
    "mailbox", "math", "os", "pathlib", "pickle", "pprint", "queue", "random", "re", "shlex", "shutil",
    "socket", "sqlite3", "statistics", "string", "subprocess", "tarfile", "tempfile", "textwrap", "threading",
    "timeit", "tokenize", "typing", "unittest", "urllib.parse", "uuid", "warnings", "zipfile",
)


def _docstrings():
    seen = set()
    for name in _MODULES:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                module = importlib.import_module(name)
        except ImportError:
            continue
        objects = [module] + [obj for _, obj in sorted(vars(module).items()) if inspect.isclass(obj) or inspect.isfunction(obj)]
        for obj in objects:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                doc = inspect.getdoc(obj)
            if doc and doc not in seen:
                seen.add(doc)
                yield " ".join(doc.split())


def stdlib_texts(n: int | None = None, min_chars: int = 400, seed: int = 0) -> list[str]:
    """``n`` docstrings of at least ``min_chars`` characters (whitespace collapsed), shuffled by ``seed``.

    ``n=None`` returns all of them (the same order: ``stdlib_texts(k)`` is a prefix of it)."""
    texts = sorted(t for t in _docstrings() if len(t) >= min_chars)
    random.Random(seed).shuffle(texts)
    if n is None:
        return texts
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n={n!r} must be a non-negative integer or None (all texts)")
    if n > len(texts):
        raise ValueError(f"asked for n={n} texts of >= {min_chars} chars; only {len(texts)} are available")
    return texts[:n]


def stdlib_source_files(package: str | None = None, *, skip_tests: bool = False) -> list[Path]:
    """The standard library's ``.py`` files (or those of ``package``, e.g. ``"email"``), sorted, without
    ``site-packages`` (and without any ``test`` folder when ``skip_tests``)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    if package is not None:
        root = root / package
        if not root.is_dir():
            raise ValueError(f"package={package!r} is not a folder of the standard library ({root})")
    return sorted(p for p in root.rglob("*.py")
                  if "site-packages" not in p.parts and not (skip_tests and "test" in p.parts))


def stdlib_source_bytes(max_bytes: int = 16_000_000, *, val_fraction: float = 0.05, seed: int = 0,
                        skip_tests: bool = False):
    """(train, validation) byte tensors (``torch.long``, values 0..255) of the standard library's source: files
    are read in sorted order until ``max_bytes``, then split by file, ``val_fraction`` of them (at least one)
    to validation, by a permutation seeded with ``seed``; each side joins its files with a newline."""
    import torch

    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction={val_fraction!r} must lie strictly between 0 and 1")
    chunks, total = [], 0
    for path in stdlib_source_files(skip_tests=skip_tests):
        try:
            chunks.append(path.read_bytes())
        except OSError:
            continue
        total += len(chunks[-1])
        if total >= max_bytes:
            break
    order = np.random.default_rng(seed).permutation(len(chunks))
    n_val = max(1, int(len(chunks) * val_fraction))
    as_tensor = lambda idx: torch.frombuffer(bytearray(b"\n".join(chunks[i] for i in idx)), dtype=torch.uint8).long()  # noqa: E731
    return as_tensor(order[n_val:]), as_tensor(order[:n_val])

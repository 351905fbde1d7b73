"""Real text that ships offline: docstrings of the Python standard library.

The corpus is deterministic for a given Python version: modules are imported in sorted order from a
fixed list, docstrings are de-duplicated and filtered by length, and ``seed`` shuffles the result.
"""

from __future__ import annotations

import importlib
import inspect
import random
import warnings

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

"""A paper's identity, declared once in its package's ``__init__.py`` as ``PAPER``."""

from __future__ import annotations

import re
from dataclasses import dataclass

_SLUG = re.compile(r"^[a-z][a-z0-9_]*$")
_ARXIV = re.compile(r"^\d{4}\.\d{4,5}$")


@dataclass(frozen=True)
class Paper:
    """``number`` ("01".."99"), ``slug`` (the package and notebook name), ``title``, ``arxiv`` id
    (``"2410.13276"``, or ``None`` when the paper has none), ``code`` (the official repository URL, or
    ``None``) and ``venue``."""

    number: str
    slug: str
    title: str
    arxiv: str | None
    code: str | None
    venue: str = "NeurIPS 2025"

    def __post_init__(self):
        if not (isinstance(self.number, str) and re.fullmatch(r"\d\d", self.number)):
            raise ValueError(f"Paper.number must be two digits like '07', got {self.number!r}")
        if not (isinstance(self.slug, str) and _SLUG.match(self.slug)):
            raise ValueError(f"Paper.slug must be lower-case letters, digits and '_', got {self.slug!r}")
        if not (isinstance(self.title, str) and self.title.strip()):
            raise ValueError("Paper.title must be a non-empty string")
        if self.arxiv is not None and not _ARXIV.match(self.arxiv):
            raise ValueError(f"Paper.arxiv must look like '2410.13276' or be None, got {self.arxiv!r}")

    @property
    def notebook(self) -> str:
        """The notebook's stem, ``NN_slug``."""
        return f"{self.number}_{self.slug}"

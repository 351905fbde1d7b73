"""The claims recorder: what the paper says beside what this run measured.

A paper's ``claims.py`` builds each row from the run's measurements; its verdict and evidence come
from :func:`companion.core.verdicts.judge`, the one rule for every verdict::

    Claim("last iterate converges", "NashConv < 1e-6 on Kuhn", f"{nc:.1e} after 500 iterations",
          "Kuhn poker, CPU", judge(nc, 1e-6, kind="exact"))

and the notebook records them in its Reproduce section::

    claims = Claims(PAPER.notebook)
    claims.extend(claim_rows(results))
    claims.table()

When the batch runner (``make run`` / ``make test``) executes the notebook it sets
``COMPANION_CLAIMS_DIR``; every ``add`` then rewrites ``<dir>/<notebook>.claims.json`` atomically so
the runner can collect the claims even if a later cell fails. Interactively nothing is written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from companion.core.atomic import write_json_atomic
from companion.core.validation import check_str
from companion.core.verdicts import Judgement

CLAIMS_DIR_ENV = "COMPANION_CLAIMS_DIR"


@dataclass(frozen=True)
class Claim:
    """One row of a claims table: what the paper says beside what this run measured, at what scale, and
    the :class:`~companion.core.verdicts.Judgement` (verdict and evidence) that ``judge`` gave it."""

    claim: str
    paper: str
    measured: str
    scale: str
    judgement: Judgement

    def __post_init__(self):
        for name in ("claim", "paper", "measured", "scale"):
            check_str(name, getattr(self, name))
        if not isinstance(self.judgement, Judgement):
            raise TypeError(f"judgement must come from companion.core.judge or not_run, got {self.judgement!r}")

    @property
    def verdict(self) -> str:
        return self.judgement.verdict

    @property
    def evidence(self) -> str:
        return self.judgement.evidence

    def as_dict(self) -> dict:
        """The row as the claims JSON, the run index and the sweep report store it."""
        return {"claim": self.claim, "paper": self.paper, "measured": self.measured, "scale": self.scale,
                "verdict": self.verdict, "evidence": self.evidence}


class Claims:
    """An ordered list of :class:`Claim` for one notebook, mirrored to JSON under the batch runner."""

    def __init__(self, notebook: str):
        self.notebook = check_str("notebook", notebook)
        self.items: list[Claim] = []

    def extend(self, rows) -> "Claims":
        """Record the :class:`Claim` rows a paper's ``claims.claim_rows(...)`` built; returns self."""
        rows = list(rows)
        for row in rows:
            if not isinstance(row, Claim):
                raise TypeError(f"claim rows must be Claim objects, got {type(row).__name__}")
        self.items.extend(rows)
        self._write()
        return self

    @property
    def path(self) -> Path | None:
        folder = os.environ.get(CLAIMS_DIR_ENV)
        return Path(folder) / f"{self.notebook}.claims.json" if folder else None

    def _write(self) -> None:
        if self.path is not None:
            write_json_atomic(self.path, {"notebook": self.notebook, "claims": [c.as_dict() for c in self.items]})

    def table(self):
        """The claims as a pandas DataFrame (what the notebook shows in its Reproduce section).

        It displays every cell in full, never cut at pandas' 50 characters: as HTML with wrapped,
        left-aligned cells and the verdict coloured, and as text without a column-width limit.
        """
        import html

        import pandas as pd

        colours = {"reproduced": "#d8f0e0", "partly reproduced": "#fdf0c8", "not reproduced": "#f8d7d3",
                   "inconclusive": "#dce9f7", "not run here": "#ececec"}

        class ClaimsTable(pd.DataFrame):
            @property
            def _constructor(self):
                return pd.DataFrame

            def __repr__(self):
                with pd.option_context("display.max_colwidth", None, "display.max_columns", None, "display.width", None):
                    return super().__repr__()

            def _repr_html_(self):
                head = "".join(f"<th>{html.escape(str(c))}</th>" for c in self.columns)
                rows = "".join(
                    "<tr>" + "".join(
                        f"<td style='background:{colours.get(v, 'transparent')}'>{html.escape(str(v))}</td>"
                        if c == "verdict" else f"<td>{html.escape(str(v))}</td>" for c, v in zip(self.columns, row)) + "</tr>"
                    for row in self.itertuples(index=False))
                return ("<table class='companion-claims' style='table-layout:auto;border-collapse:collapse'>"
                        "<style>.companion-claims td,.companion-claims th{text-align:left;vertical-align:top;"
                        "white-space:normal;word-break:normal;overflow-wrap:anywhere;max-width:28em;padding:4px 8px;"
                        "border-bottom:1px solid #ddd}</style>"
                        f"<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")

        frame = pd.DataFrame([c.as_dict() for c in self.items],
                             columns=["claim", "paper", "measured", "scale", "verdict", "evidence"])
        return ClaimsTable(frame.rename(columns={"paper": "paper says", "measured": "measured here"}))

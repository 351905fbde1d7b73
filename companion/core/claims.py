"""The claims recorder: what the paper says beside what this run measured.

A notebook records each headline result once, in its Reproduce section::

    claims = Claims("18_rtcfr")
    claims.add(claim="last iterate converges", paper="NashConv < 1e-6 on Kuhn",
               measured=f"{nc:.1e} after 500 iterations", scale="Kuhn poker, CPU",
               verdict="reproduced")
    claims.table()

When the batch runner (``make run`` / ``make test``) executes the notebook it sets
``COMPANION_CLAIMS_DIR``; every ``add`` then rewrites ``<dir>/<notebook>.claims.json`` atomically so
the runner can collect the claims even if a later cell fails. Interactively nothing is written.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

from companion.core.atomic import write_json_atomic
from companion.core.validation import check_choice, check_str

VERDICTS = ("reproduced", "partly reproduced", "not reproduced", "recorded on GPU", "not run here")
CLAIMS_DIR_ENV = "COMPANION_CLAIMS_DIR"


@dataclass(frozen=True)
class Claim:
    """One row of a claims table: what the paper says beside what this run measured, at what scale."""

    claim: str
    paper: str
    measured: str
    scale: str
    verdict: str

    def __post_init__(self):
        for name in ("claim", "paper", "measured", "scale"):
            check_str(name, getattr(self, name))
        check_choice("verdict", self.verdict, VERDICTS)


class Claims:
    """An ordered list of :class:`Claim` for one notebook, mirrored to JSON under the batch runner."""

    def __init__(self, notebook: str):
        self.notebook = check_str("notebook", notebook)
        self.items: list[Claim] = []

    def add(self, *, claim: str, paper: str, measured: str, scale: str, verdict: str) -> Claim:
        for name, value in (("claim", claim), ("paper", paper), ("measured", measured), ("scale", scale)):
            check_str(name, value)
        item = Claim(claim, paper, measured, scale, check_choice("verdict", verdict, VERDICTS))
        self.items.append(item)
        self._write()
        return item

    def extend(self, rows) -> "Claims":
        """Record the :class:`Claim` rows a paper's ``claims.claim_rows(...)`` built; returns self."""
        for row in rows:
            if not isinstance(row, Claim):
                raise TypeError(f"claim rows must be Claim objects, got {type(row).__name__}")
            self.add(claim=row.claim, paper=row.paper, measured=row.measured, scale=row.scale, verdict=row.verdict)
        return self

    @property
    def path(self) -> Path | None:
        folder = os.environ.get(CLAIMS_DIR_ENV)
        return Path(folder) / f"{self.notebook}.claims.json" if folder else None

    def _write(self) -> None:
        if self.path is not None:
            write_json_atomic(self.path, {"notebook": self.notebook, "claims": [asdict(c) for c in self.items]})

    def table(self):
        """The claims as a pandas DataFrame (what the notebook shows in its Reproduce section).

        It displays every cell in full, never cut at pandas' 50 characters: as HTML with wrapped,
        left-aligned cells and the verdict coloured, and as text without a column-width limit.
        """
        import html

        import pandas as pd

        colours = {"reproduced": "#d8f0e0", "partly reproduced": "#fdf0c8", "not reproduced": "#f8d7d3",
                   "recorded on GPU": "#dce9f7", "not run here": "#ececec"}

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

        frame = pd.DataFrame([asdict(c) for c in self.items], columns=list(Claim.__dataclass_fields__))
        return ClaimsTable(frame.rename(columns={"paper": "paper says", "measured": "measured here"}))

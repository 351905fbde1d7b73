"""The claims recorder: what the paper says beside what this run measured.

A paper's ``claims.py`` builds each row from the run's measurements; its verdict and evidence come
from :func:`companion.core.verdicts.judge`, the one rule for every verdict::

    Claim("last iterate converges", "NashConv < 1e-6 on Kuhn", f"NashConv {nc:.1e} after 500 iterations",
          "Kuhn poker, CPU", judge(nc, 1e-6, kind="exact"), details=f"at 100 iterations {nc100:.1e}",
          cell="1ed39a2b")

and the notebook records them in its Reproduce section::

    claims = Claims(PAPER.notebook)
    claims.extend(claim_rows(results))
    claims.table()

``measured`` is one headline line; ``details`` (optional) holds the rest of the numbers, which the table
folds into a ``<details>`` element (a long measured text without them is split by :func:`measured_parts`);
``cell`` (optional) is the nbformat id of the notebook cell that measured the row, which the table links to:
``NN_slug.ipynb#cell-id=<id>`` in the notebook (JupyterLab opens the notebook at that cell), and
``NN_slug.html#cell-id=<id>`` in the run's report (nbconvert's HTML gives each cell that id).
:func:`at_cell` links a list of rows to one cell. Every text field shows "n/a" for a NaN
(:func:`companion.core.verdicts.readable`).

When the batch runner (``make run`` / ``make test``) executes the notebook it sets
``COMPANION_CLAIMS_DIR``; every ``add`` then rewrites ``<dir>/<notebook>.claims.json`` atomically so
the runner can collect the claims even if a later cell fails. Interactively nothing is written.
"""

from __future__ import annotations

import html
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from companion.core.atomic import write_json_atomic
from companion.core.validation import ParameterError, check_str
from companion.core.verdicts import Judgement, readable

CLAIMS_DIR_ENV = "COMPANION_CLAIMS_DIR"
HEADLINE_CHARS = 120  # a measured text longer than this, given without details, is cut at its first top-level "; "
CELL_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # nbformat 4.5's cell id
COLUMNS = ("claim", "paper", "measured", "scale", "verdict", "evidence")
HEADERS = {"paper": "paper says", "measured": "measured here"}
VERDICT_COLOURS = {  # (text, pill) per verdict: one palette for the notebook's table and the run's reports
    "reproduced": ("#1a7f37", "#d8f0e0"), "partly reproduced": ("#9a6700", "#fdf0c8"),
    "not reproduced": ("#cf222e", "#f8d7d3"), "inconclusive": ("#0969da", "#dce9f7"),
    "not run here": ("#57606a", "#ececec")}
# Inline styles, not a <style> sheet: JupyterLab's sanitizer drops <style> from an untrusted notebook's outputs
# but keeps these properties, and an inline style beats the ``:not(.jp-RenderedMarkdown).jp-RenderedHTMLCommon td
# {text-align: right}`` rule of JupyterLab (and of nbconvert's lab template) whatever its selector.
CELL_STYLE = ("text-align:left;vertical-align:top;white-space:normal;word-break:normal;overflow-wrap:anywhere;"
              "max-width:28em;padding:4px 8px;border-bottom:1px solid #ddd")
PILL_STYLE = "display:inline-block;border-radius:999px;padding:1px 9px;font-weight:600;white-space:nowrap"


def measured_parts(measured: str, details: str = "") -> tuple[str, str]:
    """The (headline, details) of a measured text: ``details`` where a row gave them; else a text of at most
    ``HEADLINE_CHARS`` is all headline, and a longer one is cut at its first "; " outside brackets; a headline
    still longer than that which ends in a " (...)" of numbers passes them on to the details too."""
    if details or len(measured) <= HEADLINE_CHARS:
        return measured, details
    outer = _outer_positions(measured)
    cut = next((i for i in outer if measured.startswith("; ", i)), len(measured))
    head, rest = measured[:cut], measured[cut + 2:]
    opens = [i for i in outer if i < cut and measured.startswith(" (", i)]
    end = len(head) - 1  # the trailing group must close there, with nothing outside brackets in between
    if (len(head) > HEADLINE_CHARS and opens and head.endswith(")") and end in outer
            and not any(opens[-1] + 1 < i < end for i in outer)):
        head, rest = head[:opens[-1]], "; ".join(filter(None, (head[opens[-1] + 2:-1], rest)))
    return head, rest


def _outer_positions(text: str) -> list[int]:
    """The positions of ``text`` outside every bracket, and the position of each bracket that closes to depth 0."""
    out, depth = [], 0
    for i, ch in enumerate(text):
        depth -= ch in ")]}"
        if depth == 0:
            out.append(i)
        depth += ch in "([{"
    return out


@dataclass(frozen=True)
class Claim:
    """One row of a claims table: what the paper says beside what this run measured (a headline, optional
    ``details``), at what scale, the :class:`~companion.core.verdicts.Judgement` (verdict and evidence) that
    ``judge`` gave it, and optionally the id of the notebook ``cell`` that measured it."""

    claim: str
    paper: str
    measured: str
    scale: str
    judgement: Judgement
    details: str = ""
    cell: str = ""

    def __post_init__(self):
        for name in ("claim", "paper", "measured", "scale"):
            object.__setattr__(self, name, readable(check_str(name, getattr(self, name))))
        if not isinstance(self.details, str):
            raise ParameterError("details", self.details, "a string (empty for none)")
        object.__setattr__(self, "details", readable(self.details))
        if self.cell != "" and not (isinstance(self.cell, str) and CELL_ID.fullmatch(self.cell)):
            raise ParameterError("cell", self.cell, "a notebook cell id (1-64 letters, digits, '-' or '_'), or '' for none")
        if not isinstance(self.judgement, Judgement):
            raise TypeError(f"judgement must come from companion.core.judge or not_run, got {self.judgement!r}")

    @property
    def verdict(self) -> str:
        return self.judgement.verdict

    @property
    def evidence(self) -> str:
        return self.judgement.evidence

    def as_dict(self) -> dict:
        """The row as the claims JSON, the run index and the sweep report store it: ``measured`` is the
        headline, ``details`` the rest (see :func:`measured_parts`), ``cell`` the measuring cell's id or ""."""
        headline, details = measured_parts(self.measured, self.details)
        return {"claim": self.claim, "paper": self.paper, "measured": headline, "details": details,
                "scale": self.scale, "verdict": self.verdict, "evidence": self.evidence, "cell": self.cell}


def at_cell(cell: str, rows) -> list[Claim]:
    """``rows`` (Claims), each linked to the notebook cell ``cell`` (its nbformat id) that measured them."""
    return [replace(row, cell=cell) for row in rows]


def verdict_badge(verdict: str) -> str:
    """A verdict as a coloured pill (HTML)."""
    fg, bg = VERDICT_COLOURS.get(verdict, ("#57606a", "#ececec"))
    return f"<span class='companion-pill' style='{PILL_STYLE};color:{fg};background:{bg}'>{html.escape(verdict)}</span>"


def measured_html(row: dict, page: str) -> str:
    """A row's measured cell (HTML): the headline, its details folded in ``<details>``, and a link
    ``<page>#cell-id=<id>`` to the cell that measured it. ``row`` is :meth:`Claim.as_dict`'s; ``page`` is the
    notebook (``NN_slug.ipynb``: JupyterLab opens it at that cell) or its nbconvert HTML (``NN_slug.html``, whose
    cells carry the ids ``cell-id=<id>``)."""
    headline, details = measured_parts(row["measured"], row.get("details", ""))
    text = (f"<details><summary>{html.escape(headline)}</summary>{html.escape(details)}</details>" if details
            else html.escape(headline))
    if row.get("cell"):
        text += f" <a href='{html.escape(page)}#cell-id={html.escape(row['cell'])}' title='the cell that measured it'>[cell]</a>"
    return text


def claims_html(rows: list[dict], page: str) -> str:
    """The claims table (HTML) of rows as :meth:`Claim.as_dict` gives them: left-aligned wrapped cells, the
    measured cell as :func:`measured_html` writes it (links to ``page``), the verdict as a pill, the evidence."""
    td = f"<td style='{CELL_STYLE}'>"
    head = "".join(f"<th style='{CELL_STYLE}'>{HEADERS.get(c, c)}</th>" for c in COLUMNS)
    body = "".join(
        "<tr>" + "".join(td + (measured_html(r, page) if c == "measured" else verdict_badge(r[c]) if c == "verdict"
                                else html.escape(r[c])) + "</td>" for c in COLUMNS) + "</tr>"
        for r in rows)
    return (f"<table class='companion-claims' style='table-layout:auto;border-collapse:collapse'>"
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")


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

        As text it shows each row's headline in full (never cut at pandas' 50 characters); as HTML it is
        :func:`claims_html`: the headline with its details folded out, a link to the measuring cell (which
        JupyterLab follows to that cell of the notebook), the verdict as a coloured pill.
        """
        import pandas as pd

        rows, page = [c.as_dict() for c in self.items], f"{self.notebook}.ipynb"

        class ClaimsTable(pd.DataFrame):
            @property
            def _constructor(self):
                return pd.DataFrame

            def __repr__(self):
                with pd.option_context("display.max_colwidth", None, "display.max_columns", None, "display.width", None):
                    return super().__repr__()

            def _repr_html_(self):
                return claims_html(rows, page)

        return ClaimsTable(pd.DataFrame(rows, columns=list(COLUMNS)).rename(columns=HEADERS))

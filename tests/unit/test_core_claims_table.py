"""The claims table as a reader sees it: left-aligned against JupyterLab's stylesheet, one headline per measured
cell with its details folded out, a link to the measuring cell, no NaN and no raw Python repr in any row that any
paper builds from its recorded GPU results."""

from __future__ import annotations

import ast
import importlib
import re

import nbformat
import pytest

from companion.core import Claim, Claims, inconclusive, judge, not_run, repo_path
from companion.core.claims import (CELL_STYLE, HEADLINE_CHARS, VERDICT_COLOURS, at_cell, claims_html, measured_parts,
                                   verdict_badge)
from companion.core.verdicts import VERDICTS

# each paper's function that builds its rows from ``scale.recorded()`` (the committed GPU results)
RECORDED_ROWS = {
    "seer_attention": "recorded_rows", "hyperet": "gpu_rows", "scalekv": "recorded_rows",
    "zeros_attention": "kernel_claim_rows", "gaussian_video": "gpu_rows", "sudoku_dfs": "nine_by_nine_row",
    "graph_multiview": "gpu_rows", "dartquant": "gpu_rows", "delta_attention": "ladder_rows",
    "ortho_residual": "gpu_rows", "low_rank_clone": "gpu_rows", "lorasuite": "gpu_rows", "hollowflow": "gpu_rows",
    "cpmla": "gpu_rows", "nemotron_flash": "gpu_rows", "kernelshap": "scale_claim_rows", "gain_rl": "gpu_rows",
    "rtcfr": "recorded_rows", "diverse_sampling": "gpu_rows",
}
NAN = re.compile(r"(?<![\w.])[+-]?nan(?![\w])", re.IGNORECASE)
RAW_REPR = re.compile(r"""\{\s*['"]|['"]\s*:\s|array\(|tensor\(|np\.(float|int)|\[[^\[\]]*,[^\[\]]*,[^\[\]]*\]""")
HEADLINE_MAX = 180  # no headline is a wall: a longer text belongs in the row's details


def _row(measured="m", details="", cell="", verdict=None):
    return Claim("c", "p", measured, "s", verdict or judge(1e-12, 1e-9, kind="exact"), details=details, cell=cell)


def test_cells_are_left_aligned_by_a_rule_that_beats_jupyterlab():
    """JupyterLab (and nbconvert's lab template) right-align output tables with
    ``:not(.jp-RenderedMarkdown).jp-RenderedHTMLCommon td``; an inline style beats any selector, and the
    sanitizer of an untrusted notebook keeps it while it drops a <style> sheet."""
    page = Claims("99_demo").extend([_row()]).table()._repr_html_()
    cells = re.findall(r"<t[dh]( style='[^']*')?>", page)
    assert len(cells) == 12 and all(f" style='{CELL_STYLE}'" == c for c in cells)
    assert "text-align:left" in CELL_STYLE and "vertical-align:top" in CELL_STYLE
    assert "<style" not in page


def test_the_verdict_is_a_coloured_pill_and_the_evidence_stays():
    assert set(VERDICT_COLOURS) == set(VERDICTS)
    for v in VERDICTS:
        fg, bg = VERDICT_COLOURS[v]
        assert f"color:{fg};background:{bg}'>{v}</span>" in verdict_badge(v) and "border-radius" in verdict_badge(v)
    row = _row(verdict=judge([0.9, 1.1, 1.0], 2.0, direction="higher"))
    page = claims_html([row.as_dict()], "99_demo.ipynb")
    assert verdict_badge("not reproduced") in page and "n=3: 1 ± 0.1 (0.9–1.1) vs ≥ 2" in page
    assert [h for h in re.findall(r"<th[^>]*>([^<]*)</th>", page)] == [
        "claim", "paper says", "measured here", "scale", "verdict", "evidence"]


def test_every_verdict_reaches_the_json_and_the_pill_unchanged():
    judgements = [judge([0.1] * 3, 0.5, direction="lower"), judge([1.5, 2.3, 2.4], 2.0, direction="higher"),
                  judge(1.0, 0.5, kind="exact"), inconclusive("no baseline"), not_run("needs a GPU")]
    assert [j.verdict for j in judgements] == list(VERDICTS)
    for j in judgements:
        d = _row(verdict=j).as_dict()
        assert d["verdict"] == j.verdict and verdict_badge(j.verdict) in claims_html([d], "99_demo.ipynb")


def test_a_measured_cell_is_one_headline_with_its_details_folded():
    short = "max error 3e-16 over 40 mixes"
    assert measured_parts(short) == (short, "")
    wall = "speed-up 28× at n = 55 (k = 7; k = 8 in the details); " + "n = 13: 1328 vs 47.2 ms; " * 10
    head, rest = measured_parts(wall)
    assert head == "speed-up 28× at n = 55 (k = 7; k = 8 in the details)"  # cut outside the brackets
    assert rest.startswith("n = 13") and len(wall) > HEADLINE_CHARS
    assert measured_parts(wall, "given") == (wall, "given")  # a row's own details win
    listed = "LoRA(n) ended lower in 4 of 4 settings (" + "n 10, lr 0.001: 2.67 vs 2.66; " * 5 + "n 100: 2.6 vs 2.5)"
    assert measured_parts(listed) == ("LoRA(n) ended lower in 4 of 4 settings", listed[40:-1])  # a closing list
    assert measured_parts(listed + " here") == (listed + " here", "")  # no cut that would leave half a bracket
    one = claims_html([_row(head, rest).as_dict()], "99_demo.ipynb")
    assert f"<details><summary>{head}</summary>{rest}</details>" in one
    assert "<details>" not in claims_html([_row(short).as_dict()], "99_demo.ipynb")
    d = _row(wall).as_dict()
    assert (d["measured"], d["details"]) == (head, rest)  # the JSON the runner and the report read holds the split


def test_a_measured_text_of_exactly_headline_chars_is_all_headline():
    text = "a; " + "b" * (HEADLINE_CHARS - 3)
    assert len(text) == HEADLINE_CHARS and measured_parts(text) == (text, "")
    assert measured_parts(text + "b") == ("a", "b" * (HEADLINE_CHARS - 2))  # one more and it is cut at the "; "


def test_a_row_links_to_the_cell_that_measured_it():
    table = Claims("13_hollowflow").extend([_row(cell="1ed39a2b")]).table()
    assert "href='13_hollowflow.ipynb#cell-id=1ed39a2b'" in table._repr_html_()  # JupyterLab opens it at the cell
    assert "href='13_hollowflow.html#cell-id=1ed39a2b'" in claims_html([_row(cell="1ed39a2b").as_dict()],
                                                                       "13_hollowflow.html")  # the report's anchor
    assert "cell-id" not in claims_html([_row().as_dict()], "13_hollowflow.html")
    linked = at_cell("gmv-09", [_row(), _row(cell="other")])
    assert [r.cell for r in linked] == ["gmv-09", "gmv-09"] and linked[0].measured == "m"
    for bad in ("has space", "x" * 65, "<a>", 7, None):
        with pytest.raises(ValueError, match="cell"):
            _row(cell=bad)


def test_nan_is_written_n_a_in_every_field():
    row = Claim("c nan", "p", "BD-rate +nan %, BD-PSNR nan dB", "NaN seeds", inconclusive("the mean is -nan"),
                details="spread nan; nanoGPT, financial")
    assert row.measured == "BD-rate n/a %, BD-PSNR n/a dB" and row.scale == "n/a seeds"
    assert row.evidence == "the mean is n/a" and row.claim == "c n/a"
    assert row.details == "spread n/a; nanoGPT, financial"  # words that hold "nan" are left alone
    with pytest.raises(ValueError, match="details"):
        _row(details=None)


def _notebook_cell_ids(slug: str) -> set[str]:
    path = next(repo_path("notebooks").glob(f"*_{slug}.ipynb"))
    return {c.id for c in nbformat.read(path, as_version=4).cells}


def _recorded_rows(build, recorded) -> list[Claim]:
    rows = build(recorded=recorded) if build.__name__ == "nine_by_nine_row" else build(recorded)  # (checkpoint, recorded)
    return rows if isinstance(rows, list) else [rows]


@pytest.mark.parametrize("slug", sorted(RECORDED_ROWS))
def test_recorded_rows_render_cleanly(slug):
    """Every row a paper builds from its committed GPU results: no NaN, no raw repr, a headline that is not a
    wall, and a link only to a cell its notebook has."""
    claims = importlib.import_module(f"companion.{slug}.claims")
    recorded = importlib.import_module(f"companion.{slug}.scale").recorded()
    rows = _recorded_rows(getattr(claims, RECORDED_ROWS[slug]), recorded)
    ids = _notebook_cell_ids(slug)
    for row in rows:
        d = row.as_dict()
        for key, text in d.items():
            assert not NAN.search(text), (key, text)
            assert not RAW_REPR.search(text), (key, text)
        assert len(d["measured"]) <= HEADLINE_MAX, d["measured"]
        assert not d["cell"] or d["cell"] in ids, d["cell"]


def _named_cells(path) -> list[str]:
    """The string literals a claims.py names as cells: ``cell="..."`` arguments and ``*_CELL`` constants."""
    tree, out = ast.parse(path.read_text()), []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "cell" and isinstance(node.value, ast.Constant):
            out.append(node.value.value)
        if isinstance(node, ast.Assign) and node.col_offset == 0:
            names = [t for tgt in node.targets for t in (tgt.elts if isinstance(tgt, ast.Tuple) else [tgt])]
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            out += [v.value for t, v in zip(names, values)
                    if isinstance(t, ast.Name) and t.id.endswith("_CELL") and isinstance(v, ast.Constant)]
    return out


@pytest.mark.parametrize("path", sorted(repo_path("companion").glob("*/claims.py")), ids=lambda p: p.parent.name)
def test_named_cells_exist_in_the_notebook(path):
    named = _named_cells(path)
    if named:
        assert set(named) <= _notebook_cell_ids(path.parent.name), set(named) - _notebook_cell_ids(path.parent.name)


def test_the_named_cells_are_found():
    assert set(_named_cells(repo_path("companion", "hollowflow", "claims.py"))) == {
        "19dd220b", "f91b2bf8", "262fd978", "81d11844"}


RAW_TEX = re.compile(r"[_^]\{|\\[A-Za-z]+")


@pytest.mark.parametrize("path", sorted(repo_path("companion").glob("*/claims.py")), ids=lambda p: p.parent.name)
def test_claims_text_has_no_raw_tex(path):
    """The table's text is HTML, not typeset: notation is written in Unicode (Σ_c, xₙ₊₁, hᵀ), never as TeX
    (``_{``, ``^{``, ``\\frac``), which would show raw. Docstrings are not shown and are not checked."""
    tree = ast.parse(path.read_text())
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    raw = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
           and id(n) not in docstrings and RAW_TEX.search(n.value)]
    assert not raw, f"{path.parent.name}: TeX in claims text {raw[:3]}"

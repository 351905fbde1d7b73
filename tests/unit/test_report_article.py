"""The report's article parts and the index thumbnails (companion.report), on figures with a known drawing."""

import base64
import io
import re

import nbformat
import plotly.graph_objects as go
from PIL import Image

from companion import report, thumbnails

W, H = thumbnails.THUMB_SIZE
PAD = thumbnails.THUMB_PAD


def _polylines(svg: str) -> list[list[tuple[float, float]]]:
    return [[tuple(float(v) for v in p.split(",")) for p in pts.split()] for pts in re.findall(r"<polyline points='([^']+)'", svg)]


def test_a_line_spans_the_plot_area_from_corner_to_corner_on_fixed_ranges():
    fig = go.Figure(go.Scatter(x=[0, 1], y=[0, 1], mode="lines"), layout={"xaxis": {"range": [0, 1]}, "yaxis": {"range": [0, 1]}})
    [line] = _polylines(thumbnails.thumbnail_svg(fig.to_plotly_json()))
    assert line == [(PAD, H - PAD), (W - PAD, PAD)]  # y grows upwards


def test_log_axes_categories_and_reversed_axes_place_points_where_plotly_would():
    fig = go.Figure(go.Scatter(x=["a", "b", "c"], y=[1, 10, 100], mode="lines"),
                    layout={"yaxis": {"type": "log", "range": [0, 2]}, "xaxis": {"range": [0, 2]}})
    [line] = _polylines(thumbnails.thumbnail_svg(fig.to_plotly_json()))
    assert [round(y, 1) for _, y in line] == [H - PAD, H / 2, PAD]  # 1, 10, 100 evenly spaced on a log axis
    assert [round(x, 1) for x, _ in line] == [PAD, W / 2, W - PAD]  # categories numbered 0, 1, 2
    fig.update_yaxes(autorange="reversed", range=None)
    [line] = _polylines(thumbnails.thumbnail_svg(fig.to_plotly_json()))
    assert line[0][1] < line[-1][1]  # the first point at the top


def test_stacked_bars_sit_on_each_other_and_reach_the_top_of_their_range():
    fig = go.Figure([go.Bar(x=["a"], y=[1]), go.Bar(x=["a"], y=[2])], layout={"barmode": "stack", "yaxis": {"range": [0, 3]}})
    rects = re.findall(r"<rect x='[^']+' y='([^']+)' width='[^']+' height='([^']+)' fill='#", thumbnails.thumbnail_svg(fig.to_plotly_json()))
    (y1, h1), (y2, h2) = [(float(y), float(h)) for y, h in rects]
    assert abs(y1 + h1 - (H - PAD)) < 0.2 and abs(y2 + h2 - y1) < 0.2 and abs(y2 - PAD) < 0.2
    assert abs(h2 - 2 * h1) < 0.2


def test_a_heat_map_keeps_its_orientation_and_colours():
    fig = go.Figure(go.Heatmap(z=[[0.0, 1.0], [1.0, 1.0]], colorscale=[[0, "#000000"], [1, "#ffffff"]]))
    uri = re.search(r"href='data:image/png;base64,([^']+)'", thumbnails.thumbnail_svg(fig.to_plotly_json())).group(1)
    image = Image.open(io.BytesIO(base64.b64decode(uri))).convert("L")
    w, h = image.size
    assert image.getpixel((1, h - 2)) == 0  # z[0][0] (row 0 is at the bottom of the y axis) is black
    assert image.getpixel((w - 2, h - 2)) == 255 and image.getpixel((1, 1)) == 255
    fig.update_yaxes(autorange="reversed")  # row 0 at the top
    uri = re.search(r"href='data:image/png;base64,([^']+)'", thumbnails.thumbnail_svg(fig.to_plotly_json())).group(1)
    image = Image.open(io.BytesIO(base64.b64decode(uri))).convert("L")
    assert image.getpixel((1, 1)) == 0 and image.getpixel((1, h - 2)) == 255


def test_the_thumbnail_is_the_first_figure_it_can_draw_and_none_without_one(tmp_path):
    nb = nbformat.v4.new_notebook()
    cube = go.Figure(go.Scatter3d(x=[0, 1], y=[0, 1], z=[0, 1]))
    curve = go.Figure(go.Scatter(x=[0, 1, 2], y=[2, 0, 1]))
    cells = []
    for fig in (cube, curve):
        cell = nbformat.v4.new_code_cell("fig")
        cell.outputs = [nbformat.v4.new_output("display_data", data={report.PLOTLY_MIME: fig.to_plotly_json()}, metadata={})]
        cells.append(cell)
    nb.cells = cells
    path = tmp_path / "01_demo.ipynb"
    nbformat.write(nb, path)
    assert not thumbnails.drawable(cube.to_plotly_json()) and thumbnails.thumbnail_svg(cube.to_plotly_json()) is None
    thumb = thumbnails.write_thumbnail(path)
    assert thumb == tmp_path / "01_demo.thumb.svg" and len(_polylines(thumb.read_text())) == 1
    nb.cells = cells[:1]
    nbformat.write(nb, path)
    thumb.unlink()
    assert thumbnails.write_thumbnail(path) is None and not thumb.exists()


def test_headline_rows_put_settled_rows_first_then_inconclusive_and_keep_three():
    verdicts = ["not run here", "inconclusive", "reproduced", "not run here", "not reproduced", "partly reproduced", "reproduced"]
    rows = [{"claim": f"c{i}", "verdict": v} for i, v in enumerate(verdicts)]
    assert [r["claim"] for r in report.headline_rows(rows)] == ["c2", "c4", "c5"]
    assert [r["claim"] for r in report.headline_rows(rows[:2])] == ["c1", "c0"]


def test_every_paper_has_a_theme_and_the_tour_starts_the_index():
    from companion.runner import discover

    stems = [p.stem for p in discover().values()]
    assert report.theme_of("00_tour") == report.TOUR_THEME
    assert all(report.theme_of(s) in report.THEMES for s in stems if s != "00_tour"), \
        [s for s in stems if report.theme_of(s) not in report.THEMES]
    slugs = [slug for group in report.THEMES.values() for slug in group]
    assert len(slugs) == len(set(slugs))  # one theme per paper

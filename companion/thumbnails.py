"""Thumbnails for the run index: a notebook's first figure drawn as a small static SVG.

The index shows one picture per paper. Drawing live plotly figures there made it slow (about 10 s for 20
papers) and some came out blank, and a static export needs kaleido and a browser on every worker. So
:func:`thumbnail_svg` draws the figure's JSON directly, at the size the index shows it: lines, markers,
fills, bars, heatmaps and images, on linear, log and category axes, with subplots and equal-aspect axes
(numpy and Pillow only). A figure it cannot draw (3-D, histograms, shapes only) is skipped for the next.
"""

from __future__ import annotations

import base64
import html
import io
import json
import re
from pathlib import Path

import numpy as np

from companion.core.atomic import write_text_atomic
from companion.report import PLOTLY_MIME


def first_figure(executed: Path, max_bytes: int | None = 400_000, accept=None) -> dict | None:
    """The first plotly figure an executed notebook shows outside explorers (for which ``accept(figure)``
    holds, when given), or None; figures whose JSON is longer than ``max_bytes`` are skipped."""
    try:
        nb = json.loads(Path(executed).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []):
            figure = out.get("data", {}).get(PLOTLY_MIME)
            if (figure and (max_bytes is None or len(json.dumps(figure)) <= max_bytes)
                    and (accept is None or accept(figure))):
                return figure
    return None


THUMB_SIZE = (320, 180)  # px: drawn at the size the index shows it
THUMB_PAD = 6  # px around the plot areas
MAX_LINE_POINTS = 800  # a longer line is thinned to this many vertices
MAX_MARKERS = 1500
DRAWN = ("scatter", "scattergl", "bar", "heatmap", "image")


def _array(value):
    """A plotly JSON array: a list, or plotly's typed array ``{"dtype", "bdata", "shape"}`` as numpy."""

    if isinstance(value, dict) and "bdata" in value:
        a = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        shape = value.get("shape")
        if shape:
            a = a.reshape([int(n) for n in (shape.split(",") if isinstance(shape, str) else shape)])
        return a
    return value


def _rgb(colour) -> tuple[int, int, int]:
    """``#rgb``, ``#rrggbb``, ``rgb()``/``rgba()`` or a CSS name as an RGB triple (grey when unknown)."""
    from PIL import ImageColor

    text = str(colour).strip()
    match = re.fullmatch(r"rgba?\(([^)]*)\)", text.replace(" ", ""))
    if match:
        return tuple(int(float(v)) for v in match.group(1).split(",")[:3])
    try:
        return ImageColor.getrgb(text)[:3]
    except ValueError:
        return (128, 128, 128)


def _colour_map(values, colorscale, lo=None, hi=None):
    """``values`` (any shape) through a plotly colorscale (a name or ``[[pos, colour], ...]``): uint8 RGBA, NaN transparent."""
    import plotly.colors

    scale = plotly.colors.get_colorscale(colorscale) if isinstance(colorscale, str) else colorscale
    pos = np.array([float(p) for p, _ in scale])
    rgb = np.array([_rgb(c) for _, c in scale], dtype=float)
    v = np.asarray(values, dtype=float)
    lo = np.nanmin(v) if lo is None else lo
    hi = np.nanmax(v) if hi is None else hi
    t = np.clip((v - lo) / (hi - lo), 0, 1) if hi > lo else np.zeros_like(v)
    out = np.zeros(v.shape + (4,), dtype=np.uint8)
    for k in range(3):
        out[..., k] = np.interp(np.nan_to_num(t), pos, rgb[:, k]).round()
    out[..., 3] = np.where(np.isnan(v), 0, 255)
    return out


class _Axis:
    """One axis of a figure: its type, categories, range and the slice of the canvas it spans."""

    def __init__(self, layout: dict, name: str):
        letter, suffix = name[0], name[1:]
        spec = layout.get(f"{letter}axis{suffix}") or {}
        over = spec.get("overlaying")
        base = (layout.get(f"{letter}axis{over[1:]}") or {}) if over and over != "free" else spec
        self.domain = base.get("domain", [0.0, 1.0])
        self.log = spec.get("type") == "log"
        self.categories: dict[str, int] = {}
        autorange = spec.get("autorange")
        self.range = spec.get("range") if spec.get("range") and autorange in (None, False) else None
        self.reversed = autorange == "reversed"
        self.name, self.anchor = name, spec.get("scaleanchor")  # an axis drawn at its anchor's units per pixel
        self.seen: list[float] = []

    def coords(self, values):
        """Data values as floats on this axis (categories numbered as they appear, log10 on a log axis, NaN gaps)."""
        import numpy as np

        values = _array(values)
        if values is None:
            return np.array([], dtype=float)
        if isinstance(values, np.ndarray) and values.dtype.kind in "iuf":
            out = values.astype(float)
        else:
            values = list(values)
            if any(isinstance(v, str) for v in values):
                out = np.array([self.categories.setdefault(v, len(self.categories)) if isinstance(v, str) else np.nan
                                for v in values], dtype=float)
            else:
                out = np.array([np.nan if v is None else v for v in values], dtype=float)
        if self.log:
            with np.errstate(divide="ignore", invalid="ignore"):
                out = np.where(out > 0, np.log10(np.where(out > 0, out, 1)), np.nan)
        return out

    def span(self, *values) -> None:
        import numpy as np

        for v in values:
            v = np.asarray(v, dtype=float).ravel()
            v = v[np.isfinite(v)]
            if v.size:
                self.seen += [float(v.min()), float(v.max())]

    def limits(self) -> tuple[float, float]:
        """The axis range: given, else the data's with 4% room."""
        if self.range:
            return tuple(float(r) for r in self.range)
        if not self.seen:
            return 0.0, 1.0
        lo, hi = min(self.seen), max(self.seen)
        room = (hi - lo) * 0.04 or 0.5
        return lo - room, hi + room

    def scale(self, limits: tuple[float, float], lo_px: float, hi_px: float):
        """The map from data to pixels: ``limits`` onto [lo_px, hi_px] (the other way round on a reversed axis)."""
        lo, hi = limits[::-1] if self.reversed else limits
        return lambda v: lo_px + (v - lo) / (hi - lo) * (hi_px - lo_px) if hi != lo else (lo_px + hi_px) / 2


def _equal_units(xlim, ylim, width: float, height: float):
    """Both ranges widened about their centres to the same data units per pixel (plotly's ``scaleanchor``)."""
    unit = max((xlim[1] - xlim[0]) / width, (ylim[1] - ylim[0]) / height)
    widen = lambda lim, px: ((lim[0] + lim[1] - unit * px) / 2, (lim[0] + lim[1] + unit * px) / 2)  # noqa: E731
    return widen(xlim, width), widen(ylim, height)


def _visible(trace: dict) -> bool:
    return trace.get("type", "scatter") in DRAWN and trace.get("visible", True) is True


def drawable(figure: dict) -> bool:
    """Whether :func:`thumbnail_svg` draws something of ``figure``: a visible trace of a kind it draws, with data."""

    for t in figure.get("data", []):
        if not _visible(t):
            continue
        if t.get("type") in ("heatmap", "image"):
            if t.get("source") or np.asarray(_array(t.get("z")) if t.get("z") is not None else [], dtype=object).size:
                return True
            continue
        for key in ("y", "x"):
            values = _array(t.get(key))
            if values is not None and any(v is not None for v in np.asarray(values, dtype=object).ravel()):
                return True
    return False


def _png(rgba, size: tuple[int, int], smooth: bool) -> str:
    from PIL import Image

    image = Image.fromarray(rgba).resize((max(1, size[0]), max(1, size[1])),
                                         Image.Resampling.LANCZOS if smooth else Image.Resampling.NEAREST)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def thumbnail_svg(figure: dict) -> str | None:
    """A small static SVG of a plotly figure (JSON dict), drawn at :data:`THUMB_SIZE` for the run index: the
    traces of the kinds in :data:`DRAWN` (lines, markers, fills, bars, heat maps and images, on linear, log
    or category axes, in their subplots' domains), without text. None when nothing can be drawn.

    Drawn here rather than exported by plotly (kaleido, not installed, needs a browser) so that ``make run``
    needs nothing beyond the project's own dependencies on any worker."""

    width, height = THUMB_SIZE
    layout = figure.get("layout", {}) or {}
    template = (layout.get("template") or {}) if isinstance(layout.get("template"), dict) else {}
    colorway = layout.get("colorway") or template.get("layout", {}).get("colorway") or \
        ["#636efa", "#EF553B", "#00cc96", "#ab63fa", "#FFA15A", "#19d3f3", "#FF6692", "#B6E880", "#FF97FF", "#FECB52"]
    sequential = (template.get("layout", {}).get("colorscale", {}) or {}).get("sequential") or "Plasma"
    heatmap_scale = ((template.get("data", {}).get("heatmap") or [{}])[0]).get("colorscale") or sequential
    traces = [(i, t) for i, t in enumerate(figure.get("data", [])) if _visible(t)]
    axes: dict[str, _Axis] = {}

    def axis(name):
        return axes.setdefault(name, _Axis(layout, name))

    # First pass: every trace's coordinates, so that each axis knows its data's extent.
    prepared = []
    for i, t in traces:
        kind = t.get("type", "scatter")
        xa, ya = axis(t.get("xaxis", "x")), axis(t.get("yaxis", "y"))
        colour = (t.get("line") or {}).get("color") or (t.get("marker") or {}).get("color")
        colour = colour if isinstance(colour, str) else colorway[i % len(colorway)]
        if kind in ("heatmap", "image"):
            if kind == "image":
                if t.get("source"):
                    from PIL import Image

                    raw = np.asarray(Image.open(io.BytesIO(base64.b64decode(t["source"].split(",", 1)[1]))).convert("RGBA"))
                else:
                    z = np.asarray(_array(t.get("z")), dtype=float)
                    raw = np.concatenate([z[..., :3], z[..., 3:4] * 255 if z.shape[-1] == 4 else np.full(z.shape[:2] + (1,), 255.0)], -1)
                    raw = np.clip(raw, 0, 255).astype(np.uint8)
                rows, cols = raw.shape[:2]
                x0, dx, y0, dy = t.get("x0", 0), t.get("dx", 1), t.get("y0", 0), t.get("dy", 1)
                xs = (x0 - dx / 2, x0 + (cols - 0.5) * dx)
                ys = (y0 - dy / 2, y0 + (rows - 0.5) * dy)
                if not ya.range and "autorange" not in (layout.get(f"yaxis{t.get('yaxis', 'y')[1:]}") or {}):
                    ya.reversed = True  # plotly draws an image's first row at the top
                ya.anchor = ya.anchor or xa.name  # and its pixels square
                smooth = True
            else:
                z = _array(t.get("z"))
                z = z.astype(float) if isinstance(z, np.ndarray) else \
                    np.array([[np.nan if v is None else v for v in row] for row in z or []], dtype=float)
                if z.ndim != 2 or not np.isfinite(z).any():
                    continue
                if t.get("transpose"):
                    z = z.T
                raw = _colour_map(z, t.get("colorscale") or heatmap_scale, t.get("zmin"), t.get("zmax"))
                rows, cols = z.shape

                def edges(values, n, ax):
                    c = ax.coords(values) if values is not None else np.arange(n, dtype=float)
                    if c.size != n or not np.isfinite(c).all():
                        c = np.arange(n, dtype=float)
                    step = (c[-1] - c[0]) / (n - 1) if n > 1 else 1.0
                    return c[0] - step / 2, c[-1] + step / 2

                xs, ys = edges(t.get("x"), cols, xa), edges(t.get("y"), rows, ya)
                smooth = False
            xa.span(xs)
            ya.span(ys)
            prepared.append((0, i, kind, t, xa, ya, (raw, xs, ys, smooth), colour))
            continue
        x, y = t.get("x"), t.get("y")
        if kind == "bar" and t.get("orientation") == "h":
            xv, yv = xa.coords(x), ya.coords(y) if y is not None else None
            if yv is None:
                yv = np.arange(len(xv), dtype=float)
        else:
            yv = ya.coords(y)
            xv = xa.coords(x) if x is not None else np.arange(len(yv), dtype=float)
        n = min(len(xv), len(yv))
        xv, yv = xv[:n], yv[:n]
        if not n:
            continue
        prepared.append((1 if kind == "bar" else 2, i, kind, t, xa, ya, (xv, yv), colour))

    # Bars: group (default), stack or overlay, as the layout's barmode says.
    bar_mode = layout.get("barmode", "group")
    bars = [p for p in prepared if p[2] == "bar"]
    groups: dict[tuple, list] = {}
    for p in bars:
        groups.setdefault((id(p[4]), id(p[5])), []).append(p)
    bar_geometry = {}
    for members in groups.values():
        horizontal = members[0][3].get("orientation") == "h"
        positions = np.concatenate([p[6][1] if horizontal else p[6][0] for p in members])
        distinct = np.unique(positions[np.isfinite(positions)])
        spacing = float(np.min(np.diff(distinct))) if distinct.size > 1 else 1.0
        slot = 0.8 * spacing / (len(members) if bar_mode == "group" else 1)
        base: dict[float, float] = {}
        for k, p in enumerate(members):
            pos, val = (p[6][1], p[6][0]) if horizontal else p[6]
            offset = (k - (len(members) - 1) / 2) * slot if bar_mode == "group" else 0.0
            starts = np.array([base.get(q, 0.0) for q in pos]) if bar_mode in ("stack", "relative") else np.zeros_like(val)
            ends = starts + np.nan_to_num(val)
            if bar_mode in ("stack", "relative"):
                for q, e in zip(pos, ends):
                    base[q] = e
            bar_geometry[p[1]] = (pos + offset, slot, starts, ends, horizontal)
            value_axis, position_axis = (p[4], p[5]) if horizontal else (p[5], p[4])
            value_axis.span(starts, ends)
            position_axis.span(pos - spacing / 2, pos + spacing / 2)
    for p in prepared:
        if p[2] not in ("bar", "heatmap", "image"):
            p[4].span(p[6][0])
            p[5].span(p[6][1])

    inner_w, inner_h = width - 2 * THUMB_PAD, height - 2 * THUMB_PAD
    parts, clips, frames = [], [], {}
    previous_line: dict[tuple, tuple] = {}
    for order, i, kind, t, xa, ya, data, colour in sorted(prepared, key=lambda p: (p[0], p[1])):
        left, right = THUMB_PAD + xa.domain[0] * inner_w, THUMB_PAD + xa.domain[1] * inner_w
        top, bottom = THUMB_PAD + (1 - ya.domain[1]) * inner_h, THUMB_PAD + (1 - ya.domain[0]) * inner_h
        xlim, ylim = xa.limits(), ya.limits()
        if ya.anchor == xa.name or xa.anchor == ya.name:
            xlim, ylim = _equal_units(xlim, ylim, right - left, bottom - top)
        fx, fy = xa.scale(xlim, left, right), ya.scale(ylim, bottom, top)
        key = (round(left), round(top), round(right), round(bottom))
        if key not in frames:
            frames[key] = f"c{len(frames)}"
            clips.append(f"<clipPath id='{frames[key]}'><rect x='{left:.1f}' y='{top:.1f}' width='{right - left:.1f}' "
                         f"height='{bottom - top:.1f}'/></clipPath>")
        clip = f" clip-path='url(#{frames[key]})'"
        opacity = _scalar(t.get("opacity"), 1.0)
        if kind in ("heatmap", "image"):
            raw, xs, ys, smooth = data
            px = sorted((fx(xs[0]), fx(xs[1])))
            py = sorted((fy(ys[0]), fy(ys[1])))
            if fx(xs[0]) > fx(xs[1]):
                raw = raw[:, ::-1]
            if fy(ys[0]) > fy(ys[1]):  # row 0 lies at ys[0]: below the last row on the page, unless the axis is reversed
                raw = raw[::-1]
            size = (int(round(px[1] - px[0])), int(round(py[1] - py[0])))
            parts.append(f"<image x='{px[0]:.1f}' y='{py[0]:.1f}' width='{size[0]}' height='{size[1]}' preserveAspectRatio='none'"
                         f" opacity='{opacity}' href='{_png(np.ascontiguousarray(raw), size, smooth)}'{clip}/>")
        elif kind == "bar":
            pos, slot, starts, ends, horizontal = bar_geometry[i]
            fill = (t.get("marker") or {}).get("color")
            fills = list(fill) if isinstance(fill, (list, tuple)) and all(isinstance(c, str) for c in fill) else None
            rects = []
            for k, (q, s0, s1) in enumerate(zip(pos, starts, ends)):
                if not (np.isfinite(q) and np.isfinite(s1)):
                    continue
                if horizontal:
                    xs_, ys_ = sorted((fx(s0), fx(s1))), sorted((fy(q - slot / 2), fy(q + slot / 2)))
                else:
                    xs_, ys_ = sorted((fx(q - slot / 2), fx(q + slot / 2))), sorted((fy(s0), fy(s1)))
                colour_k = fills[k % len(fills)] if fills else colour
                rects.append(f"<rect x='{xs_[0]:.1f}' y='{ys_[0]:.1f}' width='{max(xs_[1] - xs_[0], 0.5):.1f}' "
                             f"height='{max(ys_[1] - ys_[0], 0.5):.1f}' fill='{html.escape(colour_k)}'/>")
            parts.append(f"<g opacity='{opacity}'{clip}>{''.join(rects)}</g>")
        else:
            xv, yv = data
            mode = t.get("mode") or ("lines+markers" if len(xv) < 20 else "lines")
            points = np.stack([fx(xv), fy(yv)], axis=1)
            finite = np.isfinite(points).all(axis=1)
            fill = t.get("fill", "none")
            if fill in ("toself", "tozeroy", "tonexty") and finite.any():
                poly = points[finite]
                if fill == "tozeroy":
                    zero = bottom if ya.log else fy(0.0)
                    poly = np.concatenate([poly, [[poly[-1, 0], zero], [poly[0, 0], zero]]])
                elif fill == "tonexty" and (xa, ya) in previous_line:
                    poly = np.concatenate([poly, previous_line[(xa, ya)][::-1]])
                fill_colour = t.get("fillcolor") or colour
                parts.append(f"<polygon points='{_svg_points(poly)}' fill='{html.escape(fill_colour)}' "
                             f"fill-opacity='{1.0 if t.get('fillcolor') else 0.3}' stroke='none'{clip}/>")
            previous_line[(xa, ya)] = points[finite]
            if "lines" in mode:
                line = t.get("line") or {}
                stroke = min(max(_scalar(line.get("width"), 2) * 0.75, 1.0), 3.0)
                for run in _runs(points, finite):
                    parts.append(f"<polyline points='{_svg_points(run)}' fill='none' stroke='{html.escape(colour)}' "
                                 f"stroke-width='{stroke:.2f}' stroke-linejoin='round' opacity='{opacity}'{clip}/>")
            if "markers" in mode:
                marker = t.get("marker") or {}
                radius = min(max(_scalar(marker.get("size"), 6) * 0.3, 1.0), 3.5)
                colours = marker.get("color")
                colours = _array(colours)
                if isinstance(colours, (list, np.ndarray)) and len(colours) == len(points):
                    if all(isinstance(c, str) for c in colours):
                        fills = list(colours)
                    else:
                        rgba = _colour_map(np.asarray(colours, dtype=float), marker.get("colorscale") or sequential,
                                           marker.get("cmin"), marker.get("cmax"))
                        fills = [f"rgb({r},{g},{b})" for r, g, b, _ in rgba]
                else:
                    fills = [colour] * len(points)
                keep = np.flatnonzero(finite)[:: max(1, int(finite.sum()) // MAX_MARKERS + 1) if finite.sum() > MAX_MARKERS else 1]
                dots = "".join(f"<circle cx='{points[k, 0]:.1f}' cy='{points[k, 1]:.1f}' r='{radius:.1f}' "
                               f"fill='{html.escape(str(fills[k]))}'/>" for k in keep)
                parts.append(f"<g opacity='{_scalar(marker.get('opacity'), 1.0) * opacity}'{clip}>{dots}</g>")
    if not parts:
        return None
    frame = "".join(f"<rect x='{l}' y='{t}' width='{r - l}' height='{b - t}' fill='none' stroke='#d0d7de' stroke-width='0.6'/>"
                    for (l, t, r, b) in frames)
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' viewBox='0 0 {width} {height}'>"
            f"<defs>{''.join(clips)}</defs><rect width='{width}' height='{height}' fill='#ffffff'/>{frame}{''.join(parts)}</svg>")


def _runs(points, finite):
    """The unbroken stretches of a line (NaN values break it), each thinned to at most MAX_LINE_POINTS vertices."""

    breaks = np.flatnonzero(np.diff(finite.astype(int)) != 0) + 1
    for chunk, ok in zip(np.split(points, breaks), np.split(finite, breaks)):
        if ok[0] and len(chunk) > 1:
            step = max(1, len(chunk) // MAX_LINE_POINTS)
            yield np.concatenate([chunk[::step], chunk[-1:]]) if step > 1 else chunk


def _scalar(value, default: float) -> float:
    """A style value that may be given per point (a size, an opacity): its median; ``default`` when absent."""

    if value is None:
        return default
    values = np.asarray(_array(value), dtype=float).ravel()
    return float(np.nanmedian(values)) if values.size else default


def _svg_points(points) -> str:
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in points)


def write_thumbnail(executed: Path, target: Path | None = None) -> Path | None:
    """The index thumbnail of an executed notebook, ``<stem>.thumb.svg`` beside it (or ``target``): its first
    figure outside explorers that :func:`thumbnail_svg` can draw. None (nothing written) when there is none."""
    executed = Path(executed)
    figure = first_figure(executed, max_bytes=None, accept=drawable)
    svg = thumbnail_svg(figure) if figure else None
    if svg is None:
        return None
    target = Path(target) if target else executed.with_name(f"{executed.stem}.thumb.svg")
    write_text_atomic(target, svg)
    return target

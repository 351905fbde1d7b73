"""The DFS-trace explorer of paper 06: a transcript, step by step, as a board, a search tree and the
model's next-token distribution.

Paper: Giannoulis, Pantis, Tzamos, NeurIPS 2025 (arXiv 2509.22023), Section 3 (transcripts).

:func:`trace_figure` is the pure update function (transcript + step -> figure, readout), unit-tested
without a browser; :func:`trace_explorer` binds it to a puzzle dropdown, a step slider and a play
button through :class:`companion.viz.Explorer`. Colours: clues black, rule moves blue, guesses
orange, a dead end red, the solved board green. The tree has one node per value tried at a guess
(the root is the puzzle after the clues); the current node is ringed. When a model is given, the
third panel shows its teacher-forced distribution over the next token at the current step, with the
tokens of the transcript's label set in green.

This module imports plotly and ipywidgets (notebook only); the GPU script never imports it.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from companion.sudoku.board import geometry, token_name
from companion.sudoku.replay import EVENT_COLORS, replay, tree_layout

_FILL = {"": "#ffffff", "clue": "#e6e6e6", "rule": "#d6e6f5", "guess": "#ffe2c4"}
_TEXT = {"": "#000000", "clue": EVENT_COLORS["clue"], "rule": EVENT_COLORS["rule"], "guess": EVENT_COLORS["guess"]}
_STATUS_COLOR = {"open": "#7f7f7f", "dead-end": EVENT_COLORS["dead-end"], "solved": EVENT_COLORS["solved"]}


def _board_traces(step, n: int, xoff: float = 0.0):
    """Cell squares, values and the highlighted cell of the current move."""
    xs, ys, fills, texts, colors = [], [], [], [], []
    for cell in range(n * n):
        r, c = divmod(cell, n)
        xs.append(c + 0.5 + xoff)
        ys.append(n - r - 0.5)
        o = step.origin[cell]
        fills.append(_FILL[o])
        v = step.board[cell]
        texts.append(str(v) if v else "")
        colors.append(_TEXT[o])
    size = 300 / n
    squares = go.Scatter(
        x=xs, y=ys, mode="markers", marker=dict(symbol="square", size=size, color=fills, line=dict(width=0)),
        hoverinfo="skip", showlegend=False,
    )
    values = go.Scatter(
        x=xs, y=ys, mode="text", text=texts, textfont=dict(size=max(10, int(size * 0.45)), color=colors),
        hoverinfo="skip", showlegend=False,
    )
    return [squares, values]


def _grid_shapes(n: int, xref: str, yref: str, border: str):
    b = geometry(n).box
    shapes = []
    for i in range(n + 1):
        w = 2.5 if i % b == 0 else 0.6
        shapes.append(dict(type="line", x0=i, x1=i, y0=0, y1=n, xref=xref, yref=yref, line=dict(width=w, color="#333")))
        shapes.append(dict(type="line", x0=0, x1=n, y0=i, y1=i, xref=xref, yref=yref, line=dict(width=w, color="#333")))
    shapes.append(dict(type="rect", x0=-0.15, x1=n + 0.15, y0=-0.15, y1=n + 0.15, xref=xref, yref=yref, line=dict(width=4, color=border)))
    return shapes


def trace_figure(transcript_tokens, n: int, step: int, probs=None, choices=None, title: str | None = None, top_k: int = 8):
    """Figure and readout of a transcript at ``step`` (index into the tokens).

    ``probs`` (``[T, VOCAB]``, optional) are the model's next-token distributions along the transcript;
    ``choices`` the transcript's label sets (``choices[t]`` = valid tokens at position t).
    """
    steps, nodes = replay(transcript_tokens, n)
    if not steps:
        raise ValueError("empty transcript")
    step = int(np.clip(step, 0, len(steps) - 1))
    cur = steps[step]
    with_probs = probs is not None
    cols = 3 if with_probs else 2
    widths = [0.36, 0.34, 0.30] if with_probs else [0.5, 0.5]
    titles = ["board", "DFS tree (one node per value tried)"] + (["model: next-token probability"] if with_probs else [])
    fig = make_subplots(rows=1, cols=cols, column_widths=widths, subplot_titles=titles, horizontal_spacing=0.08)
    for tr in _board_traces(cur, n):
        fig.add_trace(tr, row=1, col=1)
    border = {"dead-end": EVENT_COLORS["dead-end"], "solved": EVENT_COLORS["solved"]}.get(cur.event, "#ffffff")
    for sh in _grid_shapes(n, "x", "y", border):
        fig.add_shape(**sh)
    if cur.event in ("rule", "guess", "clue"):
        from companion.sudoku.board import decode_move

        cell, _ = decode_move(cur.token, n)
        r, c = divmod(cell, n)
        fig.add_shape(
            type="rect", x0=c + 0.06, x1=c + 0.94, y0=n - r - 0.94, y1=n - r - 0.06, xref="x", yref="y",
            line=dict(width=3, color=EVENT_COLORS.get(cur.event, "#000")),
        )
    fig.update_xaxes(range=[-0.3, n + 0.3], showgrid=False, zeroline=False, showticklabels=False, row=1, col=1)
    fig.update_yaxes(range=[-0.3, n + 0.3], showgrid=False, zeroline=False, showticklabels=False, scaleanchor="x", row=1, col=1)

    # DFS tree
    pos = tree_layout(nodes)
    ex, ey = [], []
    for node in nodes[1:]:
        (x0, y0), (x1, y1) = pos[node.parent], pos[node.id]
        ex += [x0, x1, None]
        ey += [y0, y1, None]
    fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines", line=dict(color="#aaaaaa", width=1.5), hoverinfo="skip", showlegend=False), row=1, col=2)
    visible = [node for node in nodes if node.first_step <= step]
    fig.add_trace(
        go.Scatter(
            x=[pos[m.id][0] for m in visible],
            y=[pos[m.id][1] for m in visible],
            mode="markers+text",
            text=["root" if m.move is None else token_name(m.move, n) for m in visible],
            textposition="bottom center",
            textfont=dict(size=9),
            marker=dict(
                size=[18 if m.id == cur.node else 11 for m in visible],
                color=[_STATUS_COLOR[m.status] if m.last_step <= step or m.status == "open" else _STATUS_COLOR["open"] for m in visible],
                line=dict(width=[3 if m.id == cur.node else 0 for m in visible], color="#000"),
            ),
            hovertext=[f"node {m.id}, depth {m.depth}, {m.status}" for m in visible],
            hoverinfo="text",
            showlegend=False,
        ),
        row=1, col=2,
    )
    xs = [p[0] for p in pos.values()]
    ys = [p[1] for p in pos.values()]
    fig.update_xaxes(range=[min(xs) - 0.8, max(xs) + 0.8], showgrid=False, zeroline=False, showticklabels=False, title_text="values tried, left to right", row=1, col=2)
    fig.update_yaxes(range=[min(ys) - 0.8, 0.6], showgrid=False, zeroline=False, title_text="guess depth (0 = root)", tickvals=sorted(set(ys)), ticktext=[str(int(-y)) for y in sorted(set(ys))], row=1, col=2)

    readout = f"step {step}/{len(steps) - 1}: {token_name(cur.token, n)} ({cur.event}), depth {cur.depth}"
    if with_probs:
        p = np.asarray(probs[step]) if step < len(probs) else np.zeros(1001)
        top = np.argsort(-p)[:top_k]
        valid = choices[step + 1] if choices is not None and step + 1 < len(choices) and choices[step + 1] else frozenset()
        colors = [EVENT_COLORS["solved"] if int(t) in valid else "#9e9e9e" for t in top]
        fig.add_trace(
            go.Bar(x=[float(p[t]) for t in top], y=[token_name(int(t), n) for t in top], orientation="h", marker_color=colors, showlegend=False),
            row=1, col=3,
        )
        fig.update_xaxes(range=[0, 1], title_text="probability (green: in the label set)", row=1, col=3)
        fig.update_yaxes(autorange="reversed", title_text="next token", row=1, col=3)
        if valid:
            readout += f"; model mass on the {len(valid)} valid next tokens: {float(sum(p[t] for t in valid)):.2f}"
    fig.update_layout(title=title or "DFS transcript, step by step", height=430, margin=dict(l=30, r=20, t=70, b=40))
    return fig, readout


def trace_explorer(transcripts: dict, models: dict | None = None, title: str = "DFS-trace explorer"):
    """An Explorer over ``{label: Transcript}`` with a puzzle dropdown, a step slider and a play button.

    ``models`` maps a board size (4 or 9) to a trained model (or None); a transcript whose size has a
    model gets the third panel with the model's next-token distribution.
    """
    import ipywidgets as widgets

    from companion.viz import Explorer

    if not transcripts:
        raise ValueError("trace_explorer needs at least one transcript")
    models = models or {}
    cache: dict = {}

    def probs_for(name):
        model = models.get(transcripts[name].n)
        if model is None:
            return None
        if name not in cache:
            from companion.sudoku.model import next_token_probs

            cache[name] = next_token_probs(model, transcripts[name].tokens).numpy()
        return cache[name]

    names = list(transcripts)
    first = transcripts[names[0]]
    puzzle = widgets.Dropdown(options=names, value=names[0], description="puzzle")
    slider = widgets.IntSlider(value=first.n_clues, min=0, max=len(first) - 1, description="step", continuous_update=False)
    play = widgets.Play(value=first.n_clues, min=0, max=len(first) - 1, interval=400, description="play")
    widgets.jslink((play, "value"), (slider, "value"))

    def on_puzzle(change):
        t = transcripts[change["new"]]
        slider.max = play.max = len(t) - 1
        slider.value = play.value = min(slider.value, len(t) - 1)

    puzzle.observe(on_puzzle, names="value")

    def update(puzzle, step, play=None):
        t = transcripts[puzzle]
        return trace_figure(t.tokens, t.n, step, probs=probs_for(puzzle), choices=t.choices, title=f"{title}: {puzzle}")

    return Explorer(update, {"puzzle": puzzle, "step": slider, "play": play}, title=title)

"""The DFS-trace explorer of paper 06: a transcript, step by step, as a board, the search tree and the
model's next-token distribution.

Paper: Giannoulis, Pantis, Tzamos, NeurIPS 2025 (arXiv 2509.22023), Section 3 (transcripts).

:func:`explorer_view` is the pure update function (the precomputed :class:`ExplorerData`, a transcript
name and a step -> figure and readout), unit-tested without a browser; :func:`explorer_controls`
makes its controls (a transcript dropdown, a step slider and a play button); the notebook binds them
with :class:`companion.viz.Explorer`. Colours: clues grey, rule moves blue, guesses orange, a dead
end red, the solved board green. The tree has one node per value tried at a guess (the root is the
puzzle after the clues) and grows with the step; the current node is ringed. The third panel is a
model's teacher-forced distribution over the next token (green bars: tokens in the transcript's
label set), or a plain sentence when no model of that board size is trained.

Board cells are drawn as a heatmap in data coordinates, so the shading of the given cells lines up
with the grid at any figure size, from the first draw on (pixel-sized square markers did not).

This module imports plotly and ipywidgets (notebook only); the GPU script never imports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from companion.sudoku_dfs.board import START, decode_move, geometry, token_name
from companion.sudoku_dfs.replay import EVENT_COLORS, replay, tree_layout
import companion.viz  # noqa: F401  (the theme and the mode bar)

__all__ = ["ExplorerData", "describe_step", "explorer_controls", "explorer_view", "hard_transcripts", "trace_figure"]

_ORIGINS = ("", "clue", "rule", "guess")
_FILL = {"": "#ffffff", "clue": "#d9d9d9", "rule": "#d6e6f5", "guess": "#ffe2c4"}
_TEXT = {"": "#000000", "clue": EVENT_COLORS["clue"], "rule": EVENT_COLORS["rule"], "guess": EVENT_COLORS["guess"]}
_STATUS_COLOR = {"open": "#7f7f7f", "dead-end": EVENT_COLORS["dead-end"], "solved": EVENT_COLORS["solved"]}
MAX_TREE_LABELS = 24  # above this many visible nodes the tree labels only on hover


@dataclass
class ExplorerData:
    """What the explorer shows: ``{name: Transcript}``, a model per board size (4, 9; None: not
    trained), and a few words about each model for the readout. Model distributions are computed
    once per transcript, on first view."""

    transcripts: dict
    models: dict = field(default_factory=dict)
    model_names: dict = field(default_factory=dict)
    _probs: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        if not self.transcripts:
            raise ValueError("the explorer needs at least one transcript")

    def probs(self, name: str):
        """``[T, VOCAB]`` next-token probabilities of the model for transcript ``name`` (None: no model)."""
        t = self.transcripts[name]
        model = self.models.get(t.n)
        if model is None:
            return None
        if name not in self._probs:
            from companion.sudoku_dfs.decoding import next_token_probs

            self._probs[name] = next_token_probs(model, t.tokens).numpy()
        return self._probs[name]


def hard_transcripts(seed: int = 0, lo: int = 20, hi: int = 150, tries: int = 8) -> dict:
    """DFS transcripts of the famously hard boards of ``data/sudoku/hard_9x9.txt``, ``{label: Transcript}``:
    for each board the first seed from ``seed`` on whose search makes between ``lo`` and ``hi`` guesses
    (dozens of guesses and backtracks, short enough to scrub), else the last one tried."""
    import re

    from companion.core import repo_path
    from companion.sudoku_dfs.generator import load_named_puzzles
    from companion.sudoku_dfs.solver import dfs_transcript

    out = {}
    for name, puzzle in load_named_puzzles(repo_path("data", "sudoku", "hard_9x9.txt"), n=9):
        for k in range(tries):
            t = dfs_transcript(puzzle, seed=seed + k)
            if lo <= t.n_guesses <= hi:
                break
        short = re.sub(r"^\d+\.\s*", "", name).split(" (")[0].split(", posted")[0]
        out[f"9x9 hard: {short} ({t.n_guesses} guesses, {t.n_dead_ends} dead ends)"] = t
    return out


def _board_traces(step, n: int):
    """The cell shading (a heatmap in data coordinates) and the values."""
    z = np.zeros((n, n))
    xs, ys, texts, colors = [], [], [], []
    for cell in range(n * n):
        r, c = divmod(cell, n)
        o = step.origin[cell]
        z[n - 1 - r, c] = _ORIGINS.index(o)
        v = step.board[cell]
        if v:
            xs.append(c + 0.5)
            ys.append(n - r - 0.5)
            texts.append(str(v))
            colors.append(_TEXT[o])
    k = len(_ORIGINS) - 1
    scale = [[i / k, _FILL[o]] for i, o in enumerate(_ORIGINS)]
    shading = go.Heatmap(
        z=z, x=[c + 0.5 for c in range(n)], y=[r + 0.5 for r in range(n)], zmin=0, zmax=k, colorscale=scale,
        showscale=False, hoverinfo="skip", name="cells",
    )
    values = go.Scatter(
        x=xs, y=ys, mode="text", text=texts, textfont=dict(size=22 if n == 4 else 15, color=colors),
        hoverinfo="skip", showlegend=False, name="values",
    )
    return [shading, values]


def _grid_shapes(n: int, border: str):
    b = geometry(n).box
    shapes = []
    for i in range(n + 1):
        w = 2.5 if i % b == 0 else 0.6
        shapes.append(dict(type="line", x0=i, x1=i, y0=0, y1=n, xref="x", yref="y", line=dict(width=w, color="#333")))
        shapes.append(dict(type="line", x0=0, x1=n, y0=i, y1=i, xref="x", yref="y", line=dict(width=w, color="#333")))
    shapes.append(dict(type="rect", x0=-0.15, x1=n + 0.15, y0=-0.15, y1=n + 0.15, xref="x", yref="y",
                       line=dict(width=4, color=border)))
    return shapes


def _cell_name(token: int, n: int) -> str:
    cell, v = decode_move(token, n)
    r, c = divmod(cell, n)
    return f"row {r + 1}, column {c + 1} = {v}"


def describe_step(tokens, kinds, choices, n: int, step: int, steps) -> str:
    """One plain sentence about token ``step`` of a transcript (what it is and why it is there)."""
    cur = steps[step]
    tok = cur.token
    kind = kinds[step] if kinds is not None and step < len(kinds) else cur.event
    labels = choices[step] if choices is not None and step < len(choices) else None
    if cur.event == "clue":
        return f"a given clue: {_cell_name(tok, n)}"
    if tok == START and cur.event == "start":
        return "token 100: the clues are written, the search starts"
    if cur.event == "rule":
        k = len(labels) if labels else 0
        extra = f" (one of {k} forced moves here)" if k > 1 else " (the only forced move here)" if k == 1 else ""
        return f"rule move {_cell_name(tok, n)}: a naked or hidden single{extra}"
    if cur.event == "guess-marker":
        return "token 101: no rule applies, so the search guesses"
    if cur.event == "level":
        return f"token {tok}: the guess depth, written before a guess and after each backtrack"
    if cur.event == "guess":
        first = kind == "guess" and labels is not None and len(labels) > 1
        why = f"one of {len(labels)} candidate values of the cells with the fewest candidates" if first else "the next value of the same cell, after a dead end"
        return f"guess {_cell_name(tok, n)}: {why}; it opens depth {cur.depth}"
    if cur.event == "dead-end":
        return "token 102: dead end (a contradiction, or no value left): back to the last guess"
    if cur.event == "solved":
        return "token 0: the board is complete"
    return f"token {tok} ({token_name(tok, n)}), not valid here"


def trace_figure(transcript, step: int, probs=None, title: str | None = None, model_name: str | None = None,
                 top_k: int = 8):
    """Figure and readout of ``transcript`` (a :class:`~companion.sudoku_dfs.solver.Transcript`, or any
    object with ``tokens``, ``n`` and optionally ``kinds``/``choices``) at ``step`` (a token index).

    ``probs`` (``[T, VOCAB]``) are a model's next-token distributions along the transcript; without them
    the third panel says that no model of this board size is trained, and at a step past them (a transcript
    longer than the model's context) that the model does not read that far.
    """
    tokens, n = list(transcript.tokens), transcript.n
    kinds, choices = getattr(transcript, "kinds", None), getattr(transcript, "choices", None)
    steps, nodes = replay(tokens, n)
    if not steps:
        raise ValueError("empty transcript")
    step = int(np.clip(step, 0, len(steps) - 1))
    cur = steps[step]
    titles = ["board", "DFS tree so far (one node per value tried)", "model: next-token probability"]
    fig = make_subplots(rows=1, cols=3, column_widths=[0.34, 0.36, 0.30], subplot_titles=titles, horizontal_spacing=0.07)
    for tr in _board_traces(cur, n):
        fig.add_trace(tr, row=1, col=1)
    border = {"dead-end": EVENT_COLORS["dead-end"], "solved": EVENT_COLORS["solved"]}.get(cur.event, "#ffffff")
    for sh in _grid_shapes(n, border):
        fig.add_shape(**sh)
    if cur.event in ("rule", "guess", "clue"):
        cell, _ = decode_move(cur.token, n)
        r, c = divmod(cell, n)
        fig.add_shape(type="rect", x0=c + 0.06, x1=c + 0.94, y0=n - r - 0.94, y1=n - r - 0.06, xref="x", yref="y",
                      line=dict(width=3, color=EVENT_COLORS.get(cur.event, "#000")))
    fig.update_xaxes(range=[-0.3, n + 0.3], showgrid=False, zeroline=False, showticklabels=False, row=1, col=1)
    fig.update_yaxes(range=[-0.3, n + 0.3], showgrid=False, zeroline=False, showticklabels=False, scaleanchor="x",
                     row=1, col=1)

    # the DFS tree as it stands at this step
    visible = [node for node in nodes if node.first_step <= step]
    pos = tree_layout(nodes)
    ex, ey = [], []
    for node in visible[1:]:
        (x0, y0), (x1, y1) = pos[node.parent], pos[node.id]
        ex += [x0, x1, None]
        ey += [y0, y1, None]
    fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines", line=dict(color="#aaaaaa", width=1.5), hoverinfo="skip",
                             showlegend=False, name="tree edges"), row=1, col=2)
    labels = len(visible) <= MAX_TREE_LABELS
    fig.add_trace(
        go.Scatter(
            x=[pos[m.id][0] for m in visible], y=[pos[m.id][1] for m in visible],
            mode="markers+text" if labels else "markers",
            text=["root" if m.move is None else token_name(m.move, n) for m in visible],
            textposition="bottom center", textfont=dict(size=9),
            marker=dict(
                size=[16 if m.id == cur.node else 9 for m in visible],
                color=[_STATUS_COLOR[m.status] if m.last_step <= step else _STATUS_COLOR["open"] for m in visible],
                line=dict(width=[3 if m.id == cur.node else 0 for m in visible], color="#000"),
            ),
            hovertext=[("root" if m.move is None else f"guess {token_name(m.move, n)}") + f", depth {m.depth}" for m in visible],
            hoverinfo="text", showlegend=False, name="tree nodes",
        ),
        row=1, col=2,
    )
    xs = [p[0] for p in pos.values()]
    ys = [p[1] for p in pos.values()]
    fig.update_xaxes(range=[min(xs) - 0.8, max(xs) + 0.8], showgrid=False, zeroline=False, showticklabels=False,
                     title_text="values tried, left to right", row=1, col=2)
    fig.update_yaxes(range=[min(ys) - 0.8, 0.6], showgrid=False, zeroline=False, title_text="guess depth (0 = root)",
                     tickvals=sorted(set(ys)), ticktext=[str(int(-y)) for y in sorted(set(ys))], row=1, col=2)

    guesses = sum(1 for s in steps[: step + 1] if s.event == "guess")
    dead = sum(1 for s in steps[: step + 1] if s.event == "dead-end")
    readout = (f"Step {step} of {len(steps) - 1}: {describe_step(tokens, kinds, choices, n, step, steps)}. "
               f"Depth {cur.depth}; so far {guesses} guesses, {dead} dead ends.")
    valid = choices[step + 1] if choices is not None and step + 1 < len(choices) and choices[step + 1] else frozenset()
    if probs is not None and step < len(probs):
        p = np.asarray(probs[step])
        top = np.argsort(-p)[:top_k]
        colors = [EVENT_COLORS["solved"] if int(t) in valid else "#9e9e9e" for t in top]
        fig.add_trace(go.Bar(x=[float(p[t]) for t in top], y=[token_name(int(t), n) for t in top], orientation="h",
                             marker_color=colors, showlegend=False, name="model"), row=1, col=3)
        fig.update_xaxes(range=[0, 1], title_text="probability (green: a valid next token)", row=1, col=3)
        fig.update_yaxes(autorange="reversed", row=1, col=3)
        who = model_name or "the model"
        if valid:
            mass = float(sum(p[t] for t in valid))
            pick = int(top[0])
            verdict = "a valid next token" if pick in valid else "not a valid next token"
            readout += (f" {who[0].upper() + who[1:]}: {mass:.0%} of its probability on the {len(valid)} valid next "
                        f"token{'s' if len(valid) > 1 else ''}; its top choice, {token_name(pick, n)}, is {verdict}.")
    else:
        if probs is not None:  # a transcript longer than the model's context (the hard 9x9 boards)
            text = f"Step {step} lies past the {len(probs)} positions<br>the model reads."
            readout += f" The model reads the first {len(probs)} tokens only."
        else:
            text = f"No {n}x{n} model is trained in this run.<br>" + (
                "The 9x9 GPT-2 is trained by<br>python -m companion.bench sudoku_dfs on a GPU;<br>pass its checkpoint with<br>"
                "-p CHECKPOINT /path/to/file.safetensors" if n == 9 else "Run the training cell above.")
            readout += f" No {n}x{n} model is trained in this run."
        fig.add_annotation(text=text, x=0.5, y=0.5, xref="x3 domain", yref="y3 domain", showarrow=False,
                           font=dict(size=12, color="#555"))
        fig.update_xaxes(visible=False, row=1, col=3)
        fig.update_yaxes(visible=False, row=1, col=3)
    fig.update_layout(title=title or "DFS transcript, step by step", height=440, margin=dict(l=30, r=20, t=70, b=40))
    return fig, readout


def explorer_view(data: ExplorerData, puzzle: str, step: int, play=None):
    """The explorer's figure and readout for transcript ``puzzle`` at token ``step`` (``play`` is the
    play button's value, linked to ``step``)."""
    if puzzle not in data.transcripts:
        raise ValueError(f"unknown transcript {puzzle!r}; choose one of {list(data.transcripts)}")
    t = data.transcripts[puzzle]
    return trace_figure(t, step, probs=data.probs(puzzle), title=f"DFS transcript: {puzzle}",
                        model_name=data.model_names.get(t.n))


def explorer_controls(data: ExplorerData, interval_ms: int = 300) -> dict:
    """A transcript dropdown (wide enough for its labels), a step slider and a play button; choosing
    another transcript resets the slider to its range and to its first step after the clues."""
    import ipywidgets as widgets

    names = list(data.transcripts)
    first = data.transcripts[names[0]]
    width = f"{min(560, max(260, 8 * max(len(n) for n in names) + 90))}px"
    puzzle = widgets.Dropdown(options=names, value=names[0], description="transcript",
                              layout=widgets.Layout(width=width), style={"description_width": "initial"})
    slider = widgets.IntSlider(value=first.n_clues, min=0, max=len(first) - 1, description="step",
                               continuous_update=False, layout=widgets.Layout(width="420px"))
    play = widgets.Play(value=first.n_clues, min=0, max=len(first) - 1, interval=interval_ms, description="play")
    widgets.jslink((play, "value"), (slider, "value"))

    def on_puzzle(change):
        t = data.transcripts[change["new"]]
        slider.max = play.max = len(t) - 1
        slider.value = play.value = t.n_clues

    puzzle.observe(on_puzzle, names="value")
    return {"puzzle": puzzle, "step": slider, "play": play}

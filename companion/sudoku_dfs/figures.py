"""Figure and table builders of notebook 06 besides the explorer (plotly and pandas; notebook only).

Paper: Giannoulis, Pantis, Tzamos, NeurIPS 2025 (arXiv 2509.22023).
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from companion.sudoku_dfs.claims import TOKEN_TYPES
from companion.sudoku_dfs.replay import EVENT_COLORS, replay
import companion.viz  # noqa: F401  (the theme and the mode bar)

__all__ = ["scale_figure", "scale_table", "transcript_depth_figure"]


def transcript_depth_figure(transcript, title: str) -> go.Figure:
    """One transcript as search depth over token position, its events coloured."""
    steps, _ = replay(transcript.tokens, transcript.n)
    fig = go.Figure()
    for event in ["clue", "rule", "guess", "dead-end", "solved"]:
        idx = [s.index for s in steps if s.event == event]
        fig.add_scatter(x=idx, y=[steps[i].depth for i in idx], mode="markers", name=event,
                        marker=dict(color=EVENT_COLORS[event], size=7 if event in ("guess", "dead-end", "solved") else 4))
    fig.add_scatter(x=[s.index for s in steps], y=[s.depth for s in steps], mode="lines",
                    line=dict(color="#cccccc", width=1), name="search depth", hoverinfo="skip")
    fig.update_layout(title=title, xaxis_title="token position", yaxis_title="guess depth", height=330)
    return fig


def scale_table(r: dict):
    """The GPU study's payload (:func:`companion.sudoku_dfs.scale.run_scale_up`, or its recorded JSON) as a
    two-column table, a row per finished stage and one naming the stages that did not finish; L1 vs L2 shows the
    median and the mean (they can disagree). The training data are counted by the data stage where they were made
    before training, by the training stage where a stream made them during it."""
    import pandas as pd

    from companion.core.stages import not_finished, stage_states
    from companion.sudoku_dfs.scale import recorded_config

    done = {name for name, state in stage_states(r).items() if state == "done"}
    rows = []
    if "training" in done:
        rows.append(("configuration that ran", recorded_config(r)))
    if "data" in done:
        d = r["data"]
        made = d if "puzzles" in d else (r.get("training") or {}).get("data", {})  # made before / streamed during training
        rows.append(("training data", f"{made['puzzles']} generated puzzles, {made['transcripts']} transcripts "
                                      f"({d['filter']})" if "puzzles" in made else
                     f"stream started ({d['start_puzzles']} puzzles, {d['start_transcripts']} transcripts in "
                     f"{d['start_seconds']:.0f} s; {d['filter']})"))
    if "evaluation" in done:
        ev = r["evaluation"]
        rows += [
            ("board accuracy (held out)", f"{ev['board_accuracy']:.1%} on {ev['held_out_puzzles']} puzzles; "
                                          f"{ev['board_accuracy_needs_guess']:.1%} of those needing a guess"),
            ("board accuracy, grammar-constrained", f"{ev['board_accuracy_protocol']:.1%}"),
            ("guesses per puzzle", f"model {ev['model_guesses_mean']} (teacher DFS {ev['teacher_guesses_mean']})"),
            ("ended with 0", f"{ev['ended_with_0']:.1%}"),
            ("teacher-forced accuracy (held out)",
             ", ".join(f"{k} {v:.3f}" for k, v in ev["teacher_forced_accuracy"].items())),
        ]
    if "propagation" in done:
        prop = r["propagation"]
        for row in prop["rows"]:
            gpu = f"GPU {row['gpu_boards_per_s']:,} boards/s" if "gpu_boards_per_s" in row else ""
            cpu = f"numpy CPU {row['numpy_cpu_boards_per_s']:,} boards/s" if "numpy_cpu_boards_per_s" in row else ""
            rows.append((f"propagation, {row['boards']:,} boards", "; ".join(x for x in (gpu, cpu) if x)))
        rows.append(("propagation, sequential Python", f"{prop['sequential_python_boards_per_s']:,} boards/s"))
    if "one_level_guessing" in done:
        ol = r["one_level_guessing"]
        for stat in ("median", "mean"):
            key = f"{stat}_expected_guesses"
            rows.append((f"one guess: {stat} expected guesses",
                         f"L1 {ol['l1'][key]}, L2 {ol['l2'][key]}, upper oracle {ol['upper_oracle'][key]}, "
                         f"lower oracle {ol['lower_oracle'][key]} ({ol['test_puzzles']} held-out stuck puzzles)"))
    if not_finished(r):
        rows.append(("stages not finished", "; ".join(not_finished(r))))
    return pd.DataFrame(rows, columns=["what", "value"])


def scale_figure(r: dict, pilot: list[dict] = ()) -> go.Figure:
    """The GPU study's training (its ``training`` stage) against the optimiser step: the teacher-forced accuracy
    on held-out transcripts with a guess per token type (top: moves and all tokens; 101 and 102 in the legend) and
    the training loss (bottom); hovering a point gives its seconds into training. ``pilot`` (the learning-rate
    pilot's records) adds each pilot run's move accuracy, dotted. A payload without the accuracy curve or the loss
    (a layout older than the curve, a training stage that did not finish) shows where each is not recorded."""
    tr = r.get("training") or {}
    curve = tr.get("rule_accuracy_curve") or []
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, row_heights=[0.6, 0.4])
    for key, visible in (("move", True), ("all", True), ("101", "legendonly"), ("102", "legendonly")):
        pts = [c for c in curve if key in c]
        if pts:
            fig.add_scatter(x=[c["step"] for c in pts], y=[c[key] for c in pts], mode="lines+markers",
                            text=[f", {c['seconds']:.0f} s" if "seconds" in c else "" for c in pts],  # older curves: steps only
                            name=f"accuracy: {TOKEN_TYPES[key]}", visible=visible,
                            hovertemplate="step %{x}%{text}: %{y:.3f}", row=1, col=1)
    for run in pilot:
        pts = run["training"]["rule_accuracy_curve"]
        fig.add_scatter(x=[c["step"] for c in pts], y=[c["move"] for c in pts], mode="lines",
                        line=dict(dash="dot", width=3),
                        name=f"pilot, lr {run['training']['lr']:g} ({run['training']['seconds']:.0f} s): moves",
                        hovertemplate="step %{x}: %{y:.3f}", row=1, col=1)
    if tr.get("loss_curve"):
        fig.add_scatter(x=tr["loss_curve"]["step"], y=tr["loss_curve"]["loss"], mode="lines", name="training loss",
                        row=2, col=1)
    for row, shown, what in ((1, any("move" in c for c in curve), "teacher-forced accuracy"),
                             (2, bool(tr.get("loss_curve")), "training loss")):
        if not shown:
            axis = "" if row == 1 else "2"
            fig.add_annotation(text=f"{what}: not recorded in this run", x=0.5, y=0.5, xref=f"x{axis} domain",
                               yref=f"y{axis} domain", showarrow=False, font=dict(size=14))
    title = (f"9x9 GPT-2 on {r.get('device', 'an unnamed device')}: {tr['steps']} steps in {tr['seconds']:.0f} s, "
             f"teacher-forced accuracy on held-out transcripts" if "steps" in tr else
             "9x9 GPT-2 training: not recorded (the training stage did not finish)")
    fig.update_yaxes(title_text="teacher-forced accuracy", range=[0, 1.02], row=1, col=1)
    fig.update_yaxes(title_text="training loss", row=2, col=1)
    fig.update_xaxes(title_text="optimiser step", row=2, col=1)
    fig.update_layout(title=title, height=460)
    return fig

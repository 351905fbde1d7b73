"""Paper 06: the GPT-2 side - encoding, the multi-target losses, symmetry augmentation, decoding, checkpoints,
the explorer's pure update function."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from companion.core import ParameterError
from companion.sudoku_dfs.board import PAD, SOLVED, START, VOCAB_SIZE, decode_move
from companion.sudoku_dfs.generator import generate_puzzle
from companion.sudoku_dfs.checkpoints import load_checkpoint, resolve_checkpoint, save_checkpoint
from companion.sudoku_dfs.data import augment_batch, encode_transcripts, symmetry_maps
from companion.sudoku_dfs.decoding import evaluate_model, greedy_decode, is_valid_completion, label_accuracy, prompt_tokens
from companion.sudoku_dfs.loss import multi_target_loss
from companion.sudoku_dfs.model import GPTConfig, build_model, n_parameters
from companion.sudoku_dfs.training import TrainConfig, train_model
from companion.sudoku_dfs.replay import verify_transcript
from companion.sudoku_dfs.solver import Transcript, dfs_transcript, unique_solution

TINY = GPTConfig(n_layer=1, n_head=2, n_embd=16, n_positions=128)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors: one intra-op thread is faster and does not spin against other processes."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def transcripts4():
    return [dfs_transcript(generate_puzzle(4, s)[0], seed=s) for s in range(6)] + [
        dfs_transcript("2.3.......4.4..3", seed=0, check_unique=False)
    ]


def test_encoding_aligns_labels_with_the_next_token(transcripts4):
    data = encode_transcripts(transcripts4)
    for i, t in enumerate(transcripts4):
        L = len(t)
        assert data.tokens[i, :L].tolist() == t.tokens and (data.tokens[i, L:] == PAD).all()
        for pos in range(L - 1):
            got = {int(x) for x in data.labels[i, pos] if x >= 0}
            want = set(t.choices[pos + 1] or ())
            assert got == want
            if want:
                assert t.tokens[pos + 1] in got  # the transcript's own next token is always a label
        assert (data.labels[i, L - 1] < 0).all()  # nothing after the end token


def test_multi_target_losses_exact_values():
    logits = torch.zeros(1, 2, VOCAB_SIZE)
    labels = torch.full((1, 2, 3), -1, dtype=torch.int16)
    labels[0, 0, :2] = torch.tensor([111, 112])  # two valid tokens at position 0
    labels[0, 1, 0] = 0  # one at position 1
    # uniform logits: every log p is -log V
    lv = math.log(VOCAB_SIZE)
    assert float(multi_target_loss(logits, labels, "l2")) == pytest.approx(lv)
    assert float(multi_target_loss(logits, labels, "l1")) == pytest.approx(((lv - math.log(2)) + lv) / 2)
    assert float(multi_target_loss(logits, labels, "l2-position")) == pytest.approx(lv)
    with pytest.raises(ParameterError, match="kind"):
        multi_target_loss(logits, labels, "l3")


def test_l1_is_indifferent_where_the_mass_sits_inside_the_set():
    labels = torch.full((1, 1, 2), -1, dtype=torch.int16)
    labels[0, 0] = torch.tensor([111, 112])
    a = torch.full((1, 1, VOCAB_SIZE), -30.0)
    a[0, 0, 111] = 10.0  # all mass on one valid token
    b = torch.full((1, 1, VOCAB_SIZE), -30.0)
    b[0, 0, 111] = b[0, 0, 112] = 10.0  # spread over both
    assert float(multi_target_loss(a, labels, "l1")) == pytest.approx(0.0, abs=1e-6)
    assert float(multi_target_loss(b, labels, "l1")) == pytest.approx(0.0, abs=1e-6)
    # L2 prefers the spread distribution
    assert float(multi_target_loss(b, labels, "l2")) < float(multi_target_loss(a, labels, "l2"))


@pytest.mark.parametrize("n", [4, 9])
def test_augmentation_yields_valid_transcripts(n):
    ts = [dfs_transcript(generate_puzzle(n, 300 + s)[0], seed=s) for s in range(3)]
    data = encode_transcripts(ts)
    aug = augment_batch(data, symmetry_maps(n, len(ts), torch.Generator().manual_seed(1)))
    for i, t in enumerate(ts):
        L = len(t)
        tok = aug.tokens[i, :L].tolist()
        puzzle = [0] * (n * n)
        for x in tok[: t.n_clues]:
            c, v = decode_move(x, n)
            puzzle[c] = v
        choices = [None] * L
        for pos in range(L - 1):
            lab = [int(x) for x in aug.labels[i, pos] if x >= 0]
            choices[pos + 1] = frozenset(lab) if lab else None
        image = Transcript(n=n, puzzle=tuple(puzzle), tokens=tok, choices=choices, kinds=t.kinds, solution=unique_solution(puzzle))
        assert verify_transcript(image) == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_symmetry_maps_built_on_the_gpu_equal_the_cpu_ones():
    cpu = symmetry_maps(9, 64, torch.Generator().manual_seed(3))
    gpu = symmetry_maps(9, 64, torch.Generator().manual_seed(3), device="cuda")
    assert gpu.device.type == "cuda" and torch.equal(cpu, gpu.cpu())


def test_greedy_decode_batched_equals_one_by_one():
    model = build_model(TINY, seed=0)
    puzzles = [generate_puzzle(4, s)[0] for s in range(5)]
    batched = greedy_decode(model, puzzles, max_total=40, batch_size=8)
    single = [greedy_decode(model, [p], max_total=40)[0] for p in puzzles]
    assert batched == single
    for p, seq in zip(puzzles, batched):
        prompt = prompt_tokens(p)
        assert seq[: len(prompt)] == prompt and prompt[-1] == START
        assert len(seq) <= 40 and (seq[-1] == SOLVED or len(seq) == 40)
    # the cache path equals a full recomputation for the first generated tokens
    ids = torch.tensor([prompt_tokens(puzzles[0])])
    with torch.no_grad():
        for _ in range(3):
            nxt = model(input_ids=ids).logits[0, -1].argmax()
            ids = torch.cat([ids, nxt.view(1, 1)], 1)
    assert ids[0].tolist() == batched[0][: ids.shape[1]]


def test_a_failing_torch_compile_is_recorded_and_training_goes_on_eagerly(transcripts4, monkeypatch):
    data = encode_transcripts(transcripts4)
    cfg = TrainConfig(steps=4, batch_size=4, lr=3e-3, log_every=1, seed=0)

    def broken(fn):
        def run(*args):
            raise RuntimeError("backend failed")
        return run

    monkeypatch.setattr(torch, "compile", broken)
    compiled = train_model(build_model(TINY, seed=0), data, dataclasses.replace(cfg, compile=True))
    eager = train_model(build_model(TINY, seed=0), data, cfg)
    assert compiled["compiled"] is False and "backend failed" in compiled["compile_error"]
    assert eager["compiled"] is False and eager["compile_error"] is None
    assert compiled["loss"] == eager["loss"]  # the same steps, eagerly, from the first


def test_tiny_training_reduces_the_loss_and_evaluation_runs(transcripts4, tmp_path):
    data = encode_transcripts(transcripts4)
    model = build_model(TINY, seed=0)
    hist = train_model(model, data, TrainConfig(steps=30, batch_size=8, lr=3e-3, log_every=1))
    assert hist["loss"][-1] < hist["loss"][0]
    acc = label_accuracy(model, data)
    assert 0.0 <= acc["all"] <= 1.0
    puzzles = [t.puzzle for t in transcripts4]
    ev = evaluate_model(model, puzzles, max_total=40)
    assert len(ev["correct"]) == len(puzzles) and 0.0 <= ev["board_accuracy"] <= 1.0
    # checkpoint roundtrip (bf16 on disk)
    path = save_checkpoint(model, tmp_path / "m.safetensors", {"steps": 30})
    loaded, meta = load_checkpoint(path)
    assert meta == {"steps": 30}
    for (k, a), (_, b) in zip(sorted(model.state_dict().items()), sorted(loaded.state_dict().items())):
        if a.is_floating_point():
            assert torch.allclose(a.float(), b.float(), atol=1e-2, rtol=1e-2), k
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "missing.safetensors")


def test_valid_completion():
    sol = "1234341221434321"
    assert is_valid_completion("1" + "." * 15, tuple(int(c) for c in sol))
    assert not is_valid_completion("2" + "." * 15, tuple(int(c) for c in sol))
    assert not is_valid_completion("." * 16, (1,) * 16)


def test_config_errors():
    with pytest.raises(ParameterError, match="n_embd"):
        build_model(GPTConfig(n_embd=30, n_head=4))
    with pytest.raises(ParameterError, match="n_inner"):
        build_model(GPTConfig(n_embd=32, n_head=4, n_inner=100))


def test_model_is_the_official_architecture():
    """Shared builder, then the official minGPT's choices: untied head, exact GELU, no dropout, 1001 tokens."""
    model = build_model(GPTConfig(n_layer=1, n_head=2, n_embd=16, n_positions=32, dropout=0.0), seed=3)
    assert model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr()
    assert model.config.vocab_size == VOCAB_SIZE and model.config.activation_function == "gelu"
    assert all(m.p == 0.0 for m in model.modules() if isinstance(m, torch.nn.Dropout))
    x = torch.linspace(-3, 3, 7)
    assert torch.allclose(model.transformer.h[0].mlp.act(x), torch.nn.functional.gelu(x))  # exact, not tanh
    # untied: the head has its own parameters (vocab x d more than a tied model)
    tied = build_model(GPTConfig(n_layer=1, n_head=2, n_embd=16, n_positions=32, tie_embeddings=True), seed=3)
    assert n_parameters(model) - n_parameters(tied) == VOCAB_SIZE * 16
    # same seed, same weights; training mode changes nothing without dropout
    again = build_model(GPTConfig(n_layer=1, n_head=2, n_embd=16, n_positions=32), seed=3)
    ids = torch.tensor([[100, 111, 122]])
    assert torch.equal(model(input_ids=ids).logits, again.train()(input_ids=ids).logits)


def test_checkpoint_parameter_is_taken_as_given(tmp_path, monkeypatch):
    from companion.core import repo_path

    assert resolve_checkpoint("") is None
    f = tmp_path / "abs.safetensors"
    f.write_bytes(b"x")
    assert resolve_checkpoint(str(f)) == f  # absolute stays absolute
    assert resolve_checkpoint("data/sudoku/puzzles_4x4.txt") == repo_path("data", "sudoku", "puzzles_4x4.txt")  # relative: the repo
    with pytest.raises(ParameterError, match="CHECKPOINT") as err:
        resolve_checkpoint(str(tmp_path / "missing.safetensors"))
    assert "missing.safetensors" in str(err.value)
    with pytest.raises(ParameterError, match="CHECKPOINT"):
        resolve_checkpoint("no/such/file.safetensors")
    with pytest.raises(ParameterError, match="CHECKPOINT"):
        resolve_checkpoint(3)


def test_explorer_view_is_pure_and_readable(transcripts4):
    pytest.importorskip("plotly")
    from companion.sudoku_dfs.explorer import ExplorerData, explorer_view

    t = transcripts4[-1]  # the 4x4 transcript with a dead end
    dead = t.kinds.index("dead-end")
    data = ExplorerData({"dead end": t})
    fig, readout = explorer_view(data, "dead end", dead)
    assert "token 102: dead end" in readout and readout.startswith(f"Step {dead} of {len(t) - 1}:")
    assert "No 4x4 model is trained" in readout  # the model pane says so plainly
    assert any("No 4x4 model" in a.text for a in fig.layout.annotations)
    fig2, _ = explorer_view(data, "dead end", dead)
    assert fig.to_json() == fig2.to_json()
    # the start token and a rule move read as sentences, not codes
    start = t.tokens.index(START)
    assert "the clues are written, the search starts" in explorer_view(data, "dead end", start)[1]
    rule = t.kinds.index("rule")
    r, c = divmod(decode_move(t.tokens[rule], 4)[0], 4)
    assert f"rule move row {r + 1}, column {c + 1} = " in explorer_view(data, "dead end", rule)[1]
    # out-of-range steps are clipped, not errors; unknown names are
    explorer_view(data, "dead end", 10_000)
    with pytest.raises(ValueError, match="unknown transcript"):
        explorer_view(data, "nope", 0)


def test_explorer_model_pane_and_tree_growth(transcripts4):
    pytest.importorskip("plotly")
    from companion.sudoku_dfs.explorer import ExplorerData, explorer_view

    t = transcripts4[-1]
    model = build_model(TINY, seed=0)
    data = ExplorerData({"t": t}, models={4: model}, model_names={4: "the tiny model"})
    step = t.kinds.index("rule")
    fig, readout = explorer_view(data, "t", step)
    bars = [tr for tr in fig.data if tr.type == "bar"]
    assert len(bars) == 1 and len(bars[0].x) == 8
    assert "The tiny model: " in readout and "valid next token" in readout
    mass = float(sum(data.probs("t")[step][list(t.choices[step + 1])]))
    assert f"{mass:.0%} of its probability" in readout
    # the tree grows with the step: nodes shown = root + guesses made so far
    nodes = lambda s: len(next(tr for tr in explorer_view(data, "t", s)[0].data if tr.name == "tree nodes").x)  # noqa: E731
    first_guess = t.kinds.index("guess")
    assert nodes(first_guess - 1) == 1 and nodes(first_guess) == 2 and nodes(len(t) - 1) == 1 + t.n_guesses


def test_explorer_model_pane_past_the_models_context(transcripts4):
    """A transcript longer than the model's positions (the hard 9x9 boards at 512): past them the pane says the
    model does not read that far instead of drawing a distribution."""
    pytest.importorskip("plotly")
    from companion.sudoku_dfs.explorer import trace_figure

    t = transcripts4[-1]
    probs = np.full((len(t) - 3, 1001), 1 / 1001)  # a model that read all but the last 3 tokens
    fig, readout = trace_figure(t, len(t) - 3, probs=probs)
    assert not [tr for tr in fig.data if tr.type == "bar"]
    assert f"The model reads the first {len(t) - 3} tokens only." in readout
    assert any(f"past the {len(t) - 3} positions" in a.text for a in fig.layout.annotations)
    fig, readout = trace_figure(t, len(t) - 4, probs=probs)
    assert len([tr for tr in fig.data if tr.type == "bar"]) == 1 and "reads the first" not in readout


def test_explorer_board_shading_is_in_data_coordinates(transcripts4):
    """The given cells' shading is a heatmap over the grid's own coordinates (aligned at any size)."""
    pytest.importorskip("plotly")
    from companion.sudoku_dfs.explorer import ExplorerData, explorer_view

    t = transcripts4[0]
    fig, _ = explorer_view(ExplorerData({"t": t}), "t", t.n_clues)
    heat = next(tr for tr in fig.data if tr.type == "heatmap")
    assert list(heat.x) == [0.5, 1.5, 2.5, 3.5] and list(heat.y) == [0.5, 1.5, 2.5, 3.5]
    z = np.array(heat.z)
    for cell, v in enumerate(t.puzzle):
        r, c = divmod(cell, 4)
        assert (z[3 - r, c] == 1) == bool(v)  # 1 = clue (grey), at the clue's row and column


def test_explorer_controls_and_hard_boards():
    pytest.importorskip("ipywidgets")
    from companion.sudoku_dfs.explorer import ExplorerData, explorer_controls, hard_transcripts

    hard = hard_transcripts(0)
    assert len(hard) == 2 and all(t.n_guesses >= 20 and t.n_dead_ends >= 10 and t.solved for t in hard.values())
    data = ExplorerData(hard)
    controls = explorer_controls(data)
    names = list(hard)
    assert controls["puzzle"].options == tuple(names)
    assert int(controls["puzzle"].layout.width[:-2]) >= 8 * min(70, max(map(len, names)))  # wide enough to read
    controls["puzzle"].value = names[1]
    assert controls["step"].max == len(hard[names[1]]) - 1 and controls["step"].value == hard[names[1]].n_clues


def test_checkpoint_stage_writes_the_profile_path_with_the_run_in_its_metadata(tmp_path):
    """The GPU study's last stage: the trained model at the profile's ``checkpoint`` path, its metadata naming
    the steps and the held-out accuracy of the earlier stages; a stage whose input another stage of the same
    call makes (not saved) refuses without it."""
    from companion.core.stages import StageContext
    from companion.sudoku_dfs.scale import SMOKE_PROFILE
    from companion.sudoku_dfs.study import checkpoint_stage, training_stage

    profile = {**SMOKE_PROFILE, "checkpoint": str(tmp_path / "ck.safetensors")}
    ctx = StageContext(profile=profile, device="cpu", log=lambda *a: None,
                       results={"training": {"steps": 4, "batch_size": 8, "seconds": 0.1},
                                "evaluation": {"board_accuracy": 0.25}})
    with pytest.raises(RuntimeError, match="training stage"):
        checkpoint_stage(ctx)
    with pytest.raises(RuntimeError, match="data stage"):
        training_stage(ctx)
    ctx.shared["model"] = build_model(TINY, seed=0)
    out = checkpoint_stage(ctx)
    assert out["file"] == profile["checkpoint"] and out["bytes"] == (tmp_path / "ck.safetensors").stat().st_size
    _, meta = load_checkpoint(tmp_path / "ck.safetensors")
    assert meta == out["meta"] and meta["steps"] == 4 and meta["board_accuracy_held_out"] == 0.25
    assert meta["device"] == "cpu" and meta["trained_by"].startswith("python -m companion.bench sudoku_dfs")


def test_scale_table_shows_the_finished_stages_and_names_the_others():
    from companion.sudoku_dfs.figures import scale_table
    from companion.sudoku_dfs.scale import recorded

    from companion.core.stages import not_finished
    from companion.sudoku_dfs.scale import recorded_config

    rec = recorded()
    table = scale_table(rec)
    assert table["what"].iloc[0] == "configuration that ran" and table["value"].iloc[0] == recorded_config(rec)
    assert "one guess: median expected guesses" in set(table["what"])
    assert ("stages not finished" in set(table["what"])) == bool(not_finished(rec))
    cut = {k: v for k, v in rec.items() if k != "propagation"}
    cut["stages"] = {**rec["stages"], "propagation": {"state": "skipped", "reason": "deadline: 2 s left, needs 10 s"}}
    table = scale_table(cut)
    assert not any(w.startswith("propagation") for w in table["what"])
    assert table["value"].iloc[-1] == "; ".join(not_finished(cut))
    assert table["value"].iloc[-1].endswith("propagation (skipped: deadline: 2 s left, needs 10 s)")


def _training_payload(curve=True, loss=True):
    tr = {"model": {"config": {"n_layer": 2, "n_head": 2, "n_embd": 32}, "parameters": 30_000}, "batch_size": 8,
          "lr": 1e-3, "steps": 1000, "seconds": 40.0, "data": {"puzzles": 90, "transcripts": 200}}
    if loss:
        tr["loss_curve"] = {"step": [0, 500, 1000], "loss": [7.0, 5.0, 4.0]}
    if curve:
        tr["rule_accuracy_curve"] = [{"step": 500 * k, "seconds": 20.0 * k + 5, "loss": 7.0 - k, "move": 0.1 + 0.3 * k,
                                      "all": 0.2 + 0.3 * k, "101": 0.5, "102": 0.2} for k in range(3)]
    return {"device": "NVIDIA H200", "date": "2026-12-04", "training": tr,
            "stages": {"data": {"state": "done"}, "training": {"state": "done"},
                       "evaluation": {"state": "skipped", "reason": "deadline"}},
            "data": {"workers_per_rank": 2, "start_seconds": 3.0, "start_transcripts": 16, "start_puzzles": 7,
                     "filter": "contains a guess"}}


def test_scale_table_counts_streamed_data_from_the_training_stage():
    from companion.sudoku_dfs.figures import scale_table

    table = scale_table(_training_payload()).set_index("what")["value"]
    assert table["training data"] == "90 generated puzzles, 200 transcripts (contains a guess)"
    assert table["stages not finished"] == "evaluation (skipped: deadline)"


def test_scale_figure_draws_the_training_curve():
    """Accuracy per token type on the top panel (moves and all tokens shown, 101 and 102 in the legend), the loss
    on the bottom one, against the step; the seconds in the hover text."""
    from companion.sudoku_dfs.figures import scale_figure

    fig = scale_figure(_training_payload())
    by_name = {t.name: t for t in fig.data}
    move = by_name["accuracy: moves"]
    assert list(move.x) == [0, 500, 1000] and list(move.y) == pytest.approx([0.1, 0.4, 0.7])
    assert list(move.text) == [", 5 s", ", 25 s", ", 45 s"] and move.visible is True and move.yaxis == "y"
    assert by_name["accuracy: all tokens"].visible is True
    assert by_name["accuracy: 101 (no rule applies)"].visible == "legendonly"
    loss = by_name["training loss"]
    assert loss.yaxis == "y2" and list(loss.y) == [7.0, 5.0, 4.0]
    assert fig.layout.title.text.startswith("9x9 GPT-2 on NVIDIA H200: 1000 steps in 40 s")
    assert fig.layout.yaxis.title.text == "teacher-forced accuracy" and fig.layout.yaxis2.title.text == "training loss"
    assert fig.layout.xaxis2.title.text == "optimiser step" and not fig.layout.annotations


def test_the_lr_pilot_adds_dotted_move_curves_and_a_sentence_from_its_records():
    from companion.sudoku_dfs.figures import scale_figure
    from companion.sudoku_dfs.scale import lr_pilot_text, recorded_lr_pilot

    def pilot_run(lr, move_end, steps, ms):
        run = _training_payload()
        run["training"].update(lr=lr, steps=steps, seconds=90.0, ms_per_step=ms)
        run["training"]["rule_accuracy_curve"][-1]["move"] = move_end
        return run

    pilot = [pilot_run(1e-3, 0.17, 1900, 47.4), pilot_run(2e-3, 0.3, 2780, 32.4)]
    fig = scale_figure(_training_payload(), pilot)
    dotted = [t for t in fig.data if t.name.startswith("pilot")]
    assert [t.name for t in dotted] == ["pilot, lr 0.001 (90 s): moves", "pilot, lr 0.002 (90 s): moves"]
    assert all(t.line.dash == "dot" and t.yaxis == "y" for t in dotted) and dotted[1].y[-1] == 0.3
    text = lr_pilot_text(pilot)
    assert text.startswith("Learning-rate pilot (90 s of training each, batch 8, one after another on NVIDIA H200)")
    assert "lr 0.001: move accuracy 0.17 after 1,900 steps (47 ms a step); lr 0.002: move accuracy 0.30" in text
    assert lr_pilot_text([]) == "No learning-rate pilot is recorded."
    recorded = recorded_lr_pilot()  # the committed pilot: one record per rate, each its own training stage
    assert len(recorded) >= 2 and len({r["training"]["lr"] for r in recorded}) == len(recorded)
    assert all(r["stages"]["training"]["state"] == "done" for r in recorded)


def test_scale_figure_says_what_was_not_recorded():
    from companion.sudoku_dfs.figures import scale_figure

    old = scale_figure(_training_payload(curve=False))  # a layout older than the accuracy curve
    assert [t.name for t in old.data] == ["training loss"]
    assert [(a.text, a.yref) for a in old.layout.annotations] == [("teacher-forced accuracy: not recorded in this run",
                                                                   "y domain")]
    bare = scale_figure({"device": "NVIDIA H200", "stages": {"training": {"state": "failed", "error": "OOM"}}})
    assert not bare.data and len(bare.layout.annotations) == 2
    assert bare.layout.title.text == "9x9 GPT-2 training: not recorded (the training stage did not finish)"

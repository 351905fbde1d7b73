"""Paper 06: the GPT-2 side - encoding, the multi-target losses, symmetry augmentation, decoding, checkpoints,
the explorer's pure update function."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from companion.core import ParameterError
from companion.sudoku.board import PAD, SOLVED, START, VOCAB_SIZE, decode_move
from companion.sudoku.generator import generate_puzzle
from companion.sudoku.model import (
    GPTConfig,
    TrainConfig,
    augment_batch,
    encode_transcripts,
    evaluate_model,
    greedy_decode,
    is_valid_completion,
    label_accuracy,
    load_checkpoint,
    make_gpt2,
    multi_target_loss,
    prompt_tokens,
    save_checkpoint,
    symmetry_maps,
    train_model,
)
from companion.sudoku.replay import verify_transcript
from companion.sudoku.solver import Transcript, dfs_transcript, unique_solution

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


def test_greedy_decode_batched_equals_one_by_one():
    model = make_gpt2(TINY, seed=0).eval()
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


def test_tiny_training_reduces_the_loss_and_evaluation_runs(transcripts4, tmp_path):
    data = encode_transcripts(transcripts4)
    model = make_gpt2(TINY, seed=0)
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
        make_gpt2(GPTConfig(n_embd=30, n_head=4))


def test_explorer_update_is_pure_and_labelled(transcripts4):
    pytest.importorskip("plotly")
    from companion.sudoku.explorer import trace_figure

    t = transcripts4[-1]  # the 4x4 transcript with a dead end
    dead = t.kinds.index("dead-end")
    fig, readout = trace_figure(t.tokens, 4, dead, title="t")
    assert "dead end" in readout and fig.layout.title.text == "t"
    fig2, _ = trace_figure(t.tokens, 4, dead, title="t")
    assert fig.to_json() == fig2.to_json()
    probs = np.full((len(t), VOCAB_SIZE), 1.0 / VOCAB_SIZE)
    fig3, readout3 = trace_figure(t.tokens, 4, 8, probs=probs, choices=t.choices)
    assert len(fig3.data) == len(fig.data) + 1 and "valid next tokens" in readout3
    # out-of-range steps are clipped, not errors
    trace_figure(t.tokens, 4, 10_000)


@pytest.mark.slow
def test_scale_up_smoke_runs_end_to_end(tmp_path):
    """The GPU script's pipeline in its tiny CPU form: every stage runs and reports."""
    from companion.sudoku.scale import run_scale_up

    payload, model = run_scale_up(smoke=True, gen_seconds=2.0, train_seconds=1.0, eval_puzzles=3, log=lambda _: None)
    for key in ("data", "model", "training", "evaluation", "propagation", "one_level_guessing", "checkpoint_meta"):
        assert key in payload
    assert payload["evaluation"]["held_out_puzzles"] == 3
    assert 0.0 <= payload["evaluation"]["board_accuracy"] <= 1.0
    assert payload["propagation"]["rows"][0]["numpy_cpu_boards_per_s"] > 0
    path = save_checkpoint(model, tmp_path / "ckpt.safetensors", payload["checkpoint_meta"])
    assert load_checkpoint(path)[1]["steps"] == payload["training"]["steps"]

"""Paper 06: the notebook's 4x4 GPT-2 - recipe, checkpoint round trip, recipe mismatch, the MODEL_4X4
parameter, and the committed checkpoint (data/sudoku/gpt2_4x4_seed0.safetensors)."""

from __future__ import annotations

import ast
import json

import pytest
import torch

from companion.core import ParameterError, repo_path
from companion.core.checkpoints import save_state
from companion.sudoku_dfs.checkpoints import check_board_checkpoint, save_checkpoint
from companion.sudoku_dfs.decoding import evaluate_model
from companion.sudoku_dfs.four_by_four import (PUZZLES_4X4, load_matching, model_for_run, recipe, recipe_differences,
                                               resolve, save_model, train)
from companion.sudoku_dfs.generator import load_puzzles
from companion.sudoku_dfs.solver import dfs_transcript

COMMITTED = ("data", "sudoku", "gpt2_4x4_seed0.safetensors")


def _small(steps=3, seed=1):
    rec = recipe(n_train=100, steps=steps, seed=seed)
    rec["gpt"].update(n_embd=32, n_head=2)  # a small model for speed; still a valid recipe dict
    return rec


def _notebook_parameters() -> dict:
    import nbformat

    nb = nbformat.read(repo_path("notebooks", "06_sudoku_dfs.ipynb"), as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    return {t.targets[0].id: ast.literal_eval(t.value) for t in ast.parse(cell.source).body if isinstance(t, ast.Assign)}


def test_recipe_is_json_and_names_its_data():
    rec = recipe(2000, 900, 0)
    assert json.loads(json.dumps(rec))["train"]["steps"] == 900 and rec["gpt"]["n_layer"] == 1
    assert rec["puzzles"] == "/".join(PUZZLES_4X4)
    assert recipe(2000, 900, 0) == rec and recipe(1999, 900, 0)["puzzles_sha256_16"] != rec["puzzles_sha256_16"]
    assert recipe_differences(rec, json.loads(json.dumps(rec))) == []
    diff = recipe_differences(rec, recipe(2000, 900, 1))
    assert any(d.startswith("train.seed: run 0, checkpoint 1") for d in diff) and any(d.startswith("seed:") for d in diff)
    assert recipe_differences(rec, None) == ["the file records no 4x4 recipe"]


def test_checkpoint_round_trip_and_mismatch(tmp_path):
    rec = _small()
    model, hist = train(rec)
    path = save_model(model, hist, rec, tmp_path / "m.safetensors", {"command": "test"}, dtype=torch.float32)
    loaded, hist2, source = model_for_run(str(path), rec)
    assert source["kind"] == "checkpoint" and source["command"] == "test" and source["path"] == str(path)
    assert hist2["loss"] == hist["loss"] and hist2["steps"] == 3
    for (k, a), (_, b) in zip(sorted(model.state_dict().items()), sorted(loaded.state_dict().items())):
        if a.is_floating_point():
            assert torch.equal(a, b), k  # float32 storage: exact
    ids = torch.tensor([[111, 100, 124]])
    assert torch.equal(model(input_ids=ids).logits, loaded(input_ids=ids).logits)
    # a different recipe: the file is not used, the model is trained here, and the reason names the field
    other = _small(steps=4)
    m2, h2, s2 = model_for_run(str(path), other)
    assert s2["kind"] == "trained" and h2["steps"] == 4 and "train.steps: run 4, checkpoint 3" in s2["reason"]
    assert "MODEL_4X4" in s2["reason"]
    # "" trains here
    _, _, s3 = model_for_run("", rec)
    assert s3["kind"] == "trained" and s3["reason"] == "MODEL_4X4 is empty"
    # a Sudoku checkpoint without a 4x4 recipe (e.g. a 9x9 one) is a mismatch, not an error
    bare = save_checkpoint(model, tmp_path / "bare.safetensors", {"steps": 3})
    assert load_matching(bare, rec)[0] is None and load_matching(bare, rec)[2] == ["the file records no 4x4 recipe"]


def test_model_4x4_parameter_paths(tmp_path):
    assert resolve("") is None
    f = tmp_path / "abs.safetensors"
    f.write_bytes(b"not a checkpoint")
    assert resolve(str(f)) == f  # absolute stays absolute
    assert resolve("/".join(COMMITTED)) == repo_path(*COMMITTED)  # relative: the repository root
    for bad in (str(tmp_path / "missing.safetensors"), "no/such/model.safetensors"):
        with pytest.raises(ParameterError, match="MODEL_4X4") as err:
            model_for_run(bad, _small())
        assert "missing.safetensors" in str(err.value) or "no/such" in str(err.value)
    with pytest.raises(ParameterError, match="MODEL_4X4"):
        resolve(3)
    # an existing file that is not a checkpoint: an error naming the parameter, not a traceback from safetensors
    with pytest.raises(ParameterError, match="MODEL_4X4"):
        model_for_run(str(f), _small())


def test_committed_checkpoint_is_the_notebook_default_and_solves_held_out_puzzles():
    path = repo_path(*COMMITTED)
    assert path.stat().st_size < 2_000_000
    p = _notebook_parameters()
    assert p["MODEL_4X4"] == "/".join(COMMITTED)
    rec = recipe(p["N_TRAIN_4X4"], p["TRAIN_STEPS_4X4"], p["SEED"])
    model, meta, diff = load_matching(path, rec)
    assert diff == [], diff  # the notebook's defaults load it rather than train
    assert meta["command"].startswith("python -m companion.sudoku_dfs.four_by_four") and "--seed 0" in meta["command"]
    assert meta["history"]["steps"] == p["TRAIN_STEPS_4X4"]
    torch.set_num_threads(1)
    test = load_puzzles(repo_path(*PUZZLES_4X4), n=4)[-p["N_TEST_4X4"]:]
    sols = [dfs_transcript(q, seed=0).solution for q in test]
    acc = evaluate_model(model, test, sols, max_total=64)["board_accuracy"]  # plain greedy, the paper's evaluation
    assert acc >= 0.95, acc


def test_a_4x4_checkpoint_given_for_9x9_boards_is_refused_by_name(tmp_path):
    path = repo_path("data", "sudoku", "gpt2_4x4_seed0.safetensors")
    with pytest.raises(ParameterError, match=r"CHECKPOINT.*9x9 model: this one holds 64 tokens, fewer than the 83"):
        check_board_checkpoint(path, 9)
    assert check_board_checkpoint(path, 4, name="MODEL_4X4") == path and check_board_checkpoint(None, 9) is None
    other = tmp_path / "other.safetensors"
    save_state(other, {"w": torch.zeros(2)}, {"something": 1})
    with pytest.raises(ParameterError, match="CHECKPOINT.*Sudoku checkpoint"):
        check_board_checkpoint(other, 9)

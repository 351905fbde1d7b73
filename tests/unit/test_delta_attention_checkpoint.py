"""Δ Attention (paper 09): the recall toy's committed checkpoint, its round trip and the path parameter."""

import json

import pytest
import torch

from companion.core import ParameterError, repo_path
from companion.delta_attention.checkpoint import (
    DEFAULT_CHECKPOINT,
    RecallRecipe,
    load_checkpoint,
    mismatches,
    read_metadata,
    resolve_checkpoint,
    save_checkpoint,
    train_from_recipe,
)
from companion.delta_attention.claims import LEARNED_FACTOR
from companion.delta_attention.make_checkpoint import main as make_checkpoint
from companion.delta_attention.recall import RecallTask, notebook_task, recall_metrics

SMALL = RecallTask(length=64, pairs=4, queries=4, num_keys=8, num_values=8, num_filler=8)


def test_round_trip_is_the_trained_model(tmp_path):
    recipe = RecallRecipe(steps=3, batch=4, d=16, heads=2, seed=5)
    model, losses = train_from_recipe(SMALL, recipe)
    path = save_checkpoint(model, tmp_path / "toy.safetensors", SMALL, recipe, losses=losses, extra={"date": "today"})
    loaded, meta = load_checkpoint(path, task=SMALL, recipe=recipe)
    assert meta["task"] == SMALL and meta["recipe"] == recipe and meta["extra"]["date"] == "today"
    assert meta["losses"] == pytest.approx(losses, abs=1e-5)
    for (ka, a), (kb, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert ka == kb and torch.equal(a, b)
    again, _ = train_from_recipe(SMALL, recipe)            # training is deterministic: the file is what a run trains
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), loaded.state_dict().values()))


def test_mismatches_name_what_differs(tmp_path):
    recipe = RecallRecipe(steps=2, batch=2, d=16, heads=2)
    model, _ = train_from_recipe(SMALL, recipe)
    path = save_checkpoint(model, tmp_path / "toy.safetensors", SMALL, recipe)
    meta = read_metadata(path)
    assert mismatches(meta, SMALL, recipe) == []
    other = RecallRecipe(steps=3, batch=2, d=16, heads=2, seed=1)
    assert mismatches(meta, SMALL, other) == ["steps: run 3, checkpoint 2", "seed: run 1, checkpoint 0"]
    assert mismatches(meta, RecallTask(length=80, pairs=4, queries=4, num_keys=8, num_values=8, num_filler=8),
                      recipe) == ["length: run 80, checkpoint 64"]
    with pytest.raises(ValueError, match="steps: run 3"):
        load_checkpoint(path, task=SMALL, recipe=other)


def test_not_a_checkpoint_is_refused(tmp_path):
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(2)}, str(tmp_path / "x.safetensors"), metadata={"format": "something/else"})
    with pytest.raises(ValueError, match="not a recall-toy checkpoint"):
        read_metadata(tmp_path / "x.safetensors")


def test_path_parameter(tmp_path):
    assert resolve_checkpoint("") is None
    assert resolve_checkpoint(DEFAULT_CHECKPOINT) == repo_path(*DEFAULT_CHECKPOINT.split("/"))   # relative = repository
    f = tmp_path / "abs.safetensors"
    f.write_bytes(b"x")
    assert resolve_checkpoint(str(f)) == f                                                      # absolute as given
    with pytest.raises(ParameterError, match="RECALL_CHECKPOINT=.*does not exist.*make_checkpoint"):
        resolve_checkpoint("data/delta_attention/missing.safetensors")
    with pytest.raises(ParameterError, match="RECALL_CHECKPOINT=3"):
        resolve_checkpoint(3)


def test_committed_checkpoint_is_the_notebooks_model():
    path = resolve_checkpoint(DEFAULT_CHECKPOINT)
    task, recipe = notebook_task(), RecallRecipe()
    model, meta = load_checkpoint(path, task=task, recipe=recipe)       # the notebook's defaults match it
    assert len(meta["losses"]) == recipe.steps and "make_checkpoint" in meta["extra"]["command"]
    dense = recall_metrics(model, task, None, batch=64, seed=7)
    assert dense["accuracy"] > LEARNED_FACTOR / task.num_values        # it learned the task
    assert abs(dense["nll"] - sum(meta["losses"][-20:]) / 20) < 0.1     # held-out loss near the recorded training loss


def test_make_checkpoint_command(tmp_path, capsys):
    out = tmp_path / "made.safetensors"
    assert make_checkpoint(["--out", str(out), "--length", "64", "--pairs", "4", "--steps", "2"]) == 0
    meta = read_metadata(out)
    assert meta["recipe"].steps == 2 and meta["task"] == notebook_task(64, 4)
    assert "--steps 2" in meta["extra"]["command"] and json.dumps(meta["extra"])
    assert "parameters" in capsys.readouterr().out

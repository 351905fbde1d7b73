"""Paper 03, ScaleKV: the committed tiny-VAR checkpoints, the notebook's CHECKPOINT parameter and the seed spread.

Round trip (weights, config, recipe and loss curve survive; the loaded model computes the same
logits), training is deterministic (so a checkpoint is exactly the model a run with its recipe would
train), a config or recipe mismatch is listed by name and refused by a strict load, path parameters
resolve as given (absolute stays absolute, relative is relative to the repository), a missing file is
a ParameterError naming CHECKPOINT, and the committed files are small and are the model they claim to be.
"""

from pathlib import Path

import pytest
import torch

from companion.core import ParameterError, repo_path
from companion.scalekv import TinyVAR, VARConfig, load_digit_tokens, seed_sweeps
from companion.scalekv.checkpoint import (
    DEFAULT_CHECKPOINT,
    Recipe,
    load_checkpoint,
    load_seed_models,
    mismatches,
    read_metadata,
    resolve_checkpoint,
    save_checkpoint,
)
from companion.scalekv.make_checkpoint import main as make_checkpoint_main
from companion.scalekv.train import notebook_config, train_tiny_var

SMALL = VARConfig(sides=(1, 2, 3, 4), vocab=4, layers=2, dim=16, heads=4, mlp_ratio=2)
SMALL_RECIPE = Recipe(steps=3, batch_size=4, lr=0.01, seed=5, levels=4)


@pytest.fixture(scope="module")
def small_data():
    return load_digit_tokens(SMALL.sides, levels=4)


@pytest.fixture(scope="module")
def trained(small_data):
    return train_tiny_var(SMALL, SMALL_RECIPE, small_data)


def test_round_trip_keeps_weights_metadata_and_outputs(tmp_path, trained, small_data):
    model, losses, _ = trained
    path = save_checkpoint(model, tmp_path / "sub" / "m.safetensors", SMALL_RECIPE, losses=losses, extra={"date": "2025-01-01"})
    assert path.is_file() and [p.name for p in path.parent.iterdir()] == ["m.safetensors"]  # no temporary file left
    loaded, meta = load_checkpoint(path, config=SMALL, recipe=SMALL_RECIPE)
    assert meta["config"] == SMALL and meta["recipe"] == SMALL_RECIPE and meta["extra"] == {"date": "2025-01-01"}
    assert meta["losses"] == pytest.approx(losses, abs=1e-5)
    ref, got = model.state_dict(), loaded.state_dict()
    assert ref.keys() == got.keys() and all(torch.equal(ref[k], got[k]) for k in ref)
    tokens, labels = small_data.tokens[:6], small_data.labels[:6]
    with torch.no_grad():
        assert torch.equal(model.eval()(tokens, labels), loaded(tokens, labels))
    assert not loaded.training


def test_loading_leaves_the_global_rng_alone(tmp_path, trained):
    model, losses, _ = trained
    path = save_checkpoint(model, tmp_path / "m.safetensors", SMALL_RECIPE, losses=losses)
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    load_checkpoint(path)
    assert torch.equal(torch.rand(3), expected)


def test_training_is_deterministic_so_a_checkpoint_is_the_run_it_records(small_data, trained):
    model, losses, _ = trained
    again, losses2, _ = train_tiny_var(SMALL, SMALL_RECIPE, small_data)
    assert losses == losses2
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    other, _, _ = train_tiny_var(SMALL, Recipe(**{**SMALL_RECIPE.to_dict(), "seed": 6}), small_data)
    assert not torch.equal(other.head.weight, model.head.weight)


def test_mismatches_name_what_differs_and_strict_load_refuses(tmp_path, trained):
    model, losses, _ = trained
    path = save_checkpoint(model, tmp_path / "m.safetensors", SMALL_RECIPE, losses=losses)
    meta = read_metadata(path)
    assert mismatches(meta, SMALL, SMALL_RECIPE) == []
    wider = VARConfig(**{**SMALL.to_dict(), "dim": 32})
    other_seed = Recipe(**{**SMALL_RECIPE.to_dict(), "seed": 1, "lr": 0.02})
    assert mismatches(meta, wider, SMALL_RECIPE) == ["dim: run 32, checkpoint 16"]
    assert mismatches(meta, SMALL, other_seed) == ["lr: run 0.02, checkpoint 0.01", "seed: run 1, checkpoint 5"]
    longer = VARConfig(**{**SMALL.to_dict(), "sides": (1, 2, 3, 4, 6)})
    assert mismatches(meta, longer, SMALL_RECIPE) == ["sides: run [1, 2, 3, 4, 6], checkpoint [1, 2, 3, 4]"]
    with pytest.raises(ValueError, match=r"another configuration: dim: run 32, checkpoint 16"):
        load_checkpoint(path, config=wider, recipe=SMALL_RECIPE)
    with pytest.raises(ValueError, match=r"seed: run 1, checkpoint 5"):
        load_checkpoint(path, config=SMALL, recipe=other_seed)


def test_a_file_that_is_not_a_tiny_var_checkpoint_is_refused(tmp_path):
    from safetensors.torch import save_file

    path = tmp_path / "other.safetensors"
    save_file({"w": torch.zeros(2)}, str(path), metadata={"format": "something else"})
    with pytest.raises(ValueError, match="not a tiny-VAR checkpoint"):
        read_metadata(path)
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        read_metadata(tmp_path / "absent.safetensors")


def test_resolve_checkpoint_paths_as_given(tmp_path, trained):
    assert resolve_checkpoint("") is None and resolve_checkpoint("   ") is None
    model, losses, _ = trained
    absolute = save_checkpoint(model, tmp_path / "m.safetensors", SMALL_RECIPE, losses=losses)
    assert resolve_checkpoint(str(absolute)) == absolute  # absolute stays absolute
    assert resolve_checkpoint(DEFAULT_CHECKPOINT) == repo_path("data", "scalekv", "tiny_var_seed0.safetensors")  # relative to the repo
    with pytest.raises(ParameterError, match="CHECKPOINT") as err:
        resolve_checkpoint("data/scalekv/absent.safetensors")
    assert err.value.name == "CHECKPOINT" and "does not exist" in str(err.value)
    with pytest.raises(ParameterError, match="CHECKPOINT"):
        resolve_checkpoint(str(tmp_path))  # a folder is not a checkpoint file
    with pytest.raises(ParameterError, match="CHECKPOINT"):
        resolve_checkpoint(None)
    with pytest.raises(ParameterError, match=r"SEED_CHECKPOINTS\[i\]") as err:
        resolve_checkpoint("", "SEED_CHECKPOINTS[i]", allow_empty=False)
    assert "train here" not in str(err.value)
    assert resolve_checkpoint(str(absolute), "SEED_CHECKPOINTS[i]", allow_empty=False) == absolute


def test_recipe_validates():
    with pytest.raises(ParameterError, match="steps"):
        Recipe(steps=0)
    with pytest.raises(ParameterError, match="lr"):
        Recipe(lr=0.0)
    with pytest.raises(ValueError, match="vocab"):
        train_tiny_var(SMALL, Recipe(levels=8))


def test_make_checkpoint_cli_writes_a_loadable_file(tmp_path, capsys):
    out = tmp_path / "cli.safetensors"
    assert make_checkpoint_main(["--out", str(out), "--seed", "3", "--steps", "2", "--sides", "1,2,3,4", "--layers", "2",
                                 "--dim", "16"]) == 0
    model, meta = load_checkpoint(out)
    assert meta["recipe"] == Recipe(steps=2, seed=3) and meta["config"] == notebook_config((1, 2, 3, 4), 2, 16)
    assert len(meta["losses"]) == 2 and meta["extra"]["command"].startswith("python -m companion.scalekv.make_checkpoint --out")
    assert "2 AdamW steps" in capsys.readouterr().out


COMMITTED = sorted(repo_path("data", "scalekv").glob("tiny_var_seed*.safetensors"))


def test_the_committed_checkpoints_exist_and_are_small():
    assert [p.name for p in COMMITTED][:1] == ["tiny_var_seed0.safetensors"]
    assert all(p.stat().st_size < 1_000_000 for p in COMMITTED)


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.stem)
def test_a_committed_checkpoint_is_the_notebooks_model_trained_with_its_recipe(path):
    seed = int(path.stem.rsplit("seed", 1)[1])
    model, meta = load_checkpoint(path, config=notebook_config(), recipe=Recipe(seed=seed))
    assert isinstance(model, TinyVAR) and len(meta["losses"]) == meta["recipe"].steps
    # The weights are a trained model: its loss on 256 of the digits is near the recorded end of training
    # and far below the loss of the same model at initialisation (about log(8) = 2.08 nats per token).
    data = load_digit_tokens(model.config.sides, levels=meta["recipe"].levels)
    with torch.no_grad():
        loss = float(model.loss(data.tokens[:256], data.labels[:256]))
    tail = sum(meta["losses"][-20:]) / 20
    assert abs(loss - tail) < 0.1, (loss, tail)
    assert meta["losses"][0] > 2.0 > 1.0 > loss
    assert Path(meta["extra"]["command"].split("--out ")[1].split()[0]).name == path.name


def test_load_seed_models_keeps_the_other_seeds_of_the_same_recipe(tmp_path, small_data, trained):
    model, losses, _ = trained
    same_seed = save_checkpoint(model, tmp_path / "s5.safetensors", SMALL_RECIPE, losses=losses)
    r6 = Recipe(**{**SMALL_RECIPE.to_dict(), "seed": 6})
    seed6 = save_checkpoint(train_tiny_var(SMALL, r6, small_data)[0], tmp_path / "s6.safetensors", r6)
    r7 = Recipe(**{**SMALL_RECIPE.to_dict(), "seed": 7, "steps": 2})
    other_recipe = save_checkpoint(train_tiny_var(SMALL, r7, small_data)[0], tmp_path / "s7.safetensors", r7)
    models, notes = load_seed_models([same_seed, seed6, other_recipe, seed6], SMALL, SMALL_RECIPE)
    assert list(models) == [6] and isinstance(models[6], TinyVAR)
    assert notes == ["s5.safetensors left out: seed 5 is already in", "s7.safetensors left out: steps: run 3, checkpoint 2",
                     "s6.safetensors left out: seed 6 is already in"]


def test_seed_sweeps_runs_each_seed_with_its_own_noise_and_reuses_the_own_table(small_data, trained):
    model, _, _ = trained
    other = train_tiny_var(SMALL, Recipe(**{**SMALL_RECIPE.to_dict(), "seed": 6}), small_data)[0]
    labels = torch.arange(4) % 10
    own = seed_sweeps({6: other}, labels, [0.5], cal_images=2, window_size=1)
    assert sorted(own.seed.unique()) == [6] and sorted(own.method) == ["scalekv", "uniform"]
    both = seed_sweeps({6: other}, labels, [0.5], own=(5, own.assign(method=["scalekv", "uniform"])), cal_images=2, window_size=1)
    assert sorted(both.seed.unique()) == [5, 6] and len(both) == 4
    again = seed_sweeps({6: other}, labels, [0.5], cal_images=2, window_size=1)
    assert again.psnr.tolist() == own.psnr.tolist()  # deterministic: same seed, same noise
    assert len(seed_sweeps({}, labels, [0.5])) == 0

"""companion.core.checkpoints: the safetensors checkpoint helper the papers share.

Round trip (tensors exact, metadata decoded, floating tensors cast to the storage dtype and back,
integer ones kept), the on-disk format (JSON values, "format" stored as a plain string, so the
committed files of papers 03, 06 and 09 read), atomic writes (a failed write leaves no temporary file
and the earlier file intact), clear errors naming the file for a file that is not such a checkpoint,
and differences between a run's and a checkpoint's recipe.
"""

import json

import pytest
import torch

from companion.core import repo_path
from companion.core.checkpoints import differences, flatten, load_state, read_metadata, save_state


def _state():
    g = torch.Generator().manual_seed(0)
    return {"w": torch.randn(3, 4, generator=g), "b": torch.randn(4, generator=g), "count": torch.arange(5)}


def test_round_trip_exact_and_metadata_decoded(tmp_path):
    state = _state()
    meta = {"format": "test/1", "recipe": {"steps": 3, "lr": 0.01, "sides": (1, 2)}, "losses": [1.5, 0.25], "note": "x"}
    path = save_state(tmp_path / "sub" / "m.safetensors", state, meta)
    assert path == tmp_path / "sub" / "m.safetensors" and path.is_file()
    loaded, md = load_state(path, format="test/1")
    assert set(loaded) == set(state) and all(torch.equal(loaded[k], state[k]) for k in state)
    assert loaded["count"].dtype == torch.int64
    expected = {"format": "test/1", "recipe": {"steps": 3, "lr": 0.01, "sides": [1, 2]}, "losses": [1.5, 0.25], "note": "x"}
    assert md == expected and read_metadata(path) == expected
    # the raw header: values JSON strings, the format a plain string
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        raw = f.metadata()
    assert raw["format"] == "test/1" and json.loads(raw["recipe"]) == expected["recipe"] and raw["note"] == '"x"'


def test_dtype_casts_floating_tensors_only(tmp_path):
    state = _state()
    path = save_state(tmp_path / "h.safetensors", state, {}, dtype=torch.float16)
    loaded, md = load_state(path)
    assert md == {} and loaded["w"].dtype == torch.float16 and loaded["count"].dtype == torch.int64
    assert torch.equal(loaded["w"], state["w"].half())
    back, _ = load_state(path, dtype=torch.float32)
    assert back["w"].dtype == torch.float32 and torch.equal(back["w"], state["w"].half().float())
    assert torch.equal(back["count"], state["count"])


def test_write_is_atomic(tmp_path, monkeypatch):
    path = save_state(tmp_path / "m.safetensors", _state(), {"v": 1})
    before = path.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.safetensors"]  # no temporary file left

    import safetensors.torch

    def broken(state, filename, metadata=None):
        with open(filename, "wb") as f:
            f.write(b"half a file")
        raise OSError("disk full")

    monkeypatch.setattr(safetensors.torch, "save_file", broken)
    with pytest.raises(OSError, match="disk full"):
        save_state(path, _state(), {"v": 2})
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["m.safetensors"]
    monkeypatch.undo()
    assert read_metadata(path) == {"v": 1}


def test_metadata_must_be_string_keyed_and_format_a_string(tmp_path):
    with pytest.raises(TypeError, match="format"):
        save_state(tmp_path / "m.safetensors", _state(), {"format": 1})
    with pytest.raises(TypeError, match="strings"):
        save_state(tmp_path / "m.safetensors", _state(), {1: "a"})
    assert not any(tmp_path.iterdir())


def test_a_file_that_is_not_such_a_checkpoint_is_a_clear_error(tmp_path):
    from safetensors.torch import save_file

    with pytest.raises(FileNotFoundError, match="no checkpoint at .*absent"):
        read_metadata(tmp_path / "absent.safetensors")
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a checkpoint at all")
    for reader in (read_metadata, load_state):
        with pytest.raises(ValueError, match=r"junk\.safetensors is not a toy model: not a safetensors file"):
            reader(junk, what="toy model")
    other = tmp_path / "other.safetensors"
    save_file({"w": torch.zeros(2)}, str(other), metadata={"format": "else/1", "x": "not json"})
    for reader in (read_metadata, load_state):
        with pytest.raises(ValueError, match=r"other\.safetensors is not a toy model \(metadata format 'else/1', expected 'toy/1'\)"):
            reader(other, format="toy/1", what="toy model")
        with pytest.raises(ValueError, match=r"other\.safetensors is not a toy model \(no 'recipe' metadata\)"):
            reader(other, what="toy model", required=("recipe",))
        with pytest.raises(ValueError, match=r"other\.safetensors is not a checkpoint: metadata 'x' is not JSON"):
            reader(other)


@pytest.mark.parametrize("rel, fmt, keys", [
    ("data/scalekv/tiny_var_seed0.safetensors", "companion.scalekv.tiny_var/1", {"config", "recipe", "losses", "extra"}),
    ("data/delta_attention/recall_toy_seed0.safetensors", "companion.delta_attention.recall_toy/1",
     {"task", "recipe", "losses", "extra"}),
    ("data/sudoku/gpt2_4x4_seed0.safetensors", None, {"gpt_config", "meta"}),
])
def test_committed_checkpoints_read(rel, fmt, keys):
    path = repo_path(*rel.split("/"))
    md = read_metadata(path, format=fmt)
    assert keys <= set(md) and md.get("format") == fmt
    state, md2 = load_state(path, format=fmt)
    assert md2 == md and state and all(isinstance(t, torch.Tensor) for t in state.values())


def test_differences():
    wanted = {"steps": 2, "lr": 0.01, "sides": (1, 2, 3), "train": {"seed": 0, "warmup": 20}}
    same = json.loads(json.dumps(wanted))
    assert differences(wanted, same) == []
    assert differences(wanted, {**same, "lr": 0.01 * (1 + 1e-14)}) == []  # floats agree to a relative 1e-12
    recorded = {"steps": 240, "lr": 0.02, "sides": [1, 2], "train": {"seed": 1, "warmup": 20}, "extra": "x"}
    assert differences(wanted, recorded) == ["steps: run 2, checkpoint 240", "lr: run 0.01, checkpoint 0.02",
                                             "sides: run [1, 2, 3], checkpoint [1, 2]",
                                             "train.seed: run 0, checkpoint 1", "extra: run (absent), checkpoint 'x'"]
    assert differences({"a": 1, "b": 2}, {"a": 1}) == ["b: run 2, checkpoint (absent)"]
    assert differences({"n": 3}, {"n": 3.0}) == [] and differences({"n": 3}, {"n": "3"}) == ["n: run 3, checkpoint '3'"]
    assert differences({"x": 1.0}, {"x": None}) == ["x: run 1.0, checkpoint None"]
    assert flatten({"a": {"b": {"c": 1}}, "d": [1]}) == {"a.b.c": 1, "d": [1]}

"""Committed checkpoints of paper 03's tiny VAR: safetensors weights with the configuration, the
training recipe and the loss curve in the file's metadata, and the notebook's ``CHECKPOINT`` parameter.

A checkpoint is the result of :func:`companion.scalekv.train.train_tiny_var` for one
``(VARConfig, Recipe)``; it stands in for that training only when a run asks for exactly that
configuration and recipe (:func:`mismatches` is empty), so the notebook shows the same model whether it
trains or loads. Made by ``python -m companion.scalekv.train`` (see ``data/scalekv/README.md``); the
weights are float32 (about 80 k parameters, ~0.3 MB), loaded with ``safetensors`` only (no pickle).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from companion.core import ParameterError, check_float, check_int, repo_path
from companion.core.atomic import write_atomic
from companion.core.paths import resolve_path_parameter
from companion.scalekv.model import TinyVAR, VARConfig

__all__ = ["Recipe", "save_checkpoint", "load_checkpoint", "read_metadata", "mismatches", "resolve_checkpoint", "load_seed_models",
           "DEFAULT_CHECKPOINT", "FORMAT"]

FORMAT = "companion.scalekv.tiny_var/1"
DEFAULT_CHECKPOINT = "data/scalekv/tiny_var_seed0.safetensors"


@dataclass(frozen=True)
class Recipe:
    """How a tiny VAR is trained (:func:`companion.scalekv.train.train_var`) on the digits' token maps."""

    steps: int = 240
    batch_size: int = 16
    lr: float = 0.006
    seed: int = 0
    levels: int = 8  # grey levels of the token maps (= the model's vocab)
    weight_decay: float = 0.01
    label_dropout: float = 0.1

    def __post_init__(self):
        check_int("steps", self.steps, lo=1)
        check_int("batch_size", self.batch_size, lo=1)
        check_float("lr", self.lr, lo=0.0, lo_open=True)
        check_int("seed", self.seed)
        check_int("levels", self.levels, lo=2, hi=256)
        check_float("weight_decay", self.weight_decay, lo=0.0)
        check_float("label_dropout", self.label_dropout, lo=0.0, hi=1.0, hi_open=True)

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        return f"{self.steps} AdamW steps of batch {self.batch_size}, lr {self.lr:g}, seed {self.seed}"


def _config_dict(config: VARConfig) -> dict:
    d = config.to_dict()
    d["sides"] = [int(s) for s in d["sides"]]
    return d


def save_checkpoint(model: TinyVAR, path, recipe: Recipe, *, losses=(), extra: Mapping | None = None) -> Path:
    """Write ``model``'s weights (float32) atomically to ``path`` with its config, ``recipe``, the loss of
    every step and ``extra`` (date, command, seconds, versions) as safetensors metadata."""
    from safetensors.torch import save_file

    state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in model.state_dict().items()}
    metadata = {
        "format": FORMAT,
        "config": json.dumps(_config_dict(model.config)),
        "recipe": json.dumps(recipe.to_dict()),
        "losses": json.dumps([round(float(x), 5) for x in losses]),
        "extra": json.dumps(dict(extra or {}), default=str),
    }
    return write_atomic(Path(path), lambda tmp: save_file(state, tmp, metadata=metadata))


def read_metadata(path) -> dict:
    """``{"config": VARConfig, "recipe": Recipe, "losses": [...], "extra": {...}}`` of a checkpoint, without its weights."""
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    with safe_open(str(path), framework="pt") as f:
        md = f.metadata() or {}
    if md.get("format") != FORMAT:
        raise ValueError(f"{path} is not a tiny-VAR checkpoint of paper 03 (metadata format {md.get('format')!r}, expected {FORMAT!r})")
    cfg = json.loads(md["config"])
    cfg["sides"] = tuple(cfg["sides"])
    return {"config": VARConfig(**cfg), "recipe": Recipe(**json.loads(md["recipe"])), "losses": json.loads(md.get("losses", "[]")),
            "extra": json.loads(md.get("extra", "{}"))}


def mismatches(meta: Mapping, config: VARConfig, recipe: Recipe) -> list[str]:
    """What differs between a checkpoint's recorded config/recipe and the ones a run asks for
    (``"dim: run 64, checkpoint 48"``); empty when the checkpoint is exactly that run's model."""
    out = []
    for what, ours, theirs in (("config", _config_dict(config), _config_dict(meta["config"])),
                               ("recipe", recipe.to_dict(), meta["recipe"].to_dict())):
        for key in ours:
            a, b = ours[key], theirs.get(key)
            same = (a == b) if not isinstance(a, float) else (b is not None and abs(a - float(b)) <= 1e-12 * max(1.0, abs(a)))
            if not same:
                out.append(f"{key}: run {a}, checkpoint {b}")
    return out


def load_checkpoint(path, device="cpu", *, config: VARConfig | None = None, recipe: Recipe | None = None) -> tuple[TinyVAR, dict]:
    """``(model in eval mode, metadata)`` from :func:`save_checkpoint`. With ``config`` and ``recipe``
    the checkpoint must have been made with exactly those (ValueError listing what differs)."""
    from safetensors.torch import load_file

    meta = read_metadata(path)
    if config is not None or recipe is not None:
        diff = mismatches(meta, config or meta["config"], recipe or meta["recipe"])
        if diff:
            raise ValueError(f"checkpoint {path} was made with another configuration: " + "; ".join(diff))
    with torch.random.fork_rng(devices=[]):  # the random init is overwritten; leave the global RNG as it was
        model = TinyVAR(meta["config"])
    state = load_file(str(path))
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"checkpoint {path} does not fit TinyVAR({meta['config']}): missing {missing[:3]}, unexpected {unexpected[:3]}")
    return model.to(device).eval(), meta


def load_seed_models(paths, config: VARConfig, recipe: Recipe, device="cpu") -> tuple[dict, list[str]]:
    """``({seed: model}, notes)``: the checkpoints among ``paths`` made with ``config`` and ``recipe`` up to
    the seed, other than ``recipe.seed`` itself; ``notes`` says why each other file was left out."""
    models, notes = {}, []
    for path in paths:
        meta = read_metadata(path)
        seed = meta["recipe"].seed
        why = mismatches(meta, config, Recipe(**{**recipe.to_dict(), "seed": seed}))
        if why or seed == recipe.seed or seed in models:
            notes.append(f"{Path(path).name} left out: " + ("; ".join(why) if why else f"seed {seed} is already in"))
        else:
            models[seed] = load_checkpoint(path, device)[0]
    return models, notes


def resolve_checkpoint(value, name: str = "CHECKPOINT", *, allow_empty: bool = True) -> Path | None:
    """A checkpoint path parameter resolved by :func:`companion.core.paths.resolve_path_parameter`."""
    return resolve_path_parameter(value, name, made_by="`python -m companion.scalekv.make_checkpoint`",
                                  allow_empty=allow_empty)

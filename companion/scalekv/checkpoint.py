"""Committed checkpoints of paper 03's tiny VAR: safetensors weights with the configuration, the
training recipe and the loss curve in the file's metadata, and the notebook's ``CHECKPOINT`` parameter.

A checkpoint is the result of :func:`companion.scalekv.train.train_tiny_var` for one
``(VARConfig, Recipe)``; it stands in for that training only when a run asks for exactly that
configuration and recipe (:func:`mismatches` is empty), so the notebook shows the same model whether it
trains or loads. Made by ``python -m companion.scalekv.train`` (see ``data/scalekv/README.md``); the
weights are float32 (about 80 k parameters, ~0.3 MB), loaded with ``safetensors`` only (no pickle).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from companion.core import check_float, check_int
from companion.core import checkpoints
from companion.core.checkpoints import differences, load_state, save_state
from companion.core.paths import resolve_path_parameter
from companion.scalekv.model import TinyVAR, VARConfig

__all__ = ["Recipe", "save_checkpoint", "load_checkpoint", "read_metadata", "mismatches", "resolve_checkpoint", "load_seed_models",
           "DEFAULT_CHECKPOINT", "FORMAT"]

FORMAT = "companion.scalekv.tiny_var/1"
DEFAULT_CHECKPOINT = "data/scalekv/tiny_var_seed0.safetensors"
_WHAT = "tiny-VAR checkpoint of paper 03"


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
    every step and ``extra`` (date, command, seconds, versions) as safetensors metadata
    (:func:`companion.core.checkpoints.save_state`)."""
    metadata = {
        "format": FORMAT,
        "config": _config_dict(model.config),
        "recipe": recipe.to_dict(),
        "losses": [round(float(x), 5) for x in losses],
        "extra": dict(extra or {}),
    }
    return save_state(path, model.state_dict(), metadata, dtype=torch.float32)


def read_metadata(path) -> dict:
    """``{"config": VARConfig, "recipe": Recipe, "losses": [...], "extra": {...}}`` of a checkpoint, without its weights."""
    md = checkpoints.read_metadata(path, format=FORMAT, what=_WHAT, required=("config", "recipe"))
    return _meta(md)


def _meta(md: Mapping) -> dict:
    cfg = dict(md["config"])
    cfg["sides"] = tuple(cfg["sides"])
    return {"config": VARConfig(**cfg), "recipe": Recipe(**md["recipe"]), "losses": md.get("losses", []),
            "extra": md.get("extra", {})}


def mismatches(meta: Mapping, config: VARConfig, recipe: Recipe) -> list[str]:
    """What differs between a checkpoint's recorded config/recipe and the ones a run asks for
    (``"dim: run 64, checkpoint 48"``, :func:`companion.core.checkpoints.differences`); empty when the
    checkpoint is exactly that run's model."""
    return (differences(_config_dict(config), _config_dict(meta["config"]))
            + differences(recipe.to_dict(), meta["recipe"].to_dict()))


def load_checkpoint(path, device="cpu", *, config: VARConfig | None = None, recipe: Recipe | None = None) -> tuple[TinyVAR, dict]:
    """``(model in eval mode, metadata)`` from :func:`save_checkpoint`. With ``config`` and ``recipe``
    the checkpoint must have been made with exactly those (ValueError listing what differs)."""
    meta = read_metadata(path)
    if config is not None or recipe is not None:
        diff = mismatches(meta, config or meta["config"], recipe or meta["recipe"])
        if diff:
            raise ValueError(f"checkpoint {path} was made with another configuration: " + "; ".join(diff))
    with torch.random.fork_rng(devices=[]):  # the random init is overwritten; leave the global RNG as it was
        model = TinyVAR(meta["config"])
    state, _ = load_state(path, format=FORMAT, what=_WHAT)
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

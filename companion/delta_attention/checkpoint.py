"""The committed checkpoint of paper 09's causal recall toy (experiment B, ``recall.py``): safetensors
weights with the task, the training recipe and the loss curve in the file's metadata, and the
notebook's ``RECALL_CHECKPOINT`` parameter.

A checkpoint is the result of :func:`companion.delta_attention.recall.train_recall` for one
``(RecallTask, RecallRecipe)``; it stands in for that training only when a run asks for exactly that
task and recipe (:func:`mismatches` is empty), so the notebook shows the same model whether it trains
or loads. Made by ``python -m companion.delta_attention.make_checkpoint`` (see
``data/delta_attention/README.md``); float32 weights (about 0.1 M parameters, ~0.4 MB), loaded with
``safetensors`` only (no pickle).
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
from companion.delta_attention.recall import RecallTask, TinyCausalLM, train_recall

__all__ = ["DEFAULT_CHECKPOINT", "FORMAT", "RecallRecipe", "load_checkpoint", "mismatches", "read_metadata",
           "resolve_checkpoint", "save_checkpoint", "train_from_recipe"]

FORMAT = "companion.delta_attention.recall_toy/1"
DEFAULT_CHECKPOINT = "data/delta_attention/recall_toy_seed0.safetensors"
_WHAT = "recall-toy checkpoint of paper 09"


@dataclass(frozen=True)
class RecallRecipe:
    """The model size and training recipe of :func:`~companion.delta_attention.recall.train_recall`."""

    steps: int = 300
    batch: int = 32
    d: int = 64
    layers: int = 2
    heads: int = 4
    lr: float = 3e-3
    smear_from: int = 0
    seed: int = 0

    def __post_init__(self):
        check_int("steps", self.steps, lo=1)
        check_int("batch", self.batch, lo=1)
        check_int("d", self.d, lo=8)
        check_int("layers", self.layers, lo=1)
        check_int("heads", self.heads, lo=1)
        check_float("lr", self.lr, lo=0.0, lo_open=True)
        check_int("smear_from", self.smear_from, lo=0)
        check_int("seed", self.seed)

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        return (f"{self.layers} layers, d={self.d}, {self.heads} heads; {self.steps} AdamW steps of batch {self.batch}, "
                f"lr {self.lr:g}, seed {self.seed}")


def train_from_recipe(task: RecallTask, recipe: RecallRecipe) -> tuple[TinyCausalLM, list[float]]:
    """``train_recall(task, **recipe)``: what the notebook runs when it trains, and what a checkpoint holds."""
    return train_recall(task, **recipe.to_dict())


def save_checkpoint(model: TinyCausalLM, path, task: RecallTask, recipe: RecallRecipe, *, losses=(),
                    extra: Mapping | None = None) -> Path:
    """Write ``model``'s weights (float32) atomically to ``path`` with ``task``, ``recipe``, the loss of
    every step and ``extra`` (date, command, seconds, versions) as safetensors metadata
    (:func:`companion.core.checkpoints.save_state`)."""
    metadata = {
        "format": FORMAT,
        "task": asdict(task),
        "recipe": recipe.to_dict(),
        "losses": [round(float(x), 5) for x in losses],
        "extra": dict(extra or {}),
    }
    return save_state(path, model.state_dict(), metadata, dtype=torch.float32)


def read_metadata(path) -> dict:
    """``{"task": RecallTask, "recipe": RecallRecipe, "losses": [...], "extra": {...}}`` of a checkpoint."""
    md = checkpoints.read_metadata(path, format=FORMAT, what=_WHAT, required=("task", "recipe"))
    return {"task": RecallTask(**md["task"]), "recipe": RecallRecipe(**md["recipe"]),
            "losses": md.get("losses", []), "extra": md.get("extra", {})}


def mismatches(meta: Mapping, task: RecallTask, recipe: RecallRecipe) -> list[str]:
    """What differs between a checkpoint's recorded task/recipe and the ones a run asks for
    (``"steps: run 150, checkpoint 300"``, :func:`companion.core.checkpoints.differences`); empty when the
    checkpoint is exactly that run's model."""
    return differences(asdict(task), asdict(meta["task"])) + differences(recipe.to_dict(), meta["recipe"].to_dict())


def load_checkpoint(path, *, task: RecallTask | None = None, recipe: RecallRecipe | None = None) -> tuple[TinyCausalLM, dict]:
    """``(model in eval mode, metadata)`` from :func:`save_checkpoint`. With ``task``/``recipe`` the
    checkpoint must have been made with exactly those (ValueError listing what differs)."""
    meta = read_metadata(path)
    if task is not None or recipe is not None:
        diff = mismatches(meta, task or meta["task"], recipe or meta["recipe"])
        if diff:
            raise ValueError(f"checkpoint {path} was made with another configuration: " + "; ".join(diff))
    r = meta["recipe"]
    with torch.random.fork_rng(devices=[]):  # the random init is overwritten; leave the global RNG as it was
        model = TinyCausalLM(meta["task"].vocab, d=r.d, layers=r.layers, heads=r.heads, smear_from=r.smear_from)
    state, _ = load_state(path, format=FORMAT, what=_WHAT)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"checkpoint {path} does not fit the recall toy ({r.describe()}): missing {missing[:3]}, "
                         f"unexpected {unexpected[:3]}")
    return model.eval(), meta


def resolve_checkpoint(value, name: str = "RECALL_CHECKPOINT") -> Path | None:
    """The file a path parameter names (``companion.core.paths.resolve_path_parameter``): ``""`` is none
    (train here); an absolute path is taken as given, a relative one is relative to the repository root;
    anything but an existing file raises :class:`~companion.core.ParameterError` naming the parameter."""
    return resolve_path_parameter(value, name, made_by="`python -m companion.delta_attention.make_checkpoint`")

"""Checkpoints of the paper-06 GPT-2: bf16 safetensors with the configuration in the metadata, and the
notebook's ``CHECKPOINT`` parameter resolved as given.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch

from companion.core import ParameterError
from companion.core.paths import resolve_path_parameter
from companion.core.checkpoints import load_state, read_metadata, save_state
from companion.sudoku_dfs.model import GPTConfig, build_model

__all__ = ["check_board_checkpoint", "load_checkpoint", "resolve_checkpoint", "save_checkpoint"]


def resolve_checkpoint(value: str, name: str = "CHECKPOINT",
                       made_by: str = "python -m companion.bench sudoku_dfs") -> Path | None:
    """A checkpoint path parameter resolved by :func:`companion.core.paths.resolve_path_parameter`
    (``""`` is none; absolute as given; relative to the repository root)."""
    return resolve_path_parameter(value, name, made_by=made_by)


def save_checkpoint(model, path, meta: dict | None = None, dtype: torch.dtype = torch.bfloat16) -> Path:
    """Save weights with safetensors (``dtype``, default bf16) plus the config and ``meta`` as metadata
    (:func:`companion.core.checkpoints.save_state`; only floating-point tensors are stored)."""
    state = {k: v for k, v in model.state_dict().items() if v.is_floating_point()}
    metadata = {"gpt_config": asdict(model.sudoku_config), "meta": meta or {}}
    return save_state(path, state, metadata, dtype=dtype)


def load_checkpoint(path, device="cpu"):
    """``(model, meta)`` from :func:`save_checkpoint`; weights are loaded in float32."""
    state, md = load_state(path, what="Sudoku checkpoint", required=("gpt_config",), dtype=torch.float32)
    config = GPTConfig(**md["gpt_config"])
    model = build_model(config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not m.endswith(".attn.bias") and not m.endswith("masked_bias")]
    if missing or unexpected:
        raise ValueError(f"checkpoint {path} does not match the model: missing {missing[:3]}, unexpected {unexpected[:3]}")
    return model.to(device).eval(), md.get("meta", {})



def check_board_checkpoint(path: Path | None, n: int, name: str = "CHECKPOINT") -> Path | None:
    """``path`` unchanged where it is None or a checkpoint whose model can read ``n`` x ``n`` transcripts, from its
    metadata alone. A file that is not a Sudoku checkpoint, or whose context cannot hold the ``n * n`` clues, the
    start token and one move (a 4x4 model given for 9x9, whose transcripts it would silently truncate), is refused
    with a :class:`ParameterError` naming ``name``."""
    if path is None:
        return None
    try:
        config = GPTConfig(**read_metadata(path, what="Sudoku checkpoint", required=("gpt_config",))["gpt_config"])
    except (ValueError, TypeError) as exc:
        raise ParameterError(name, str(path), f"a {n}x{n} checkpoint made by python -m companion.bench sudoku_dfs ({exc})") from exc
    need = n * n + 2
    if config.n_positions < need:
        raise ParameterError(name, str(path), f"a checkpoint of a {n}x{n} model: this one holds {config.n_positions} "
                                              f"tokens, fewer than the {need} of a {n}x{n} transcript's clues, start and first move")
    return path

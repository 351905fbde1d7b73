"""Checkpoints of the paper-06 GPT-2: bf16 safetensors with the configuration in the metadata, and the
notebook's ``CHECKPOINT`` parameter resolved as given.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import torch

from companion.core.paths import resolve_path_parameter
from companion.core.atomic import write_atomic
from companion.sudoku_dfs.model import GPTConfig, build_model

__all__ = ["load_checkpoint", "resolve_checkpoint", "save_checkpoint"]


def resolve_checkpoint(value: str, name: str = "CHECKPOINT", made_by: str = "benchmarks/sudoku_train_gpu.py") -> Path | None:
    """A checkpoint path parameter resolved by :func:`companion.core.paths.resolve_path_parameter`
    (``""`` is none; absolute as given; relative to the repository root)."""
    return resolve_path_parameter(value, name, made_by=made_by)


def save_checkpoint(model, path, meta: dict | None = None, dtype: torch.dtype = torch.bfloat16) -> Path:
    """Save weights with safetensors (``dtype``, default bf16) plus the config and ``meta`` as metadata."""
    from safetensors.torch import save_file

    state = {k: v.detach().to("cpu", dtype).contiguous() for k, v in model.state_dict().items() if v.is_floating_point()}
    metadata = {"gpt_config": json.dumps(asdict(model.sudoku_config)), "meta": json.dumps(meta or {})}
    return write_atomic(path, lambda tmp: save_file(state, tmp, metadata=metadata))


def load_checkpoint(path, device="cpu"):
    """``(model, meta)`` from :func:`save_checkpoint`; weights are loaded in float32."""
    from safetensors import safe_open

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}")
    with safe_open(str(path), framework="pt") as f:
        md = f.metadata() or {}
        if "gpt_config" not in md:
            raise ValueError(f"{path} is not a Sudoku checkpoint (no gpt_config metadata)")
        state = {k: f.get_tensor(k).float() for k in f.keys()}
    config = GPTConfig(**json.loads(md["gpt_config"]))
    model = build_model(config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not m.endswith(".attn.bias") and not m.endswith("masked_bias")]
    if missing or unexpected:
        raise ValueError(f"checkpoint {path} does not match the model: missing {missing[:3]}, unexpected {unexpected[:3]}")
    return model.to(device).eval(), json.loads(md.get("meta", "{}"))

"""Model checkpoints as safetensors files: the weights, plus JSON metadata (the recipe that made them).

The generic part of every paper's committed checkpoint, written once: :func:`save_state` writes a
state dict atomically (:func:`companion.core.atomic.write_atomic`) with metadata, :func:`read_metadata`
reads the metadata without the weights, :func:`load_state` reads both, and :func:`differences` says in
which fields a recorded recipe differs from the one a run asks for (``"steps: run 2, checkpoint 240"``).
The papers keep their own parts: their recipe dataclasses, model builders and file formats.

On disk, every metadata value is a JSON string, except ``"format"``, which is stored as the plain
string it is (so a file's kind shows in any safetensors viewer, and the committed files of papers
03, 06 and 09 read unchanged). Weights are loaded with ``safetensors`` only (no pickle).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = ["FORMAT_KEY", "differences", "flatten", "load_state", "read_metadata", "save_state"]

FORMAT_KEY = "format"  # the one metadata value stored as a plain string, not JSON


def _tensors(state_dict: Mapping, dtype=None) -> dict:
    """CPU, contiguous, detached copies of ``state_dict``'s tensors; floating ones cast to ``dtype`` if given."""
    out = {}
    for key, value in state_dict.items():
        value = value.detach()
        value = value.to("cpu", dtype) if (dtype is not None and value.is_floating_point()) else value.to("cpu")
        out[key] = value.contiguous()
    return out


def save_state(path, state_dict: Mapping, metadata: Mapping, dtype=None) -> Path:
    """Write ``state_dict`` (floating tensors cast to ``dtype`` where given) atomically to ``path`` as
    safetensors, with ``metadata``: each value JSON-encoded (``default=str``), except a ``"format"``
    string, which is stored as it is. A failed write leaves no temporary file and an earlier file as it was."""
    from safetensors.torch import save_file

    from companion.core.atomic import write_atomic

    state = _tensors(state_dict, dtype)
    encoded = {}
    for key, value in metadata.items():
        if not isinstance(key, str):
            raise TypeError(f"checkpoint metadata keys must be strings, got {key!r}")
        if key == FORMAT_KEY:
            if not isinstance(value, str):
                raise TypeError(f"checkpoint metadata {FORMAT_KEY!r} must be a string, got {value!r}")
            encoded[key] = value
        else:
            encoded[key] = json.dumps(value, default=str)
    return write_atomic(Path(path), lambda tmp: save_file(state, tmp, metadata=encoded))


def _check_kind(path: Path, raw: dict, format: str | None, what: str, required: Iterable[str]) -> None:
    if format is not None and raw.get(FORMAT_KEY) != format:
        raise ValueError(f"{path} is not a {what} (metadata format {raw.get(FORMAT_KEY)!r}, expected {format!r})")
    for key in required:
        if key not in raw:
            raise ValueError(f"{path} is not a {what} (no {key!r} metadata)")


def _decode(path: Path, raw: dict, what: str) -> dict:
    out = {}
    for key, value in raw.items():
        if key == FORMAT_KEY:
            out[key] = value
            continue
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} is not a {what}: metadata {key!r} is not JSON ({exc})") from exc
    return out


def _open(path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    return path


def _unreadable(path: Path, what: str, exc: Exception) -> ValueError:
    return ValueError(f"{path} is not a {what}: not a safetensors file ({type(exc).__name__}: {exc})")


def read_metadata(path, *, format: str | None = None, what: str = "checkpoint", required: Iterable[str] = ()) -> dict:
    """The decoded metadata of a checkpoint written by :func:`save_state`, without reading its weights.

    A missing file is a :class:`FileNotFoundError` (``"no checkpoint at ..."``). A file that is not
    safetensors, whose ``"format"`` is not ``format`` (where given), that lacks a ``required`` key or
    has a value that is not JSON is a :class:`ValueError` naming the file and ``what`` it should be.
    """
    from safetensors import safe_open

    path = _open(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            raw = dict(f.metadata() or {})
    except Exception as exc:  # noqa: BLE001  (safetensors raises its own error types on a file that is not one)
        raise _unreadable(path, what, exc) from exc
    _check_kind(path, raw, format, what, required)
    return _decode(path, raw, what)


def load_state(path, *, format: str | None = None, what: str = "checkpoint", required: Iterable[str] = (),
               dtype=None) -> tuple[dict, dict]:
    """``(state_dict, metadata)`` of a checkpoint written by :func:`save_state` (CPU tensors; floating ones
    cast to ``dtype`` where given). Errors as :func:`read_metadata`'s; the kind is checked before any
    tensor is read."""
    from safetensors import safe_open

    path = _open(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            raw = dict(f.metadata() or {})
            _check_kind(path, raw, format, what, required)
            state = {}
            for key in f.keys():
                tensor = f.get_tensor(key)
                state[key] = tensor.to(dtype) if (dtype is not None and tensor.is_floating_point()) else tensor
    except ValueError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise _unreadable(path, what, exc) from exc
    return state, _decode(path, raw, what)


def flatten(mapping: Mapping, prefix: str = "") -> dict:
    """``{"train": {"steps": 3}}`` -> ``{"train.steps": 3}`` (nested mappings only; lists stay values)."""
    out = {}
    for key, value in mapping.items():
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


_ABSENT = object()


def _show(value) -> str:
    """A value in a difference message: strings quoted (``'3'`` is not ``3``), a missing key ``(absent)``."""
    return "(absent)" if value is _ABSENT else repr(value) if isinstance(value, str) else str(value)


def _same(a, b) -> bool:
    if isinstance(a, float) and not isinstance(b, bool) and isinstance(b, (int, float)):
        return abs(a - float(b)) <= 1e-12 * max(1.0, abs(a))
    return a == b


def differences(wanted: Mapping, recorded: Mapping) -> list[str]:
    """The fields in which ``recorded`` (a checkpoint's recipe) differs from ``wanted`` (a run's), as
    ``"key: run <wanted>, checkpoint <recorded>"``; ``[]`` when they agree.

    Nested mappings are compared by their flattened keys (``"train.steps"``); both sides go through a
    JSON round trip first (tuples compare as the lists they are on disk); floats agree to a relative
    1e-12. Keys of ``wanted`` come first in their order, then keys only ``recorded`` has; strings are
    quoted and a key one side lacks shows as ``(absent)``.
    """
    a = flatten(json.loads(json.dumps(dict(wanted), default=str)))
    b = flatten(json.loads(json.dumps(dict(recorded), default=str)))
    keys = list(a) + [k for k in b if k not in a]
    return [f"{k}: run {_show(a.get(k, _ABSENT))}, checkpoint {_show(b.get(k, _ABSENT))}"
            for k in keys if k not in a or k not in b or not _same(a[k], b[k])]

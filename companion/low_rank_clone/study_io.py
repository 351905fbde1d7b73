"""Save and load an encoder study (:func:`~companion.low_rank_clone.experiments.run_encoder_study`)
without its models: JSON for settings, curves, scores, clone terms and singular values; a compressed
``.npz`` for the cosine matrices (stored as float16). A grid of studies, one per student width d_S and
clone weight α, lives in one folder as ``d<W>_a<α>.json`` / ``.npz``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from companion.core.atomic import write_text_atomic


def _with(stem: Path, suffix: str) -> Path:
    """``stem`` plus ``suffix`` (not ``with_suffix``: a stem such as ``d192_a0.2`` has a dot of its own)."""
    return stem.with_name(stem.name + suffix)


def save_study(study: dict, stem) -> tuple[Path, Path]:
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    arrays = {"teacher_cos": study["teacher_cos"].astype(np.float16)}
    runs = {}
    for name, run in study["runs"].items():
        r = {k: v for k, v in run.items() if k not in ("model", "snapshots")}
        r["snapshots"] = []
        for j, s in enumerate(run["snapshots"]):
            key = f"{name}|{j}"
            arrays[key] = s["cos"].astype(np.float16)
            r["snapshots"].append({**{k: v for k, v in s.items() if k != "cos"}, "cos_key": key})
        runs[name] = r
    meta = {k: v for k, v in study.items() if k not in ("teacher_cos", "runs")}
    meta["runs"] = runs
    npz = _with(stem, ".npz")
    tmp = stem.with_name(stem.name + ".tmp.npz")
    np.savez_compressed(tmp, **{k.replace("|", "__"): v for k, v in arrays.items()})
    tmp.replace(npz)
    js = _with(stem, ".json")
    write_text_atomic(js, json.dumps(meta, separators=(",", ":")) + "\n")  # compact: long lists of spectra
    return js, npz


def load_study(stem) -> dict | None:
    """The saved study (cosine matrices as float32 arrays), or None when it is not there."""
    stem = Path(stem)
    js, npz = _with(stem, ".json"), _with(stem, ".npz")
    if not js.exists() or not npz.exists():
        return None
    meta = json.loads(js.read_text(encoding="utf-8"))
    with np.load(npz) as z:
        arrays = {k.replace("__", "|"): z[k].astype(np.float32) for k in z.files}
    meta["teacher_cos"] = arrays["teacher_cos"]
    for run in meta["runs"].values():
        for s in run["snapshots"]:
            s["cos"] = arrays[s.pop("cos_key")]
            s["clone_terms"] = s.get("clone_terms", {})
    return meta


def grid_stem(folder, d_student: int, alpha: float) -> Path:
    """The file stem of the study at width ``d_student`` and clone weight ``alpha`` in a grid folder."""
    return Path(folder) / f"d{int(d_student)}_a{float(alpha):g}"


def load_grid(folder) -> dict:
    """Every study of a grid folder as ``{(d_student, alpha): study}`` (empty when there is none)."""
    grid = {}
    for js in sorted(Path(folder).glob("d*_a*.json")):
        m = re.fullmatch(r"d(\d+)_a([0-9.]+)", js.stem)
        study = load_study(js.with_name(js.stem)) if m else None
        if study is not None:
            grid[(int(m.group(1)), float(m.group(2)))] = study
    return grid

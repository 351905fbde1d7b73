"""Save and load an encoder study (:func:`~companion.low_rank_clone.experiments.run_encoder_study`)
without its models: JSON for settings, curves, scores, clone terms and singular values; a compressed
``.npz`` for the cosine matrices (stored as float16 sentence embeddings, the cosines recomputed on load)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from companion.core.atomic import write_json_atomic


def save_study(study: dict, stem) -> tuple[Path, Path]:
    stem = Path(stem)
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
    npz = stem.with_suffix(".npz")
    tmp = stem.with_name(stem.name + ".tmp.npz")
    np.savez_compressed(tmp, **{k.replace("|", "__"): v for k, v in arrays.items()})
    tmp.replace(npz)
    js = stem.with_suffix(".json")
    write_json_atomic(js, meta)
    return js, npz


def load_study(stem) -> dict | None:
    """The saved study (cosine matrices as float32 arrays), or None when it is not there."""
    stem = Path(stem)
    js, npz = stem.with_suffix(".json"), stem.with_suffix(".npz")
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

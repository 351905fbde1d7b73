"""The notebook's experiments: the keyframe ablations (Ψ modes, hierarchy, rate term) and the grouping
ablations (motion-aware vs fixed groups of 1 and 5), each as an RD curve with one point per layer count
l = 1..L (one progressive model = one curve), compared by BD-PSNR and BD-rate against the full method.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from companion.gaussian_video.bd import bd_psnr, bd_rate, rd_envelope
from companion.gaussian_video.bitstream import encode_key
from companion.gaussian_video.pipeline import Config, SequenceResult, _eval, encode_sequence, fit_keyframe, pretrain

KEY_VARIANTS = {
    "full": {},
    "opacity-only Ψ": {"psi_mode": "opacity"},
    "volume-only Ψ": {"psi_mode": "volume"},
    "no hierarchy": {"hierarchical": False},
    "no rate term": {"lambda_rate_key": 0.0},
}


@dataclass
class KeyframeStudy:
    cfg: Config
    curves: dict = field(default_factory=dict)   # variant → {"bytes": [...], "psnr": [...]}
    models: dict = field(default_factory=dict)   # variant → (Gaussians, layer)
    pretrained: object = None


def keyframe_study(frame, cfg: Config, variants=tuple(KEY_VARIANTS)) -> KeyframeStudy:
    """Pretrain once, then RD-train and code the keyframe under each variant's settings."""
    study = KeyframeStudy(cfg)
    study.pretrained = pretrain(frame, cfg)
    for name in variants:
        c = cfg.replace(**KEY_VARIANTS[name])
        g, layer = fit_keyframe(frame, c, study.pretrained)
        enc, dec = encode_key(g, layer, c.L)
        study.models[name] = (dec, layer)
        study.curves[name] = {"bytes": [enc.bytes_upto(l) for l in range(1, c.L + 1)],
                              "psnr": _eval(dec, layer, frame, c.L)}
    return study


GROUP_VARIANTS = {"motion-aware": None, "fixed group of 1": 1, "fixed group of 5": 5}


def grouping_study(frames, cfg: Config, key_cache: dict | None = None, log=None) -> dict[str, SequenceResult]:
    """The sequence coded with motion-aware grouping and with fixed groups of 1 and 5 frames (shared
    keyframe fits: a keyframe depends only on its frame and the keyframe settings)."""
    cache = {} if key_cache is None else key_cache
    return {name: encode_sequence(frames, cfg.replace(group_size=gs), cache, log=log)
            for name, gs in GROUP_VARIANTS.items()}


def dropped_layers(curve: dict) -> list[int]:
    """The layer counts l (1-based) whose points leave a curve's monotone envelope (more bytes, no more
    PSNR than a point of fewer bytes; :func:`~companion.gaussian_video.bd.rd_envelope`)."""
    return [i + 1 for i in rd_envelope(curve["bytes"], curve["psnr"])[2]]


def bd_against(curves: dict, reference: str) -> dict:
    """BD-PSNR (dB) and BD-rate (%) of every curve against ``reference`` (NaN where the ranges do not overlap),
    on the monotone envelopes; ``dropped`` = the layers each side loses to the envelope (reference, curve)."""
    ref = curves[reference]
    out = {}
    for name, c in curves.items():
        if name == reference:
            continue
        out[name] = {"bd_psnr": bd_psnr(ref["bytes"], ref["psnr"], c["bytes"], c["psnr"]),
                     "bd_rate": bd_rate(ref["bytes"], ref["psnr"], c["bytes"], c["psnr"]),
                     "dropped": (dropped_layers(ref), dropped_layers(c))}
    return out


def monotone(values, tol: float = 0.0) -> bool:
    return bool(np.all(np.diff(np.asarray(values, dtype=float)) >= -tol))

"""The one-GPU (H200) study of paper 05 (4DGCPro): progressive decode + render of a 3-D Gaussian scene.

Run by ``benchmarks/gaussian_video_decode.py``; results in ``benchmarks/results/gaussian_video_decode.json``
(read by :func:`recorded`). No plotly here.

1. **Scene**: ``n_gaussians`` 3-D Gaussians in articulated parts (each part moves rigidly, plus a small
   non-rigid wobble) over ``n_frames`` frames, seen by ``n_cameras`` cameras on a ring at ``width²``.
   Synthetic and not trained: the study is about decoding and rendering (a full 3-D training pipeline is
   left out for time).
2. **Bitstream**: Ψ = α + λ_Ψ·V layering into L layers; keyframe attributes quantised as in the paper
   (positions uint16, the rest uint8, per-channel min/max), inter-frames as int8 deltas of positions and
   quaternions at step q; each (layer, channel) chunk compressed with zlib (level 9). The paper's H.264 path
   is used when an ffmpeg with libx264 exists, otherwise recorded as not available. Bytes per layer exact.
3. **Decode + render per frame for l = 1..L**: decompress chunks of layers ≤ l, copy to the GPU,
   dequantise (keyframe) or add the deltas (inter-frame), EWA-project for one camera
   (:func:`~companion.gaussian_video.splat.project_ewa`), bin into 16 × 16 tiles and rasterise with the
   Triton kernel (``companion_kernels.gaussian_splat``); PSNR of c^l against the unquantised all-layer render.
4. **Rasterisers** at l = L: the strongest peer first (gsplat when importable — it is not installed on the
   H200 here, recorded as such — otherwise the per-tile PyTorch splatter), then Triton; agreement in mean and
   max absolute pixel difference.
"""

from __future__ import annotations

import math
import time
import zlib

import numpy as np
import torch

from companion.core import recorded_results, time_ms
from companion.gaussian_video.significance import significance, split_layers
from companion.gaussian_video.splat import conics as to_conics
from companion.gaussian_video.splat import covariance_3d, project_ewa

RESULTS_NAME = "gaussian_video_decode"
GPU_PROFILE = {
    "n_gaussians": 100_000,
    "n_parts": 12,
    "n_frames": 8,
    "n_cameras": 16,
    "width": 512,
    "L": 6,
    "lambda_psi": 1e5,
    "q_inter": 1e-4,
}
SMOKE_PROFILE = {**GPU_PROFILE, "n_gaussians": 400, "n_parts": 3, "n_frames": 2, "n_cameras": 2, "width": 48, "L": 3}


def recorded() -> dict | None:
    """The committed results of ``benchmarks/gaussian_video_decode.py`` (None when not recorded yet)."""
    return recorded_results(RESULTS_NAME)


def make_scene(n: int, n_parts: int, n_frames: int, seed: int = 0) -> dict:
    """Gaussians in ``n_parts`` parts; per frame the means and quaternions (``[T, N, 3]``, ``[T, N, 4]``)."""
    g = torch.Generator().manual_seed(seed)
    part = torch.randint(0, n_parts, (n,), generator=g)
    centres = (torch.rand(n_parts, 3, generator=g) - 0.5) * 1.2
    spread = 0.05 + 0.15 * torch.rand(n_parts, 3, generator=g)
    local = torch.randn(n, 3, generator=g) * spread[part]
    scales = torch.exp(torch.randn(n, 3, generator=g) * 0.4) * 0.008
    quats = torch.randn(n, 4, generator=g)
    quats = quats / quats.norm(dim=1, keepdim=True)
    opac = 0.1 + 0.89 * torch.rand(n, generator=g)
    colors = (torch.rand(n_parts, 3, generator=g)[part] + 0.15 * torch.randn(n, 3, generator=g)).clamp(0, 1)
    speed = (torch.rand(n_parts, generator=g) - 0.5) * 0.3
    drift = (torch.rand(n_parts, 3, generator=g) - 0.5) * 0.02
    means, qs = [], []
    for t in range(n_frames):
        ang = speed * t
        c, s = torch.cos(ang)[part], torch.sin(ang)[part]
        x = torch.stack([c * local[:, 0] - s * local[:, 1], s * local[:, 0] + c * local[:, 1], local[:, 2]], 1)
        wob = 0.01 * torch.sin(3 * local[:, :1] * 10 + 0.7 * t)
        means.append(centres[part] + drift[part] * t + x + wob)
        half = ang[part] / 2
        rq = torch.stack([torch.cos(half), torch.zeros_like(half), torch.zeros_like(half), torch.sin(half)], 1)
        w1, x1, y1, z1 = rq.unbind(1)
        w2, x2, y2, z2 = quats.unbind(1)
        qs.append(torch.stack([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                               w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2], 1))
    return {"means": torch.stack(means), "quats": torch.stack(qs), "scales": scales, "opacities": opac,
            "colors": colors}


def cameras(n: int, width: int, radius: float = 3.0, fov_deg: float = 40.0):
    """``n`` cameras on a ring looking at the origin: (viewmats ``[n, 4, 4]``, K ``[3, 3]``)."""
    f = 0.5 * width / math.tan(math.radians(fov_deg) / 2)
    K = torch.tensor([[f, 0, width / 2], [0, f, width / 2], [0, 0, 1.0]])
    views = []
    for i in range(n):
        a = 2 * math.pi * i / n
        eye = torch.tensor([radius * math.cos(a), 0.4 * math.sin(3 * a), radius * math.sin(a)])
        fwd = -eye / eye.norm()
        right = torch.linalg.cross(fwd, torch.tensor([0.0, 1.0, 0.0]))
        right = right / right.norm()
        up = torch.linalg.cross(fwd, right)
        R = torch.stack([right, up, fwd])
        V = torch.eye(4)
        V[:3, :3] = R
        V[:3, 3] = -R @ eye
        views.append(V)
    return torch.stack(views), K


# --- the bitstream -------------------------------------------------------------------------------

_KEY = {"means": 16, "quats": 8, "scales": 8, "opacities": 8, "colors": 8}


def _q(x: np.ndarray, bits: int):
    lo, hi = float(x.min()), float(x.max())
    span = hi - lo if hi > lo else 1.0
    s = np.round((x - lo) / span * ((1 << bits) - 1)).astype(np.uint16 if bits > 8 else np.uint8)
    return s, lo, span


def encode_scene(scene: dict, layer: np.ndarray, L: int, q_inter: float) -> dict:
    """Chunks per frame, layer and attribute: zlib(level 9) of the quantised symbols (module docstring)."""
    order = np.argsort(layer, kind="stable")
    counts = np.bincount(layer, minlength=L + 1)[1:]
    bounds = np.concatenate([[0], np.cumsum(counts)])
    frames = []
    key = {}
    for name, bits in _KEY.items():
        x = (scene[name][0] if name in ("means", "quats") else scene[name]).numpy()[order].reshape(len(order), -1)
        s, lo, span = _q(x.astype(np.float64), bits)
        key[name] = (s, lo, span, bits)
    frames.append({"kind": "key", "layers": [
        {name: zlib.compress(np.ascontiguousarray(key[name][0][bounds[l]:bounds[l + 1]]).tobytes(), 9) for name in _KEY}
        for l in range(L)], "meta": {n: (v[1], v[2], v[3], v[0].shape[1]) for n, v in key.items()}})
    # closed-loop inter-frames of positions and rotations
    rec = {n: key[n][1] + key[n][0].astype(np.float64) * key[n][2] / ((1 << key[n][3]) - 1) for n in ("means", "quats")}
    for t in range(1, scene["means"].shape[0]):
        layers = [dict() for _ in range(L)]
        for name in ("means", "quats"):
            target = scene[name][t].numpy()[order].astype(np.float64)
            d = np.clip(np.round((target - rec[name]) / q_inter), -127, 127).astype(np.int8)
            rec[name] = rec[name] + d.astype(np.float64) * q_inter
            for l in range(L):
                layers[l][name] = zlib.compress(np.ascontiguousarray(d[bounds[l]:bounds[l + 1]]).tobytes(), 9)
        frames.append({"kind": "inter", "layers": layers})
    return {"frames": frames, "counts": counts.tolist(), "order": order, "L": L, "q_inter": q_inter}


def layer_bytes(stream: dict, t: int) -> list[int]:
    return [sum(len(b) for b in layer.values()) for layer in stream["frames"][t]["layers"]]


class Decoder:
    """Keeps the decoded state on the device; ``decode(t, l)`` returns the Gaussians of layers ≤ l at frame t."""

    def __init__(self, stream: dict, device):
        self.s, self.dev = stream, device
        self.meta = stream["frames"][0]["meta"]

    def _key(self, l: int) -> dict:
        n = sum(self.s["counts"][:l])
        out = {}
        for name, (lo, span, bits, ch) in self.meta.items():
            dt = np.uint16 if bits > 8 else np.uint8
            raw = b"".join(zlib.decompress(self.s["frames"][0]["layers"][k][name]) for k in range(l))
            sym = torch.from_numpy(np.frombuffer(raw, dtype=dt).astype(np.int32).reshape(n, ch)).to(self.dev)
            out[name] = lo + sym.float() * (span / ((1 << bits) - 1))
        return out

    def step(self, g: dict, k: int, l: int) -> dict:
        """One inter-frame: inflate frame k's chunks of layers ≤ l and add the deltas to the state ``g``."""
        n = sum(self.s["counts"][:l])
        out = dict(g)
        for name in ("means", "quats"):
            raw = b"".join(zlib.decompress(self.s["frames"][k]["layers"][j][name]) for j in range(l))
            d = torch.from_numpy(np.frombuffer(raw, dtype=np.int8).astype(np.float32).reshape(n, -1)).to(self.dev)
            out[name] = g[name] + d * self.s["q_inter"]
        return out

    def decode(self, t: int, l: int) -> dict:
        g = self._key(l)
        for k in range(1, t + 1):
            g = self.step(g, k, l)
        return {**g, "opacities": g["opacities"][:, 0]}


def project(g: dict, view: torch.Tensor, K: torch.Tensor):
    """EWA projection of decoded Gaussians to (means2d, conics, opacities, colors, depths), culling z ≤ 0.1."""
    cov = covariance_3d(g["quats"], g["scales"])
    m2, c2, depth = project_ewa(g["means"], cov, view, K)
    keep = depth > 0.1
    return (m2[keep].contiguous(), to_conics(c2[keep]).contiguous(), g["opacities"][keep].contiguous(),
            g["colors"][keep].contiguous(), depth[keep].contiguous())


def _psnr(a, b):
    mse = float(((a.clamp(0, 1) - b.clamp(0, 1)) ** 2).mean())
    return 10 * math.log10(1 / max(mse, 1e-12))


def run_scale_up(*, smoke: bool = False, device=None, deadline_s: float | None = None, log=print, save=None,
                 profile: dict | None = None) -> dict:
    from companion_kernels.gaussian_splat import rasterize
    from companion.gaussian_video.bitstream import h264_encoder

    t0 = time.perf_counter()
    left = (lambda: deadline_s - (time.perf_counter() - t0)) if deadline_s else (lambda: math.inf)
    P = dict(profile or (SMOKE_PROFILE if smoke else GPU_PROFILE))
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() and not smoke else "cpu"))
    impl = "triton"  # on the CPU (smoke run) through the Triton interpreter
    save = save or (lambda p: None)
    W = P["width"]
    scene = make_scene(P["n_gaussians"], P["n_parts"], P["n_frames"])
    views, K = cameras(P["n_cameras"], W)
    psi = significance(scene["opacities"], scene["scales"], P["lambda_psi"], "sum")
    L = P["L"]
    layer = split_layers(psi, L).numpy()
    t_enc = time.perf_counter()
    stream = encode_scene(scene, layer, L, P["q_inter"])
    payload = {"smoke": smoke, "profile": P, "scene": {"n_gaussians": P["n_gaussians"], "width": W, "height": W,
               "n_cameras": P["n_cameras"], "n_frames": P["n_frames"]},
               "encode_s": round(time.perf_counter() - t_enc, 2),
               "bytes_per_layer": {"keyframe": layer_bytes(stream, 0),
                                   "inter_mean": [float(np.mean([layer_bytes(stream, t)[l] for t in range(1, P["n_frames"])]))
                                                  if P["n_frames"] > 1 else 0.0 for l in range(L)]},
               "codec": "zlib level 9 on uint16/uint8 symbols (keyframe) and int8 deltas (inter)",
               "h264": "available" if h264_encoder() else "not available: no ffmpeg with libx264 on this machine"}
    log(f"[encode] {payload['encode_s']} s; keyframe bytes per layer {payload['bytes_per_layer']['keyframe']}")
    save(payload)

    dec = Decoder(stream, dev)
    view, Kd = views[0].to(dev), K.to(dev)
    t_last = P["n_frames"] - 1
    # ground truth: the unquantised scene, all Gaussians, frame t_last, camera 0
    order = torch.from_numpy(stream["order"])
    gt_g = {"means": scene["means"][t_last][order].to(dev), "quats": scene["quats"][t_last][order].to(dev),
            "scales": scene["scales"][order].to(dev), "opacities": scene["opacities"][order].to(dev),
            "colors": scene["colors"][order].to(dev)}
    gt = rasterize(*project(gt_g, view, Kd), W, W, impl="reference")

    # 1. rasterisers at l = L: the strongest peer first
    g = dec.decode(t_last, L)
    args = project(g, view, Kd)
    ras = {}
    try:
        import gsplat

        def run_gsplat():
            return gsplat.rasterization(g["means"], g["quats"], g["scales"], g["opacities"], g["colors"], view[None],
                                        Kd[None], W, W)[0]

        ras["gsplat"] = "installed"
        ras["gsplat_ms"] = round(time_ms(run_gsplat, dev, warmup=5, rep=20), 3)
        ras["gsplat_mean_abs_diff_vs_reference"] = float((run_gsplat()[0] - rasterize(*args, W, W, impl="reference")).abs().mean())
    except ImportError:
        ras["gsplat"] = "not installed on this machine"
    except Exception as exc:  # noqa: BLE001 - recorded, the rest goes on
        ras["gsplat"] = f"failed: {type(exc).__name__}: {str(exc)[:200]}"
    ras["peer"] = "PyTorch per-tile splatter (kernels/gaussian_splat/reference.py)"
    ras["peer_ms"] = round(time_ms(lambda: rasterize(*args, W, W, impl="reference"), dev, warmup=5, rep=20), 3)
    log(f"[raster] peer {ras['peer_ms']} ms")
    save({**payload, "rasterizer": ras})
    ras["triton_ms"] = round(time_ms(lambda: rasterize(*args, W, W, impl=impl), dev, warmup=5, rep=20), 3)
    a = rasterize(*args, W, W, impl=impl)
    b = rasterize(*args, W, W, impl="reference")
    ras["mean_abs_diff"] = float((a - b).abs().mean())
    ras["max_abs_diff"] = float((a - b).abs().max())
    ras["n_projected"] = int(args[0].shape[0])
    log(f"[raster] triton {ras['triton_ms']} ms, mean |diff| {ras['mean_abs_diff']:.2e}")
    payload["rasterizer"] = ras
    save(payload)

    # 2. decode + render per layer count
    per = []
    for l in range(1, L + 1):
        if left() < 10:
            per.append({"l": l, "skipped": "time budget"})
            continue
        key_ms = time_ms(lambda: dec._key(l), dev, warmup=3, rep=10)
        prev = dec.decode(max(t_last - 1, 0), l)
        prev = {**prev, "opacities": prev["opacities"][:, None]}
        decode_ms = time_ms(lambda: dec.step(prev, t_last, l), dev, warmup=3, rep=10) if t_last else key_ms
        g = dec.decode(t_last, l)
        args = project(g, view, Kd)
        render_ms = time_ms(lambda: rasterize(*project(g, view, Kd), W, W, impl=impl), dev, warmup=5, rep=20)
        img = rasterize(*args, W, W, impl=impl)
        bytes_l = sum(layer_bytes(stream, 0)[:l]) + (sum(layer_bytes(stream, t_last)[:l]) if t_last else 0)
        per.append({"l": l, "n_gaussians": int(sum(stream["counts"][:l])), "decode_ms": round(decode_ms, 3),
                    "keyframe_decode_ms": round(key_ms, 3),
                    "render_ms": round(render_ms, 3), "total_ms": round(decode_ms + render_ms, 3),
                    "psnr_vs_unquantised": round(_psnr(img, gt), 3),
                    "keyframe_mb": round(sum(layer_bytes(stream, 0)[:l]) / 1e6, 4),
                    "inter_mb": round(sum(payload["bytes_per_layer"]["inter_mean"][:l]) / 1e6, 4),
                    "bytes_key_plus_last": bytes_l})
        log(f"[layers {l}] decode {decode_ms:.2f} ms + render {render_ms:.2f} ms, PSNR {per[-1]['psnr_vs_unquantised']:.2f}")
        payload["per_layer"] = [p for p in per if "skipped" not in p]
        payload["per_layer_skipped"] = [p["l"] for p in per if "skipped" in p]
        save(payload)
    payload["decode_note"] = ("decode_ms = one inter-frame (frame t_last on top of the decoded frame t_last - 1): zlib "
                              "inflate of the layers' chunks on the CPU + host-to-device copy + delta addition; "
                              "keyframe_decode_ms = inflate + copy + dequantise of the keyframe; render_ms = EWA "
                              "projection + tile binning + Triton rasterisation of one 512² view")
    payload["total_seconds"] = round(time.perf_counter() - t0, 1)
    save(payload)
    return payload

"""The one-GPU (H200) study of paper 05 (4DGCPro): progressive decode + render of a 3-D Gaussian scene.

Run by ``benchmarks/gaussian_video_decode.py``; results in ``benchmarks/results/gaussian_video_decode.json``
(read by :func:`recorded`). No plotly here.

1. **Scene**: ``n_gaussians`` 3-D Gaussians in articulated parts (each part moves rigidly, plus a small
   non-rigid wobble) over ``n_frames`` frames, seen by ``n_cameras`` cameras on a ring at ``width²``.
   Synthetic and not trained: the study is about decoding and rendering (training is
   :mod:`companion.gaussian_video.train3d`).
2. **Two bitstreams** of the same Ψ = α + λ_Ψ·V layering into L layers, both with positions quantised to
   16 bits and the other attributes to 8 bits (per-attribute min/max), bytes per layer exact. Gaussians are
   sorted by layer and, within a layer, along a Morton curve of their frame-0 positions (:func:`layer_order`;
   the paper does not say how it orders Gaussians inside a level; this makes neighbouring pixels of a plane
   hold nearby Gaussians, which an image codec needs):

   * **H.264, the paper's codec** (:func:`encode_scene_h264`): per layer one video, each attribute channel
     one 8-bit plane (a position as two planes, high and low byte; 17 planes), frame t = the attributes at
     time t, coded by x264 through PyAV with the paper's settings (I/P only, 3 references, yuv444p, preset
     medium, qp ``h264_qp``; :func:`~companion.gaussian_video.bitstream.encode_h264`). The x264 P frames
     carry the motion; the header is the per-attribute (min, span) as float32 and the layer counts. Also
     coded at qp 0 (lossless), whose bytes, decode time and PSNR at l = L are recorded beside: a position's
     high-byte plane makes coding errors expensive (one level of it is 1/256 of the scene's extent).
   * **zlib, for comparison** (:func:`encode_scene`): a keyframe of the quantised symbols, then closed-loop
     int8 deltas of positions and quaternions at step ``q_inter``, each (layer, attribute) chunk zlib level 9
     (the package's rANS coder of the CPU study is pure Python and far too slow for 100k Gaussians).
3. **Decode + dequantise + render per frame for l = 1..L**, frame t_last, camera 0:

   * H.264: FFmpeg's software decoder (through PyAV, on the host CPU; the paper decodes in hardware)
     decodes the l layer videos, all frames, the layers in parallel threads; ``h264_decode_ms`` is that
     time divided by the number of frames (what playback costs per frame); ``h264_dequant_ms`` =
     host-to-device copy of frame t_last's planes + dequantisation;
   * zlib: ``decode_ms`` = inflate frame t_last's chunks of layers ≤ l + copy + add the deltas to frame
     t_last − 1 (``keyframe_decode_ms`` for the keyframe);
   * ``render_ms``: EWA projection (:func:`project`) + 16 × 16 tile binning + the Triton rasteriser
     (``companion_kernels.gaussian_splat``) of one ``width²`` view; PSNR of c^l against the unquantised
     all-layer render of the same frame and view.

   Targets (issue): High (l = L) decode + render under 33 ms per frame; Low (l = 1) at most 0.5× High.
4. **Rasterisers** at l = L on the zlib-decoded scene, strongest peer first: gsplat
   (:func:`~companion.gaussian_video.gsplat_peer.load_gsplat`; a failure is recorded and the run goes on),
   timed end to end (``rasterization``) and ``rasterize_to_pixels`` alone on its own projection and tile
   lists; then ours on those same projected inputs and lists (``rasterize_binned``) and end to end
   (:func:`project` + binning + Triton); then the per-tile PyTorch splatter. Agreement Triton vs gsplat:
   mean and max absolute pixel difference, kernel on identical inputs and end to end (target: mean < 1e-3).

Conventions aligned with gsplat 1.5.3 (its defaults in ``rasterization``): 0.3 px blur added to Σ' (eps2d)
without opacity compensation ("classic"), near plane 0.01 (:data:`NEAR_PLANE`), the EWA Jacobian at t_x/t_z
clamped to 1.3× the half field of view, pixel centres at +½, α' = min(0.999, o·exp(−σ)), α' < 1/255
skipped, a pixel stopping before its transmittance would reach ≤ 1e-4, 16 × 16 tiles, black background.
Differences that remain: (a) gsplat caps a Gaussian's footprint at 3.33σ, ours bins every tile where
α' ≥ 1/255, which differs only for opacities above 0.997 (none here: opacities ≤ 0.99), and only end to end;
(b) gsplat skips a pixel where σ < 0 (a non-positive-definite conic) where ours clamps σ at 0 (the same for
valid Gaussians); (c) gsplat computes the projection fused in CUDA float32 with fast ``__expf``, ours in
PyTorch float32 ops (rounding); (d) a tile of ours reads its whole list even once every pixel is done
(speed only).
"""

from __future__ import annotations

import math
import struct
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from companion.core import recorded_results, time_ms
from companion.gaussian_video.bitstream import (
    H264Unavailable, _varint, attribute_frames, attribute_symbols, decode_h264, encode_h264)
from companion.gaussian_video.gsplat_peer import GsplatUnavailable, load_gsplat
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
    "q_inter": 1e-3,  # int8 deltas reach ±0.127 per frame: the parts move up to 0.114 per frame
    "h264_qp": 20,
}
NEAR_PLANE = 0.01  # gsplat's default: Gaussians nearer the camera than this are culled
TILE = 16
SMOKE_PROFILE = {**GPU_PROFILE, "n_gaussians": 400, "n_parts": 3, "n_frames": 2, "n_cameras": 2, "width": 48, "L": 3}
TRITON_MIN_SPEED = 0.5        # issue target: the Triton rasteriser at least half gsplat's throughput
GSPLAT_MAX_MEAN_ABS_DIFF = 1e-3  # issue target: the Triton rasteriser matches gsplat within this mean |Δ| per pixel


def recorded() -> dict | None:
    """The committed results of ``benchmarks/gaussian_video_decode.py`` (None when not recorded yet)."""
    return recorded_results(RESULTS_NAME)


def rasterizer_summary(sp: dict) -> dict | None:
    """The rasteriser comparison of a run (its ``"rasterizer"`` entry), for the notebook's Checks: these test
    this project's Triton kernel against gsplat (or the PyTorch splatter), not a claim of the paper.

    Returns None when the run timed no rasteriser, else ``{"peer", "speed", "mean_abs_diff", "text"}``:
    ``speed`` = peer ms / Triton ms on the same inputs (gsplat's projected inputs and tile lists when gsplat
    ran), ``mean_abs_diff`` = the mean |Δ| per pixel against gsplat on those inputs (None without gsplat)."""
    if sp.get("triton_on_gsplat_lists_ms"):
        speed = sp["gsplat_rasterize_to_pixels_ms"] / sp["triton_on_gsplat_lists_ms"]
        e2e = sp["gsplat_rasterization_ms"] / sp["triton_end_to_end_ms"]
        text = (f"on gsplat's projected inputs and tile lists: Triton {sp['triton_on_gsplat_lists_ms']:.2f} ms vs "
                f"{sp['gsplat']} rasterize_to_pixels {sp['gsplat_rasterize_to_pixels_ms']:.2f} ms: {speed:.2f}× "
                f"(issue target ≥ {TRITON_MIN_SPEED}×: {'met' if speed >= TRITON_MIN_SPEED else 'not met'}); end to "
                f"end {sp['triton_end_to_end_ms']:.2f} vs {sp['gsplat_rasterization_ms']:.2f} ms: {e2e:.2f}×; "
                f"mean |Δ| {sp['kernel_mean_abs_diff']:.2g} (max {sp['kernel_max_abs_diff']:.2g}; target < "
                f"{GSPLAT_MAX_MEAN_ABS_DIFF:g}), end to end mean {sp['end_to_end_mean_abs_diff']:.2g}")
        return {"peer": sp["gsplat"], "speed": speed, "mean_abs_diff": sp["kernel_mean_abs_diff"], "text": text}
    if not (sp.get("triton_ms") and sp.get("peer_ms")):
        return None
    peer, peer_ms = (("gsplat", sp["gsplat_ms"]) if sp.get("gsplat_ms") else (sp["peer"], sp["peer_ms"]))
    speed = peer_ms / sp["triton_ms"]
    text = (f"Triton {sp['triton_ms']:.2f} ms vs {peer} {peer_ms:.2f} ms: {speed:.2f}× (issue target ≥ "
            f"{TRITON_MIN_SPEED}× gsplat); gsplat: {sp.get('gsplat', 'not installed')}; max |Δ| vs the PyTorch "
            f"splatter {sp.get('max_abs_diff', float('nan')):.2g}")
    return {"peer": peer, "speed": speed, "mean_abs_diff": None, "text": text}


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


def layer_order(layer: np.ndarray, means: np.ndarray, bits: int = 10) -> np.ndarray:
    """The coding order: Gaussians sorted by layer, and within a layer along a Morton (Z-order) curve of
    their positions ``means`` ``[N, 3]`` (``bits`` per axis), so that neighbouring pixels of an attribute
    plane hold nearby Gaussians."""
    lo, hi = means.min(0), means.max(0)
    q = np.round((means - lo) / np.maximum(hi - lo, 1e-12) * ((1 << bits) - 1)).astype(np.int64)
    code = np.zeros(len(means), dtype=np.int64)
    for b in range(bits):
        for a in range(3):
            code |= ((q[:, a] >> b) & 1) << (3 * b + a)
    return np.lexsort((code, layer))


def encode_scene(scene: dict, layer: np.ndarray, L: int, q_inter: float) -> dict:
    """Chunks per frame, layer and attribute: zlib(level 9) of the quantised symbols (module docstring)."""
    order = layer_order(layer, scene["means"][0].numpy())
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


def encode_scene_h264(scene: dict, layer: np.ndarray, L: int, qp: int) -> dict:
    """The paper's codec (module docstring, 2): one x264 video per layer of 17 attribute planes over all
    frames. ``layers[l]`` is layer l+1's H.264 stream (its exact bytes); ``header`` the side information."""
    T = scene["means"].shape[0]
    order = layer_order(layer, scene["means"][0].numpy())
    counts = np.bincount(layer, minlength=L + 1)[1:]
    bounds = np.concatenate([[0], np.cumsum(counts)])
    planes, meta, header = [], {}, bytearray()
    for name, bits in _KEY.items():
        x = scene[name].numpy()
        x = x if name in ("means", "quats") else np.broadcast_to(x, (T, *x.shape))
        x = x[:, order].reshape(T, len(order), -1).astype(np.float64)
        s, lo, span = _q(x, bits)
        lo, span = np.float32(lo), np.float32(span)  # as sent in the header
        header += struct.pack("<ff", lo, span)
        meta[name] = (float(lo), float(span), bits, x.shape[2])
        planes += [(s >> 8).astype(np.uint8), (s & 0xFF).astype(np.uint8)] if bits > 8 else [s]
    header += b"".join(_varint(int(c)) for c in counts)
    sym = np.concatenate(planes, axis=2)  # [T, N, 17]
    layers = [encode_h264(attribute_frames(np.ascontiguousarray(sym[:, bounds[l]:bounds[l + 1]])), qp) for l in range(L)]
    return {"layers": layers, "header": bytes(header), "counts": counts.tolist(), "order": order, "meta": meta,
            "channels": sym.shape[2], "n_frames": T, "qp": qp}


class H264Decoder:
    """``symbols(l)``: the planes of layers ≤ l, all frames, ``[T, n, 17]`` uint8 (FFmpeg through PyAV);
    ``dequantise(sym)``: one frame's ``[n, 17]`` planes to the Gaussians on the device."""

    def __init__(self, stream: dict, device):
        self.s, self.dev = stream, device

    def _layer(self, k: int) -> np.ndarray:
        return attribute_symbols(decode_h264(self.s["layers"][k]), self.s["counts"][k], self.s["channels"])

    def symbols(self, l: int) -> np.ndarray:
        """The l layer videos are independent streams, decoded in parallel threads (FFmpeg runs without
        the GIL), as a player holding l layers would."""
        with ThreadPoolExecutor(max_workers=l) as pool:
            return np.concatenate(list(pool.map(self._layer, range(l))), axis=1)

    def dequantise(self, sym: np.ndarray) -> dict:
        x = torch.from_numpy(sym).to(self.dev).int()
        out, col = {}, 0
        for name, (lo, span, bits, ch) in self.s["meta"].items():
            if bits > 8:  # high byte plane, low byte plane
                v, col = x[:, col:col + ch] * 256 + x[:, col + ch:col + 2 * ch], col + 2 * ch
            else:
                v, col = x[:, col:col + ch], col + ch
            out[name] = lo + v.float() * (span / ((1 << bits) - 1))
        return {**out, "opacities": out["opacities"][:, 0]}


def project(g: dict, view: torch.Tensor, K: torch.Tensor, width: int):
    """EWA projection of decoded Gaussians for a ``width``² camera to (means2d, conics, opacities, colors,
    depths), gsplat's way (module docstring): 0.3 px blur, clamped Jacobian, culling depth < NEAR_PLANE."""
    cov = covariance_3d(g["quats"], g["scales"])
    m2, c2, depth = project_ewa(g["means"], cov, view, K, image_size=(width, width))
    keep = depth >= NEAR_PLANE
    return (m2[keep].contiguous(), to_conics(c2[keep]).contiguous(), g["opacities"][keep].contiguous(),
            g["colors"][keep].contiguous(), depth[keep].contiguous())


def _psnr(a, b):
    mse = float(((a.clamp(0, 1) - b.clamp(0, 1)) ** 2).mean())
    return 10 * math.log10(1 / max(mse, 1e-12))


def _diff(a, b, name: str) -> dict:
    d = (a - b).abs()
    return {f"{name}_mean_abs_diff": float(d.mean()), f"{name}_max_abs_diff": float(d.max())}


def versus_gsplat(gsplat, g: dict, view, K, width: int, impl: str = "triton") -> dict:
    """gsplat first, then ours, on one ``width``² view of the Gaussians ``g`` (module docstring, 4).

    gsplat: ``rasterization`` with its defaults end to end, and ``rasterize_to_pixels`` alone on the
    means2d, conics, opacities and tile lists of a ``packed=False`` call (its tensors indexed by Gaussian).
    Ours: ``rasterize_binned`` on exactly those inputs and lists (the kernel comparison), and
    :func:`project` + binning + Triton end to end."""
    from companion_kernels.gaussian_splat import rasterize, rasterize_binned

    dev = g["means"].device

    def gs_full(packed=True):
        return gsplat.rasterization(g["means"], g["quats"], g["scales"], g["opacities"], g["colors"], view[None],
                                    K[None], width, width, packed=packed)

    out = {"gsplat": f"gsplat {gsplat.__version__}", "gsplat_rasterization_ms": time_ms(gs_full, dev, warmup=5, rep=20)}
    img, _, meta = gs_full(packed=False)
    m2, con = meta["means2d"].contiguous(), meta["conics"].contiguous()  # [1, N, 2], [1, N, 3]
    op, col = meta["opacities"].contiguous(), g["colors"][None].contiguous()  # [1, N], [1, N, 3]
    tile_offsets, ids = meta["isect_offsets"], meta["flatten_ids"]  # [1, th, tw] int32, [M] int32

    def gs_raster():
        return gsplat.rasterize_to_pixels(m2, con, col, op, width, width, TILE, tile_offsets, ids)[0][0]

    out["gsplat_rasterize_to_pixels_ms"] = time_ms(gs_raster, dev, warmup=5, rep=20)
    offsets = torch.cat([tile_offsets.reshape(-1), tile_offsets.new_tensor([ids.numel()])])

    def ours():
        return rasterize_binned(m2[0], con[0], op[0], col[0], offsets, ids, width, width, impl=impl)

    out["triton_on_gsplat_lists_ms"] = time_ms(ours, dev, warmup=5, rep=20)
    out["triton_end_to_end_ms"] = time_ms(lambda: rasterize(*project(g, view, K, width), width, width, impl=impl),
                                          dev, warmup=5, rep=20)
    out.update(_diff(ours(), gs_raster(), "kernel"))
    out.update(_diff(rasterize(*project(g, view, K, width), width, width, impl=impl), img[0], "end_to_end"))
    out["gsplat_n_intersections"] = int(ids.numel())
    return {k: round(v, 4) if k.endswith("_ms") else v for k, v in out.items()}


def run_scale_up(*, smoke: bool = False, device=None, deadline_s: float | None = None, log=print, save=None,
                 profile: dict | None = None) -> dict:
    from companion_kernels.gaussian_splat import rasterize

    t0 = time.perf_counter()
    left = (lambda: deadline_s - (time.perf_counter() - t0)) if deadline_s else (lambda: math.inf)
    P = dict(profile or (SMOKE_PROFILE if smoke else GPU_PROFILE))
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() and not smoke else "cpu"))
    impl = "triton"  # on the CPU (smoke run) through the Triton interpreter
    save = save or (lambda p: None)
    W, T, L = P["width"], P["n_frames"], P["L"]
    scene = make_scene(P["n_gaussians"], P["n_parts"], T)
    views, K = cameras(P["n_cameras"], W)
    psi = significance(scene["opacities"], scene["scales"], P["lambda_psi"], "sum")
    layer = split_layers(psi, L).numpy()
    t_enc = time.perf_counter()
    stream = encode_scene(scene, layer, L, P["q_inter"])
    payload = {"smoke": smoke, "profile": P, "scene": {"n_gaussians": P["n_gaussians"], "width": W, "height": W,
               "n_cameras": P["n_cameras"], "n_frames": T},
               "encode_s": round(time.perf_counter() - t_enc, 2),
               "bytes_per_layer": {"keyframe": layer_bytes(stream, 0),
                                   "inter_mean": [float(np.mean([layer_bytes(stream, t)[l] for t in range(1, T)]))
                                                  if T > 1 else 0.0 for l in range(L)]},
               "codec": "zlib level 9 on uint16/uint8 symbols (keyframe) and int8 deltas (inter)"}
    log(f"[zlib] {payload['encode_s']} s; keyframe bytes per layer {payload['bytes_per_layer']['keyframe']}")
    try:
        t_enc = time.perf_counter()
        h264 = encode_scene_h264(scene, layer, L, P["h264_qp"])
        import av

        payload["h264"] = {"codec": f"libx264 through PyAV {av.__version__}: yuv444p planes, I/P only, 3 refs, preset "
                                    f"medium, qp {P['h264_qp']}", "encode_s": round(time.perf_counter() - t_enc, 2),
                           "bytes_per_layer": [len(b) for b in h264["layers"]], "header_bytes": len(h264["header"]),
                           "n_frames": T}
        lossless = encode_scene_h264(scene, layer, L, 0)  # qp 0: what the planes cost without coding error
        payload["h264"]["lossless_qp0"] = {"bytes_per_layer": [len(b) for b in lossless["layers"]]}
        log(f"[h264] {payload['h264']['encode_s']} s; bytes per layer {payload['h264']['bytes_per_layer']}")
    except H264Unavailable as exc:
        h264, payload["h264"] = None, f"not available: {exc}"
    save(payload)

    dec = Decoder(stream, dev)
    view, Kd = views[0].to(dev), K.to(dev)
    t_last = T - 1
    # ground truth: the unquantised scene, all Gaussians, frame t_last, camera 0
    order = torch.from_numpy(stream["order"])
    gt_g = {"means": scene["means"][t_last][order].to(dev), "quats": scene["quats"][t_last][order].to(dev),
            "scales": scene["scales"][order].to(dev), "opacities": scene["opacities"][order].to(dev),
            "colors": scene["colors"][order].to(dev)}
    gt = rasterize(*project(gt_g, view, Kd, W), W, W, impl="reference")

    def render(gg):
        return rasterize(*project(gg, view, Kd, W), W, W, impl=impl)

    # 1. rasterisers at l = L: the strongest peer first
    g = dec.decode(t_last, L)
    args = project(g, view, Kd, W)
    try:
        ras = versus_gsplat(load_gsplat(), g, view, Kd, W, impl)
        log(f"[raster] gsplat {ras['gsplat_rasterize_to_pixels_ms']} ms vs Triton {ras['triton_on_gsplat_lists_ms']} ms "
            f"on the same lists; mean |diff| {ras['kernel_mean_abs_diff']:.2e}, "
            f"end to end {ras['end_to_end_mean_abs_diff']:.2e}")
    except GsplatUnavailable as exc:
        ras = {"gsplat": f"unavailable: {exc}"}
    except Exception as exc:  # noqa: BLE001 - recorded, the rest goes on
        ras = {"gsplat": f"failed: {type(exc).__name__}: {str(exc)[:300]}"}
    log(f"[raster] gsplat: {ras['gsplat']}")
    ras["peer"] = "PyTorch per-tile splatter (companion_kernels/gaussian_splat/reference.py)"
    ras["peer_ms"] = round(time_ms(lambda: rasterize(*args, W, W, impl="reference"), dev, warmup=5, rep=20), 3)
    save({**payload, "rasterizer": ras})
    ras["triton_ms"] = round(time_ms(lambda: rasterize(*args, W, W, impl=impl), dev, warmup=5, rep=20), 3)
    a = rasterize(*args, W, W, impl=impl)
    b = rasterize(*args, W, W, impl="reference")
    ras["mean_abs_diff"] = float((a - b).abs().mean())
    ras["max_abs_diff"] = float((a - b).abs().max())
    ras["n_projected"] = int(args[0].shape[0])
    log(f"[raster] PyTorch {ras['peer_ms']} ms, Triton {ras['triton_ms']} ms (binning + kernel), mean |diff| "
        f"{ras['mean_abs_diff']:.2e}")
    payload["rasterizer"] = ras
    save(payload)

    # 2. decode + dequantise + render per layer count
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
        render_ms = time_ms(lambda: render(g), dev, warmup=5, rep=20)
        img = render(g)
        bytes_l = sum(layer_bytes(stream, 0)[:l]) + (sum(layer_bytes(stream, t_last)[:l]) if t_last else 0)
        row = {"l": l, "n_gaussians": int(sum(stream["counts"][:l])), "decode_ms": round(decode_ms, 3),
               "keyframe_decode_ms": round(key_ms, 3),
               "render_ms": round(render_ms, 3), "total_ms": round(decode_ms + render_ms, 3),
               "psnr_vs_unquantised": round(_psnr(img, gt), 3),
               "keyframe_mb": round(sum(layer_bytes(stream, 0)[:l]) / 1e6, 4),
               "inter_mb": round(sum(payload["bytes_per_layer"]["inter_mean"][:l]) / 1e6, 4),
               "bytes_key_plus_last": bytes_l}
        if h264 is not None:
            hd = H264Decoder(h264, dev)
            h_dec = time_ms(lambda: hd.symbols(l), "cpu", cpu_warmup=1, cpu_reps=3) / T
            sym = hd.symbols(l)[t_last]
            h_deq = time_ms(lambda: hd.dequantise(sym), dev, warmup=3, rep=10)
            gh = hd.dequantise(sym)
            h_ren = time_ms(lambda: render(gh), dev, warmup=5, rep=20)
            h_bytes = len(h264["header"]) + sum(len(b) for b in h264["layers"][:l])
            row.update({"h264_decode_ms": round(h_dec, 3), "h264_dequant_ms": round(h_deq, 3),
                        "h264_render_ms": round(h_ren, 3), "h264_total_ms": round(h_dec + h_deq + h_ren, 3),
                        "h264_psnr_vs_unquantised": round(_psnr(render(gh), gt), 3),
                        "h264_mb_per_frame": round(h_bytes / T / 1e6, 4)})
        per.append(row)
        log(f"[layers {l}] zlib decode {decode_ms:.2f} ms + render {render_ms:.2f} ms, PSNR {row['psnr_vs_unquantised']:.2f}"
            + (f"; H.264 decode {row['h264_decode_ms']:.2f} + dequantise {row['h264_dequant_ms']:.2f} + render "
               f"{row['h264_render_ms']:.2f} ms, PSNR {row['h264_psnr_vs_unquantised']:.2f}" if h264 is not None else ""))
        payload["per_layer"] = [p for p in per if "skipped" not in p]
        payload["per_layer_skipped"] = [p["l"] for p in per if "skipped" in p]
        save(payload)
    if h264 is not None and left() > 10:
        hd = H264Decoder(lossless, dev)
        payload["h264"]["lossless_qp0"].update({
            "decode_ms_all_layers": round(time_ms(lambda: hd.symbols(L), "cpu", cpu_warmup=1, cpu_reps=3) / T, 3),
            "psnr_vs_unquantised_all_layers": round(_psnr(render(hd.dequantise(hd.symbols(L)[t_last])), gt), 3)})
        log(f"[h264 qp 0] {payload['h264']['lossless_qp0']}")
    payload["decode_note"] = ("h264_decode_ms = FFmpeg (PyAV) decoding of the l layer videos (one thread per layer), "
                              "all frames, on the CPU, divided by the frame count; h264_dequant_ms = host-to-device "
                              "copy + dequantisation of "
                              "frame t_last; decode_ms (zlib) = one inter-frame (frame t_last on top of the decoded "
                              "frame t_last - 1): inflate of the layers' chunks on the CPU + host-to-device copy + delta "
                              "addition; keyframe_decode_ms = inflate + copy + dequantise of the keyframe; render_ms = "
                              "EWA projection + tile binning + Triton rasterisation of one view")
    payload["total_seconds"] = round(time.perf_counter() - t0, 1)
    save(payload)
    return payload

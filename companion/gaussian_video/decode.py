"""Paper 05's GPU decode study (4DGCPro): progressive decode + render of a synthetic 3-D Gaussian scene, and the
stage bodies of :mod:`companion.gaussian_video.scale`.

**Scene**: :func:`~companion.gaussian_video.scene3d.make_scene` (``n_gaussians`` Gaussians in articulated parts
over ``n_frames`` frames), seen by camera 0 of :func:`~companion.gaussian_video.scene3d.cameras` at ``width²``.
Synthetic and not trained: the study is about decoding and rendering (training is
:mod:`companion.gaussian_video.train3d`).

**Two bitstreams** of the same Ψ = α + λ_Ψ·V layering into L layers (Eq. significance), both with positions
quantised to 16 bits and the other attributes to 8 bits (per-attribute min/max), bytes per layer exact. Gaussians are
sorted by layer and, within a layer, along a Morton curve of their frame-0 positions (:func:`layer_order`; the
paper does not say how it orders Gaussians inside a level; this makes neighbouring pixels of a plane hold
nearby Gaussians, which an image codec needs):

* **H.264, the paper's codec** (:func:`encode_scene_h264`): per layer one video, each attribute channel one
  8-bit plane (a position as two planes, high and low byte; 17 planes), frame t = the attributes at time t,
  coded by x264 through PyAV with the paper's settings (I/P only, 3 references, yuv444p, preset medium, qp
  ``h264_qp``; :func:`~companion.gaussian_video.bitstream.encode_h264`). The x264 P frames carry the motion;
  the header is the per-attribute (min, span) as float32 and the layer counts. Also coded at qp 0 (lossless),
  whose bytes, decode time and PSNR at l = L are recorded beside: a position's high-byte plane makes coding
  errors expensive (one level of it is 1/256 of the scene's extent).
* **zlib, for comparison** (:func:`encode_scene`): a keyframe of the quantised symbols, then closed-loop int8
  deltas of positions and quaternions at step ``q_inter``, each (layer, attribute) chunk zlib level 9 (chosen
  when the package's entropy coder was a pure-Python rANS, far too slow for 100k Gaussians; the committed
  results are zlib's, and :mod:`.bitstream` now codes with constriction's ANS).

**Decode + dequantise + render per frame for l = 1..L**, frame t_last, camera 0 (:func:`per_layer_stage`):

* H.264: FFmpeg's software decoder (through PyAV, on the host CPU; the paper decodes in hardware) decodes the
  l layer videos, all frames, the layers in parallel threads; ``h264_decode_ms`` is that time divided by the
  number of frames (what playback costs per frame); ``h264_dequant_ms`` = host-to-device copy of frame
  t_last's planes + dequantisation;
* zlib: ``decode_ms`` = inflate frame t_last's chunks of layers ≤ l + copy + add the deltas to frame
  t_last − 1 (``keyframe_decode_ms``: inflate + copy + dequantise of the keyframe);
* ``render_ms``: EWA projection + 16 × 16 tile binning (one call, Triton) + the Triton rasteriser
  (``companion_kernels.gaussian_splat``) of one ``width²`` view; PSNR of c^l against the unquantised all-layer
  render of the same frame and view.

**Rasterisers** at l = L on the zlib-decoded scene, strongest peer first: gsplat (:func:`versus_gsplat`),
timed end to end (``rasterization``) and ``rasterize_to_pixels`` alone on its own projection and tile lists,
then ours on those same projected inputs and lists (``rasterize_binned``) and end to end (:func:`render_view`:
projection + binning, then the rasteriser, each part also timed alone); the same pairs forward + backward, with the kernels' gradients compared; then the per-tile
PyTorch splatter against ours (:func:`rasterizer_stage`).

Conventions aligned with gsplat 1.5.3 (its defaults in ``rasterization``): 0.3 px blur added to Σ' (eps2d)
without opacity compensation ("classic"), near plane 0.01 (:data:`NEAR_PLANE`), the EWA Jacobian at t_x/t_z
clamped to 1.3× the half field of view, pixel centres at +½, α' = min(0.999, o·exp(−σ)), α' < 1/255
skipped, a pixel stopping before its transmittance would reach ≤ 1e-4, 16 × 16 tiles, black background.
Differences that remain: (a) gsplat caps a Gaussian's footprint at 3.33σ, ours bins every tile where
α' ≥ 1/255, which differs only for opacities above 0.997 (none here: opacities ≤ 0.99), and only end to end;
(b) gsplat skips a pixel where σ < 0 (a non-positive-definite conic) where ours clamps σ at 0 (the same for
valid Gaussians); (c) gsplat computes the projection in CUDA float32 with fast ``__expf``, ours in a Triton
float32 kernel (``companion_kernels.gaussian_splat.project``; rounding differs).
"""

from __future__ import annotations

import math
import struct
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from companion.core import time_ms
from companion.core.stages import StageContext, stage_states
from companion.gaussian_video.bitstream import _varint, attribute_frames, attribute_symbols, decode_h264, encode_h264
from companion.gaussian_video.gsplat_peer import load_gsplat
from companion.gaussian_video.scene3d import cameras, make_scene
from companion.gaussian_video.significance import significance, split_layers
from companion_kernels.gaussian_splat import NEAR_PLANE, project_and_bin, project_gaussians, rasterize_binned
TILE = 16

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
    depths) of the Gaussians kept, gsplat's way (module docstring): 0.3 px blur, clamped Jacobian, culling
    depth < NEAR_PLANE (and a non-invertible Σ'); ``companion_kernels.gaussian_splat.project`` (Triton on CUDA)."""
    m2, con, depth, keep = project_gaussians(g["means"], g["quats"], g["scales"], view, K, width, width,
                                             near_plane=NEAR_PLANE)
    return (m2[keep].contiguous(), con[keep].contiguous(), g["opacities"][keep].contiguous(),
            g["colors"][keep].contiguous(), depth[keep].contiguous())


def render_view(g: dict, view: torch.Tensor, K: torch.Tensor, width: int, impl: str = "triton") -> torch.Tensor:
    """One ``width``² render of the Gaussians ``g``: projection and tile binning in one call, then the tile
    rasteriser (``companion_kernels.gaussian_splat``; ``impl`` "triton": the kernels, "reference": PyTorch)."""
    m2, con, _, offsets, ids = project_and_bin(g["means"], g["quats"], g["scales"], g["opacities"], view, K, width,
                                               width, near_plane=NEAR_PLANE, impl=impl)
    return rasterize_binned(m2, con, g["opacities"], g["colors"], offsets, ids, width, width, impl=impl)


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
    :func:`render_view` end to end, with its two parts timed alone (projection + binning, rasteriser). Then
    forward + backward, the kernels and end to end (:func:`_versus_gsplat_backward`)."""
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
    out["triton_end_to_end_ms"] = time_ms(lambda: render_view(g, view, K, width, impl), dev, warmup=5, rep=20)

    def project_bin():
        return project_and_bin(g["means"], g["quats"], g["scales"], g["opacities"], view, K, width, width,
                               near_plane=NEAR_PLANE, impl=impl)

    out["triton_project_and_bin_ms"] = time_ms(project_bin, dev, warmup=5, rep=20)
    own = project_bin()
    out["triton_on_own_lists_ms"] = time_ms(
        lambda: rasterize_binned(own[0], own[1], g["opacities"], g["colors"], own[3], own[4], width, width, impl=impl),
        dev, warmup=5, rep=20)
    out["own_n_intersections"] = int(own[4].numel())
    out.update(_diff(ours(), gs_raster(), "kernel"))
    out.update(_diff(render_view(g, view, K, width, impl), img[0], "end_to_end"))
    out["gsplat_n_intersections"] = int(ids.numel())
    out.update(_versus_gsplat_backward(gsplat, g, view, K, width, (m2, con, col, op), (tile_offsets, offsets, ids), impl))
    return {k: round(v, 4) if k.endswith("_ms") else v for k, v in out.items()}


def _versus_gsplat_backward(gsplat, g: dict, view, K, width: int, inputs, lists, impl: str) -> dict:
    """Forward + backward of a fixed random weighting of the image (the loss Σ w·c), gsplat first: the kernels
    alone on gsplat's projected inputs and tile lists (gradients of means2d, conics, colours, opacities), and end
    to end from the 3-D Gaussians (gsplat's ``rasterization`` against the ``"tiles"`` renderer of
    :mod:`.train3d`: PyTorch EWA projection with autograd, binning, our kernels); the relative max |Δ| of each
    kernel gradient (max |ours − gsplat| / max |gsplat|)."""
    from companion.gaussian_video.train3d import render
    dev = g["means"].device
    tile_offsets, offsets, ids = lists
    weight = torch.rand(width, width, 3, generator=torch.Generator(device=dev).manual_seed(0), device=dev)
    leaves = {who: [t.detach().clone().requires_grad_(True) for t in inputs] for who in ("gsplat", "ours")}

    def gs_kernel(m2, con, col, op):
        return gsplat.rasterize_to_pixels(m2, con, col, op, width, width, TILE, tile_offsets, ids)[0][0]

    def our_kernel(m2, con, col, op):
        return rasterize_binned(m2[0], con[0], op[0], col[0], offsets, ids, width, width, impl=impl)

    def kernel_step(who, fn):
        return lambda: (fn(*leaves[who]) * weight).sum().backward()

    out = {"gsplat_rasterize_to_pixels_fwd_bwd_ms": time_ms(kernel_step("gsplat", gs_kernel), dev, warmup=5, rep=20,
                                                            grad_to_none=leaves["gsplat"]),
           "triton_fwd_bwd_on_gsplat_lists_ms": time_ms(kernel_step("ours", our_kernel), dev, warmup=5, rep=20,
                                                        grad_to_none=leaves["ours"])}
    for who, fn in (("gsplat", gs_kernel), ("ours", our_kernel)):
        for t in leaves[who]:
            t.grad = None
        kernel_step(who, fn)()
    for name, a, b in zip(("means2d", "conics", "colors", "opacities"), leaves["ours"], leaves["gsplat"]):
        out[f"grad_{name}_rel_max_abs_diff"] = float((a.grad - b.grad).abs().max() / b.grad.abs().max().clamp(min=1e-30))
    params = [g[k].detach().clone().requires_grad_(True) for k in ("means", "quats", "scales", "opacities", "colors")]

    def gs_end_to_end():
        (gsplat.rasterization(*params, view[None], K[None], width, width)[0][0] * weight).sum().backward()

    def tiles_end_to_end():
        (render(*params, view[None], K, width, width, backend="tiles")[0] * weight).sum().backward()

    out["gsplat_rasterization_fwd_bwd_ms"] = time_ms(gs_end_to_end, dev, warmup=5, rep=20, grad_to_none=params)
    out["tiles_end_to_end_fwd_bwd_ms"] = time_ms(tiles_end_to_end, dev, warmup=5, rep=20, grad_to_none=params)
    return out



# --- the stages (companion.gaussian_video.scale.STAGES) ----------------------------------------------

def _ms(fn, device, warmup: int = 5, rep: int = 20) -> float:
    """Median ms of ``fn`` on the study's device (``do_bench`` on the GPU); on the CPU one call, as the smoke
    run's times only show that the path runs."""
    return time_ms(fn, device, warmup=warmup, rep=rep, cpu_warmup=0, cpu_reps=1)


def _render(s: dict, g: dict, impl: str = "triton") -> torch.Tensor:
    return render_view(g, s["view"], s["K"], s["width"], impl)


def setup(ctx: StageContext) -> dict:
    """The scene of ``ctx.profile`` (seed ``ctx.seed``), its Ψ layer per Gaussian, camera 0 and the reference
    render of the unquantised scene at frame t_last (the PSNR target), built once per call (``ctx.shared``)."""
    if "setup" not in ctx.shared:
        P, dev = ctx.profile, torch.device(ctx.device)
        scene = make_scene(P["n_gaussians"], P["n_parts"], P["n_frames"], seed=ctx.seed)
        layer = split_layers(significance(scene["opacities"], scene["scales"], P["lambda_psi"], "sum"), P["L"]).numpy()
        views, K = cameras(P["n_cameras"], P["width"])
        t = P["n_frames"] - 1
        order = torch.from_numpy(layer_order(layer, scene["means"][0].numpy()))
        truth = {"means": scene["means"][t], "quats": scene["quats"][t],
                 **{k: scene[k] for k in ("scales", "opacities", "colors")}}
        s = {"scene": scene, "layer": layer, "view": views[0].to(dev), "K": K.to(dev), "width": P["width"]}
        s["truth"] = _render(s, {k: v[order].to(dev) for k, v in truth.items()}, impl="reference")
        ctx.shared["setup"] = s
    return ctx.shared["setup"]


def _zlib(ctx: StageContext) -> dict:
    if "zlib" not in ctx.shared:
        s = setup(ctx)
        ctx.shared["zlib"] = encode_scene(s["scene"], s["layer"], ctx.profile["L"], ctx.profile["q_inter"])
    return ctx.shared["zlib"]


def _h264(ctx: StageContext) -> dict:
    if "h264" not in ctx.shared:
        s = setup(ctx)
        ctx.shared["h264"] = encode_scene_h264(s["scene"], s["layer"], ctx.profile["L"], ctx.profile["h264_qp"])
    return ctx.shared["h264"]


def _decoded(ctx: StageContext) -> dict:
    """All L layers of frame t_last, decoded from the zlib stream on the device."""
    if "decoded" not in ctx.shared:
        P = ctx.profile
        ctx.shared["decoded"] = Decoder(_zlib(ctx), torch.device(ctx.device)).decode(P["n_frames"] - 1, P["L"])
    return ctx.shared["decoded"]


def inter_mean_bytes(stream: dict) -> list[float]:
    """Mean bytes per layer of the zlib stream's inter-frames (0 for each layer of a one-frame stream)."""
    T, L = len(stream["frames"]), stream["L"]
    return [float(np.mean([layer_bytes(stream, t)[l] for t in range(1, T)])) if T > 1 else 0.0 for l in range(L)]


def zlib_stage(ctx: StageContext) -> dict:
    """The zlib bitstream: encode seconds, bytes per layer of the keyframe and of the mean inter-frame."""
    setup(ctx)
    t0 = time.perf_counter()
    stream = _zlib(ctx)
    return {"codec": "zlib level 9 on uint16/uint8 symbols (keyframe) and int8 deltas (inter)",
            "encode_s": round(time.perf_counter() - t0, 2),
            "bytes_per_layer": {"keyframe": layer_bytes(stream, 0), "inter_mean": inter_mean_bytes(stream)}}


def h264_stage(ctx: StageContext) -> dict:
    """The paper's codec: one x264 video per layer at qp ``h264_qp`` (encode seconds, exact bytes per layer, the
    header), and at qp 0 (lossless): its bytes, FFmpeg decode of all layers per frame (host CPU) and PSNR at
    l = L against the unquantised render. Raises ``H264Unavailable`` where PyAV has no libx264 (the
    ``per_layer`` stage then times the zlib path alone)."""
    import av

    P, s = ctx.profile, setup(ctx)
    L, T = P["L"], P["n_frames"]
    t0 = time.perf_counter()
    h264 = _h264(ctx)
    encode_s = time.perf_counter() - t0
    ctx.log(f"[h264] {encode_s:.2f} s; bytes per layer {[len(b) for b in h264['layers']]}")
    lossless = H264Decoder(encode_scene_h264(s["scene"], s["layer"], L, 0), torch.device(ctx.device))
    decode_ms = time_ms(lambda: lossless.symbols(L), "cpu", cpu_warmup=1, cpu_reps=3) / T
    psnr = _psnr(_render(s, lossless.dequantise(lossless.symbols(L)[T - 1])), s["truth"])
    return {"codec": f"libx264 through PyAV {av.__version__}: yuv444p planes, I/P only, 3 refs, preset medium, "
                     f"qp {P['h264_qp']}",
            "encode_s": round(encode_s, 2), "bytes_per_layer": [len(b) for b in h264["layers"]],
            "header_bytes": len(h264["header"]), "n_frames": T,
            "lossless_qp0": {"bytes_per_layer": [len(b) for b in lossless.s["layers"]],
                             "decode_ms_all_layers": round(decode_ms, 3), "psnr_vs_unquantised_all_layers": round(psnr, 3)}}


def gsplat_stage(ctx: StageContext) -> dict:
    """gsplat, the strongest peer, timed first against our rasteriser at l = L on the zlib-decoded frame t_last
    (:func:`versus_gsplat`). Raises ``GsplatUnavailable`` where gsplat cannot load; with the profile's
    ``gsplat`` false (a CPU run: gsplat has no CPU path) it records that it was off."""
    if not ctx.profile["gsplat"]:
        return {"gsplat": "off in this profile (gsplat needs CUDA)"}
    s = setup(ctx)
    out = versus_gsplat(load_gsplat(), _decoded(ctx), s["view"], s["K"], s["width"])
    ctx.log(f"[gsplat] {out['gsplat_rasterize_to_pixels_ms']} ms vs Triton {out['triton_on_gsplat_lists_ms']} ms on "
            f"the same lists; mean |Δ| {out['kernel_mean_abs_diff']:.2e}, end to end {out['end_to_end_mean_abs_diff']:.2e}")
    return out


def rasterizer_stage(ctx: StageContext) -> dict:
    """The per-tile PyTorch splatter (timed first) against our Triton path (tile binning + kernel) on the same
    projected Gaussians at l = L: median ms of each, mean and max |Δ| per pixel."""
    from companion_kernels.gaussian_splat import rasterize

    s, dev = setup(ctx), torch.device(ctx.device)
    W = s["width"]
    args = project(_decoded(ctx), s["view"], s["K"], W)
    out = {"peer": "PyTorch per-tile splatter (companion_kernels/gaussian_splat/reference.py)",
           "peer_ms": round(_ms(lambda: rasterize(*args, W, W, impl="reference"), dev), 3),
           "triton_ms": round(_ms(lambda: rasterize(*args, W, W, impl="triton"), dev), 3)}
    d = (rasterize(*args, W, W, impl="triton") - rasterize(*args, W, W, impl="reference")).abs()
    out.update(mean_abs_diff=float(d.mean()), max_abs_diff=float(d.max()), n_projected=int(args[0].shape[0]))
    ctx.log(f"[rasterizer] PyTorch {out['peer_ms']} ms, Triton {out['triton_ms']} ms, mean |Δ| {out['mean_abs_diff']:.2e}")
    return out


#: launch variants of the tile rasteriser timed by :func:`raster_sweep_stage`, (schedule, list entries read at a
#: time, warps) forward and backward; the first of each is the default. The sequential schedule with 8 warps is
#: gsplat's layout (one pixel per thread)
FORWARD_VARIANTS = (("sequential", 16, 4), ("sequential", 16, 8), ("sequential", 32, 4), ("sequential", 16, 2),
                    ("chunk", 16, 4), ("chunk", 16, 8), ("chunk", 32, 8))
BACKWARD_VARIANTS = (("chunk", 32, 8), ("chunk", 16, 8), ("sequential", 8, 8), ("sequential", 4, 8),
                     ("sequential", 8, 4))


def raster_sweep_stage(ctx: StageContext) -> dict:
    """The tile rasteriser's launch variants on our own projection and tile lists of the l = L frame (the inputs
    of :func:`render_view`): per (schedule, ``block_g``, warps) of :data:`FORWARD_VARIANTS` the forward alone and
    the forward that also saves T_final and the used-entry count (what training runs), per variant of
    :data:`BACKWARD_VARIANTS` the backward kernel on a fixed random output gradient; median ms each, and each
    variant's max |Δ| against the default (the render; the gradients relative to their largest entry); the
    default forward with the tiles taken longest list first instead of row-major, the default backward the other
    way round, and the time to order them; the forward on gathered entries (:func:`_gathered_entries`); and the
    projection + binning in pieces (:func:`_project_and_bin_pieces`)."""
    from companion_kernels.gaussian_splat.triton import rasterize_backward_triton, rasterize_triton, tile_order

    s, g, dev = setup(ctx), _decoded(ctx), torch.device(ctx.device)
    W = s["width"]
    m2, con, depths, offsets, ids = project_and_bin(g["means"], g["quats"], g["scales"], g["opacities"], s["view"],
                                                    s["K"], W, W, near_plane=NEAR_PLANE, impl="triton")
    args = (m2, con, g["opacities"].contiguous(), g["colors"].contiguous(), offsets, ids)
    final_t = torch.empty(W, W, device=dev)
    n_used = torch.empty(W, W, dtype=torch.int32, device=dev)
    grad_out = torch.rand(W, W, 3, generator=torch.Generator(device=dev).manual_seed(0), device=dev)

    def forward(schedule, block_g, warps, save=False, order=None):
        kw = {"final_t": final_t, "n_used": n_used} if save else {}
        return rasterize_triton(*args, W, W, block_g=block_g, num_warps=warps, schedule=schedule, order=order, **kw)

    def backward(schedule, block_g, warps, order=None):
        return rasterize_backward_triton(*args, final_t, n_used, grad_out, W, W, block_g=block_g, num_warps=warps,
                                         order=order, schedule=schedule)

    image = forward(*FORWARD_VARIANTS[0])
    rows = {"forward": [], "backward": []}
    for variant in FORWARD_VARIANTS:
        rows["forward"].append({
            "schedule": variant[0], "block_g": variant[1], "num_warps": variant[2],
            "forward_ms": round(_ms(lambda: forward(*variant), dev), 4),
            "forward_saving_ms": round(_ms(lambda: forward(*variant, save=True), dev), 4),
            "max_abs_diff": float((forward(*variant) - image).abs().max())})
    forward(*FORWARD_VARIANTS[0], save=True)
    grads = backward(*BACKWARD_VARIANTS[0])
    for variant in BACKWARD_VARIANTS:
        rel = max(float((a - b).abs().max() / b.abs().max().clamp(min=1e-30))
                  for a, b in zip(backward(*variant), grads))
        rows["backward"].append({"schedule": variant[0], "block_g": variant[1], "num_warps": variant[2],
                                 "backward_ms": round(_ms(lambda: backward(*variant), dev), 4),
                                 "grad_rel_max_abs_diff": rel})
    heavy, row_major = tile_order(offsets), tile_order(offsets, heavy_first=False)
    rows["tile_order"] = {
        "forward_heavy_first_ms": round(_ms(lambda: forward(*FORWARD_VARIANTS[0], order=heavy), dev), 4),
        "backward_row_major_ms": round(_ms(lambda: backward(*BACKWARD_VARIANTS[0], order=row_major), dev), 4),
        "max_abs_diff": float((forward(*FORWARD_VARIANTS[0], order=heavy) - image).abs().max()),
        "tile_order_ms": round(_ms(lambda: tile_order(offsets), dev), 4)}
    out = {"n_intersections": int(ids.numel()), "width": W, **rows,
           "gathered_entries": _gathered_entries(args, image, W),
           "project_and_bin": _project_and_bin_pieces(g, s["view"], s["K"], W, depths, offsets, ids)}
    ctx.log(f"[raster_sweep] {out}")
    return out


def _gathered_entries(args, image, width: int) -> dict:
    """How much of the default forward is the lists' indirection: each list entry's attributes gathered into
    arrays in list order (``gather_ms``), then the same forward over them with identity ids
    (``forward_ms``, whose loads then walk memory in order); its max |Δ| against ``image`` (the same render)."""
    from companion_kernels.gaussian_splat.triton import rasterize_triton

    m2, con, op, col, offsets, ids = args
    dev, entry = m2.device, ids.long()

    def gather():
        return m2[entry], con[entry], op[entry], col[entry]

    identity = torch.arange(ids.numel(), dtype=torch.int32, device=dev)
    lists = (*gather(), offsets, identity)
    return {"gather_ms": round(_ms(gather, dev), 4),
            "forward_ms": round(_ms(lambda: rasterize_triton(*lists, width, width), dev), 4),
            "max_abs_diff": float((rasterize_triton(*lists, width, width) - image).abs().max())}


def _project_and_bin_pieces(g: dict, view, K, width: int, depths, offsets, ids) -> dict:
    """Where the Triton projection + binning's time goes (median ms): the whole call, the projection kernel
    alone (no binning), and the stable sort of the (tile, depth) keys with the gather of the ids, on keys built
    from the call's own lists (tile id in the high 32 bits, the depth's float bits below; positive depths keep
    their order as integers) in Gaussian order, as the emit kernel writes them. The rest (tile counts, their
    cumulative sum and its host sync, the emit and ranges kernels) is the whole less the two parts. ``profile``:
    the kernels of one whole call and their busy time (:func:`_busy_time`)."""
    from companion_kernels.gaussian_splat import project_gaussians

    dev = g["means"].device
    pos = (g["means"], g["quats"], g["scales"])

    def call():
        return project_and_bin(*pos, g["opacities"], view, K, width, width, near_plane=NEAR_PLANE, impl="triton")

    whole = _ms(call, dev)
    project = _ms(lambda: project_gaussians(*pos, view, K, width, width, near_plane=NEAR_PLANE, impl="triton"), dev)
    tiles = torch.repeat_interleave(torch.arange(offsets.numel() - 1, device=dev), offsets.diff().long())
    keys = (tiles << 32) | depths[ids.long()].view(torch.int32).long()
    by_gaussian = torch.sort(ids, stable=True).indices
    keys, gids = keys[by_gaussian].contiguous(), ids[by_gaussian].contiguous()

    def sort():
        k, order = torch.sort(keys, stable=True)
        return k, gids[order]

    sort_ms = _ms(sort, dev)
    return {"whole_ms": round(whole, 4), "project_ms": round(project, 4), "sort_and_gather_ms": round(sort_ms, 4),
            "rest_ms": round(whole - project - sort_ms, 4), "n_keys": int(ids.numel()),
            "profile": _busy_time(call, dev)}


def _busy_time(fn, device, reps: int = 20, top: int = 12) -> dict:
    """What one call of ``fn`` keeps the device busy with (``torch.profiler`` over ``reps`` calls after a
    warm-up): µs a call per kernel (the ``top`` longest; on the CPU, per op of its own time) and their sum.
    Against the call's do_bench time the difference is time the GPU waits on the host (launches, the host sync)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    fn()
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        for _ in range(reps):
            fn()
        if cuda:
            torch.cuda.synchronize()
    if cuda:  # kernels, memsets and copies; an op's row would count its kernels twice
        rows = [(e.key, e.self_device_time_total) for e in prof.key_averages() if e.device_type == DeviceType.CUDA]
    else:
        rows = [(e.key, e.self_cpu_time_total) for e in prof.key_averages()]
    rows = sorted(((k[:80], t / reps) for k, t in rows if t > 0), key=lambda r: -r[1])
    return {"busy_us": round(sum(us for _, us in rows), 1), "by_kernel_us": {k: round(us, 1) for k, us in rows[:top]}}


def per_layer_stage(ctx: StageContext) -> list[dict]:
    """One row per layer count l = 1..L (module docstring): the zlib path, and the H.264 path when the ``h264``
    stage is done. A layer count is not started once fewer seconds are left than the last one took: the rows
    done are kept, and readers compare their count with L."""
    P, s, dev = ctx.profile, setup(ctx), torch.device(ctx.device)
    T, L, t_last = P["n_frames"], P["L"], P["n_frames"] - 1
    stream = _zlib(ctx)
    dec, inter = Decoder(stream, dev), inter_mean_bytes(stream)
    h264 = _h264(ctx) if stage_states(ctx.results).get("h264") == "done" else None
    rows, took = [], 0.0
    for l in range(1, L + 1):
        if ctx.left() < took:
            ctx.log(f"[per_layer] stopped before l = {l}: {ctx.left():.0f} s left")
            break
        t0 = time.perf_counter()
        key_ms = _ms(lambda: dec._key(l), dev, warmup=3, rep=10)
        prev = dec.decode(max(t_last - 1, 0), l)
        prev = {**prev, "opacities": prev["opacities"][:, None]}
        decode_ms = _ms(lambda: dec.step(prev, t_last, l), dev, warmup=3, rep=10) if t_last else key_ms
        g = dec.decode(t_last, l)
        render_ms = _ms(lambda: _render(s, g), dev)
        key_bytes = sum(layer_bytes(stream, 0)[:l])
        row = {"l": l, "n_gaussians": int(sum(stream["counts"][:l])), "decode_ms": round(decode_ms, 3),
               "keyframe_decode_ms": round(key_ms, 3), "render_ms": round(render_ms, 3),
               "total_ms": round(decode_ms + render_ms, 3),
               "psnr_vs_unquantised": round(_psnr(_render(s, g), s["truth"]), 3),
               "keyframe_mb": round(key_bytes / 1e6, 4), "inter_mb": round(sum(inter[:l]) / 1e6, 4),
               "bytes_key_plus_last": key_bytes + (sum(layer_bytes(stream, t_last)[:l]) if t_last else 0)}
        if h264 is not None:
            hd = H264Decoder(h264, dev)
            h_dec = time_ms(lambda: hd.symbols(l), "cpu", cpu_warmup=1, cpu_reps=3) / T
            sym = hd.symbols(l)[t_last]
            h_deq = _ms(lambda: hd.dequantise(sym), dev, warmup=3, rep=10)
            gh = hd.dequantise(sym)
            h_ren = _ms(lambda: _render(s, gh), dev)
            h_bytes = len(h264["header"]) + sum(len(b) for b in h264["layers"][:l])
            row.update({"h264_decode_ms": round(h_dec, 3), "h264_dequant_ms": round(h_deq, 3),
                        "h264_render_ms": round(h_ren, 3), "h264_total_ms": round(h_dec + h_deq + h_ren, 3),
                        "h264_psnr_vs_unquantised": round(_psnr(_render(s, gh), s["truth"]), 3),
                        "h264_mb_per_frame": round(h_bytes / T / 1e6, 4)})
        rows.append(row)
        took = time.perf_counter() - t0
        ctx.log(f"[per_layer] l = {l}: zlib decode {decode_ms:.2f} + render {render_ms:.2f} ms, PSNR "
                f"{row['psnr_vs_unquantised']:.2f}" + (f"; H.264 {row['h264_total_ms']:.2f} ms, PSNR "
                                                     f"{row['h264_psnr_vs_unquantised']:.2f}" if h264 else ""))
    return rows

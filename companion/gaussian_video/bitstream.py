"""The bitstream (paper Sec. 3.4): quantised attributes, entropy-coded per (group, layer, channel).

The paper stores positions as uint16 and the other attributes as uint8, flattens each channel into an
image and codes the images with H.264 (x264, I/P frames only, 3 references, yuv444p, preset medium,
qp 20). At this scale we code the same quantised symbols with an entropy coder driven by the training's
rate models (Sec. 3.3: the KDE for keyframes, the Gaussian for residuals, R = −Σ log₂ P(x̃)): the ANS coder of
constriction 0.5.0 (``constriction.stream.stack.AnsCoder``, 32-bit words) under a
``constriction.stream.model.Categorical(freqs, perfect=False)`` per channel, built from the integer
frequencies below (:func:`categorical`), so encoder and decoder hand constriction the same numbers and get
the same 24-bit fixed-point model. A stream's size is −Σ log₂ P(s) under those frequencies (the coded
counterpart of the training's rate R) plus the rounding of P to 24 bits and at most 64 bits for the
coder's final state (:func:`ans_encode`); constriction's rounding is part of the format, hence the pinned
version:

* **keyframe** channel c: per-channel min/max (float32) and symbols s = round((x − min)/(max − min) ·
  (2^b − 1)), b = 16 for positions, 8 otherwise; the model is a ``Categorical`` from the FFT-KDE of the
  channel, sent as 32 coarse levels (one byte each) and expanded to 256 integer frequencies (the high
  byte of 16-bit positions; their low byte is sent raw, 8 bits);
* **inter-frame**: the motion grid (G × G × 3 values: Δx, Δy, Δθ, quantised with step q) in the header,
  then per layer the residuals Δ = x_t − x̂_{t−1} of log-scale, opacity and colour quantised with step q;
  each channel is coded with a ``QuantizedGaussian`` (:func:`gaussian_freqs`) whose mean and std (float16)
  and symbol range (int16) are in the frame header (a constant channel, lo = hi, costs no bits).

Layout of one frame: ``varint(len) header | varint(len) chunk_1 | … | varint(len) chunk_L``. Keyframe header:
``K``, L, the Gaussians per layer, then per channel min, max and the 32 KDE levels. Inter-frame header: ``P``,
G, the model (mean, std, lo, hi) of each grid and residual channel, then the grid as one ANS stream. Chunk l
holds layer l's symbols of every channel: the raw low bytes of the 16-bit channels (channel by channel), then
one ANS stream of the channels in order (the decoder knows every count from the header or the keyframe).
**Size accounting** (printed by the notebook): a frame's bytes are its header (model tables,
min/max, counts) plus its chunks; the bytes of layers ≤ l are the header plus chunks 1..l, so the sizes
add over layers exactly, and chunk l depends on layer l's symbols and the header alone. The motion grid counts
in the header; there are no MLP weights (the CPU analogue's motion model is the grid itself). Decoding is
bit-exact: :func:`decode_key` returns the same float32 tensors as the dequantised Gaussians :func:`encode_key`
returns, :func:`decode_inter` the same integer symbols.

**The paper's codec path** (used by the GPU study, :mod:`companion.gaussian_video.decode`): per layer, each
8-bit attribute channel of the layer's Gaussians is one image plane (:func:`attribute_frames`, a 16-bit
position as two planes, high and low byte), video frame t holds the attributes at time t, and the planes
go straight into x264 as yuv444p pictures (:func:`encode_h264`, through PyAV; :func:`decode_h264`). No RGB
conversion, so qp 0 is lossless. As x264 applies "qp 20" to 4:4:4 input, the U and V planes (the 2nd
and 3rd plane of each group of three) get qp + 4 (the stream's SEI, which lists every option, shows
``chroma_qp_offset=4``) and I frames about qp − 3 (``ip_ratio`` 1.4). Without libx264 in PyAV,
:class:`H264Unavailable`.
"""

from __future__ import annotations

import io
import math
import struct
from dataclasses import dataclass

import constriction
import numpy as np
import torch

from companion.core import ParameterError, check_float, check_int
from companion.gaussian_video.rate import kde_cdf
from companion.gaussian_video.scene import ATTRIBUTES, Gaussians2D

KEY_BITS = {"mu": 16}  # everything else 8 bits
KDE_LEVELS = 32
INTER_ATTRIBUTES = ("log_scale", "opacity", "color")  # per-Gaussian residuals; depth is static in a group
FREQ_TOTAL = 1 << 16


# --- the entropy coder: constriction's ANS ----------------------------------------------------------

def categorical(freqs) -> constriction.stream.model.Categorical | None:
    """constriction's ``Categorical`` over the symbols 0..len(freqs)−1 with P(s) ∝ freqs[s] (positive
    integers), quantised by constriction to 24-bit fixed point (``perfect=False``: its fast, deterministic
    rounding, which encoder and decoder repeat on the same numbers). None for a one-symbol alphabet (a
    constant channel): its symbols are certain and cost nothing, and constriction needs two symbols or more."""
    f = np.asarray(freqs, dtype=np.float64)
    if f.ndim != 1 or len(f) == 0 or not bool((f >= 1).all()) or not bool((f == np.floor(f)).all()):
        raise ValueError("freqs must be a non-empty list of positive integers")
    return None if len(f) == 1 else constriction.stream.model.Categorical(f, perfect=False)


def ans_encode(parts) -> bytes:
    """One ANS stream of ``parts`` = [(symbols, model), ...] (symbols non-negative integers below the model's
    size; a model None codes only zeros, in no bits), each array under its own model; :func:`ans_decode`
    reads the arrays back in the same order. ANS is a stack, so the parts are pushed last first. Returns the
    compressed 32-bit words, little-endian; an empty stream is zero bytes."""
    coder = constriction.stream.stack.AnsCoder()
    for sym, model in reversed(parts):
        sym = np.asarray(sym)
        if not sym.size:
            continue
        if int(sym.min()) < 0 or int(sym.max()) >= (1 << 31 if model is not None else 1):
            raise ValueError("ANS symbols must be integers in 0..n − 1 for a model over n symbols")
        if model is not None:
            try:
                coder.encode_reverse(np.ascontiguousarray(sym, dtype=np.int32), model)
            except KeyError:  # constriction's answer to a symbol outside the model's alphabet
                raise ValueError("ANS symbols must be integers in 0..n − 1 for a model over n symbols") from None
    return coder.get_compressed().astype("<u4", copy=False).tobytes()


def ans_decode(data: bytes, parts) -> list[np.ndarray]:
    """The inverse of :func:`ans_encode`: ``parts`` = [(model, count), ...] in the encoder's order; int64
    arrays. Raises ValueError when the stream does not end exactly where the last symbol does (a corrupt or
    mismatched payload)."""
    if len(data) % 4:
        raise ValueError(f"corrupt ANS payload: {len(data)} bytes is not a whole number of 32-bit words")
    coder = constriction.stream.stack.AnsCoder(np.frombuffer(data, dtype="<u4").astype(np.uint32))
    out = [np.zeros(n, dtype=np.int64) if model is None else coder.decode(model, n).astype(np.int64)
           for model, n in parts]
    if not coder.is_empty():
        raise ValueError("corrupt ANS payload: the decoder did not return to the initial state")
    return out


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    n, shift = 0, 0
    while True:
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, pos


# --- the probability models ----------------------------------------------------------------------

def kde_levels(symbols: np.ndarray) -> bytes:
    """The Categorical model of 8-bit symbols: the FFT-KDE (Silverman) of the symbols evaluated on 32
    coarse bins of 8 symbols, scaled to 0..255 (one byte per level)."""
    if len(symbols) == 0:
        return bytes(KDE_LEVELS)
    edges, cdf = kde_cdf(torch.as_tensor(symbols, dtype=torch.float64), 1.0, oversample=1)
    coarse = np.arange(0, 257, 8, dtype=np.float64) - 0.5
    c = np.interp(coarse, edges.numpy(), cdf.numpy(), left=0.0, right=1.0)
    mass = np.diff(c)
    return bytes(np.round(255 * mass / max(mass.max(), 1e-12)).astype(np.uint8).tolist())


def kde_freqs(levels: bytes) -> list[int]:
    """256 integer frequencies from the 32 levels: 1 + 16·level of the symbol's coarse bin (integers
    only, so encoder and decoder agree exactly)."""
    return [1 + 16 * levels[s >> 3] for s in range(256)]


def gaussian_freqs(mean: float, std: float, lo: int, hi: int) -> list[int]:
    """QuantizedGaussian: integer frequencies ≥ 1 of the symbols lo..hi, ∝ Φ((s+½−m)/σ) − Φ((s−½−m)/σ)."""
    cdf = lambda v: 0.5 * (1 + math.erf((v - mean) / (std * math.sqrt(2))))  # noqa: E731
    return [1 + int(FREQ_TOTAL * (cdf(s + 0.5) - cdf(s - 0.5))) for s in range(lo, hi + 1)]


# --- quantisation --------------------------------------------------------------------------------

def key_quantise(x: torch.Tensor, bits: int):
    """(symbols int64, lo, hi) of one channel: s = round((x − lo)/(hi − lo) · (2^b − 1))."""
    lo, hi = np.float32(x.min()), np.float32(x.max())
    levels = (1 << bits) - 1
    span = np.float32(hi - lo) if hi > lo else np.float32(1.0)
    s = torch.round((x - float(lo)) / float(span) * levels).long().clamp(0, levels)
    return s, lo, hi


def key_dequantise(s: torch.Tensor, lo, hi, bits: int) -> torch.Tensor:
    levels = (1 << bits) - 1
    span = np.float32(hi - lo) if hi > lo else np.float32(1.0)
    return torch.tensor(float(lo), dtype=torch.float32) + s.to(torch.float32) * (torch.tensor(float(span), dtype=torch.float32) / levels)


def key_step(x: torch.Tensor, bits: int) -> float:
    """The quantisation step of one keyframe channel, (max − min)/(2^b − 1) (used for the training noise)."""
    span = float(x.max() - x.min())
    return max(span, 1e-6) / ((1 << bits) - 1)


# --- frames --------------------------------------------------------------------------------------

@dataclass
class EncodedFrame:
    """One coded frame: ``data`` = header + chunks; ``header_bytes`` and ``layer_bytes`` add up to len(data)."""

    data: bytes
    kind: str               # "key" or "inter"
    header_bytes: int
    layer_bytes: list[int]

    def bytes_upto(self, l: int) -> int:
        """Bytes a decoder needs for layers ≤ l: the header plus chunks 1..l."""
        return self.header_bytes + sum(self.layer_bytes[:l])


def _order(layer: torch.Tensor, L: int) -> list[np.ndarray]:
    return [torch.nonzero(layer == l).reshape(-1).numpy() for l in range(1, L + 1)]


def encode_key_channels(columns, rows) -> tuple[bytes, list[bytes], list[torch.Tensor]]:
    """The keyframe channels ``columns`` = [(x, bits), ...] (1-D CPU float tensors over all Gaussians) of a
    frame whose layer l holds the Gaussians ``rows[l]`` (an index array or a slice): (the header's tables —
    per channel min, max (float32) and the 32 KDE levels —, chunk l = the raw low bytes of the 16-bit channels
    of layer l then one ANS stream of every channel's (high-byte) symbols of layer l, the dequantised channels)."""
    header, raws, parts, dec = bytearray(), [[] for _ in rows], [[] for _ in rows], []
    for x, bits in columns:
        s, lo, hi = key_quantise(x, bits)
        dec.append(key_dequantise(s, lo, hi, bits))
        high = (s >> (bits - 8)).numpy()
        levels = kde_levels(high)
        header += struct.pack("<ff", lo, hi) + levels
        model = categorical(kde_freqs(levels))
        for l, r in enumerate(rows):
            parts[l].append((high[r], model))
            if bits > 8:
                raws[l].append((s.numpy()[r] & 0xFF).astype(np.uint8).tobytes())
    return bytes(header), [b"".join(r) + ans_encode(p) for r, p in zip(raws, parts)], dec


def decode_key_channels(header: bytes, pos: int, chunks, counts, bits: list[int]) -> list[torch.Tensor]:
    """The inverse of :func:`encode_key_channels` for the layers of ``chunks`` (``counts[l]`` Gaussians each;
    the tables from ``header[pos:]``, one channel per entry of ``bits``): every channel dequantised (float32),
    layer 1's Gaussians first."""
    tables, models = [], []
    for _ in bits:
        lo, hi = struct.unpack_from("<ff", header, pos)
        tables.append((np.float32(lo), np.float32(hi)))
        models.append(categorical(kde_freqs(header[pos + 8:pos + 8 + KDE_LEVELS])))
        pos += 8 + KDE_LEVELS
    n_raw = sum(b > 8 for b in bits)
    syms = [[] for _ in bits]
    for chunk, n in zip(chunks, counts):
        raw = np.frombuffer(chunk[:n_raw * n], dtype=np.uint8).reshape(n_raw, n).astype(np.int64)
        highs = ans_decode(chunk[n_raw * n:], [(m, n) for m in models])
        k = 0
        for c, b in enumerate(bits):
            if b > 8:
                syms[c].append((highs[c] << 8) | raw[k])
                k += 1
            else:
                syms[c].append(highs[c])
    return [key_dequantise(torch.from_numpy(np.concatenate(sc)), lo, hi, b)
            for sc, (lo, hi), b in zip(syms, tables, bits)]


def encode_key(g: Gaussians2D, layer: torch.Tensor, L: int) -> tuple[EncodedFrame, Gaussians2D]:
    """Code a keyframe; returns the frame and the decoded (dequantised) Gaussians."""
    idx = _order(layer, L)
    header = bytearray(b"K")
    header += _varint(L) + b"".join(_varint(len(i)) for i in idx)
    names = [(name, c) for name, ch in ATTRIBUTES.items() for c in range(ch)]
    columns = [(getattr(g, n).detach()[:, c], KEY_BITS.get(n, 8)) for n, c in names]
    tables, chunks, dec = encode_key_channels(columns, idx)
    return _assemble(bytes(header) + tables, chunks, "key"), Gaussians2D(**_by_attribute(names, dec))


def read_key_header(frame: EncodedFrame | bytes, upto: int | None = None):
    """(header, chunks, per-layer counts, the checked layer count ``upto`` (all when None), the header
    position after the counts) of a keyframe's bytes: the part every keyframe decoder shares."""
    data = frame.data if isinstance(frame, EncodedFrame) else frame
    header, chunks = _split(data)
    if header[:1] != b"K":
        raise ValueError("not a keyframe")
    L, pos = _read_varint(header, 1)
    counts = []
    for _ in range(L):
        n, pos = _read_varint(header, pos)
        counts.append(n)
    upto = L if upto is None else upto
    if not 1 <= upto <= min(L, len(chunks)):
        raise ParameterError("l", upto, f"a layer index in 1..{min(L, len(chunks))}")
    return header, chunks, counts, upto, pos


def decode_key(frame: EncodedFrame | bytes, upto: int | None = None):
    """(Gaussians of layers ≤ upto in layer order, their layer index) from a keyframe's bytes."""
    header, chunks, counts, upto, pos = read_key_header(frame, upto)
    names = [(name, c) for name, ch in ATTRIBUTES.items() for c in range(ch)]
    cols = decode_key_channels(header, pos, chunks[:upto], counts[:upto], [KEY_BITS.get(n, 8) for n, _ in names])
    layer = torch.repeat_interleave(torch.arange(1, upto + 1), torch.tensor(counts[:upto]))
    return Gaussians2D(**_by_attribute(names, cols)), layer


def _by_attribute(names, cols) -> dict[str, torch.Tensor]:
    """{attribute: its channels stacked ``[N, ch]``} from columns listed as (attribute, channel) ``names``."""
    return {a: torch.stack([col for (n, _), col in zip(names, cols) if n == a], 1) for a in dict(names)}


def gaussian_column(col: torch.Tensor, q: float):
    """(header entry, model, lo) of one column of integer delta symbols: its mean and std (float16, std ≥ ¼)
    and symbol range lo..hi (int16) — the ``QuantizedGaussian`` of :func:`gaussian_freqs` as a
    :func:`categorical` over s − lo. ``q`` only names the step in the error for deltas beyond int16."""
    mean = float(np.float16(col.double().mean()))
    std = float(np.float16(max(float(col.double().std()) if len(col) > 1 else 0.0, 0.25)))
    lo, hi = int(col.min()), int(col.max())
    if lo < -32768 or hi > 32767:
        raise ParameterError("q", q, "a step large enough that the deltas fit in int16 symbols")
    return struct.pack("<eehh", mean, std, lo, hi), categorical(gaussian_freqs(mean, std, lo, hi)), lo


def read_gaussian_column(header: bytes, pos: int):
    """(model, lo, the position after it) of a :func:`gaussian_column` header entry."""
    mean, std, lo, hi = struct.unpack_from("<eehh", header, pos)
    return categorical(gaussian_freqs(mean, std, lo, hi)), lo, pos + 8


def encode_inter(deltas: dict[str, torch.Tensor], layer: torch.Tensor, L: int, q: float) -> EncodedFrame:
    """Code one inter-frame: ``deltas["grid"]`` the integer motion-grid symbols ``[G, G, 3]`` (in the
    header: every layer needs the rigid motion) and ``deltas[name]`` the integer residual symbols Δ/q
    ``[N, ch]`` of each per-Gaussian attribute (one chunk per layer)."""
    q = check_float("q", q, lo=0.0, lo_open=True)
    idx = _order(layer, L)
    header = bytearray(b"P")
    grid = deltas["grid"].long()
    header += _varint(grid.shape[0])
    grid_parts, res = [], []
    for c in range(grid.shape[2]):
        col = grid[:, :, c].reshape(-1)
        head, model, lo = gaussian_column(col, q)
        header += head
        grid_parts.append(((col - lo).numpy(), model))
    for name in INTER_ATTRIBUTES:
        sym = deltas[name].long()
        for c in range(sym.shape[1]):
            head, model, lo = gaussian_column(sym[:, c], q)
            header += head
            res.append(((sym[:, c] - lo).numpy(), model))
    stream = ans_encode(grid_parts)
    header += _varint(len(stream)) + stream
    chunks = [ans_encode([(col[i], model) for col, model in res]) for i in idx]
    return _assemble(bytes(header), chunks, "inter")


def decode_inter(frame: EncodedFrame | bytes, layer: torch.Tensor, upto: int | None = None) -> dict[str, torch.Tensor]:
    """The integer delta symbols of the Gaussians of layers ≤ upto (rows in ``layer``'s order; rows of
    higher layers are 0)."""
    data = frame.data if isinstance(frame, EncodedFrame) else frame
    header, chunks = _split(data)
    if header[:1] != b"P":
        raise ValueError("not an inter-frame")
    L = int(layer.max())
    upto = L if upto is None else upto
    if not 1 <= upto <= L:
        raise ParameterError("l", upto, f"a layer index in 1..{L}")
    idx = _order(layer, L)
    G, pos = _read_varint(header, 1)
    grid_meta, res_meta = [], []
    for _ in range(3):
        model, lo, pos = read_gaussian_column(header, pos)
        grid_meta.append((model, lo))
    for name in INTER_ATTRIBUTES:
        for _ in range(ATTRIBUTES[name]):
            model, lo, pos = read_gaussian_column(header, pos)
            res_meta.append((model, lo))
    n_bytes, pos = _read_varint(header, pos)
    vals = ans_decode(header[pos:pos + n_bytes], [(m, G * G) for m, _ in grid_meta])
    out = {"grid": torch.stack([torch.from_numpy(v).reshape(G, G) + lo for v, (_, lo) in zip(vals, grid_meta)], -1)}
    cols = [torch.zeros(len(layer), dtype=torch.long) for _ in res_meta]
    for l in range(upto):
        for col, v, (_, lo) in zip(cols, ans_decode(chunks[l], [(m, len(idx[l])) for m, _ in res_meta]), res_meta):
            col[idx[l]] = torch.from_numpy(v) + lo
    k = 0
    for name in INTER_ATTRIBUTES:
        out[name] = torch.stack(cols[k:k + ATTRIBUTES[name]], 1)
        k += ATTRIBUTES[name]
    return out


def _assemble(header: bytes, chunks, kind: str) -> EncodedFrame:
    head = _varint(len(header)) + header
    parts = [_varint(len(c)) + bytes(c) for c in chunks]
    return EncodedFrame(head + b"".join(parts), kind, len(head), [len(p) for p in parts])


def _split(data: bytes):
    n, pos = _read_varint(data, 0)
    header = data[pos:pos + n]
    pos += n
    chunks = []
    while pos < len(data):
        m, pos = _read_varint(data, pos)
        chunks.append(data[pos:pos + m])
        pos += m
    return header, chunks


# --- the paper's codec path: attribute planes as H.264 video (PyAV + libx264) --------------------

H264_OPTIONS = {"preset": "medium", "bf": "0", "refs": "3"}  # + "qp"; the paper's x264 settings


class H264Unavailable(RuntimeError):
    """This PyAV build has no libx264 encoder."""


def h264_encoder() -> str | None:
    """``"libx264"`` when PyAV (``av``) is importable and its FFmpeg has the libx264 encoder, else None."""
    try:
        import av

        av.codec.Codec("libx264", "w")
    except (ImportError, ValueError):  # av.codec.codec.UnknownCodecError is a ValueError
        return None
    return "libx264"


def plane_shape(n: int) -> tuple[int, int]:
    """(height, width) of the image holding ``n`` Gaussians one per pixel, row-major: the smallest even
    width ≥ √n and the smallest even height with height·width ≥ n (yuv444p needs no evenness, but x264's
    macroblock padding is cheaper and every decoder accepts even sizes)."""
    n = check_int("n", n, lo=1)
    side = math.isqrt(n - 1) + 1  # ⌈√n⌉
    w = side + side % 2
    h = -(-n // w)
    return h + h % 2, w


def attribute_frames(sym: np.ndarray) -> np.ndarray:
    """Lay out 8-bit attribute symbols ``[T, N, C]`` (time, Gaussians, channels) as yuv444p video frames
    ``[T, 3, h, w·⌈C/3⌉]``: channel c is plane c mod 3 of tile c // 3 (tiles side by side), Gaussian i
    at pixel (i // w, i mod w) of its tile, (h, w) = :func:`plane_shape` (N), padding 0. Frame t holds the
    attributes at time t, so x264's P frames predict each plane from the same plane at t − 1."""
    if not isinstance(sym, np.ndarray) or sym.dtype != np.uint8 or sym.ndim != 3:
        raise TypeError(f"sym must be a uint8 array [T, N, C], got {type(sym).__name__} "
                        f"{getattr(sym, 'dtype', '')} {getattr(sym, 'shape', '')}")
    T, n, C = sym.shape
    h, w = plane_shape(n)
    tiles = -(-C // 3)
    planes = np.zeros((T, 3 * tiles, h * w), dtype=np.uint8)
    planes[:, :C, :n] = sym.transpose(0, 2, 1)
    return np.ascontiguousarray(planes.reshape(T, tiles, 3, h, w).transpose(0, 2, 3, 1, 4).reshape(T, 3, h, tiles * w))


def attribute_symbols(frames: np.ndarray, n: int, channels: int) -> np.ndarray:
    """The inverse of :func:`attribute_frames`: ``[T, n, channels]`` uint8."""
    T = frames.shape[0]
    h, w = plane_shape(n)
    tiles = -(-channels // 3)
    planes = frames.reshape(T, 3, h, tiles, w).transpose(0, 3, 1, 2, 4).reshape(T, 3 * tiles, h * w)
    return np.ascontiguousarray(planes[:, :channels, :n].transpose(0, 2, 1))


def encode_h264(frames: np.ndarray, qp: int = 20) -> bytes:
    """The paper's attribute-image codec: ``frames`` ``[T, 3, H, W]`` uint8 (H, W even), each frame's three
    planes fed to x264 as the Y, U, V planes of a yuv444p picture (no colour conversion, so qp = 0 is
    lossless), I and P frames only (no B frames), 3 reference frames, preset medium, constant ``qp``.
    Returns the H.264 Annex-B stream; its length is the exact byte count. Raises :class:`H264Unavailable`
    when PyAV has no libx264."""
    qp = check_int("qp", qp, lo=0, hi=51)
    if not isinstance(frames, np.ndarray) or frames.dtype != np.uint8:
        raise TypeError(f"frames must be a uint8 numpy array, got {type(frames).__name__} {getattr(frames, 'dtype', '')}")
    if frames.ndim != 4 or frames.shape[1] != 3 or frames.shape[0] < 1:
        raise ValueError(f"frames must have shape [T >= 1, 3, H, W] (three planes per frame), got {frames.shape}")
    T, _, H, W = frames.shape
    if H % 2 or W % 2 or H < 2 or W < 2:
        raise ValueError(f"frames must have even height and width >= 2, got H={H}, W={W} (see plane_shape)")
    if h264_encoder() is None:
        raise H264Unavailable("this PyAV build has no libx264 encoder (install the `av` wheel from PyPI, which "
                              "bundles it); use the entropy-coded bitstream (encode_key / encode_inter) instead")
    import av

    buf = io.BytesIO()
    with av.open(buf, "w", format="h264") as out:
        stream = out.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = W, H, "yuv444p"
        stream.options = {**H264_OPTIONS, "qp": str(qp)}
        for t in range(T):
            out.mux(stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(frames[t]), format="yuv444p")))
        out.mux(stream.encode())
    return buf.getvalue()


def decode_h264(data: bytes) -> np.ndarray:
    """The planes ``[T, 3, H, W]`` uint8 of an :func:`encode_h264` stream (FFmpeg's H.264 decoder)."""
    import av

    with av.open(io.BytesIO(data), "r", format="h264") as src:
        return np.stack([f.to_ndarray(format="yuv444p") for f in src.decode(video=0)])

"""The bitstream (paper Sec. 3.4): quantised attributes, entropy-coded per (group, layer, channel).

The paper stores positions as uint16 and the other attributes as uint8, flattens each channel into an
image and codes the images with H.264 (x264, I/P frames only, 3 references, yuv444p, preset medium,
qp 20). At this scale we code the same quantised symbols with an entropy coder driven by the training's
rate models (the issue's choice of constriction ``Categorical`` / ``QuantizedGaussian``; constriction is
not installed here, so :func:`rans_encode` is a minimal exact range-ANS coder on Python integers):

* **keyframe** channel c: per-channel min/max (float32) and symbols s = round((x − min)/(max − min) ·
  (2^b − 1)), b = 16 for positions, 8 otherwise; the model is a ``Categorical`` from the FFT-KDE of the
  channel, sent as 32 coarse levels (one byte each) and expanded to 256 integer frequencies (the high
  byte of 16-bit positions; their low byte is sent raw, 8 bits);
* **inter-frame**: the motion grid (G × G × 3 values: Δx, Δy, Δθ, quantised with step q) in the header,
  then per layer the residuals Δ = x_t − x̂_{t−1} of log-scale, opacity and colour quantised with step q;
  each channel is coded with a ``QuantizedGaussian`` whose mean and std (float16) and symbol range
  (int16) are in the frame header.

Layout of one frame: ``type | header | chunk_1 | … | chunk_L``; a chunk holds layer l's symbols of every
channel. **Size accounting** (printed by the notebook): a frame's bytes are its header (model tables,
min/max, counts) plus its chunks; the bytes of layers ≤ l are the header plus chunks 1..l, so the sizes
add over layers exactly. The motion grid counts in the header; there are no MLP weights (the CPU
analogue's motion model is the grid itself). Decoding is bit-exact: :func:`decode_frame` returns the same float32 tensors as
the encoder's own dequantisation.

:func:`encode_h264` is the paper's codec path; it needs an ffmpeg binary with libx264 and raises
:class:`H264Unavailable` otherwise.
"""

from __future__ import annotations

import bisect
import math
import shutil
import struct
import subprocess
from dataclasses import dataclass

import numpy as np
import torch

from companion.core import ParameterError, check_float
from companion.gaussian_video.rate import kde_cdf
from companion.gaussian_video.scene import ATTRIBUTES, Gaussians2D

KEY_BITS = {"mu": 16}  # everything else 8 bits
KDE_LEVELS = 32
INTER_ATTRIBUTES = ("log_scale", "opacity", "color")  # per-Gaussian residuals; depth is static in a group
FREQ_TOTAL = 1 << 16


# --- the entropy coder ---------------------------------------------------------------------------

def _cum(freqs):
    cum = [0]
    for f in freqs:
        if f <= 0:
            raise ValueError("every frequency must be a positive integer")
        cum.append(cum[-1] + int(f))
    return cum


def rans_encode(symbols, freqs) -> bytes:
    """Range-ANS with an unbounded integer state: x ← ⌊x/f_s⌋·M + C_s + (x mod f_s), from x = 1, in
    reverse order. Its length is ⌈(1 + Σ log₂(M/f_s))/8⌉ bytes at most plus one: arithmetic-coding
    optimal for a static model."""
    cum = _cum(freqs)
    M = cum[-1]
    x = 1
    for s in reversed(list(symbols)):
        f = freqs[s]
        x = (x // f) * M + cum[s] + (x % f)
    return x.to_bytes((x.bit_length() + 7) // 8, "big")


def rans_decode(data: bytes, freqs, n: int) -> list[int]:
    """The inverse of :func:`rans_encode` for ``n`` symbols (checks that the state returns to 1)."""
    cum = _cum(freqs)
    M = cum[-1]
    x = int.from_bytes(data, "big")
    out = []
    for _ in range(n):
        slot = x % M
        s = bisect.bisect_right(cum, slot) - 1
        out.append(s)
        x = freqs[s] * (x // M) + slot - cum[s]
    if x != 1:
        raise ValueError("corrupt rANS payload: the decoder state did not return to 1")
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


def dequantise_key(g: Gaussians2D) -> Gaussians2D:
    """What the decoder will reconstruct from a keyframe: every channel quantised and dequantised."""
    out = {}
    for name in ATTRIBUTES:
        t = getattr(g, name)
        bits = KEY_BITS.get(name, 8)
        cols = []
        for c in range(t.shape[1]):
            s, lo, hi = key_quantise(t[:, c], bits)
            cols.append(key_dequantise(s, lo, hi, bits))
        out[name] = torch.stack(cols, 1)
    return Gaussians2D(**out)


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


def _order(layer: torch.Tensor, L: int) -> list[torch.Tensor]:
    return [torch.nonzero(layer == l).reshape(-1) for l in range(1, L + 1)]


def encode_key(g: Gaussians2D, layer: torch.Tensor, L: int) -> tuple[EncodedFrame, Gaussians2D]:
    """Code a keyframe; returns the frame and the decoded (dequantised) Gaussians."""
    idx = _order(layer, L)
    header = bytearray(b"K")
    header += _varint(L) + b"".join(_varint(len(i)) for i in idx)
    chunks = [bytearray() for _ in range(L)]
    for name, ch in ATTRIBUTES.items():
        t = getattr(g, name).detach()
        bits = KEY_BITS.get(name, 8)
        for c in range(ch):
            s, lo, hi = key_quantise(t[:, c], bits)
            high = (s >> (bits - 8)).numpy()
            levels = kde_levels(high)
            header += struct.pack("<ff", lo, hi) + levels
            freqs = kde_freqs(levels)
            for l in range(L):
                sym = high[idx[l].numpy()].tolist()
                payload = rans_encode(sym, freqs)
                if bits > 8:
                    payload = (s[idx[l]] & 0xFF).to(torch.uint8).numpy().tobytes() + payload
                chunks[l] += _varint(len(payload)) + payload
    return _assemble(bytes(header), chunks, "key"), dequantise_key(g)


def decode_key(frame: EncodedFrame | bytes, upto: int | None = None):
    """(Gaussians of layers ≤ upto in layer order, their layer index) from a keyframe's bytes."""
    data = frame.data if isinstance(frame, EncodedFrame) else frame
    header, chunks = _split(data)
    if header[:1] != b"K":
        raise ValueError("not a keyframe")
    pos = 1
    L, pos = _read_varint(header, pos)
    counts = []
    for _ in range(L):
        n, pos = _read_varint(header, pos)
        counts.append(n)
    upto = L if upto is None else upto
    if not 1 <= upto <= min(L, len(chunks)):
        raise ParameterError("l", upto, f"a layer index in 1..{min(L, len(chunks))}")
    cpos = [0] * upto
    out = {}
    for name, ch in ATTRIBUTES.items():
        bits = KEY_BITS.get(name, 8)
        cols = []
        for _ in range(ch):
            lo, hi = struct.unpack_from("<ff", header, pos)
            levels = header[pos + 8:pos + 8 + KDE_LEVELS]
            pos += 8 + KDE_LEVELS
            freqs = kde_freqs(levels)
            parts = []
            for l in range(upto):
                n_bytes, p = _read_varint(chunks[l], cpos[l])
                payload = chunks[l][p:p + n_bytes]
                cpos[l] = p + n_bytes
                low = None
                if bits > 8:
                    low, payload = np.frombuffer(payload[:counts[l]], dtype=np.uint8), payload[counts[l]:]
                high = np.array(rans_decode(payload, freqs, counts[l]), dtype=np.int64)
                sym = high if low is None else (high << 8) | low.astype(np.int64)
                parts.append(torch.from_numpy(sym))
            cols.append(key_dequantise(torch.cat(parts), np.float32(lo), np.float32(hi), bits))
        out[name] = torch.stack(cols, 1)
    layer = torch.repeat_interleave(torch.arange(1, upto + 1), torch.tensor(counts[:upto]))
    return Gaussians2D(**out), layer


def _code_column(col: torch.Tensor, q: float):
    mean = float(np.float16(col.double().mean()))
    std = float(np.float16(max(float(col.double().std()) if len(col) > 1 else 0.0, 0.25)))
    lo, hi = int(col.min()), int(col.max())
    if lo < -32768 or hi > 32767:
        raise ParameterError("q", q, "a step large enough that the deltas fit in int16 symbols")
    return struct.pack("<eehh", mean, std, lo, hi), gaussian_freqs(mean, std, lo, hi), lo


def encode_inter(deltas: dict[str, torch.Tensor], layer: torch.Tensor, L: int, q: float) -> EncodedFrame:
    """Code one inter-frame: ``deltas["grid"]`` the integer motion-grid symbols ``[G, G, 3]`` (in the
    header: every layer needs the rigid motion) and ``deltas[name]`` the integer residual symbols Δ/q
    ``[N, ch]`` of each per-Gaussian attribute (one chunk per layer)."""
    q = check_float("q", q, lo=0.0, lo_open=True)
    idx = _order(layer, L)
    header = bytearray(b"P")
    grid = deltas["grid"].long()
    header += _varint(grid.shape[0])
    for c in range(grid.shape[2]):
        col = grid[:, :, c].reshape(-1)
        head, freqs, lo = _code_column(col, q)
        payload = rans_encode((col - lo).tolist(), freqs)
        header += head + _varint(len(payload)) + payload
    chunks = [bytearray() for _ in range(L)]
    for name in INTER_ATTRIBUTES:
        sym = deltas[name].long()
        for c in range(sym.shape[1]):
            col = sym[:, c]
            head, freqs, lo = _code_column(col, q)
            header += head
            for l in range(L):
                payload = rans_encode((col[idx[l]] - lo).tolist(), freqs)
                chunks[l] += _varint(len(payload)) + payload
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
    pos, cpos, out = 1, [0] * upto, {}
    G, pos = _read_varint(header, pos)
    gcols = []
    for _ in range(3):
        mean, std, lo, hi = struct.unpack_from("<eehh", header, pos)
        n_bytes, pos = _read_varint(header, pos + 8)
        vals = rans_decode(header[pos:pos + n_bytes], gaussian_freqs(mean, std, lo, hi), G * G)
        pos += n_bytes
        gcols.append(torch.tensor(vals, dtype=torch.long).reshape(G, G) + lo)
    out["grid"] = torch.stack(gcols, -1)
    for name in INTER_ATTRIBUTES:
        cols = []
        for _ in range(ATTRIBUTES[name]):
            mean, std, lo, hi = struct.unpack_from("<eehh", header, pos)
            pos += 8
            freqs = gaussian_freqs(mean, std, lo, hi)
            col = torch.zeros(len(layer), dtype=torch.long)
            for l in range(upto):
                n_bytes, p = _read_varint(chunks[l], cpos[l])
                payload = chunks[l][p:p + n_bytes]
                cpos[l] = p + n_bytes
                col[idx[l]] = torch.tensor(rans_decode(payload, freqs, len(idx[l])), dtype=torch.long) + lo
            cols.append(col)
        out[name] = torch.stack(cols, 1)
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


# --- the paper's codec path ----------------------------------------------------------------------

class H264Unavailable(RuntimeError):
    """No H.264 encoder on this machine."""


def h264_encoder() -> str | None:
    """Path of an ffmpeg binary that lists libx264, or None."""
    exe = shutil.which("ffmpeg")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "-hide_banner", "-encoders"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return exe if "libx264" in out else None


def encode_h264(images: np.ndarray, qp: int = 20) -> bytes:
    """The paper's attribute-image codec: ``images`` ``[T, H, W, 3]`` uint8 (each a flattened attribute
    channel, three channels per image) coded with x264: I/P frames only (``-bf 0``), 3 references,
    yuv444p, preset medium, constant qp. Raises :class:`H264Unavailable` without an H.264 encoder."""
    exe = h264_encoder()
    if exe is None:
        raise H264Unavailable(
            "the H.264 path needs an ffmpeg binary with libx264 on PATH (e.g. `apt-get install ffmpeg`); "
            "none was found, so use the entropy-coded bitstream (encode_key / encode_inter) instead")
    images = np.ascontiguousarray(images, dtype=np.uint8)
    if images.ndim != 4 or images.shape[-1] != 3 or images.shape[1] % 2 or images.shape[2] % 2:
        raise ParameterError("images", images.shape, "[T, H, W, 3] uint8 with even H and W")
    T, H, W, _ = images.shape
    cmd = [exe, "-hide_banner", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{W}x{H}",
           "-i", "-", "-c:v", "libx264", "-pix_fmt", "yuv444p", "-qp", str(qp), "-bf", "0", "-refs", "3",
           "-preset", "medium", "-f", "h264", "-"]
    res = subprocess.run(cmd, input=images.tobytes(), capture_output=True, timeout=600)
    if res.returncode != 0:
        raise RuntimeError(f"ffmpeg failed: {res.stderr.decode(errors='replace')[:500]}")
    return res.stdout

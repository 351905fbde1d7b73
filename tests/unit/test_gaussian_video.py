"""companion.gaussian_video: known truths of the splatter, Ψ layering, rates, coder, bitstream, BD
metrics, grouping, the pipeline's bit-exact decoder, and the explorer without a browser."""

import io
import math

import numpy as np
import plotly.graph_objects as go
import pytest
import torch

from companion.core import ParameterError
from companion.gaussian_video import PAPER
from companion.gaussian_video.bd import bd_psnr, bd_rate, rd_envelope
from companion.gaussian_video import bitstream
from companion.gaussian_video.bitstream import (
    H264Unavailable, ans_decode, ans_encode, attribute_frames, attribute_symbols, categorical, decode_h264,
    decode_inter, decode_key, encode_h264, encode_inter, encode_key, gaussian_freqs, h264_encoder, kde_freqs,
    plane_shape)
from companion.gaussian_video.pipeline import Config, decode_sequence, encode_sequence, global_shift, motion_groups
from companion.gaussian_video.rate import MAX_BINS, empirical_entropy, gaussian_bits, kde_bits, kde_cdf, noisy, silverman_bandwidth
from companion.gaussian_video.scene import check_frames, init_gaussians, make_frames
from companion.gaussian_video.significance import (
    layer_counts, layer_masks, layer_weights, progressive_render, significance, split_layers)
from companion.gaussian_video.splat import conics, covariance_2d, project_ewa, splat, splat_loop

FAST = Config(n_gaussians=32, prune=0.25, L=3, key_steps=3, rd_steps=2, rigid_steps=2, residual_steps=2)


def _g(n=9, size=8, seed=0):
    return init_gaussians(torch.rand(size, size, 3, generator=torch.Generator().manual_seed(seed)), n, seed)


def test_identity():
    assert PAPER.notebook == "05_gaussian_video"


def test_splatter_equals_per_pixel_loop():
    g = _g(9, 7).map(lambda t: t.double())
    cn = conics(covariance_2d(g.log_scale, g.theta[:, 0]))
    dense = splat(g.mu, cn, g.alpha(), g.color, g.depth[:, 0], 6, 7, background=0.3)
    loop = splat_loop(g.mu, cn, g.alpha(), g.color, g.depth[:, 0], 6, 7, background=0.3)
    assert (dense - loop).abs().max() < 1e-10


def test_single_gaussian_closed_form():
    mu = torch.tensor([[2.5, 1.5]], dtype=torch.float64)
    cn = torch.tensor([[0.5, 0.0, 0.5]], dtype=torch.float64)
    img = splat(mu, cn, torch.tensor([0.8], dtype=torch.float64), torch.ones(1, 3, dtype=torch.float64),
                torch.zeros(1, dtype=torch.float64), 3, 5)
    assert img[1, 2, 0].item() == pytest.approx(0.8)  # the centre pixel: α = opacity
    assert img[1, 3, 0].item() == pytest.approx(0.8 * math.exp(-0.25))


def test_masks_equal_rendering_the_subset():
    g = _g(12, 8)
    keep = torch.tensor([1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 0, 1]).bool()
    full = g.render(8, 8, masks=keep.float()[None])[0]
    sub = g.subset(keep).render(8, 8)
    assert torch.allclose(full, sub, atol=1e-6)


def test_ewa_projection_of_an_isotropic_gaussian_on_the_axis():
    view = torch.eye(4, dtype=torch.float64)
    K = torch.tensor([[100.0, 0, 50], [0, 100.0, 40], [0, 0, 1]], dtype=torch.float64)
    m2, c2, d = project_ewa(torch.tensor([[0.0, 0.0, 2.0]], dtype=torch.float64),
                            0.01 * torch.eye(3, dtype=torch.float64)[None], view, K, blur=0.0)
    assert torch.allclose(m2, torch.tensor([[50.0, 40.0]], dtype=torch.float64))
    assert torch.allclose(c2[0], (100 / 2) ** 2 * 0.01 * torch.eye(2, dtype=torch.float64))  # σ' = f σ / z
    assert d.item() == 2.0


def test_significance_modes_and_bad_values():
    a = torch.tensor([0.2, 0.9, 0.5])
    s = torch.tensor([[1.0, 2.0], [0.5, 0.5], [1.0, 1.0]])
    area = math.pi * s.prod(1)
    assert torch.allclose(significance(a, s, 0.1, "sum"), a + 0.1 * area)
    assert torch.equal(significance(a, s, 7.0, "opacity"), a)
    assert torch.allclose(significance(a, s, 7.0, "volume"), area)
    assert torch.allclose(significance(a, s, 7.0, "product"), a * area)
    s3 = torch.ones(3, 3) * 2
    assert torch.allclose(significance(a, s3, 0.0, "volume"), torch.full((3,), 4 / 3 * math.pi * 8))
    with pytest.raises(ParameterError):
        significance(a, s, -1.0)
    with pytest.raises(ParameterError):
        significance(a, s, 1.0, "max")


def test_split_layers_counts_order_and_permutation():
    psi = torch.tensor([0.1, 0.9, 0.5, 0.7, 0.3, 0.2, 0.8])
    layer = split_layers(psi, 3)
    assert layer.tolist() == [3, 1, 2, 1, 2, 3, 1]  # equal split 3, 2, 2
    assert split_layers(psi, 2, counts=[1, 6]).tolist() == [2, 1, 2, 2, 2, 2, 2]
    perm = torch.randperm(7, generator=torch.Generator().manual_seed(1))
    assert torch.equal(split_layers(psi[perm], 3), layer[perm])
    assert layer_counts(10, 4) == [3, 3, 2, 2]
    assert layer_masks(layer, 3).sum(1).tolist() == [3, 5, 7]
    for bad in (dict(L=0), dict(L=8), dict(L=3, counts=[1, 2, 3]), dict(L=2, counts=[0, 7])):
        with pytest.raises(ParameterError):
            split_layers(psi, **bad)


def test_progressive_render_and_layer_weights():
    g = _g(10, 8)
    layer = split_layers(significance(g.alpha(), g.scales(), 0.01), 3)
    top = progressive_render(g, layer, 3, 8, 8)
    assert torch.allclose(top, g.render(8, 8), atol=1e-6)
    with pytest.raises(ParameterError):
        progressive_render(g, layer, 4, 8, 8)
    assert layer_weights(4) == [0.5, 0.25, 0.5 / 3, 1.0]
    assert layer_weights(1) == [1.0]


def test_kde_rate_near_empirical_entropy_and_gaussian_rate():
    x = torch.randn(20000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for q in (0.1, 0.5):
        sym = torch.round(x / q)
        kde = float(kde_bits(sym * q, q).mean())
        assert abs(kde - empirical_entropy(sym.numpy())) < 0.05
        assert abs(float(gaussian_bits(sym * q, q).mean()) - empirical_entropy(sym.numpy())) < 0.05
    assert silverman_bandwidth(x) == pytest.approx(0.9 * 20000 ** -0.2, rel=0.05)


def _symmetric_sample(n=500, seed=0):
    x = torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return torch.cat([x, -x])


def _kde_bits_exact(v, data, q):
    """−log₂ P(v) under the Gaussian KDE itself (no grid, no FFT): P(v) = mean_i [Φ((v + q/2 − x_i)/h) −
    Φ((v − q/2 − x_i)/h)], h Silverman's bandwidth of the data."""
    from scipy.stats import norm

    h = silverman_bandwidth(data)
    d = data.numpy()[None, :]
    v = np.asarray(v, dtype=float)[:, None]
    return -np.log2((norm.cdf((v + q / 2 - d) / h) - norm.cdf((v - q / 2 - d) / h)).mean(1))


def test_kde_bits_per_value_symmetric_data():
    """Per value, not only the mean. On data symmetric about 0, bits(v) = bits(−v)."""
    xs, v = _symmetric_sample(), torch.linspace(-3, 3, 121, dtype=torch.float64)
    # q small enough that the grid is coarsened to MAX_BINS bins over [lo, hi] = [−hi, hi]: a symmetric grid,
    # so the binned histogram, the FFT smoothing and the interpolated CDF are exactly symmetric
    q = 0.01
    edges, cdf = kde_cdf(xs, q)
    assert len(edges) == MAX_BINS + 2 and float(edges[0]) == pytest.approx(-float(edges[MAX_BINS]), abs=1e-12)
    b, b_neg = kde_bits(v, q, reference=xs), kde_bits(-v, q, reference=xs)
    assert float((b - b_neg).abs().max()) < 1e-9
    # on the fine grid (step q/4, edges not symmetric about 0) a sample moves by at most one step of q/4:
    # the two sides agree within 0.03 bits (a density shifted by one bin gives 0.18)
    q = 0.1
    b, b_neg = kde_bits(v, q, reference=xs), kde_bits(-v, q, reference=xs)
    assert float((b - b_neg).abs().max()) < 0.03


def test_kde_bits_per_value_against_the_closed_form_kde():
    """Per value against the KDE's own closed form (a Gaussian mixture's CDF, no grid): within 0.02 bits at
    the default oversampling on |v| ≤ 2 (a density shifted by one bin is off by about 0.1), and closer as the
    grid refines."""
    xs, q = _symmetric_sample(), 0.1
    v = torch.linspace(-2, 2, 81, dtype=torch.float64)
    exact = _kde_bits_exact(v.numpy(), xs, q)
    err = {ov: float(np.abs(kde_bits(v, q, reference=xs, oversample=ov).numpy() - exact).max()) for ov in (1, 4, 16)}
    assert err[4] < 0.02, err
    assert err[16] < err[4] < err[1], err
    # a single sample at 0: P(v) = Φ((v + q/2)/h) − Φ((v − q/2)/h) with h the bandwidth floor (1e-6), so the
    # value 0 costs 0 bits and a value a step away costs the floor's 30 bits
    one = torch.zeros(1, dtype=torch.float64)
    assert float(kde_bits(one, q)[0]) == pytest.approx(0.0, abs=1e-9)
    assert float(kde_bits(torch.tensor([q], dtype=torch.float64), q, reference=one)[0]) == pytest.approx(-math.log2(1e-9))


def test_noise_is_uniform_within_half_a_step():
    x = torch.zeros(10000)
    u = noisy(x, 0.2, torch.Generator().manual_seed(0))
    assert float(u.abs().max()) <= 0.1 and abs(float(u.var()) - 0.04 / 12) < 3e-4
    with pytest.raises(ParameterError):
        noisy(x, 0.0)


def _info_bytes(sym, freqs):
    """Σ −log₂ P(s) / 8 under the integer frequencies: what an ideal coder of this model spends."""
    return sum(math.log2(sum(freqs) / freqs[s]) for s in sym) / 8


def test_ans_round_trip_and_length_within_one_word_of_the_information_content():
    rng = np.random.default_rng(0)
    freqs = [1, 5, 20, 100, 3]
    sym = rng.choice(5, size=3000, p=np.array(freqs) / sum(freqs))
    model = categorical(freqs)
    data = ans_encode([(sym, model)])
    assert np.array_equal(ans_decode(data, [(model, len(sym))])[0], sym)
    ideal = _info_bytes(sym, freqs)
    # constriction rounds the model to 24-bit fixed point (a relative excess far below 0.1 % here) and ends the
    # stream with its 64-bit state: at most 8 bytes over the information content
    assert len(data) % 4 == 0 and ideal <= len(data) <= 1.001 * ideal + 8
    assert ans_encode([(np.array([], dtype=np.int64), model)]) == b""
    assert ans_decode(b"", [(model, 0)])[0].size == 0


def test_ans_stream_of_several_channels_decodes_in_order_and_refuses_a_corrupt_payload():
    rng = np.random.default_rng(1)
    f_key = kde_freqs(bytes(rng.integers(0, 256, 32, dtype=np.uint8)))
    f_res = gaussian_freqs(0.3, 1.5, -6, 7)
    a, b = rng.integers(0, 256, 500), rng.integers(0, 14, 300)
    parts = [(a, categorical(f_key)), (b, categorical(f_res))]
    data = ans_encode(parts)
    back = ans_decode(data, [(categorical(f_key), 500), (categorical(f_res), 300)])  # models rebuilt, as a decoder does
    assert np.array_equal(back[0], a) and np.array_equal(back[1], b)
    assert len(data) <= _info_bytes(a, f_key) + _info_bytes(b, f_res) + 8 + 0.001 * len(data)
    with pytest.raises(ValueError, match="corrupt"):
        ans_decode(data[:-4], [(categorical(f_key), 500), (categorical(f_res), 300)])
    with pytest.raises(ValueError, match="corrupt"):
        ans_decode(data[:-1], [(categorical(f_key), 500), (categorical(f_res), 300)])
    with pytest.raises(ValueError, match="corrupt"):  # the right bytes read with a wrong count
        ans_decode(data, [(categorical(f_key), 499), (categorical(f_res), 300)])
    with pytest.raises(ValueError, match="positive integers"):
        categorical([3, 0, 1])
    with pytest.raises(ValueError, match="0..n − 1"):
        ans_encode([(np.array([0, 14]), categorical(f_res))])
    # a constant channel (one symbol) is certain: no bits, and the stream around it is unchanged
    assert categorical([7]) is None and ans_encode([(np.zeros(9, dtype=np.int64), None)]) == b""
    with_constant = ans_encode([parts[0], (np.zeros(50, dtype=np.int64), None), parts[1]])
    assert with_constant == data
    back = ans_decode(with_constant, [(categorical(f_key), 500), (None, 50), (categorical(f_res), 300)])
    assert np.array_equal(back[1], np.zeros(50)) and np.array_equal(back[2], b)


def test_keyframe_and_inter_bitstream_round_trip():
    g = _g(40, 16)
    layer = torch.sort(split_layers(significance(g.alpha(), g.scales(), 0.01), 4)).values
    enc, dec = encode_key(g, layer, 4)
    assert len(enc.data) == enc.header_bytes + sum(enc.layer_bytes)
    out, lay = decode_key(enc)
    for k, v in out.tensors().items():
        assert torch.equal(v, getattr(dec, k)), k
    part, lay2 = decode_key(enc, 2)
    assert len(part) == int((layer <= 2).sum()) and torch.equal(part.mu, dec.mu[:len(part)])
    # a layer's bytes are its own: the header and chunks 1..l alone (bytes_upto(l)) decode layers <= l
    alone, _ = decode_key(enc.data[:enc.bytes_upto(2)], 2)
    assert all(torch.equal(v, getattr(part, k)) for k, v in alone.tensors().items())
    assert (dec.mu - g.mu).abs().max() < (g.mu.max() - g.mu.min()) / 65535
    sym = {"grid": torch.randint(-9, 9, (4, 4, 3)), "log_scale": torch.randint(-3, 4, (40, 2)),
           "opacity": torch.randint(-3, 4, (40, 1)), "color": torch.randint(-3, 4, (40, 3))}
    e2 = encode_inter(sym, layer, 4, 0.01)
    d2 = decode_inter(e2, layer)
    assert all(torch.equal(d2[k], sym[k]) for k in sym)
    assert len(e2.data) == e2.header_bytes + sum(e2.layer_bytes)
    d1 = decode_inter(e2.data[:e2.bytes_upto(1)], layer, 1)
    assert torch.equal(d1["grid"], sym["grid"])
    for k in ("log_scale", "opacity", "color"):
        assert torch.equal(d1[k][layer == 1], sym[k][layer == 1]) and not d1[k][layer > 1].any()
    with pytest.raises(ParameterError):
        decode_key(enc, 5)


needs_x264 = pytest.mark.skipif(h264_encoder() is None, reason="this PyAV build has no libx264")


def _attribute_video(T=5, n=300, C=17, seed=0):
    """Smooth 8-bit attribute planes that drift over time (like sorted, moving Gaussians)."""
    rng = np.random.default_rng(seed)
    base = np.cumsum(rng.integers(-2, 3, (n, C)), 0) + 128
    return np.clip(np.stack([base + t * rng.integers(-1, 2, (1, C)) for t in range(T)]), 0, 255).astype(np.uint8)


def test_attribute_planes_layout():
    assert [plane_shape(n) for n in (1, 4, 5, 17, 100, 16667)] == [(2, 2), (2, 2), (2, 4), (4, 6), (10, 10), (130, 130)]
    sym = _attribute_video(T=2, n=17, C=5)
    frames = attribute_frames(sym)
    assert frames.shape == (2, 3, 4, 12)  # 5 channels: two tiles of three planes, 17 Gaussians in 4 x 6
    assert frames[1, 1, 0, 6 + 3] == sym[1, 3, 4]  # channel 4 = plane 1 of tile 1; Gaussian 3 at (0, 3)
    assert frames[0, 2, 3, 11] == 0  # padding
    assert np.array_equal(attribute_symbols(frames, 17, 5), sym)
    with pytest.raises(TypeError, match="uint8"):
        attribute_frames(sym.astype(np.int16))
    with pytest.raises(ParameterError, match="n="):
        plane_shape(0)


@needs_x264
def test_h264_qp0_is_lossless_and_qp20_close():
    frames = attribute_frames(_attribute_video())
    assert np.array_equal(decode_h264(encode_h264(frames, qp=0)), frames)
    data = encode_h264(frames)  # qp 20
    err = np.abs(decode_h264(data).astype(int) - frames)
    assert err.mean() < 2 and err.max() <= 20 and err.max() > 0  # lossy, bounded
    assert len(data) < len(encode_h264(frames, qp=0))


@needs_x264
def test_h264_stream_has_the_paper_settings():
    import av

    data = encode_h264(attribute_frames(_attribute_video(T=6)), qp=20)
    with av.open(io.BytesIO(data), "r", format="h264") as src:
        types = [av.video.frame.PictureType(f.pict_type).name for f in src.decode(video=0)]
    assert types[0] == "I" and set(types) <= {"I", "P"} and "P" in types and len(types) == 6
    sei = data[data.index(b"options:"):].split(b"\x00")[0].decode()  # x264 writes its settings into the stream
    for option in ("bframes=0", " ref=3", "rc=cqp", "qp=20", "subme=7"):  # subme 7 = preset medium
        assert option in sei, option


@needs_x264
def test_h264_bad_input():
    frames = attribute_frames(_attribute_video(T=2, n=16, C=3))
    for qp in (-1, 52, 20.0):
        with pytest.raises(ParameterError, match="qp"):
            encode_h264(frames, qp=qp)
    with pytest.raises(TypeError, match="uint8"):
        encode_h264(frames.astype(np.float32))
    with pytest.raises(ValueError, match="three planes"):
        encode_h264(np.zeros((2, 4, 8, 8), dtype=np.uint8))
    with pytest.raises(ValueError, match="even"):
        encode_h264(np.zeros((2, 3, 7, 8), dtype=np.uint8))


def test_h264_unavailable_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(bitstream, "h264_encoder", lambda: None)
    with pytest.raises(H264Unavailable, match="libx264"):
        encode_h264(np.zeros((2, 3, 8, 8), dtype=np.uint8))


def test_bd_metrics():
    r, p = [100, 200, 400, 800], [30.0, 32.0, 33.0, 33.5]
    assert bd_psnr(r, p, r, p) == 0.0 and bd_rate(r, p, r, p) == pytest.approx(0.0, abs=1e-12)
    assert bd_psnr(r, p, r, [v + 1.5 for v in p]) == pytest.approx(1.5)
    assert bd_rate(r, p, [v * 0.5 for v in r], p) == pytest.approx(-50.0)
    # hand case with straight lines: PSNR = 10 log10(rate) vs 10 log10(rate) + 2 over log-rates [2, 3]
    r2 = [100, 1000]
    assert bd_psnr(r2, [20.0, 30.0], r2, [22.0, 32.0]) == pytest.approx(2.0)
    assert bd_rate(r2, [20.0, 30.0], r2, [22.0, 32.0]) == pytest.approx(100 * (10 ** -0.2 - 1))
    assert math.isnan(bd_psnr([1, 2], [1, 2], [10, 20], [1, 2]))
    with pytest.raises(ParameterError):
        bd_psnr([1], [1], [1, 2], [1, 2])


def test_bd_on_non_monotone_curves_uses_the_monotone_envelope():
    """A top layer that adds bytes and lowers PSNR must not turn into a large BD-rate.
    The recorded keyframe curves (full vs no rate term): bytes within 0.5 %, the last point of each lowers
    PSNR. Sorting by PSNR and fitting the zig-zag gave +49.75 %; on the monotone part it is about −0.5 %."""
    full = ([618, 821, 1014, 1205], [22.8353, 26.5221, 26.6761, 26.5521])
    free = ([617, 822, 1015, 1211], [22.8862, 26.5506, 26.6779, 26.5390])
    r = bd_rate(*full, *free)
    assert -1.0 < r < 0.0, r
    assert r == pytest.approx(bd_rate(full[0][:3], full[1][:3], free[0][:3], free[1][:3]))  # the monotone part
    # a dominated point changes nothing: curve 2 = curve 1 at 1.1x the bytes is +10 % with or without it
    rate, psnr = [100, 200, 400, 800], [30.0, 32.0, 33.0, 33.5]
    worse = ([1.1 * b for b in rate] + [1000.0], psnr + [33.2])
    assert bd_rate(rate, psnr, *worse) == pytest.approx(10.0)
    assert bd_psnr(rate, psnr, *worse) == pytest.approx(bd_psnr(rate, psnr, worse[0][:4], psnr))
    assert rd_envelope(*worse)[2] == [4]
    # unsorted input and an equal-rate duplicate: sorted by rate, the better of the two kept
    r_env, p_env, dropped = rd_envelope([400, 100, 200, 200], [33.0, 30.0, 31.0, 32.0])
    assert r_env.tolist() == [100, 200, 400] and p_env.tolist() == [30.0, 32.0, 33.0] and dropped == [2]
    # refusing instead of fitting the envelope
    with pytest.raises(ParameterError, match="curve 2.*PSNR rising"):
        bd_rate(rate, psnr, *worse, non_monotone="raise")
    with pytest.raises(ParameterError, match="non_monotone"):
        bd_psnr(rate, psnr, rate, psnr, non_monotone="sort")
    assert bd_rate(rate, psnr, rate, psnr, non_monotone="raise") == pytest.approx(0.0, abs=1e-12)


def test_motion_groups():
    dmu = [float("nan"), 0.2, 3.0, 0.1, 0.4]
    assert motion_groups(dmu, math.inf) == [0]
    assert motion_groups(dmu, 1e-6) == [0, 1, 2, 3, 4]
    assert motion_groups(dmu, 1.0) == [0, 2]
    for bad in (0, -1.0, True):
        with pytest.raises(ParameterError):
            motion_groups(dmu, bad)


def test_global_shift_finds_a_roll():
    f = make_frames(16, 3)[0]
    d = global_shift(f, torch.roll(f, shifts=(2, -3), dims=(0, 1)))
    assert d.tolist() == pytest.approx([-3.0, 2.0], abs=1e-6)


def test_frames_and_config_validation():
    fr = make_frames(16, 4)
    assert fr.shape == (4, 16, 16, 3) and 0 <= float(fr.min()) and float(fr.max()) <= 1
    with pytest.raises(ParameterError):
        check_frames([torch.zeros(8, 8, 3), torch.zeros(8, 9, 3)])
    for bad in (dict(L=0), dict(L=200), dict(lambda_psi=-1.0), dict(tau_mu=0.0), dict(q=0.0), dict(counts=(1, 2, 3)),
                dict(psi_mode="x")):
        with pytest.raises(ParameterError):
            FAST.replace(**bad)


def test_sequence_decodes_bit_exactly_and_groups_follow_tau():
    fr = make_frames(16, 3)
    one = encode_sequence(fr, FAST.replace(tau_mu=math.inf))
    assert one.groups == [0] and [f["kind"] for f in one.frames] == ["key", "inter", "inter"]
    for (a, _), (b, _) in zip(decode_sequence(one.encoded, FAST.q, 16, 16), one.decoded):
        assert all(torch.equal(x, y) for x, y in zip(a.tensors().values(), b.tensors().values()))
    every = encode_sequence(fr, FAST.replace(tau_mu=1e-9))
    assert every.groups == [0, 1, 2]
    c = one.rd_curve()
    assert c["bytes"] == sorted(c["bytes"]) and len(c["psnr"]) == 3


def test_explorer_view_is_pure_and_controls_match():
    from companion.gaussian_video.explorer import explorer_controls, explorer_data, explorer_view

    fr = make_frames(16, 3)
    res = encode_sequence(fr, FAST.replace(tau_mu=math.inf))
    data = explorer_data(fr, res)
    fig, readout = explorer_view(data, l=1, lambda_psi=0.01, psi_mode="opacity", frame=2, tau_mu=0.5)
    again, _ = explorer_view(data, l=1, lambda_psi=0.01, psi_mode="opacity", frame=2, tau_mu=0.5)
    assert isinstance(fig, go.Figure) and fig.to_json() == again.to_json() and "dB" in readout
    controls = explorer_controls(data)
    assert set(controls) == {"l", "lambda_psi", "psi_mode", "frame", "tau_mu"}
    explorer_view(data, **{k: c.value for k, c in controls.items()})
    for bad in (dict(l=0), dict(l=4), dict(frame=3), dict(tau_mu=0.0), dict(psi_mode="x"), dict(lambda_psi=-1.0)):
        with pytest.raises(ParameterError):
            explorer_view(data, **bad)

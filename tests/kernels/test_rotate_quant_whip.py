"""Fused rotate + per-token fake-quant + Whip sums (paper 08, DartQuant): Triton kernel vs PyTorch.

On the CPU the kernel runs in the Triton interpreter (TRITON_INTERPRET=1; fp32/fp16, small ragged shapes);
the test marked ``gpu`` runs compiled in bf16 at d = 4096. The kernel is checked against the reference in
``companion_kernels.rotate_quant_whip.reference`` and against the package's own PyTorch functions
(``companion.dartquant.quant.quantize_activations`` and ``companion.dartquant.whip.whip_loss``). Outputs are
pre-filled with NaN so unwritten elements are caught; a mutant with a wrong scale must fail the comparison.
Every schedule (``variant`` "fused", "split" and "matmul") is checked; "split" also against "fused" (the same
values, the Whip sums up to the order of the fp32 additions), "matmul" against the reference bit for bit (the
same GEMM call).
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton.jit decorates the kernels

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from companion.dartquant.quant import quantize_activations  # noqa: E402
from companion.dartquant.whip import whip_loss  # noqa: E402
from companion_kernels.rotate_quant_whip import rotate_quant_whip, rotate_quant_whip_reference  # noqa: E402
from companion_kernels.rotate_quant_whip import triton as rqw  # noqa: E402
from companion_kernels.rotate_quant_whip.reference import fake_quant_rows  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
INTERP = DEV == "cpu"


def _rotation(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))[0].float()


def _acts(t, n, seed=0):
    """Gaussian activations with two massive channels (what DartQuant rotates)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, n, generator=g)
    x[:, 1] *= 20.0
    x[:, n // 2] *= -12.0
    return x


def _launch(x, r, bits, clip=0.9, variant="fused", tiles=None):
    out = torch.full_like(x, float("nan"))
    whip = torch.full((x.shape[0],), float("nan"), device=x.device)
    rqw.rotate_quant_whip_triton(x, r, bits, clip, out=out, whip=whip, interpret=INTERP, variant=variant, tiles=tiles)
    assert torch.isfinite(out).all() and torch.isfinite(whip).all(), "the kernel left elements unwritten"
    return out, whip


def _steps(y, bits, clip=0.9):
    """Each token's quantization step s (from the fp32 rounded Y), shape [T, 1]."""
    yf = y.float()
    hi = yf.amax(-1, keepdim=True).clamp(min=0) * clip
    lo = yf.amin(-1, keepdim=True).clamp(max=0) * clip
    return ((hi - lo) / (2 ** bits - 1)).clamp_min(1e-30)


def _agrees(yq, ref, y, bits, *, max_frac=0.02):
    """Kernel output agrees with the reference up to GEMM rounding: every element within one step of its
    token, and at most ``max_frac`` of the elements off the reference's grid point."""
    d = (yq.float() - ref.float()).abs()
    step = _steps(y, bits)
    return bool((d <= 1.01 * step + 1e-6).all()) and float((d > 1e-3 * step).float().mean()) <= max_frac


@pytest.mark.parametrize("t,n,bits", [(1, 16, 4), (17, 16, 2), (37, 16, 4), (17, 24, 3), (37, 24, 5), (17, 48, 8),
                                      (1, 48, 6)])
def test_exact_on_dyadic_inputs(t, n, bits):
    """X R exact in fp32 (entries k/8 times ±1/4): the quantized output must equal the reference bit for bit."""
    g = torch.Generator().manual_seed(t * 100 + n + bits)
    x = torch.randint(-64, 65, (t, n), generator=g).float() / 8
    x[:, 0] *= 8  # an outlier channel
    r = (torch.randint(0, 2, (n, n), generator=g).float() * 2 - 1) / 4
    x, r = x.to(DEV), r.to(DEV)
    out, whip = _launch(x, r, bits)
    ref, wref = rotate_quant_whip_reference(x, r, bits)
    assert torch.equal(out, ref)
    torch.testing.assert_close(whip, wref, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("t,n,bits", [(5, 16, 2), (5, 16, 8), (37, 24, 2), (37, 24, 4), (37, 24, 8), (70, 64, 4)])
def test_matches_the_package_quantizer_and_whip(t, n, bits):
    x, r = _acts(t, n, seed=t).to(DEV), _rotation(n, seed=n).to(DEV)
    out, whip = _launch(x, r, bits)
    y = x @ r
    pkg = quantize_activations(y, bits=bits, clip=0.9)  # the package's activation quantizer
    assert _agrees(out, pkg, y, bits)
    assert torch.allclose(whip.mean(), whip_loss(y), rtol=1e-5)  # Eq. 4's loss is the mean of the sums
    torch.testing.assert_close(whip, torch.exp(-y.abs()).sum(-1), rtol=1e-5, atol=1e-6)
    ref, _ = rotate_quant_whip_reference(x, r, bits)
    assert torch.equal(ref, pkg)  # the kernel package's reference is the package's quantizer


@pytest.mark.parametrize("variant,tile", [(v, t) for v, tiles in rqw.GPU_TILES.items() for t in tiles])
def test_the_gpu_tiles(variant, tile):
    """The tile shapes the GPU benchmark tries give the same answer (here wider than the width: all masked)."""
    x, r = _acts(70, 40, seed=11).to(DEV), _rotation(40, seed=12).to(DEV)
    out, whip = _launch(x, r, 4, variant=variant, tiles=tile)
    ref, wref = rotate_quant_whip_reference(x, r, 4)
    assert _agrees(out, ref, x @ r, 4)
    torch.testing.assert_close(whip, wref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("variant", ["fused", "split"])
def test_tma_tiles_on_a_transposed_rotation_and_rows_tma_cannot_address(variant):
    """A tile with TMA loads reads a transposed R through a row-major copy (the same answer as pointer loads);
    rows of 72 bytes (fp16, width 36: not a multiple of 16 bytes) are refused, naming the width."""
    x, r = _acts(33, 40, seed=13).to(DEV), _rotation(40, seed=14).to(DEV)
    assert r.stride(1) != 1  # the test rotation is a transposed view
    tile = (16, 32, 32, 4, 1, 1)
    out, whip = _launch(x, r, 4, variant=variant, tiles=tile)
    want, wwant = _launch(x, r, 4, variant=variant, tiles=tile[:5] + (0,))
    assert torch.equal(out, want)
    torch.testing.assert_close(whip, wwant, rtol=1e-6, atol=0)
    xh, rh = _acts(5, 36, seed=15).to(DEV).half(), torch.eye(36, device=DEV).half()
    with pytest.raises(ValueError, match="a width of 36 in torch.float16 is 72 bytes"):
        _launch(xh, rh, 4, variant=variant, tiles=tile)


def test_the_kernel_study_tries_the_gpu_tiles():
    from companion.dartquant.scale_kernel import GPU_PROFILE

    assert {v: [tuple(t) for t in ts] for v, ts in GPU_PROFILE["tiles"].items()} == {
        v: list(ts) for v, ts in rqw.GPU_TILES.items()}

def test_fp16_through_the_api_with_leading_dims():
    x = _acts(2 * 19, 32, seed=3).reshape(2, 19, 32).to(DEV, torch.float16)
    r = _rotation(32, seed=4).to(DEV, torch.float16)
    out, whip = rotate_quant_whip(x, r, bits=4, impl="triton")
    assert out.shape == x.shape and out.dtype == torch.float16 and whip.shape == (2, 19) and whip.dtype == torch.float32
    ref, wref = rotate_quant_whip(x, r, bits=4, impl="reference")
    y = (x @ r).reshape(-1, 32)
    assert _agrees(out.reshape(-1, 32), ref.reshape(-1, 32), y, 4)
    torch.testing.assert_close(whip, wref, rtol=1e-3, atol=1e-3)
    auto, _ = rotate_quant_whip(x, r, bits=4, impl="auto")
    assert _agrees(auto.reshape(-1, 32), ref.reshape(-1, 32), y, 4)


def test_all_zero_token_and_one_sided_tokens():
    x = _acts(20, 16, seed=5)
    x[3] = 0.0  # no range: the quantizer falls back to [-1, 1] and returns zeros
    r = torch.eye(16)
    x[7] = x[7].abs() + 0.1  # all positive: y_min clamps to 0
    x, r = x.to(DEV), r.to(DEV)
    out, whip = _launch(x, r, 4)
    ref, wref = rotate_quant_whip_reference(x, r, 4)
    assert torch.equal(out, ref) and float(out[3].abs().max()) == 0.0
    assert abs(float(whip[3]) - 16.0) < 1e-6
    torch.testing.assert_close(whip, wref)


def _whip_rtol(n):
    """Two fp32 sums of the same n positive terms in different orders differ relatively by at most
    2(n − 1)·2^-24 (each is within (n − 1)·2^-24 of the exact sum), plus one ulp per term for exp."""
    return 2 * n * 2.0 ** -24


@pytest.mark.parametrize("t,n,bits,dtype", [(37, 24, 4, torch.float32), (21, 80, 2, torch.float32),
                                            (5, 48, 8, torch.float32), (19, 40, 4, torch.float16),
                                            (181, 40, 4, torch.float32)])
def test_split_equals_the_reference_and_the_fused_variant(t, n, bits, dtype):
    """"split" on widths and token counts that are not multiples of its tiles (two to three column blocks of
    partials, a ragged last row block), with an all-zero token (the [−1, 1] range rule): dyadic inputs make
    X R exact, so both variants must equal the reference bit for bit; the Whip sums agree within the
    summation-order bound, and a sum that drops the last (tail) column, or counts it twice, is outside it.
    181 tokens are 12 row blocks of the interpreter's 16: more than the GROUP_M = 8 of one launch group, so
    the grouped order has a second group, with 4 row blocks."""
    g = torch.Generator().manual_seed(t * 100 + n + bits)
    x = torch.randint(-16, 17, (t, n), generator=g).float() / 8
    x[:, 0] *= 4  # an outlier channel
    x[t // 2] = 0.0
    r = (torch.randint(0, 2, (n, n), generator=g).float() * 2 - 1) / 8
    x, r = x.to(DEV, dtype), r.to(DEV, dtype)
    out, whip = _launch(x, r, bits, variant="split")
    ref, wref = rotate_quant_whip_reference(x, r, bits)
    assert torch.equal(out, ref) and float(out[t // 2].abs().max()) == 0.0
    fused, wfused = _launch(x, r, bits)
    assert torch.equal(out, fused)
    tol = _whip_rtol(n)
    for other in (wref, wfused):
        torch.testing.assert_close(whip, other, rtol=tol, atol=0.0)
    tail = torch.exp(-(x @ r).float()[:, -1].abs())
    for wrong in (wref - tail, wref + tail):
        assert not torch.allclose(whip, wrong, rtol=tol, atol=0.0)


def test_split_on_rotated_activations():
    """"split" on Gaussian activations with massive channels and a dense rotation: within GEMM rounding of the
    package's quantizer, the same values as "fused", Whip sums within the summation-order bound of fused's."""
    x, r = _acts(45, 72, seed=13).to(DEV), _rotation(72, seed=14).to(DEV)
    out, whip = _launch(x, r, 4, variant="split")
    y = x @ r
    assert _agrees(out, quantize_activations(y, bits=4, clip=0.9), y, 4)
    fused, wfused = _launch(x, r, 4)
    assert torch.equal(out, fused)  # the same tiles in K: the same rounded y
    torch.testing.assert_close(whip, wfused, rtol=_whip_rtol(72), atol=0.0)
    api, wapi = rotate_quant_whip(x.reshape(5, 9, 72), r, bits=4, impl="triton", variant="split")
    assert torch.equal(api.reshape(45, 72), out) and torch.equal(wapi.reshape(45), whip)


@pytest.mark.parametrize("t,n,bits,dtype", [(37, 24, 4, torch.float32), (21, 80, 2, torch.float32),
                                            (19, 40, 4, torch.float16)])
def test_matmul_variant_equals_the_reference_bit_for_bit(t, n, bits, dtype):
    """"matmul": the reference's own GEMM (torch.mm) then the Triton row pass, whose range comes from a sweep
    over Y (two to three column steps, a ragged last row block, an all-zero token): the same quantized Y as
    the reference bit for bit on Gaussian activations with a dense rotation, Whip sums within the
    summation-order bound."""
    x, r = _acts(t, n, seed=t + n).to(DEV, dtype), _rotation(n, seed=n).to(DEV, dtype)
    x[t // 2] = 0.0
    out, whip = _launch(x, r, bits, variant="matmul")
    ref, wref = rotate_quant_whip_reference(x, r, bits)
    assert torch.equal(out, ref) and float(out[t // 2].abs().max()) == 0.0
    torch.testing.assert_close(whip, wref, rtol=_whip_rtol(n), atol=0.0)
    api, wapi = rotate_quant_whip(x.reshape(1, t, n), r, bits=bits, impl="triton", variant="matmul")
    assert torch.equal(api.reshape(t, n), out) and torch.equal(wapi.reshape(t), whip)


def test_a_bad_variant_is_rejected():
    allowed = r"variant='tiled' is not allowed; choose one of \('fused', 'split', 'matmul'\)"
    with pytest.raises(ValueError, match=allowed):
        rotate_quant_whip(torch.zeros(3, 8, device=DEV), torch.eye(8, device=DEV), variant="tiled")
    with pytest.raises(ValueError, match="variant=None"):
        rotate_quant_whip(torch.zeros(3, 8, device=DEV), torch.eye(8, device=DEV), impl="reference", variant=None)
    with pytest.raises(ValueError, match="'fused', 'split' or 'matmul'"):
        rqw.rotate_quant_whip_triton(torch.zeros(3, 8, device=DEV), torch.eye(8, device=DEV), 4, 0.9,
                                     interpret=INTERP, variant="Split")


def _wrong_scale(y, bits, factor, clip=0.9):
    """The quantizer with its step s multiplied by ``factor`` (1.0: the right one)."""
    s = _steps(y, bits, clip) * factor
    z = torch.round(-(y.amin(-1, keepdim=True).clamp(max=0) * clip) / s)
    return s * (torch.clamp(torch.round(y / s) + z, 0, 2 ** bits - 1) - z)


def test_a_wrong_scale_fails_the_comparison():
    """Mutants: the kernel run with clip 0.91, or with 3 instead of 4 bits, must not pass as clip 0.9 / 4 bits."""
    x, r = _acts(37, 24, seed=6).to(DEV), _rotation(24, seed=7).to(DEV)
    y = x @ r
    ref = fake_quant_rows(y, 4, 0.9)
    good, _ = _launch(x, r, 4)
    assert _agrees(good, ref, y, 4)
    wrong_clip, _ = _launch(x, r, 4, clip=0.91)
    assert not _agrees(wrong_clip, ref, y, 4)
    wrong_bits, _ = _launch(x, r, 3)
    assert not _agrees(wrong_bits, ref, y, 4)
    assert not _agrees(_wrong_scale(y, 4, 1.01), ref, y, 4)  # the reference's formula with a 1 % scale error
    assert _agrees(_wrong_scale(y, 4, 1.0), ref, y, 4)


@triton.jit
def _rint_kernel(v_ptr, o_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(o_ptr + i, rqw._rint(tl.load(v_ptr + i)))


def test_round_half_to_even_like_torch():
    v = torch.tensor([-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 0.49999997, 2.5000002, -3.7, 7.0, -0.0, 254.5,
                      1e-8, -255.49998], dtype=torch.float32, device=DEV)
    o = torch.full_like(v, float("nan"))
    _rint_kernel[(1,)](v, o, N=16)
    assert torch.equal(o, torch.round(v))


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        ({"bits": 1}, ValueError, "bits=1"),
        ({"bits": 9}, ValueError, "bits=9"),
        ({"bits": 4.0}, ValueError, "bits=4.0"),
        ({"clip": 0.0}, ValueError, "clip"),
        ({"clip": 1.5}, ValueError, "clip"),
        ({"impl": "cuda"}, ValueError, "impl"),
    ],
)
def test_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        rotate_quant_whip(torch.zeros(3, 8, device=DEV), torch.eye(8, device=DEV), **kwargs)


def test_bad_tensors():
    x = torch.randn(4, 8, device=DEV)
    with pytest.raises(ValueError, match="square"):
        rotate_quant_whip(x, torch.zeros(8, 6, device=DEV))
    with pytest.raises(ValueError, match="width mismatch"):
        rotate_quant_whip(x, torch.eye(6, device=DEV))
    with pytest.raises(ValueError, match=r"\[n, n\]"):
        rotate_quant_whip(x, torch.zeros(8, device=DEV))
    with pytest.raises(TypeError, match="dtype"):
        rotate_quant_whip(x, torch.eye(8, device=DEV, dtype=torch.float64))
    with pytest.raises(TypeError, match="floating-point"):
        rotate_quant_whip(x.long(), torch.eye(8, device=DEV))
    with pytest.raises(TypeError, match="float64"):
        rotate_quant_whip(x.double(), torch.eye(8, device=DEV, dtype=torch.float64), impl="triton")
    for bad in (float("nan"), float("inf"), -float("inf")):
        xb = x.clone()
        xb[2, 3] = bad
        with pytest.raises(ValueError, match="NaN or infinite"):
            rotate_quant_whip(xb, torch.eye(8, device=DEV))
    rb = torch.eye(8, device=DEV)
    rb[0, 0] = float("nan")
    with pytest.raises(ValueError, match="r has 1 NaN"):
        rotate_quant_whip(x, rb)


def test_reference_runs_in_float64():
    x, r = _acts(9, 16, seed=8).double(), _rotation(16).double()
    out, whip = rotate_quant_whip(x, r, bits=4, impl="reference")
    assert out.dtype == torch.float64 and whip.dtype == torch.float64


def test_triton_impl_needs_cuda_or_interpreter(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        rotate_quant_whip(torch.zeros(2, 4), torch.eye(4), impl="triton")


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["fused", "split", "matmul"])
@pytest.mark.parametrize("bits", [4, 8])
def test_gpu_bf16_llm_width(bits, variant):
    from companion.dartquant.hadamard import random_hadamard

    x = _acts(3000, 4096, seed=9).to(DEV, torch.bfloat16)
    r = random_hadamard(4096, seed=10).to(DEV, torch.bfloat16)  # QuaRot's R1 start (a CPU QR at 4096 is slow)
    out, whip = rotate_quant_whip(x, r, bits=bits, impl="triton", variant=variant)
    y = x @ r
    ref, wref = rotate_quant_whip_reference(x, r, bits)
    assert _agrees(out, ref, y, bits, max_frac=0.05)
    torch.testing.assert_close(whip, wref, rtol=2e-3, atol=1e-2)

"""ZeroS chunked linear attention (paper 04): Triton kernels vs the explicit O(T^2) oracle.

On the CPU the kernels run in the Triton interpreter (TRITON_INTERPRET=1, fp32/fp16); on a GPU
(tests marked ``gpu``) in bf16 at a larger size. Every buffer the kernels write is pre-filled with
NaN, so an element a kernel forgets to write fails the comparison. The per-step scalars (running
log-sum-exp, cumulative sums, gates) and their backward are computed inside the kernels: the tests
forbid PyTorch's scans while the kernel path runs, and cover a ragged last chunk (T not a multiple of
the chunk) at every chunk size.
"""

import os

from types import SimpleNamespace

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton.jit decorates the kernels

from companion_kernels.zeros_linear import zeros_linear, zeros_linear_reference  # noqa: E402
from companion_kernels.zeros_linear import triton as zl_triton  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {torch.float32: 3e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


@pytest.fixture(autouse=True)
def nan_buffers(monkeypatch):
    def full_nan(*shape, device, dtype):
        return torch.full(shape, float("nan"), device=device, dtype=dtype)

    monkeypatch.setattr(zl_triton, "_empty", full_nan)


def _inputs(B, T, H, d, dv, dtype, *, seed=0, s_scale=2.0, s_trend=0.0, device=DEV, sigma0=False):
    g = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(B, T, H, d, generator=g), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, d, generator=g), dim=-1)
    v = torch.randn(B, T, H, dv, generator=g)
    s = torch.randn(B, T, H, generator=g) * s_scale + s_trend * torch.linspace(0, 1, T)[None, :, None]
    s1, sh = torch.rand(B, T, H, generator=g), torch.rand(B, T, H, generator=g)
    s0 = torch.rand(B, T, H, generator=g) * 2 - 1 if sigma0 else None
    qkv = [x.to(device=device, dtype=dtype) for x in (q, k, v)]
    rest = [x.to(device) if x is not None else None for x in (s, s1, sh, s0)]
    return qkv + rest


def _grads(fn, args, go):
    leaves = [a.detach().clone().requires_grad_() if a is not None else None for a in args]
    out = fn(*leaves)
    (out.float() * go).sum().backward()
    return out, [x.grad for x in leaves if x is not None]


@pytest.fixture
def no_torch_scans(monkeypatch):
    """The kernel path must not fall back to PyTorch scans over T."""
    def forbidden(*a, **k):
        raise AssertionError("a PyTorch scan ran on the kernel path")

    for name in ("logcumsumexp", "cumsum", "cummax"):
        monkeypatch.setattr(torch, name, forbidden)
        monkeypatch.setattr(torch.Tensor, name, forbidden)


@pytest.mark.parametrize("dtype, shape, chunk, sigma0", [
    (torch.float32, (2, 37, 3, 8, 5), 16, False),    # odd T, d and dv below the tile
    (torch.float16, (1, 70, 2, 16, 24), 32, True),   # partial last chunk, zero-order gate
    (torch.float32, (1, 150, 2, 16, 16), 64, True),  # ragged: 2 full chunks of 64 + 22 rows
    (torch.float32, (1, 45, 1, 16, 16), 64, False),  # T below one chunk
    (torch.float32, (1, 128, 1, 16, 16), 64, False),  # T a multiple of the chunk
    (torch.float16, (1, 131, 2, 32, 32), 128, False),  # chunk 128, ragged by 3 rows
    (torch.float32, (1, 40, 1, 80, 16), 16, True),   # d = 80: two K tiles (64 + 16) in the state passes
])
def test_forward_backward_match_reference(dtype, shape, chunk, sigma0, no_torch_scans):
    B, T, H, d, dv = shape
    args = _inputs(B, T, H, d, dv, dtype, seed=T, sigma0=sigma0)
    go = torch.randn(B, T, H, dv, generator=torch.Generator().manual_seed(1)).to(DEV)
    got, g_got = _grads(lambda *a: zeros_linear(*a, impl="triton", chunk_size=chunk), args, go)
    ref_args = [a.float() if a is not None else None for a in args]
    want, g_want = _grads(lambda *a: zeros_linear_reference(*a), ref_args, go)
    assert got.dtype == dtype and got.shape == (B, T, H, dv)
    tol = TOL[dtype]
    torch.testing.assert_close(got.float(), want, atol=tol, rtol=tol)
    names = ["q", "k", "v", "s", "sigma1", "sigmah"] + (["sigma0"] if sigma0 else [])
    for name, a, b in zip(names, g_got, g_want):
        assert torch.isfinite(a).all(), f"non-finite gradient for {name}"
        scale = b.abs().max().item() + 1e-6
        assert (a.float() - b).abs().max().item() <= 4 * tol * max(1.0, scale), f"gradient of {name} differs"


def test_running_max_is_stable_where_logits_grow():
    """Logits rising by ~300 over the sequence: raw exp overflows float32; the kernel stays exact."""
    args = _inputs(1, 90, 2, 16, 8, torch.float32, seed=5, s_scale=3.0, s_trend=300.0)
    got = zeros_linear(*args, impl="triton", chunk_size=16)
    want = zeros_linear_reference(*[a.double() if a is not None else None for a in args])
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got.double(), want, atol=5e-5, rtol=1e-4)


def test_many_chunks_with_moving_logits_fwd_bwd(no_torch_scans, monkeypatch):
    """17 chunks (ragged last one), logits rising by 120 then falling: the carried log-sum-exp,
    cumulative sum and their reverse carries in the backward against the float64 oracle, with the
    scalars in the three passes of long sequences."""
    monkeypatch.setattr(zl_triton, "_ONE_PROGRAM_T", 0)
    B, T, H, d = 1, 263, 2, 16
    args = _inputs(B, T, H, d, d, torch.float32, seed=21, s_scale=2.0)
    ramp = 120.0 * torch.sin(torch.linspace(0, 3.1, T))[None, :, None].to(DEV)
    args[3] = args[3] + ramp
    go = torch.randn(B, T, H, d, generator=torch.Generator().manual_seed(2)).to(DEV)
    got, g_got = _grads(lambda *a: zeros_linear(*a, impl="triton", chunk_size=16), args, go)
    want, g_want = _grads(lambda *a: zeros_linear_reference(*a), [a.double() if a is not None else None for a in args],
                          go.double())
    torch.testing.assert_close(got.double(), want, atol=5e-5, rtol=1e-4)
    for name, a, b in zip(("q", "k", "v", "s", "sigma1", "sigmah"), g_got, g_want):
        err = (a.double() - b).abs().max().item()
        assert err <= 1e-4 * max(1.0, b.abs().max().item()), (name, err)


@pytest.mark.parametrize("segments", [2, 5, 17])
def test_state_passes_split_into_segments_match_the_oracle(segments, no_torch_scans):
    """The sequential state passes walked in segments side by side (17 chunks, the last one ragged, split
    into 2, 5 and 17 segments: uneven, and one chunk each): the carried totals, in the log-sum-exp frames
    of logits that rise by 120 then fall, give the float64 oracle's output and gradients."""
    B, T, H, d = 1, 263, 2, 16
    args = _inputs(B, T, H, d, d, torch.float32, seed=23, s_scale=2.0, sigma0=True)
    args[3] = args[3] + 120.0 * torch.sin(torch.linspace(0, 3.1, T))[None, :, None].to(DEV)
    go = torch.randn(B, T, H, d, generator=torch.Generator().manual_seed(3)).to(DEV)
    got, g_got = _grads(lambda *a: zl_triton.zeros_linear_triton(*a, chunk_size=16, segments=segments), args, go)
    want, g_want = _grads(lambda *a: zeros_linear_reference(*a), [a.double() if a is not None else None for a in args],
                          go.double())
    torch.testing.assert_close(got.double(), want, atol=5e-5, rtol=1e-4)
    for name, a, b in zip(("q", "k", "v", "s", "sigma1", "sigmah", "sigma0"), g_got, g_want):
        err = (a.double() - b).abs().max().item()
        assert err <= 1e-4 * max(1.0, b.abs().max().item()), (name, err)


@pytest.mark.parametrize("segments, chunk, T, d, dv", [(1, 16, 263, 16, 24), (5, 16, 263, 16, 24), (3, 32, 70, 20, 12)])
def test_fused_forward_equals_the_stored_states_path(segments, chunk, T, d, dv):
    """The fused forward (states in registers, output written from the walk; the segments' totals carried in)
    against the path through stored states and the float64 oracle, head dims that are not powers of two among
    them; its backward is the same kernels'. In one segment the walk computes the per-step scalars itself (the
    forward is one launch): the scalars it stores for the backward equal the scalar passes' up to the order of
    the sums, and the gradients through them the oracle's."""
    args = _inputs(1, T, 2, d, dv, torch.float32, seed=25, s_scale=2.0, sigma0=True)
    args[3] = args[3] + 120.0 * torch.sin(torch.linspace(0, 3.1, T))[None, :, None].to(DEV)
    go = torch.randn(1, T, 2, dv, generator=torch.Generator().manual_seed(4)).to(DEV)
    run = lambda fused: lambda *a: zl_triton.zeros_linear_triton(*a, chunk_size=chunk, segments=segments,  # noqa: E731
                                                                   fused=fused)
    got, g_got = _grads(run(True), args, go)
    want, g_want = _grads(run(False), args, go)
    if segments == 1:
        q, k, v, s, s1, sh, s0 = args
        walked = zl_triton._fwd_out_fused(q, k, v, s, s1, sh, s0, chunk, segments)[1:]
        for a, b in zip(walked, zl_triton._scalars(s, s1, sh, s0, chunk)):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    else:  # the same scalars: the same backward, bit for bit
        torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5)
        for a, b in zip(g_got, g_want):
            torch.testing.assert_close(a, b, atol=0, rtol=0)
    ref, g_ref = _grads(lambda *a: zeros_linear_reference(*a), [a.double() for a in args], go.double())
    torch.testing.assert_close(got.double(), ref, atol=5e-5, rtol=1e-4)
    for name, a, b in zip(("q", "k", "v", "s", "sigma1", "sigmah", "sigma0"), g_got, g_ref):
        assert (a.double() - b).abs().max().item() <= 1e-4 * max(1.0, b.abs().max().item()), name
    with pytest.raises(ValueError, match="head dims up to 128; got d=144"):
        q = torch.zeros(1, 4, 1, 144, device=DEV)
        zl_triton.zeros_linear_triton(q, q, q, *(torch.zeros(1, 4, 1, device=DEV) for _ in range(3)), fused=True)


def test_segment_split_of_the_state_passes():
    """(chunks per segment, segments): as asked, capped at one segment per chunk, never an empty segment;
    automatic on the CPU: one segment."""
    g = dict(NT=17, NKT=1, V=16, B=1, H=2)
    cpu = torch.device("cpu")
    assert zl_triton._segments(g, cpu, None) == (17, 1)
    assert zl_triton._segments(g, cpu, 1) == (17, 1)
    assert zl_triton._segments(g, cpu, 5) == (4, 5)
    assert zl_triton._segments(g, cpu, 6) == (3, 6)  # ceil(17 / 6) = 3 chunks a segment -> 6 segments
    assert zl_triton._segments(g, cpu, 16) == (2, 9)  # no empty segment
    assert zl_triton._segments(g, cpu, 100) == (1, 17)


def test_automatic_split_on_a_gpu_of_132_sms(monkeypatch):
    """The automatic split where CUDA reports 132 SMs (an H200): stored states about four programs per SM with
    at least 16 chunks a segment, the fused walk about two (head, segment) pairs per SM with at least two chunks,
    and one segment where either gives fewer than three."""
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(multi_processor_count=132))
    gpu = torch.device("cuda")
    heads16 = lambda NT: dict(NT=NT, NKT=1, V=64, B=1, H=16)  # noqa: E731  the study's B=1, H=16, d=64
    assert zl_triton._segments(heads16(1024), gpu, None) == (94, 11)  # round(528 / 48) = 11
    assert zl_triton._segments(heads16(128), gpu, None) == (16, 8)
    assert zl_triton._segments(heads16(32), gpu, None) == (32, 1)  # two segments of 16: fewer than three
    assert zl_triton._segments(heads16(1024), gpu, None, fused=True) == (64, 16)  # round(264 / 16) = 16
    assert zl_triton._segments(heads16(32), gpu, None, fused=True) == (2, 16)
    assert zl_triton._segments(heads16(4), gpu, None, fused=True) == (4, 1)  # at most NT // 2 = 2: fewer than three
    assert zl_triton._segments(dict(NT=1024, NKT=1, V=64, B=8, H=32), gpu, None, fused=True) == (1024, 1)
    assert zl_triton._segments(heads16(1024), gpu, 5, fused=True) == (205, 5)  # as asked


@pytest.mark.parametrize("scan_block, chunks_per_program, one_program_t", [(1024, 16, 0), (2, 8, 0), (1024, 16, 8192)])
def test_scalar_passes_match_the_definition(monkeypatch, scan_block, chunks_per_program, one_program_t):
    """The three scalar passes (chunk totals, scan over chunks, rows) against float64 scans in PyTorch,
    with a ragged last chunk, logits rising by 200, (scan_block=2) the carry between scan blocks and
    (8 chunks a program, 12 chunks) a last program with chunks past the end; and the one-launch form
    of short sequences."""
    monkeypatch.setattr(zl_triton, "_SCAN_BLOCK", scan_block)
    monkeypatch.setattr(zl_triton, "_CHUNKS_PER_PROGRAM", chunks_per_program)
    monkeypatch.setattr(zl_triton, "_ONE_PROGRAM_T", one_program_t)
    B, T, H, chunk = 2, 181, 3, 16  # 12 chunks, the last one with 5 rows
    g = torch.Generator().manual_seed(11)
    s = torch.randn(B, T, H, generator=g) * 3 + 200 * torch.linspace(0, 1, T)[None, :, None]
    s1, sh, s0 = (torch.rand(B, T, H, generator=g) for _ in range(3))
    rows4, lb, pb = zl_triton._scalars(*(x.to(DEV) for x in (s, s1, sh, s0)), chunk)
    sd = (s - s[:, :1]).double()
    t = torch.arange(1, T + 1, dtype=torch.float64)[None, :, None]
    lam, P = torch.logcumsumexp(sd, 1), torch.cumsum(sd, 1)
    b = (s1.double() - sh.double()) / t
    gg = -(b * P + sh.double()) / t + s0.double() / t
    heads = lambda x: x.permute(0, 2, 1).reshape(B * H, T)  # noqa: E731
    for i, want in enumerate((lam, sh.double(), b, gg)):
        torch.testing.assert_close(rows4[:, i].cpu().double(), heads(want), atol=1e-4, rtol=1e-5)
    ends = torch.arange(chunk - 1, T, chunk).tolist() + ([T - 1] if T % chunk else [])
    torch.testing.assert_close(lb.cpu().double(), heads(lam)[:, ends], atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(pb.cpu().double(), heads(P)[:, ends], atol=1e-3, rtol=1e-5)


def test_chunk_size_does_not_change_the_function():
    args = _inputs(1, 50, 1, 16, 16, torch.float32, seed=7)
    outs = [zeros_linear(*args, impl="triton", chunk_size=c) for c in (16, 32, 64, 128)]
    for o in outs[1:]:
        torch.testing.assert_close(o, outs[0], atol=2e-5, rtol=2e-5)


def test_bidirectional_matches_reference():
    args = _inputs(2, 29, 2, 8, 8, torch.float32, seed=9, sigma0=True)
    got = zeros_linear(*args, causal=False, impl="triton")
    want = zeros_linear_reference(*args, causal=False)
    torch.testing.assert_close(got, want, atol=3e-5, rtol=3e-5)


def test_rows_of_the_weights_sum_to_zero_through_the_kernel():
    """With every value equal (v_i = c), o_t = c * sum_i r_{t,i} cos = c * sum_i r_{t,i} when q = k = e1."""
    B, T, H, d = 1, 40, 1, 16
    q = torch.zeros(B, T, H, d, device=DEV)
    q[..., 0] = 1.0
    v = torch.ones(B, T, H, 16, device=DEV)
    g = torch.Generator().manual_seed(3)
    s = (torch.randn(B, T, H, generator=g) * 3).to(DEV)
    s1, sh = torch.rand(B, T, H, generator=g).to(DEV), torch.rand(B, T, H, generator=g).to(DEV)
    out = zeros_linear(q, q.clone(), v, s, s1, sh, impl="triton", chunk_size=16)
    assert out.abs().max().item() < 1e-5


def test_layer_kernel_path_equals_chunked_path():
    from companion.zeros_attention import ZeroSAttention

    torch.manual_seed(0)
    layer = ZeroSAttention(32, 2, impl="chunked", chunk_size=16).to(DEV)
    x = torch.randn(2, 45, 32, device=DEV)
    want = layer(x)
    layer.impl = "kernel"
    got = layer(x)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)


# ---------------------------------------------------------------------------------- bad input
def test_bad_inputs_get_clear_errors(monkeypatch):
    q, k, v, s, s1, sh, _ = _inputs(1, 8, 2, 8, 8, torch.float32)
    with pytest.raises(ValueError, match="T=0"):
        e = torch.zeros(1, 0, 2, 8)
        zeros_linear(e, e, e, torch.zeros(1, 0, 2), torch.zeros(1, 0, 2), torch.zeros(1, 0, 2))
    with pytest.raises(ValueError, match="k shape"):
        zeros_linear(q, k[:, :7], v, s, s1, sh)
    with pytest.raises(ValueError, match="sigma1 must have shape"):
        zeros_linear(q, k, v, s, s1[:, :, :1], sh)
    with pytest.raises(ValueError, match="v shape"):
        zeros_linear(q, k, v[:, :, :1], s, s1, sh)
    with pytest.raises(TypeError, match="dtype"):
        zeros_linear(q.to(torch.int32), k, v, s, s1, sh)
    with pytest.raises(TypeError, match="use one dtype"):
        zeros_linear(q, k.half(), v, s, s1, sh)
    with pytest.raises(ValueError, match="impl="):
        zeros_linear(q, k, v, s, s1, sh, impl="fast")
    with pytest.raises(ValueError, match="chunk_size"):
        zeros_linear(q, k, v, s, s1, sh, chunk_size=48)
    with pytest.raises(ValueError, match="contiguous"):
        zeros_linear(q.transpose(1, 2).contiguous().transpose(1, 2), k, v, s, s1, sh, impl="triton")
    if DEV == "cpu":
        monkeypatch.setenv("TRITON_INTERPRET", "0")
        with pytest.raises(ValueError, match="needs CUDA"):
            zeros_linear(q, k, v, s, s1, sh, impl="triton")


# ---------------------------------------------------------------------------------- GPU (bf16)
@pytest.mark.gpu
def test_bf16_on_gpu_matches_reference():
    B, T, H, d = 1, 1000, 4, 64
    args = _inputs(B, T, H, d, d, torch.bfloat16, seed=11, device="cuda")
    go = torch.randn(B, T, H, d, device="cuda")
    got, g_got = _grads(lambda *a: zeros_linear(*a, impl="triton"), args, go)
    ref_args = [a.float() if a is not None else None for a in args]
    want, g_want = _grads(lambda *a: zeros_linear_reference(*a), ref_args, go)
    rel_out = (got.float() - want).norm() / want.norm()
    assert rel_out.item() < 2e-2
    assert (got.float() - want).abs().max().item() < 0.1
    for name, a, b in zip(("q", "k", "v", "s", "sigma1", "sigmah"), g_got, g_want):
        assert torch.isfinite(a).all(), name
        rel = (a.float() - b).norm() / (b.norm() + 1e-6)
        assert rel.item() < 5e-2, (name, rel.item())


@pytest.mark.gpu
def test_fp32_on_gpu_is_tight():
    args = _inputs(2, 333, 3, 32, 48, torch.float32, seed=12, device="cuda", sigma0=True)
    got = zeros_linear(*args, impl="triton")
    want = zeros_linear_reference(*args)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


@pytest.mark.gpu
def test_long_bf16_sequence_matches_the_chunked_library_form():
    """Many chunks (T=8192), rising logits: the kernel's state scan against the fp32 streaming form."""
    from companion.zeros_attention import zeros_chunked

    args = _inputs(1, 8192, 4, 64, 64, torch.bfloat16, seed=13, s_trend=200.0, device="cuda")
    got = zeros_linear(*args, impl="triton")
    ref_args = [a.float() if a is not None else None for a in args]
    want = zeros_chunked(*ref_args[:6], chunk_size=256)
    assert torch.isfinite(got).all()
    assert ((got.float() - want).norm() / want.norm()).item() < 2e-2


@pytest.mark.gpu
def test_long_ragged_bf16_sequence_against_float64_rows():
    """T = 20,011 (ragged last chunk at 64 and 128), bf16: sampled rows against the float64 definition.
    The first row is exactly zero (one key: its zero-sum weight is 0), so it is checked absolutely."""
    from companion.zeros_attention.bench import sampled_rows_reference

    T = 20011
    args = _inputs(1, T, 4, 64, 64, torch.bfloat16, seed=14, device="cuda")
    rows = [1, 63, 64, 127, 128, 5000, T - 2, T - 1]
    want = sampled_rows_reference(*args[:6], rows)
    for chunk in (64, 128):
        out = zeros_linear(*args, impl="triton", chunk_size=chunk)
        assert out[:, 0].abs().max().item() == 0.0, chunk
        got = out[:, rows].permute(1, 0, 2, 3).double()
        rel = (got - want).norm(dim=-1) / want.norm(dim=-1)
        assert torch.isfinite(rel).all() and rel.max().item() < 5e-2, (chunk, rel.max().item())


@pytest.mark.gpu
@pytest.mark.parametrize("segments", [1, 7, None])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_forward_on_gpu(segments, dtype):
    """The fused forward compiled, at T = 20,011 with rising logits and d = dv = 64: equal to the path through
    stored states (the same bf16 rounding of the states before the output product)."""
    args = _inputs(1, 20011, 4, 64, 64, dtype, seed=16, s_trend=300.0, device="cuda")
    got = zl_triton.zeros_linear_triton(*args, segments=segments, fused=True)
    want = zl_triton.zeros_linear_triton(*args, segments=segments)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert ((got.float() - want.float()).norm() / want.float().norm()).item() < tol


@pytest.mark.gpu
@pytest.mark.parametrize("segments", [1, 7, None])
def test_state_pass_segments_on_gpu_fwd_bwd(segments):
    """The compiled state passes, one sequential walk, 7 uneven segments and the automatic split, at
    T = 20,011 with rising logits (fp32 inputs): the output against the library's fp32 streaming form,
    the gradients against one segment's."""
    from companion.zeros_attention import zeros_chunked

    args = _inputs(1, 20011, 2, 32, 32, torch.float32, seed=15, s_trend=300.0, device="cuda")
    go = torch.randn(1, 20011, 2, 32, device="cuda")
    got, g_got = _grads(lambda *a: zl_triton.zeros_linear_triton(*a, segments=segments), args, go)
    want = zeros_chunked(*args[:6], chunk_size=256)
    assert ((got - want).norm() / want.norm()).item() < 1e-4
    one, g_one = _grads(lambda *a: zl_triton.zeros_linear_triton(*a, segments=1), args, go)
    for name, a, b in zip(("q", "k", "v", "s", "sigma1", "sigmah"), g_got, g_one):
        assert ((a - b).norm() / b.norm()).item() < 1e-4, name

"""ScaleKV's fused token selection (paper 03): Triton kernels vs the PyTorch oracle.

On the CPU the kernels run in the Triton interpreter (TRITON_INTERPRET=1, fp32/fp16, small odd sizes);
the test marked for CUDA runs compiled in bf16 at Infinity-like sizes. Outputs are pre-filled with NaN
(indices with -1) so unwritten elements are caught. Exact index equality is asserted where the scores
are exact in floating point (small integer inputs, power-of-two head dims); on random inputs the kept
set must be a valid top-k up to a rounding tolerance, since the kernel sums the window queries before
the dot product and the oracle after it.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton.jit decorates the kernels

from companion_kernels.scalekv_select import scalekv_select  # noqa: E402
from companion_kernels.scalekv_select import api as sel_api  # noqa: E402
from companion_kernels.scalekv_select import reference as ref  # noqa: E402
from companion_kernels.scalekv_select import triton as sel_triton  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
CPU_DTYPES = [torch.float32, torch.float16]


def _inputs(b, h, n, d, w, dtype, seed=0, dv=None, integer=False, device=DEV):
    g = torch.Generator().manual_seed(seed)
    if integer:  # small integers: every logit and every sum is exact in fp16/fp32
        mk = lambda *s: torch.randint(-3, 4, s, generator=g).float()  # noqa: E731
    else:
        mk = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    q = mk(b, h, w, d).to(device=device, dtype=dtype)
    k = mk(b, h, n, d).to(device=device, dtype=dtype)
    v = torch.randn(b, h, n, dv or d, generator=g).to(device=device, dtype=dtype)
    widx = torch.randperm(n, generator=g)[:w].to(device)
    return q, k, v, widx


def _run_triton(q, k, v, widx, cap, **kw):
    b, h, n, d = k.shape
    out = (torch.full((b, h, cap, d), float("nan"), device=k.device, dtype=k.dtype),
           torch.full((b, h, cap, v.shape[-1]), float("nan"), device=k.device, dtype=k.dtype),
           torch.full((b, h, cap), -1, device=k.device, dtype=torch.int64))
    res = sel_triton.scalekv_select_triton(q.contiguous(), k.contiguous(), v.contiguous(), widx, cap, out=out, **kw)
    assert all(r is o for r, o in zip(res, out)), "the kernel must write into the given outputs"
    return res


def _assert_valid_topk(idx, q, k, widx, cap, kernel_size=5, score="logits", tol=1e-3):
    """``idx`` is a valid selection: sorted, distinct, contains the window, and its non-window part is a
    top-(cap - |W|) of the oracle's pooled scores up to ``tol`` (relative to the score scale)."""
    pooled = ref.pooled_scores_reference(ref.window_scores_reference(q.double(), k.double(), widx.long(), score), widx.long(), kernel_size)
    b, h, c = idx.shape
    assert c == cap
    assert torch.all(idx[..., 1:] > idx[..., :-1]), "indices must be strictly increasing (sorted by position, distinct)"
    wset = set(widx.tolist())
    finite = pooled[torch.isfinite(pooled)]
    scale = float(finite.abs().max()) if finite.numel() else 1.0
    for i in range(b):
        for j in range(h):
            kept = set(idx[i, j].tolist())
            assert wset <= kept, "the window keys must always be kept"
            rest = sorted(kept - wset)
            dropped = [x for x in range(k.shape[2]) if x not in kept]
            if rest and dropped:
                lo_kept = float(pooled[i, j, rest].min())
                hi_drop = float(pooled[i, j, dropped].max())
                assert lo_kept >= hi_drop - tol * scale, (lo_kept, hi_drop)


# (B, H, N, D, W, capacity): odd N, non-power-of-two D, window of 16 or fewer, capacity near both ends.
SHAPES = [
    (1, 2, 37, 16, 4, 10),
    (2, 3, 150, 32, 16, 40),
    (1, 2, 77, 24, 9, 30),
    (1, 1, 300, 64, 16, 299),
    (2, 1, 20, 8, 16, 17),
]


@pytest.mark.parametrize("dtype", CPU_DTYPES)
@pytest.mark.parametrize("score", ["logits", "softmax"])
@pytest.mark.parametrize("shape", SHAPES)
def test_random_inputs_give_a_valid_topk_and_match_the_reference(dtype, score, shape):
    b, h, n, d, w, cap = shape
    q, k, v, widx = _inputs(b, h, n, d, w, dtype, seed=n + d, dv=d + 3)
    kk, vv, idx = _run_triton(q, k, v, widx, cap, score=score)
    assert not torch.isnan(kk).any() and not torch.isnan(vv).any() and (idx >= 0).all(), "unwritten output elements"
    _assert_valid_topk(idx, q, k, widx, cap, score=score, tol=2e-3 if dtype == torch.float16 else 1e-5)
    # K and V are exactly the rows at the returned indices
    torch.testing.assert_close(kk, torch.gather(k, 2, idx[..., None].expand(-1, -1, -1, d)), rtol=0, atol=0)
    torch.testing.assert_close(vv, torch.gather(v, 2, idx[..., None].expand(-1, -1, -1, d + 3)), rtol=0, atol=0)
    _, _, want = ref.scalekv_select_reference(q, k, v, widx, cap, score=score)
    agree = torch.stack([torch.isin(idx[i, j], want[i, j]) for i in range(b) for j in range(h)]).float().mean()
    assert agree > 0.95, f"only {agree:.2%} of the kept indices agree with the reference"


@pytest.mark.parametrize("dtype", CPU_DTYPES)
@pytest.mark.parametrize("kernel_size", [1, 3, 5, 7])
def test_exact_inputs_match_the_reference_exactly(dtype, kernel_size):
    """Small-integer Q/K and D = 16 (sqrt 4): every score is exact, so the indices must agree exactly,
    ties (there are many: the max-pool makes plateaus) included — both break them by position."""
    b, h, n, d, w, cap = 2, 3, 97, 16, 16, 45
    q, k, v, widx = _inputs(b, h, n, d, w, dtype, seed=kernel_size, integer=True)
    got = _run_triton(q, k, v, widx, cap, kernel_size=kernel_size)
    want = ref.scalekv_select_reference(q, k, v, widx, cap, kernel_size=kernel_size)
    for g_, w_ in zip(got, want):
        assert torch.equal(g_, w_)


def test_capacity_equal_to_window_keeps_the_window_and_full_capacity_keeps_everything():
    q, k, v, widx = _inputs(1, 2, 50, 16, 9, torch.float32, seed=3)
    _, _, idx = _run_triton(q, k, v, widx, 9)
    assert torch.equal(idx, torch.sort(widx).values.expand(1, 2, 9).to(idx.device))
    kk, vv, idx = _run_triton(q, k, v, widx, 50)
    assert torch.equal(idx, torch.arange(50, device=idx.device).expand(1, 2, 50))
    assert torch.equal(kk, k) and torch.equal(vv, v)


@pytest.mark.parametrize("impl", ["triton", "reference"])
def test_hand_case_window_excluded_summed_and_max_pooled(impl):
    """Known answer. D = 1, two window queries of 1, keys k = [0, 5, 0, 0, 0, 0, 0, 1, 9, 9], window {8, 9}.
    Scores: s_i = (1 + 1) * k_i (summed over the window), window keys -inf *before* pooling. Max-pool
    (kernel 5): positions 0-3 see s_1 = 10, 5-7 see s_7 = 2, 4 sees 0. Top-4 = {0, 1, 2, 3}, plus the
    window. Had the window keys been scored, positions 6 and 7 would pool 18 and be kept instead."""
    q = torch.ones(1, 1, 2, 1, device=DEV)
    k = torch.tensor([0, 5, 0, 0, 0, 0, 0, 1, 9, 9], dtype=torch.float32, device=DEV).view(1, 1, 10, 1)
    v = torch.arange(10, dtype=torch.float32, device=DEV).view(1, 1, 10, 1)
    widx = torch.tensor([9, 8], device=DEV)
    kk, vv, idx = scalekv_select(q, k, v, widx, 6, impl=impl)
    assert idx.tolist() == [[[0, 1, 2, 3, 8, 9]]]
    assert vv.flatten().tolist() == [0, 1, 2, 3, 8, 9]
    # kernel 1 (no pooling): the top-4 are 1 (10), 7 (2), then the zeros at 0 and 2 (ties by position)
    _, _, idx1 = scalekv_select(q, k, v, widx, 6, kernel_size=1, impl=impl)
    assert idx1.tolist() == [[[0, 1, 2, 7, 8, 9]]]


def test_select_kernel_ties_zeros_of_either_sign():
    """The pool-and-select kernel alone on a hand-made score row: 0 as -0.0 (what a GPU sum of products such as
    -1 * +0.0 gives; the interpreter's numpy sums never give it, hence the direct launch) and +0.0 alternate, then the
    two window keys at -inf. The zeros are ties, broken by position (kernel 1): keep {0, 1, 2, 3} plus the window.
    Ranking -0.0 below +0.0 would keep 1, 3, 5, 7 instead."""
    scores = torch.tensor([-0.0, 0.0] * 4 + [float("-inf")] * 2, device=DEV).view(1, 1, 10)
    index = torch.full((1, 1, 6), -1, dtype=torch.int64, device=DEV)
    sel_triton._pool_select_kernel[(1,)](scores, torch.tensor([9, 8], device=DEV), index, 10, 2, 4, 6, HALF=0, WP=16,
                                         BLOCK=16)
    assert index.tolist() == [[[0, 1, 2, 3, 8, 9]]]


@pytest.mark.parametrize("score", ["logits", "softmax"])
@pytest.mark.parametrize("n,w", [(70, 5), (200, 16), (131, 23)])
def test_window_scores_equal_the_reference(score, n, w):
    """Step 1 alone, the per-key window scores, against the reference in float64, with windows that fill their
    power-of-two tile (16) and ones that do not (5, 23: padding rows), over one to four key blocks. A padding row
    must add nothing: with a finite log-sum-exp it would add (WP - W) / (N - W) to every score."""
    q, k, _, widx = _inputs(2, 3, n, 24, w, torch.float32, seed=n + w)
    got = sel_triton.window_scores_triton(q, k, widx.to(torch.int64), score)
    want = ref.window_scores_reference(q.double(), k.double(), widx, score)
    assert torch.isneginf(got[..., widx]).all()
    keep = torch.isfinite(want)
    torch.testing.assert_close(got.double()[keep], want[keep], rtol=1e-5, atol=1e-6)


def test_softmax_scores_are_the_papers_text():
    """score='softmax': s_i = sum_w softmax over non-window keys; per window query the scores sum to 1."""
    q, k, _, widx = _inputs(1, 2, 40, 16, 4, torch.float64, seed=5, device="cpu")
    s = ref.window_scores_reference(q, k, widx, "softmax")
    assert torch.isneginf(s[..., widx]).all()
    finite = torch.where(torch.isfinite(s), s, torch.zeros_like(s))
    torch.testing.assert_close(finite.sum(-1), torch.full((1, 2), 4.0, dtype=torch.float64))


def test_reference_ties_break_by_position():
    q = torch.zeros(1, 1, 1, 4)
    k = torch.zeros(1, 1, 12, 4)
    v = torch.randn(1, 1, 12, 4)
    _, _, idx = scalekv_select(q, k, v, torch.tensor([11]), 5, impl="reference")
    assert idx.tolist() == [[[0, 1, 2, 3, 11]]]


# ---------------------------------------------------------------- validation
def _ok():
    return _inputs(1, 2, 30, 16, 4, torch.float32, seed=9, device="cpu")


@pytest.mark.parametrize("mutate, exc, fragment", [
    (lambda q, k, v, w: (q[0], k, v, w, 10), ValueError, "q_window must be 4-D"),
    (lambda q, k, v, w: (q, k, v[:, :, :5], w, 10), ValueError, "values shape"),
    (lambda q, k, v, w: (q[..., :8], k, v, w, 10), ValueError, "q_window shape"),
    (lambda q, k, v, w: (q.half(), k, v, w, 10), TypeError, "share a dtype"),
    (lambda q, k, v, w: (q, k.int(), v, w, 10), TypeError, "dtype"),
    (lambda q, k, v, w: (q, k, v, w.float(), 10), ValueError, "window_idx must be a 1-D int"),
    (lambda q, k, v, w: (q, k, v, w[:3], 10), ValueError, "window queries"),
    (lambda q, k, v, w: (q, k, v, torch.tensor([0, 1, 2, 30]), 10), ValueError, "window_idx must lie in"),
    (lambda q, k, v, w: (q, k, v, torch.tensor([0, 1, 2, 2]), 10), ValueError, "distinct"),
    (lambda q, k, v, w: (q, k, v, w, 3), ValueError, "capacity=3"),
    (lambda q, k, v, w: (q, k, v, w, 31), ValueError, "capacity=31"),
    (lambda q, k, v, w: (q, k, v, w, 10.0), ValueError, "capacity=10.0"),
    (lambda q, k, v, w: ("q", k, v, w, 10), TypeError, "q_window must be a torch.Tensor"),
])
def test_bad_inputs_are_rejected_with_a_clear_message(mutate, exc, fragment):
    args = mutate(*_ok())
    with pytest.raises(exc, match=fragment):
        scalekv_select(*args, impl="reference")


def test_bad_options_are_rejected():
    q, k, v, w = _ok()
    with pytest.raises(ValueError, match="kernel_size=4"):
        scalekv_select(q, k, v, w, 10, kernel_size=4)
    with pytest.raises(ValueError, match="score='avg'"):
        scalekv_select(q, k, v, w, 10, score="avg")
    with pytest.raises(ValueError, match="impl='cuda'"):
        scalekv_select(q, k, v, w, 10, impl="cuda")
    q, k, v, w = (t.to(DEV) for t in (q, k, v, w))  # the Triton path: CUDA tensors, or the CPU interpreter
    with pytest.raises(ValueError, match="contiguous"):
        scalekv_select(q, k.transpose(2, 3).contiguous().transpose(2, 3), v, w, 10, impl="triton")


def test_triton_needs_cuda_or_the_interpreter(monkeypatch):
    q, k, v, w = _ok()
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="needs CUDA"):
            scalekv_select(q, k, v, w, 10, impl="triton")
        # auto falls back to the reference on the CPU
        assert torch.equal(scalekv_select(q, k, v, w, 10)[2], scalekv_select(q, k, v, w, 10, impl="reference")[2])
    with pytest.raises(TypeError, match="float64"):
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        scalekv_select(q.double(), k.double(), v.double(), w, 10, impl="triton")


# ---------------------------------------------------------------- GPU
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (compiled kernels, bf16)")
@pytest.mark.parametrize("n", [2954, 6425])
def test_gpu_bf16_at_infinity_like_sizes(n):
    b, h, d, w, cap = 2, 4, 128, 16, 650
    q, k, v, widx = _inputs(b, h, n, d, w, torch.bfloat16, seed=n, device="cuda")
    kk, vv, idx = _run_triton(q, k, v, widx, cap)
    assert not torch.isnan(kk).any() and (idx >= 0).all()
    _assert_valid_topk(idx.cpu(), q.float().cpu(), k.float().cpu(), widx.cpu(), cap, tol=1e-2)
    _, _, want = ref.scalekv_select_reference(q, k, v, widx, cap)
    agree = torch.stack([torch.isin(idx[i, j], want[i, j]) for i in range(b) for j in range(h)]).float().mean()
    assert agree > 0.97
    assert torch.equal(vv, torch.gather(v, 2, idx[..., None].expand(-1, -1, -1, d)))

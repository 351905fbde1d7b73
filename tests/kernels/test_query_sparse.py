"""Query-sparse dense attention op (paper 09, Δ Attention): Triton kernel vs the PyTorch oracle.

On the CPU the kernel runs in the Triton interpreter (TRITON_INTERPRET=1, fp32/fp16); on a GPU
(tests marked `gpu`) in bf16 at a larger size.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")   # before triton.jit decorates the kernel

from companion_kernels.query_sparse import api, reference  # noqa: E402
from companion_kernels.query_sparse import triton as qs_triton  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
CPU_DTYPES = [torch.float32, torch.float16]
TOL = {torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def _qkv(b, hq, hkv, n, d, dtype, device=DEV, seed=0):
    g = torch.Generator().manual_seed(seed)
    mk = lambda h: torch.randn(b, h, n, d, generator=g).to(device=device, dtype=dtype)  # noqa: E731
    return mk(hq), mk(hkv), mk(hkv)


def _sorted_rows(n, m, seed=0, device=DEV):
    g = torch.Generator().manual_seed(seed)
    return torch.randperm(n, generator=g)[:m].sort().values.to(device)


@pytest.mark.parametrize("dtype, causal, shape", [
    (torch.float32, True, (2, 4, 2, 77, 24)),     # GQA, odd N, head dim not a power of two
    (torch.float16, True, (1, 2, 1, 45, 16)),
    (torch.float32, False, (1, 2, 1, 45, 16)),
    (torch.float16, False, (1, 3, 3, 70, 32)),
])
def test_rows_match_reference(dtype, causal, shape):
    b, hq, hkv, n, d = shape
    q, k, v = _qkv(b, hq, hkv, n, d, dtype)
    rows = _sorted_rows(n, 19, seed=n)
    out = torch.full((b, hq, rows.numel(), d), float("nan"), dtype=dtype, device=DEV)
    got = qs_triton.query_sparse_attention(q, k, v, rows.to(torch.int32), causal=causal, out=out)
    want = reference.query_sparse_attention(q, k, v, rows, causal=causal)
    assert not torch.isnan(got).any(), "kernel left rows unwritten"
    torch.testing.assert_close(got.float(), want.float(), atol=TOL[dtype], rtol=TOL[dtype])


def test_all_rows_equal_sdpa_causal():
    """Selecting every row is ordinary causal attention: compare with torch's SDPA (a peer)."""
    b, hq, hkv, n, d = 1, 4, 2, 53, 32
    q, k, v = _qkv(b, hq, hkv, n, d, torch.float32, seed=3)
    rows = torch.arange(n, device=DEV)
    got = api.query_sparse_attention(q, k, v, rows, impl="triton")
    kk, vv = (x.repeat_interleave(hq // hkv, dim=1) for x in (k, v))
    want = torch.nn.functional.scaled_dot_product_attention(q, kk, vv, is_causal=True)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)


def test_row_zero_is_first_value():
    """Row 0 sees only key 0 under the causal mask: its output is exactly v[0]."""
    q, k, v = _qkv(1, 2, 1, 33, 16, torch.float32, seed=5)
    got = api.query_sparse_attention(q, k, v, torch.tensor([0, 32], device=DEV), impl="triton")
    torch.testing.assert_close(got[:, :, 0], v[:, :, 0].expand(1, 2, 16), atol=1e-6, rtol=0)


@pytest.mark.parametrize("dtype, propagate, n, gamma, s_p", [
    (torch.float32, True, 61, 4, 48),    # N mod γ != 0, tail of 13 rows
    (torch.float32, True, 50, 7, 35),
    (torch.float32, True, 40, 1, 30),    # γ = 1
    (torch.float32, True, 33, 5, 0),     # everything in the dense tail
    (torch.float16, True, 61, 4, 48),
    (torch.float32, False, 50, 7, 35),   # recompute ablation
    (torch.float16, False, 61, 4, 48),
])
def test_delta_matches_reference(dtype, propagate, n, gamma, s_p):
    q, k, v = _qkv(1, 4, 2, n, 16, dtype, seed=n + gamma)
    sparse = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).to(DEV, dtype)
    got = api.query_sparse_delta_(sparse.clone(), q, k, v, gamma=gamma, num_delta_rows=s_p,
                                  propagate=propagate, impl="triton")
    want = api.query_sparse_delta_(sparse.clone(), q, k, v, gamma=gamma, num_delta_rows=s_p,
                                   propagate=propagate, impl="reference")
    torch.testing.assert_close(got.float(), want.float(), atol=2 * TOL[dtype], rtol=2 * TOL[dtype])
    if not propagate:   # recompute: rows that are neither anchors nor tail are untouched, bit for bit
        keep = torch.ones(n, dtype=torch.bool)
        keep[reference.delta_rows(n, gamma, s_p)] = False
        assert torch.equal(got[:, :, keep.to(DEV)], sparse[:, :, keep.to(DEV)])


def test_delta_semantics_exact_small():
    """Eq. 6/7 on a tiny case by hand: out_i = sparse_i + (dense_a − sparse_a), a = γ⌊i/γ⌋."""
    n, gamma, s_p = 12, 3, 6
    q, k, v = _qkv(1, 1, 1, n, 16, torch.float32, seed=9)
    sparse = torch.randn(1, 1, n, 16, generator=torch.Generator().manual_seed(2)).to(DEV)
    dense = reference.query_sparse_attention(q, k, v, torch.arange(n, device=DEV))
    got = api.query_sparse_delta_(sparse.clone(), q, k, v, gamma=gamma, num_delta_rows=s_p, impl="triton")
    want = sparse.clone()
    for i in range(s_p):
        a = gamma * (i // gamma)
        want[:, :, i] = sparse[:, :, i] + dense[:, :, a] - sparse[:, :, a]
    want[:, :, s_p:] = dense[:, :, s_p:]
    torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(got[:, :, 0:s_p:gamma], dense[:, :, 0:s_p:gamma], atol=2e-5, rtol=0)


def test_gamma_one_full_rows_is_dense():
    n = 29
    q, k, v = _qkv(1, 2, 2, n, 16, torch.float32, seed=11)
    sparse = torch.zeros_like(q)
    got = api.query_sparse_delta_(sparse, q, k, v, gamma=1, num_delta_rows=20, impl="triton")
    dense = reference.query_sparse_attention(q, k, v, torch.arange(n, device=DEV))
    torch.testing.assert_close(got, dense, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("bad, exc, match", [
    (dict(rows=torch.tensor([3, 1])), ValueError, "strictly increasing"),
    (dict(rows=torch.tensor([0, 40])), ValueError, r"rows must lie in \[0, N=20\)"),
    (dict(rows=torch.tensor([[0, 1]])), ValueError, "1-D integer"),
    (dict(rows=torch.tensor([0.0, 1.0])), TypeError, "rows has dtype torch.float32; allowed: int32, int64"),
    (dict(rows=[0, 5]), TypeError, "rows must be a torch.Tensor"),
    (dict(impl="cuda"), ValueError, "impl='cuda' is not allowed"),
    (dict(causal=1), TypeError, "causal must be a bool"),
    (dict(sm_scale=-1.0), ValueError, "sm_scale=-1.0"),
    (dict(k=torch.zeros(1, 3, 20, 16), v=torch.zeros(1, 3, 20, 16)), ValueError, "multiple of key/value heads"),
    (dict(k=torch.zeros(1, 2, 20, 16, dtype=torch.float64)), TypeError, "differs from q.dtype"),
    (dict(q=torch.zeros(1, 4, 20, 16, dtype=torch.int32)), TypeError, "q has dtype torch.int32"),
    (dict(q=torch.zeros(2, 20, 16)), ValueError, "4-D"),
])
def test_bad_input_is_named(bad, exc, match):
    args = dict(q=torch.zeros(1, 4, 20, 16), k=torch.zeros(1, 2, 20, 16), v=torch.zeros(1, 2, 20, 16),
                rows=torch.tensor([0, 5]), impl="reference")
    args.update(bad)
    with pytest.raises(exc, match=match):
        api.query_sparse_attention(args.pop("q"), args.pop("k"), args.pop("v"), args.pop("rows"), **args)


@pytest.mark.parametrize("kw, match", [
    (dict(gamma=0, num_delta_rows=0), r"gamma=0 is not allowed: expected an integer in \[1, inf\]"),
    (dict(gamma=True, num_delta_rows=0), "gamma=True is not allowed"),
    (dict(gamma=4, num_delta_rows=6), "multiple of gamma"),
    (dict(gamma=4, num_delta_rows=24), r"num_delta_rows=24 is not allowed: expected an integer in \[0, 20\]"),
])
def test_bad_delta_args(kw, match):
    q = torch.zeros(1, 2, 20, 16)
    with pytest.raises(ValueError, match=match):
        api.query_sparse_delta_(q.clone(), q, q, q, impl="reference", **kw)


def test_triton_on_cpu_needs_interpreter(monkeypatch):
    if DEV == "cuda":
        pytest.skip("CPU-only behaviour")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    q = torch.zeros(1, 1, 8, 16)
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        api.query_sparse_attention(q, q, q, torch.tensor([1]), impl="triton")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("gamma", [64, 100])
def test_gpu_bf16_delta_matches_reference(gamma):
    n, s_p = 4099, 3500 // gamma * gamma
    q, k, v = _qkv(1, 8, 2, n, 128, torch.bfloat16, device="cuda", seed=gamma)
    sparse = torch.randn_like(q)
    got = api.query_sparse_delta_(sparse.clone(), q, k, v, gamma=gamma, num_delta_rows=s_p, impl="triton")
    want = api.query_sparse_delta_(sparse.clone(), q, k, v, gamma=gamma, num_delta_rows=s_p, impl="reference")
    torch.testing.assert_close(got.float(), want.float(), atol=3e-2, rtol=3e-2)
    rows = _sorted_rows(n, 300, device="cuda")
    torch.testing.assert_close(api.query_sparse_attention(q, k, v, rows).float(),
                               reference.query_sparse_attention(q, k, v, rows).float(), atol=3e-2, rtol=3e-2)


def test_float64_runs_the_reference_only():
    q, k, v = _qkv(1, 2, 1, 20, 16, torch.float64, device="cpu", seed=4)
    rows = torch.tensor([0, 7, 19])
    got = api.query_sparse_attention(q, k, v, rows, impl="auto")
    kk, vv = (x.repeat_interleave(2, dim=1) for x in (k, v))
    want = torch.nn.functional.scaled_dot_product_attention(q, kk, vv, is_causal=True)[:, :, rows]
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match="float64 runs only with impl='reference'"):
        api.query_sparse_attention(q, k, v, rows, impl="triton")


@pytest.mark.parametrize("n, gamma, s_p, block_m", [
    (120, 3, 99, 16),    # 33 anchors: tile boundaries fall between anchors 45 | 48 and 93 | 96
    (90, 4, 64, 16),     # 16 anchors fill one tile; the tail (64 ...) starts the next
    (77, 2, 70, 8),      # 35 anchors over five tiles of 8, γ = 2
    (100, 5, 95, 4),     # 19 anchors over five tiles of 4, a tail of 5 rows
])
def test_delta_exact_across_tiles(n, gamma, s_p, block_m):
    """γ > 1 with anchors spread over several BLOCK_M tiles, checked against Eq. 6/7 written out.

    Tiles run largest positions first, so a Δ added to one row too many (row a + γ, the next anchor,
    or s_p, the first tail row) corrupts a row another tile has already written densely: this
    catches it, where anchors within one tile overwrite the mistake.
    """
    q, k, v = _qkv(1, 2, 1, n, 16, torch.float32, seed=n + gamma)
    sparse = torch.randn(q.shape, generator=torch.Generator().manual_seed(3)).to(DEV)
    dense = reference.query_sparse_attention(q, k, v, torch.arange(n, device=DEV))
    cfg = {"BLOCK_M": block_m, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}
    got = api.query_sparse_delta_(sparse.clone(), q, k, v, gamma=gamma, num_delta_rows=s_p,
                                  impl="triton", config=cfg)
    assert (s_p // gamma) > 2 * block_m or (s_p // gamma) % block_m == 0, "anchors must span tiles"
    want = sparse.clone()
    for i in range(s_p):
        a = gamma * (i // gamma)
        want[:, :, i] = sparse[:, :, i] + dense[:, :, a] - sparse[:, :, a]
    want[:, :, s_p:] = dense[:, :, s_p:]
    torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(got[:, :, 0:s_p:gamma], dense[:, :, 0:s_p:gamma], atol=2e-5, rtol=0)
    ref = api.query_sparse_delta_(sparse.clone(), q, k, v, gamma=gamma, num_delta_rows=s_p, impl="reference")
    torch.testing.assert_close(ref, want, atol=2e-5, rtol=2e-5)

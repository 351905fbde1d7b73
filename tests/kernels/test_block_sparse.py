"""Block-sparse attention op (papers 01 SeerAttention and 09 Delta Attention): Triton kernels vs the oracle.

On the CPU the kernels run in the Triton interpreter (TRITON_INTERPRET=1, fp32/fp16, small odd sizes);
the tests marked `gpu` run compiled in bf16 at larger sizes, with compiled FlexAttention as a second
opinion. Gradients of q, k, v are checked against autograd through the oracle (float64 on the CPU).
Outputs and gradients are pre-filled with NaN so unwritten rows are caught.
"""

import math
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton.jit decorates the kernels

from companion_kernels.block_sparse import (  # noqa: E402
    block_sparse_attention,
    causal_block_mask,
    dense_to_index,
    pooled_attention_map,
    random_block_mask,
    sink_window_mask,
)
from companion_kernels.block_sparse import reference  # noqa: E402
from companion_kernels.block_sparse import triton as bs_triton  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
CPU_DTYPES = [torch.float32, torch.float16]
REL_TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.5e-2}


def _qkv(b, hq, hkv, n, d, dtype, seed=0, device=DEV):
    g = torch.Generator().manual_seed(seed)
    mk = lambda h: torch.randn(b, h, n, d, generator=g).to(device=device, dtype=dtype)  # noqa: E731
    return mk(hq), mk(hkv), mk(hkv)


def _grad_out(q, seed):
    """An upstream gradient dO for ``q``'s shape, drawn apart from ``_qkv``'s tensors of any seed (dO equal to q
    would hide a kernel that reads one for the other)."""
    return torch.randn(q.shape, generator=torch.Generator().manual_seed(10_000 + seed)).to(q.device, q.dtype)


def _rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _random_mask(b, h, nb, density, seed, empty_rows=(1,)):
    g = torch.Generator().manual_seed(seed)
    m = torch.rand(b, h, nb, nb, generator=g) < density
    for r in empty_rows:
        if r < nb:
            m[..., r, :] = False
    return m


def _run_kernel(q, k, v, idx, cnt, block, causal, config=None):
    out = torch.full_like(q, float("nan"))
    return bs_triton.block_sparse_attention_triton(
        q, k, v, idx.to(q.device), cnt.to(q.device), block_size=block, causal=causal, config=config, out=out
    )


# (B, Hq, Hkv, N, D, block): odd N (ragged last block), GQA, every D, both block sizes.
SHAPES = [
    (1, 2, 1, 150, 32, 64),
    (2, 4, 2, 97, 64, 64),
    (1, 2, 2, 200, 128, 128),
]


@pytest.mark.parametrize("dtype", CPU_DTYPES)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", SHAPES)
def test_random_masks_match_reference(dtype, causal, shape):
    b, hq, hkv, n, d, block = shape
    q, k, v = _qkv(b, hq, hkv, n, d, dtype, seed=n + d)
    nb = math.ceil(n / block)
    idx, cnt = dense_to_index(_random_mask(b, hq, nb, 0.5, seed=n))
    got = _run_kernel(q, k, v, idx, cnt, block, causal)
    want = reference.block_sparse_attention_reference(
        q, k, v, idx.to(DEV), cnt.to(DEV), block_size=block, causal=causal
    )
    assert not torch.isnan(got).any(), "kernel left rows unwritten (or produced NaN)"
    assert _rel(got, want) < REL_TOL[dtype]


@pytest.mark.parametrize("causal", [True, False])
def test_full_mask_equals_sdpa(causal):
    """Selecting every (causal) block is ordinary attention: compare with torch's SDPA (a peer)."""
    b, hq, hkv, n, d, block = 1, 4, 2, 131, 32, 64
    q, k, v = _qkv(b, hq, hkv, n, d, torch.float32, seed=3)
    nb = math.ceil(n / block)
    mask = causal_block_mask(nb, nb) if causal else torch.ones(nb, nb, dtype=torch.bool)
    idx, cnt = dense_to_index(mask.expand(b, hq, nb, nb))
    got = block_sparse_attention(q, k, v, idx.to(DEV), cnt.to(DEV), block_size=block, causal=causal, impl="triton")
    kk, vv = (x.repeat_interleave(hq // hkv, dim=1) for x in (k, v))
    want = torch.nn.functional.scaled_dot_product_attention(q, kk, vv, is_causal=causal)
    assert _rel(got, want) < 1e-5


def test_reference_full_mask_is_exact_in_float64():
    b, hq, hkv, n, d, block = 1, 2, 1, 70, 32, 64
    q, k, v = _qkv(b, hq, hkv, n, d, torch.float64, seed=4, device="cpu")
    nb = math.ceil(n / block)
    idx, cnt = dense_to_index(causal_block_mask(nb, nb).expand(b, hq, nb, nb))
    got = block_sparse_attention(q, k, v, idx, cnt, block_size=block, impl="reference")
    kk, vv = (x.repeat_interleave(2, dim=1) for x in (k, v))
    want = torch.nn.functional.scaled_dot_product_attention(q, kk, vv, is_causal=True)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("max_scores", [1, 2 * 97 * 97, 1 << 24])
def test_reference_head_chunks_do_not_change_the_result(monkeypatch, max_scores):
    """The reference takes as many heads at once as fit ``_MAX_SCORES``: one head, two, or all four give the
    same output as sdpa-style dense attention per head (GQA, ragged length, random mask with an empty row)."""
    b, hq, hkv, n, d, block = 2, 4, 2, 97, 16, 16
    q, k, v = _qkv(b, hq, hkv, n, d, torch.float64, seed=9, device="cpu")
    nb = math.ceil(n / block)
    mask = _random_mask(b, hq, nb, 0.5, seed=9)
    idx, cnt = dense_to_index(mask)
    monkeypatch.setattr(reference, "_MAX_SCORES", max_scores)
    got = reference.block_sparse_attention_reference(q, k, v, idx, cnt, block_size=block, causal=True)
    tok = reference.token_mask_from_blocks(mask, n, block, True)
    kk, vv = (x.repeat_interleave(hq // hkv, dim=1) for x in (k, v))
    s = (q @ kk.transpose(-1, -2) / math.sqrt(d)).masked_fill(~tok, float("-inf"))
    want = torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0) @ vv  # rows with no key: 0
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)
    assert torch.equal(got[:, :, block:2 * block], torch.zeros_like(got[:, :, block:2 * block]))


@pytest.mark.parametrize("impl", ["triton", "reference"])
def test_empty_rows_and_above_diagonal_blocks_give_zeros(impl):
    """A query block with no selected block, or only blocks above the diagonal (all masked by the causal
    rule), returns zeros, never NaN."""
    b, hq, n, d, block = 1, 2, 192, 32, 64
    q, k, v = _qkv(b, hq, hq, n, d, torch.float32, seed=5)
    mask = torch.zeros(b, hq, 3, 3, dtype=torch.bool)
    mask[:, :, 0, 2] = True  # query block 0 sees only key block 2: above the diagonal
    mask[:, :, 2, :] = True  # query block 2: dense; query block 1: empty
    idx, cnt = dense_to_index(mask)
    out = torch.full_like(q, float("nan"))
    if impl == "triton":
        out = _run_kernel(q, k, v, idx, cnt, block, True)
    else:
        out = block_sparse_attention(q, k, v, idx.to(DEV), cnt.to(DEV), block_size=block, impl="reference")
    assert not torch.isnan(out).any()
    assert torch.equal(out[:, :, : 2 * block], torch.zeros_like(out[:, :, : 2 * block]))
    assert out[:, :, 2 * block :].abs().sum() > 0


def test_first_row_sees_only_itself():
    """Causal row 0 attends to key 0 alone: its output is exactly v[0] (a known truth)."""
    q, k, v = _qkv(1, 2, 1, 100, 64, torch.float32, seed=6)
    idx, cnt = dense_to_index(causal_block_mask(2, 2).expand(1, 2, 2, 2))
    out = _run_kernel(q, k, v, idx, cnt, 64, True)
    torch.testing.assert_close(out[0, :, 0], v[0, 0, 0].expand(2, -1), atol=1e-6, rtol=1e-6)


def test_order_of_index_list_does_not_matter_and_padding_is_ignored():
    b, hq, n, d, block = 1, 2, 256, 32, 64
    q, k, v = _qkv(b, hq, hq, n, d, torch.float32, seed=7)
    idx, cnt = dense_to_index(_random_mask(b, hq, 4, 0.6, seed=8, empty_rows=()))
    want = _run_kernel(q, k, v, idx, cnt, block, True)
    g = torch.Generator().manual_seed(0)
    perm = torch.stack([torch.randperm(idx.shape[-1], generator=g) for _ in range(idx[..., 0].numel())])
    flat = idx.reshape(-1, idx.shape[-1])
    shuffled = torch.empty_like(flat)
    for r in range(flat.shape[0]):  # permute the valid prefix only, then scribble over the padding
        c = int(cnt.reshape(-1)[r])
        p = perm[r][perm[r] < c]
        shuffled[r, :c] = flat[r, p]
        shuffled[r, c:] = 999
    got = _run_kernel(q, k, v, shuffled.reshape(idx.shape), cnt, block, True)
    assert _rel(got, want) < 1e-6


def test_broadcast_mask_for_all_heads_matches_expanded():
    """A [1, 1, nQB, maxK] index list (e.g. Delta Attention's sink + window) broadcasts over B and H."""
    b, hq, hkv, n, d, block = 2, 4, 1, 300, 32, 64
    q, k, v = _qkv(b, hq, hkv, n, d, torch.float16, seed=9)
    nb = math.ceil(n / block)
    idx, cnt = dense_to_index(sink_window_mask(nb, nb, sink_blocks=1, window_blocks=1)[None, None])
    got = block_sparse_attention(q, k, v, idx.to(DEV), cnt.to(DEV), block_size=block, impl="triton")
    want = reference.block_sparse_attention_reference(
        q, k, v, idx.expand(b, hq, -1, -1).to(DEV), cnt.expand(b, hq, -1).to(DEV), block_size=block
    )
    assert _rel(got, want) < REL_TOL[torch.float16]


@pytest.mark.parametrize(
    "config",
    [dict(tma=0), dict(tma=2), dict(tma=4), dict(sub_n=64), dict(mask_always=True), dict(block_m=64, sub_n=64, tma=2)],
    ids=["pointers", "tma2d", "tma4d", "sub64", "mask_always", "split_m"],
)
def test_kernel_variants_agree(config):
    """Every variant of the notes file computes the same function (N a multiple of the block for TMA-2D), plain
    pointer loads included (the default loads through TMA descriptors). Two batches and GQA: a batch of 1 would hide
    a wrong batch term in the flat descriptors' row of a head, (b * H + h) * N for Q, (b * Hkv + hk) * N for K, V."""
    b, hq, hkv, n, d, block = 2, 2, 1, 256, 32, 128
    q, k, v = _qkv(b, hq, hkv, n, d, torch.float32, seed=10)
    idx, cnt = dense_to_index(random_block_mask(b, hq, 2, 0.7, generator=torch.Generator().manual_seed(1)))
    want = _run_kernel(q, k, v, idx, cnt, block, True)
    got = _run_kernel(q, k, v, idx, cnt, block, True, config=config)
    assert _rel(got, want) < 1e-6


# ---------------------------------------------------------------- pooled attention map
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", [(1, 2, 1, 150, 32, 64), (1, 2, 2, 256, 64, 128)])
def test_pooled_map_matches_reference(causal, shape):
    b, hq, hkv, n, d, block = shape
    q, k, _ = _qkv(b, hq, hkv, n, d, torch.float32, seed=11)
    got = pooled_attention_map(q, k, block_size=block, causal=causal, impl="triton")
    want = pooled_attention_map(q, k, block_size=block, causal=causal, impl="reference")
    assert got.dtype == torch.float32 and not torch.isnan(got).any()
    torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(got.sum(-1), torch.ones_like(got[..., 0]), atol=1e-5, rtol=0)
    if causal:
        assert torch.equal(got.triu(1), torch.zeros_like(got))


@pytest.mark.parametrize("causal", [True, False])
def test_pooled_map_ignores_the_padding_rows_of_a_ragged_last_block(causal):
    """Rows of the ragged last query block past N (q zero-filled: uniform attention, 1/N per key) must not take part in
    its tile maxima. Here the real rows of that block put almost all their mass on key 0, so that their largest
    probability in key blocks 1 and 2 lies far below 1/N, where a padding row would win the maximum."""
    b, hq, hkv, n, d, block = 1, 1, 1, 150, 32, 64
    q, k, _ = _qkv(b, hq, hkv, n, d, torch.float32, seed=26)
    q[:, :, 2 * block :] = 3 * k[:, :, :1]
    got = pooled_attention_map(q, k, block_size=block, causal=causal, impl="triton")
    want = pooled_attention_map(q, k, block_size=block, causal=causal, impl="reference")
    assert float(want[0, 0, 2, 1:].max()) < 1e-2 / n
    torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("impl", ["triton", "reference"])
def test_pooled_map_of_uniform_attention(impl):
    """q = 0 makes attention uniform over the causal keys: P[r, c] = 1/(r+1). The max over query block I
    is reached at its first row, 1/(I*B + 1), for every key block J <= I, so each row of the map is
    uniform over J <= I: exactly 1/(I+1)."""
    n, d, block = 200, 32, 64
    q = torch.zeros(1, 1, n, d, device=DEV)
    k = torch.randn(1, 1, n, d, device=DEV)
    got = pooled_attention_map(q, k, block_size=block, impl=impl)
    nb = math.ceil(n / block)
    want = causal_block_mask(nb, nb, device=DEV).float()
    want = want / want.sum(-1, keepdim=True)
    torch.testing.assert_close(got[0, 0], want, atol=1e-6, rtol=1e-6)


def test_pooled_reference_equals_chunked_online_recomputation_in_float64():
    """The two-pass construction (row statistics, then tile maxima) equals the dense definition."""
    n, d, block = 130, 32, 64
    g = torch.Generator().manual_seed(12)
    q, k = torch.randn(1, 1, n, d, generator=g, dtype=torch.float64), torch.randn(1, 1, n, d, generator=g, dtype=torch.float64)
    want = pooled_attention_map(q, k, block_size=block, impl="reference").double()
    s = (q[0, 0] @ k[0, 0].T) / math.sqrt(d)
    s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    m = torch.full((n,), float("-inf"), dtype=torch.float64)
    l = torch.zeros(n, dtype=torch.float64)
    for j in range(0, n, block):  # pass 1, online
        t = s[:, j : j + block]
        m_new = torch.maximum(m, t.amax(1))
        l = l * torch.exp(m - m_new) + torch.exp(t - m_new[:, None]).sum(1)
        m = m_new
    lse = m + torch.log(l)
    nb = math.ceil(n / block)
    pooled = torch.zeros(nb, nb, dtype=torch.float64)
    for i in range(nb):  # pass 2
        for j in range(nb):
            tile = s[i * block : (i + 1) * block, j * block : (j + 1) * block] - lse[i * block : (i + 1) * block, None]
            pooled[i, j] = torch.exp(tile.max())
    pooled = pooled / pooled.sum(-1, keepdim=True)
    torch.testing.assert_close(pooled, want[0, 0], atol=1e-6, rtol=1e-6)


# ---------------------------------------------------------------- backward (gradients of q, k, v)
def _kernel_grads(q, k, v, idx, cnt, block, causal, do, config=None):
    """The forward with its log-sum-exp, then the backward kernels; every buffer pre-filled with NaN. The LSE buffer
    is followed by a NaN guard element that must stay NaN (a ragged row store past N lands there from the last head)."""
    nan = float("nan")
    lse_and_guard = torch.full((q.shape[:3].numel() + 1,), nan, device=q.device)
    lse = lse_and_guard[:-1].view(q.shape[:3])
    idx, cnt = idx.to(q.device), cnt.to(q.device)
    out = bs_triton.block_sparse_attention_triton(
        q, k, v, idx, cnt, block_size=block, causal=causal, out=torch.full_like(q, nan), lse=lse
    )
    grads = tuple(torch.full_like(t, nan) for t in (q, k, v))
    bs_triton.block_sparse_attention_backward_triton(
        do, q, k, v, out, lse, idx, cnt, block_size=block, causal=causal, config=config, grads=grads
    )
    assert torch.isnan(lse_and_guard[-1]), "the forward stored a log-sum-exp past the end of its buffer"
    return out, lse, grads


def _reference_grads(q, k, v, idx, cnt, block, causal, do, dtype=torch.float64):
    """Autograd through the oracle (float64 unless told)."""
    leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
    out = reference.block_sparse_attention_reference(*leaves, idx.to(DEV), cnt.to(DEV), block_size=block, causal=causal)
    out.backward(do.to(dtype))
    return [t.grad for t in leaves]


def _assert_grads_close(got, want, tol):
    for name, g, w in zip("qkv", got, want):
        assert not torch.isnan(g).any(), f"d{name} has NaN or unwritten elements"
        assert _rel(g, w) < tol, f"d{name}: relative error {_rel(g, w):.2e}"


# (B, Hq, Hkv, N, D, block, causal, dtype): ragged N, GQA, both block sizes, fp16; each mask has an empty row.
BWD_CASES = [
    (1, 2, 1, 150, 32, 64, True, torch.float32),
    (1, 2, 1, 150, 32, 64, False, torch.float32),
    (2, 4, 2, 97, 64, 64, True, torch.float32),
    (1, 2, 1, 200, 32, 128, True, torch.float32),
    (1, 2, 2, 150, 32, 64, True, torch.float16),
]


@pytest.mark.parametrize("case", BWD_CASES, ids=lambda c: "-".join(map(str, c[:7])) + f"-{str(c[7])[6:]}")
def test_gradients_match_autograd_through_reference(case):
    b, hq, hkv, n, d, block, causal, dtype = case
    q, k, v = _qkv(b, hq, hkv, n, d, dtype, seed=n + d + 1)
    do = _grad_out(q, n)
    idx, cnt = dense_to_index(_random_mask(b, hq, math.ceil(n / block), 0.5, seed=n + 1))
    _, _, got = _kernel_grads(q, k, v, idx, cnt, block, causal, do)
    want = _reference_grads(q, k, v, idx, cnt, block, causal, do)
    assert [g.dtype for g in got] == [dtype] * 3
    _assert_grads_close(got, want, REL_TOL[dtype])


def test_forward_stores_the_rows_log_sum_exp_and_its_output_is_unchanged():
    """LSE_i = logsumexp_j(s_ij) over the admissible keys (float64 truth); +inf for a row with none."""
    b, hq, hkv, n, d, block = 1, 2, 1, 150, 32, 64
    q, k, v = _qkv(b, hq, hkv, n, d, torch.float32, seed=20)
    mask = _random_mask(b, hq, 3, 0.6, seed=20)  # query block 1 empty
    idx, cnt = dense_to_index(mask)
    out, lse, _ = _kernel_grads(q, k, v, idx, cnt, block, True, torch.ones_like(q))
    assert torch.equal(out, _run_kernel(q, k, v, idx, cnt, block, True))  # the no-grad kernel's output
    tok = reference.token_mask_from_blocks(mask.to(DEV), n, block, True)
    s = (q.double() @ k.double().repeat_interleave(2, dim=1).transpose(-1, -2)) / math.sqrt(d)
    want = torch.logsumexp(s.masked_fill(~tok, float("-inf")), dim=-1)
    empty = ~tok.any(-1)
    assert empty[:, :, block : 2 * block].all() and torch.isinf(lse[empty]).all() and (lse[empty] > 0).all()
    torch.testing.assert_close(lse[~empty].double(), want[~empty], atol=1e-5, rtol=1e-6)


def test_gradients_of_empty_rows_unselected_key_blocks_and_above_diagonal_blocks():
    """Query block 0 selects only key block 2 (above the diagonal: masked out by the causal rule), query
    block 1 selects nothing, query block 2 selects key blocks 0 and 2; key block 1 is selected by no one.
    Rows 0..127 get zero output and exactly zero dq; key block 1 exactly zero dk, dv; and dropping the
    above-diagonal entry changes no gradient by a single bit."""
    b, hq, hkv, n, d, block = 1, 2, 1, 150, 32, 64
    q, k, v = _qkv(b, hq, hkv, n, d, torch.float32, seed=21)
    do = _grad_out(q, 21)
    mask = torch.zeros(b, hq, 3, 3, dtype=torch.bool)
    mask[..., 0, 2] = True
    mask[..., 2, 0] = mask[..., 2, 2] = True
    out, _, (dq, dk, dv) = _kernel_grads(q, k, v, *dense_to_index(mask), block, True, do)
    assert torch.equal(out[:, :, : 2 * block], torch.zeros_like(out[:, :, : 2 * block]))
    assert torch.equal(dq[:, :, : 2 * block], torch.zeros_like(dq[:, :, : 2 * block]))
    for g in (dk, dv):
        assert torch.equal(g[:, :, block : 2 * block], torch.zeros_like(g[:, :, block : 2 * block]))
        assert g[:, :, :block].abs().sum() > 0 and g[:, :, 2 * block :].abs().sum() > 0
    _assert_grads_close((dq, dk, dv), _reference_grads(q, k, v, *dense_to_index(mask), block, True, do), 1e-5)
    mask[..., 0, 2] = False
    _, _, without = _kernel_grads(q, k, v, *dense_to_index(mask), block, True, do)
    assert all(torch.equal(g, w) for g, w in zip((dq, dk, dv), without))


def test_backward_sub_tiles_agree():
    """Whole blocks and the default sub-tiles (keys in the dQ kernel, queries in the dK/dV kernel) compute the
    same function."""
    b, hq, hkv, n, d, block = 1, 2, 1, 150, 32, 64
    q, k, v = _qkv(b, hq, hkv, n, d, torch.float32, seed=22)
    do = _grad_out(q, 22)
    idx, cnt = dense_to_index(_random_mask(b, hq, 3, 0.7, seed=22))
    _, _, want = _kernel_grads(q, k, v, idx, cnt, block, True, do)
    _, _, got = _kernel_grads(q, k, v, idx, cnt, block, True, do, config=dict(sub_m=block, sub_n=block))
    assert all(_rel(g, w) < 1e-6 for g, w in zip(got, want))


@pytest.mark.parametrize("config, b, n, strided_q", [
    (dict(tma=2), 2, 256, False), (dict(tma=4), 1, 150, False), (dict(tma=2), 1, 150, True), (dict(tma=4), 1, 256, True),
    (dict(block_m=32, block_n=16), 1, 150, False),
    (dict(block_m=16, block_n=32, tma=2, sub_n=16, sub_m=16), 2, 192, True)],
    ids=["tma2d", "tma_rank4_ragged", "tma2d_falls_back_ragged_strided", "tma_rank4_strided", "split_blocks_ragged",
         "split_blocks_tma"])
def test_backward_launch_variants_agree(config, b, n, strided_q):
    """Every launch variant of the backward kernels gives the default's gradients: the loops' tiles through TMA
    descriptors (K, V in the dQ kernel; Q, dO in the dK/dV kernel; flat 2-D, rank-4 with zero-filled ragged tails,
    and the fall-backs a layout forces: 2-D needs N a multiple of the block and contiguous tensors), and blocks
    split over several programs (block_m query rows per dQ program, block_n keys per dK/dV program). Two batches
    where flat 2-D descriptors are used: a batch of 1 would hide a wrong batch term in their row of a head
    ((b * Hkv + hk) * N for K, V in the dQ kernel, (b * H + h) * N for Q, dO in the dK/dV kernel)."""
    hq, hkv, d, block = 4, 2, 32, 64
    q, k, v = _qkv(b, hq, hkv, n, d, torch.float32, seed=23)
    if strided_q:  # q as a [B, N, H, D] buffer seen as [B, H, N, D]
        q = q.transpose(1, 2).contiguous().transpose(1, 2)
    do = _grad_out(q, 23)
    idx, cnt = dense_to_index(_random_mask(b, hq, math.ceil(n / block), 0.7, seed=23))
    _, _, want = _kernel_grads(q, k, v, idx, cnt, block, True, do)
    _, _, got = _kernel_grads(q, k, v, idx, cnt, block, True, do, config=config)
    assert all(_rel(g, w) < 1e-6 for g, w in zip(got, want))


def test_transposed_index_lists_every_selecting_query_block():
    """Against a loop over the index lists: GQA (each kv head collects its group's heads), a batch-broadcast
    index (one set of segments), a head-broadcast one, and causal dropping the blocks above the diagonal."""
    hq, hkv, nb = 4, 2, 5
    for shape in [(2, hq, nb, nb), (1, hq, nb, nb), (2, 1, nb, nb)]:
        for causal in (True, False):
            mask = torch.rand(shape, generator=torch.Generator().manual_seed(23)) < 0.5
            idx, cnt = dense_to_index(mask)
            entries, offsets = bs_triton.transposed_index(idx, cnt, hq, hkv, nb, causal)
            bi, group = shape[0], hq // hkv
            want = [[] for _ in range(bi * hkv * nb)]
            for b_ in range(bi):
                for h in range(hq):
                    for qb in range(nb):
                        for kb in idx[b_, h % shape[1], qb, : cnt[b_, h % shape[1], qb]].tolist():
                            if not causal or kb <= qb:
                                want[(b_ * hkv + h // group) * nb + kb].append((h % group) * nb + qb)
            assert offsets.dtype == entries.dtype == torch.int32 and offsets[0] == 0
            got = [sorted(entries[offsets[s] : offsets[s + 1]].tolist()) for s in range(len(want))]
            assert got == [sorted(w) for w in want]


def test_autograd_through_the_api_broadcast_mask_and_partial_grads(monkeypatch):
    """block_sparse_attention's autograd path with a [1, 1, nQB, maxK] index (Delta Attention's sink +
    window), GQA and q given as a [B, N, H, D] tensor seen as [B, H, N, D] (strided); a v-only gradient; the
    plain kernel call (no graph, no LSE) when no gradient is needed."""
    b, hq, hkv, n, d, block = 2, 2, 1, 130, 32, 64
    q, k, v = _qkv(b, hq, hkv, n, d, torch.float32, seed=24)
    do = _grad_out(q, 24)
    nb = math.ceil(n / block)
    idx, cnt = dense_to_index(sink_window_mask(nb, nb, sink_blocks=1, window_blocks=0)[None, None])
    idx, cnt = idx.to(DEV), cnt.to(DEV)
    leaves = [q.transpose(1, 2).contiguous().requires_grad_(), k.clone().requires_grad_(), v.clone().requires_grad_()]
    out = block_sparse_attention(leaves[0].transpose(1, 2), *leaves[1:], idx, cnt, block_size=block, impl="triton")
    out.backward(do)
    want = _reference_grads(q, k, v, idx.expand(b, hq, -1, -1), cnt.expand(b, hq, -1), block, True, do)
    _assert_grads_close([leaves[0].grad.transpose(1, 2), leaves[1].grad, leaves[2].grad], want, 1e-5)

    v_only = v.clone().requires_grad_()
    block_sparse_attention(q, k, v_only, idx, cnt, block_size=block, impl="triton").backward(do)
    assert _rel(v_only.grad, want[2]) < 1e-5

    lse_args = []
    forward = bs_triton.block_sparse_attention_triton

    def recording_forward(*args, **kwargs):
        lse_args.append(kwargs.get("lse"))
        return forward(*args, **kwargs)

    monkeypatch.setattr(bs_triton, "block_sparse_attention_triton", recording_forward)
    assert block_sparse_attention(q, k, v, idx, cnt, block_size=block, impl="triton").grad_fn is None
    with torch.no_grad():
        assert block_sparse_attention(q, *leaves[1:], idx, cnt, block_size=block, impl="triton").grad_fn is None
    assert lse_args == [None, None]


def test_double_backward_raises_on_the_kernel_and_runs_on_the_reference():
    b, hq, n, d, block = 1, 2, 70, 32, 64
    q, k, v = (t.requires_grad_() for t in _qkv(b, hq, hq, n, d, torch.float32, seed=25))
    idx, cnt = (t.to(DEV) for t in dense_to_index(causal_block_mask(2, 2).expand(b, hq, 2, 2)))
    out = block_sparse_attention(q, k, v, idx, cnt, block_size=block, impl="triton")
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(out.pow(2).sum(), q, create_graph=True)
    out = block_sparse_attention(q, k, v, idx, cnt, block_size=block, impl="reference")
    (g,) = torch.autograd.grad(out.pow(2).sum(), q, create_graph=True)
    (gg,) = torch.autograd.grad(g.sum(), k)
    assert torch.isfinite(gg).all() and gg.abs().sum() > 0


# ---------------------------------------------------------------- GPU (bf16, larger; not in CI)
@pytest.mark.gpu
@pytest.mark.parametrize("block", [64, 128])
@pytest.mark.parametrize("causal", [True, False])
def test_gpu_bf16_large_matches_reference(block, causal):
    b, hq, hkv, n, d = 1, 8, 2, 4096 + 37, 128
    q, k, v = _qkv(b, hq, hkv, n, d, torch.bfloat16, seed=13)
    nb = math.ceil(n / block)
    m = random_block_mask(b, hq, nb, 0.2, generator=torch.Generator().manual_seed(2))
    if not causal:
        m |= random_block_mask(b, hq, nb, 0.2, generator=torch.Generator().manual_seed(3)).transpose(-1, -2)
    idx, cnt = dense_to_index(m)
    got = _run_kernel(q, k, v, idx, cnt, block, causal)
    want = reference.block_sparse_attention_reference(
        q.float(), k.float(), v.float(), idx.to(DEV), cnt.to(DEV), block_size=block, causal=causal
    )
    assert not torch.isnan(got).any()
    assert _rel(got, want) < REL_TOL[torch.bfloat16]


@pytest.mark.gpu
def test_gpu_bf16_agrees_with_compiled_flex_attention():
    """Second opinion: compiled FlexAttention with the same BlockMask (kv blocks + causal mask_mod)."""
    from torch.nn.attention.flex_attention import BlockMask, flex_attention

    b, hq, n, d, block = 1, 8, 4096, 128, 128
    q, k, v = _qkv(b, hq, hq, n, d, torch.bfloat16, seed=14)
    nb = n // block
    mask = random_block_mask(b, hq, nb, 0.1, generator=torch.Generator().manual_seed(4)).to(DEV)
    idx, cnt = dense_to_index(mask)
    full_idx = torch.zeros(b, hq, nb, nb, dtype=torch.int32, device=DEV)
    full_idx[..., : idx.shape[-1]] = idx
    bm = BlockMask.from_kv_blocks(cnt, full_idx, BLOCK_SIZE=block, mask_mod=lambda b_, h_, qi, ki: qi >= ki)
    want = torch.compile(flex_attention)(q, k, v, block_mask=bm)
    got = block_sparse_attention(q, k, v, idx, cnt, block_size=block)
    assert _rel(got, want) < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("block", [64, 128])
@pytest.mark.parametrize("causal", [True, False])
def test_gpu_bf16_gradients_match_reference(block, causal):
    """The autograd path at a realistic size (bf16, ragged N, GQA) against autograd through the float32 oracle."""
    b, hq, hkv, n, d = 1, 8, 2, 4096 + 37, 128
    q, k, v = _qkv(b, hq, hkv, n, d, torch.bfloat16, seed=16)
    do = _grad_out(q, 16)
    nb = math.ceil(n / block)
    m = random_block_mask(b, hq, nb, 0.2, generator=torch.Generator().manual_seed(5))
    if not causal:
        m |= random_block_mask(b, hq, nb, 0.2, generator=torch.Generator().manual_seed(6)).transpose(-1, -2)
    idx, cnt = (t.to(DEV) for t in dense_to_index(m))
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    block_sparse_attention(*leaves, idx, cnt, block_size=block, causal=causal).backward(do)
    want = _reference_grads(q, k, v, idx, cnt, block, causal, do, dtype=torch.float32)
    _assert_grads_close([t.grad for t in leaves], want, 3e-2)


@pytest.mark.gpu
def test_gpu_pooled_map_bf16():
    b, hq, hkv, n, d = 1, 4, 2, 2048 + 5, 128
    q, k, _ = _qkv(b, hq, hkv, n, d, torch.bfloat16, seed=15)
    got = pooled_attention_map(q, k, block_size=64)
    want = pooled_attention_map(q.float(), k.float(), block_size=64, impl="reference")
    torch.testing.assert_close(got, want, atol=3e-3, rtol=3e-2)


def test_any_block_size_runs_the_reference_and_the_kernel_says_what_it_supports():
    from companion_kernels.block_sparse import block_sparse_attention, dense_to_index, pooled_attention_map
    from companion_kernels.block_sparse.reference import block_sparse_attention_reference

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 40, 24) for _ in range(3))  # block 16, D = 24: reference only
    mask = torch.rand(1, 2, 3, 3) < 0.6
    index, count = dense_to_index(mask)
    out = block_sparse_attention(q, k, v, index, count, block_size=16, causal=False)
    torch.testing.assert_close(out, block_sparse_attention_reference(q, k, v, index, count, block_size=16, causal=False))
    assert pooled_attention_map(q, k, block_size=16).shape == (1, 2, 3, 3)
    with pytest.raises(ValueError, match="not supported by the Triton kernel; allowed: \\(64, 128\\)"):
        block_sparse_attention(q, k, v, index, count, block_size=16, causal=False, impl="triton")

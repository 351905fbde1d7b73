"""Mask helpers and input validation of the block-sparse attention op (papers 01 and 09). CPU only, fast."""

import math

import pytest
import torch

from companion_kernels.block_sparse import (
    block_sparse_attention,
    causal_block_mask,
    dense_to_index,
    index_to_dense,
    mask_density,
    pooled_attention_map,
    random_block_mask,
    sink_window_mask,
    threshold_mask,
    topk_mask,
    topk_rows,
)


def test_dense_index_roundtrip_with_leading_dims():
    g = torch.Generator().manual_seed(0)
    mask = torch.rand(2, 3, 7, 9, generator=g) < 0.4
    mask[0, 0, 3] = False  # an empty row
    idx, cnt = dense_to_index(mask)
    assert idx.dtype == cnt.dtype == torch.int32
    assert idx.shape[:-1] == cnt.shape == (2, 3, 7)
    assert idx.shape[-1] == int(mask.sum(-1).max())
    assert torch.equal(cnt, mask.sum(-1).int())
    assert torch.equal(index_to_dense(idx, cnt, 9), mask)
    # ascending ids in the valid prefix
    r = idx[1, 2, 4, : cnt[1, 2, 4]]
    assert torch.equal(r, r.sort().values)


def test_index_to_dense_rejects_out_of_range_ids():
    idx = torch.tensor([[[0, 5]]], dtype=torch.int32)
    cnt = torch.tensor([[2]], dtype=torch.int32)
    with pytest.raises(ValueError, match="outside"):
        index_to_dense(idx, cnt, 4)
    cnt = torch.tensor([[1]], dtype=torch.int32)  # the bad id is padding now: ignored
    assert index_to_dense(idx, cnt, 4).tolist() == [[[True, False, False, False]]]


def _official_threshold(x, threshold, last_dense):
    m = x > threshold
    if last_dense:
        m[:, :, -2:, :] = True
    return m.tril()


def _official_topk(x, nz_ratio, last_dense):
    n = x.shape[-1]
    k = int((1 - math.sqrt(1 - nz_ratio)) * n)
    k = 1 if k == 0 else k
    m = torch.zeros_like(x, dtype=torch.bool)
    m.scatter_(-1, torch.topk(x, k, dim=-1).indices, True)
    if last_dense:
        m[:, :, -2:, :] = True
    return m.tril()


def _gate_scores(b, h, n, seed):
    """Causal softmax scores as SeerAttention's gate emits them (non-causal entries exactly 0)."""
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(b, h, n, n, generator=g).masked_fill(~causal_block_mask(n, n), float("-inf"))
    return torch.softmax(s, -1)


@pytest.mark.parametrize("last_dense", [False, True])
def test_threshold_mask_matches_official_rule(last_dense):
    x = _gate_scores(2, 3, 12, seed=1)
    got = threshold_mask(x, 0.05, dense_last_rows=2 if last_dense else 0)
    assert torch.equal(got, _official_threshold(x, 0.05, last_dense))


@pytest.mark.parametrize("nz_ratio", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("last_dense", [False, True])
def test_topk_mask_matches_official_rule_on_gate_scores(nz_ratio, last_dense):
    x = _gate_scores(2, 3, 16, seed=2)
    got = topk_mask(x, nz_ratio, dense_last_rows=2 if last_dense else 0)
    assert torch.equal(got, _official_topk(x, nz_ratio, last_dense))


def test_topk_square_root_rule_budget():
    # k = max(1, int((1 - sqrt(1 - r)) n)): n = 64, r = 0.5 -> int(0.2929 * 64) = 18
    assert topk_rows(64, 0.5) == 18
    assert topk_rows(64, 0.5, sqrt_rule=False) == 32
    assert topk_rows(8, 0.01) == 1
    x = torch.rand(1, 1, 64, 64)
    m = topk_mask(x, 0.5)
    rows = m.sum(-1)[0, 0]
    assert torch.equal(rows, torch.clamp(torch.arange(1, 65), max=18))
    # the rule turns a triangle density into a per-row budget: close to the asked nz_ratio
    assert abs(mask_density(m) - 0.5) < 0.05


def test_force_diagonal_fills_empty_rows():
    x = torch.full((1, 1, 6, 6), 1e-4)
    assert threshold_mask(x, 1e-3).sum() == 0
    m = threshold_mask(x, 1e-3, force_diagonal=True)
    assert torch.equal(m[0, 0], torch.eye(6, dtype=torch.bool))


def test_sink_window_mask_counts():
    m = sink_window_mask(40, 40, sink_blocks=8, window_blocks=16)
    assert m.shape == (40, 40) and m.dtype == torch.bool
    assert torch.equal(m, m.tril())
    # row 39: sinks 0..7 and 23..39 (16 before the diagonal + the diagonal)
    assert m[39].nonzero().flatten().tolist() == list(range(8)) + list(range(23, 40))
    assert m.diagonal().all()
    sym = sink_window_mask(5, 5, sink_blocks=0, window_blocks=1, causal=False)
    assert torch.equal(sym, sym.T) and int(sym.sum()) == 13


def test_random_block_mask_protocol():
    m = random_block_mask(1, 2, 64, 0.25, generator=torch.Generator().manual_seed(3))
    assert torch.equal(m, m.tril())
    assert m.diagonal(dim1=-2, dim2=-1).all()
    rows = m.sum(-1)
    k = int(rows.max())
    assert torch.equal(rows[0, 0], torch.clamp(torch.arange(1, 65), max=k))
    assert abs(mask_density(m) - 0.25) < 0.02


# ---------------------------------------------------------------- validation
def _inputs(n=64, d=32, hq=2, hkv=1, dtype=torch.float32):
    q = torch.randn(1, hq, n, d, dtype=dtype)
    k = torch.randn(1, hkv, n, d, dtype=dtype)
    v = torch.randn(1, hkv, n, d, dtype=dtype)
    nb = math.ceil(n / 64)
    idx, cnt = dense_to_index(causal_block_mask(nb, nb).expand(1, hq, nb, nb))
    return q, k, v, idx, cnt


@pytest.mark.parametrize(
    "mutate, exc, match",
    [
        (lambda a: a.update(q=a["q"].double()), TypeError, "dtype"),
        (lambda a: a.update(q=a["q"][..., :24].contiguous(), k=a["k"][..., :24].contiguous(),
                            v=a["v"][..., :24].contiguous(), impl="triton"), ValueError, "head dim"),
        (lambda a: a.update(k=a["k"].half()), TypeError, "differs"),
        (lambda a: a.update(q=torch.randn(1, 3, 64, 32), k=torch.randn(1, 2, 64, 32), v=torch.randn(1, 2, 64, 32)),
         ValueError, "multiple"),
        (lambda a: a.update(block_size=32), ValueError, "block_size"),
        (lambda a: a.update(impl="cuda"), ValueError, "impl"),
        (lambda a: a.update(idx=a["idx"].long()), TypeError, "int32"),
        (lambda a: a.update(idx=a["idx"] + 5), ValueError, "outside"),
        (lambda a: a.update(cnt=a["cnt"][..., :0]), ValueError, "block_count"),
        (lambda a: a.update(q=a["q"].transpose(-1, -2).contiguous().transpose(-1, -2)), ValueError, "contiguous"),
        (lambda a: a.update(sm_scale=-1.0), ValueError, "sm_scale"),
    ],
)
def test_bad_inputs_get_clear_errors(mutate, exc, match):
    q, k, v, idx, cnt = _inputs()
    a = dict(q=q, k=k, v=v, idx=idx, cnt=cnt, block_size=64, impl="auto", sm_scale=None)
    mutate(a)
    with pytest.raises(exc, match=match):
        block_sparse_attention(a["q"], a["k"], a["v"], a["idx"], a["cnt"], block_size=a["block_size"],
                               impl=a["impl"], sm_scale=a["sm_scale"])


def test_auto_falls_back_to_reference_on_cpu_and_pooled_validates():
    q, k, v, idx, cnt = _inputs()
    out = block_sparse_attention(q, k, v, idx, cnt)
    want = block_sparse_attention(q, k, v, idx, cnt, impl="reference")
    assert torch.equal(out, want)
    assert pooled_attention_map(q, k, block_size=16).shape == (1, 2, 4, 4)  # the reference takes any block size
    with pytest.raises(ValueError, match="block_size=16 is not supported by the Triton kernel"):
        pooled_attention_map(q, k, block_size=16, impl="triton")

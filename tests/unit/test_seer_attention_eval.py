"""SeerAttention (paper 01): mask selection, baselines, metrics, sparse runs and the explorer."""

import copy

import pytest
import torch

from companion.core import ParameterError
from companion.models import tiny_llama
from companion.seer_attention.evaluate import (
    METHODS,
    ashape_scores,
    density,
    evaluate_blocks,
    final_hidden,
    head_output_cosine,
    keep_per_row,
    method_selector,
    recall,
    sparse_forward,
    threshold_select,
    topk_select,
)
from companion.seer_attention.gate import GateSet
from companion.models.attention import attention_layout


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("sparsity", [0.5, 0.7, 0.9])
def test_topk_density_matches_request_within_one_block_per_row(causal, sparsity):
    n = 32
    scores = torch.softmax(torch.randn(2, 3, n, n), -1)
    mask = topk_select(scores, sparsity, causal=causal, dense_last_rows=0)
    # one block per row is 1/n of a full map and n / (n(n+1)/2) = 2/(n+1) of a causal triangle
    assert density(mask, causal) == pytest.approx(1 - sparsity, abs=(2.0 / (n + 1)) if causal else 1.0 / n)
    assert bool(mask.any(-1).all())  # no empty row
    if causal:
        assert not bool(mask.triu(1).any())
    else:
        assert bool((mask.sum(-1) == keep_per_row(n, sparsity, False)).all())


@pytest.mark.parametrize("sparsity", [0.5, 0.9])
def test_topk_keeps_the_last_two_rows_dense_on_causal_maps_like_the_official_code(sparsity):
    """``get_sparse_attn_mask_from_nz_ratio(..., use_dense_for_last_block=True)``: rows -2: dense, then tril."""
    n = 12
    scores = torch.softmax(torch.randn(1, 2, n, n).masked_fill(torch.ones(n, n).triu(1).bool(), float("-inf")), -1)
    mask = topk_select(scores, sparsity, causal=True)
    assert bool(mask[..., -2:, :].equal(torch.ones(1, 2, n, n, dtype=torch.bool).tril()[..., -2:, :]))
    plain = topk_select(scores, sparsity, causal=True, dense_last_rows=0)
    assert bool(mask[..., :-2, :].equal(plain[..., :-2, :]))  # the other rows are the plain top-k
    assert int(plain[..., -2:, :].sum()) < int(mask[..., -2:, :].sum())
    assert bool(topk_select(scores, sparsity, causal=False).equal(topk_select(scores, sparsity, causal=False, dense_last_rows=0)))


def test_threshold_rule_forces_last_rows_and_diagonal():
    n = 10
    scores = torch.full((1, 1, n, n), 1e-6).tril()
    scores[..., 0] = 0.5
    m = threshold_select(scores, 1e-3, causal=True)
    assert bool(m[0, 0, -2:].equal(torch.ones(2, n, dtype=torch.bool).tril(n - 2)[-2:]))  # last two rows dense (causal part)
    assert bool(m[0, 0].diagonal().all())  # diagonal forced: no empty rows, no NaN
    assert bool(m[0, 0, :, 0].all()) and int(m[0, 0, :-2].sum()) == 2 * (n - 2) - 1
    # bidirectional: a row below the threshold everywhere still keeps its best block
    sb = torch.full((1, 1, 4, 4), 0.25)
    sb[0, 0, 1, 3] = 0.26
    mb = threshold_select(sb, 0.3, causal=False)
    assert mb.sum().item() == 4 and bool(mb[0, 0, 1, 3])
    with pytest.raises(ParameterError, match="threshold"):
        threshold_select(sb, 1.5, causal=False)


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.2, 1.3])
def test_sparsity_outside_open_unit_interval_is_refused(bad):
    with pytest.raises(ParameterError, match="sparsity"):
        topk_select(torch.rand(4, 4), bad, causal=False)


def test_ashape_topk_equals_the_sink_window_helper():
    """Top-k of the A-shape prior with k = w + 2 blocks is the op's sink (1 block) + window (w) mask."""
    from companion_kernels.block_sparse import sink_window_mask, topk_mask

    n = 12
    for w in (0, 1, 3):
        k = w + 2
        nz = 1 - (1 - k / n) ** 2  # the causal top-k's square-root rule then keeps exactly k per row
        mask = topk_mask(ashape_scores(n, causal=True), nz + 1e-9, causal=True)
        assert torch.equal(mask, sink_window_mask(n, n, sink_blocks=1, window_blocks=w, causal=True)), w


def test_oracle_has_the_best_recall_of_its_own_target():
    torch.manual_seed(0)
    from companion.seer_attention.distill import TeacherData

    gs = GateSet(2, num_heads=2, head_dim=4, block_size=4, gate_dim=4, causal=False)
    untrained = copy.deepcopy(gs)
    data = TeacherData(block_size=4, causal=False)
    for _ in range(2):
        data.qp.append(torch.randn(3, 2, 8, 4))
        data.kp.append(torch.randn(3, 2, 8, 12))
        data.gt.append(torch.softmax(3 * torch.randn(3, 2, 8, 8), -1))
        data.mass.append(torch.softmax(3 * torch.randn(3, 2, 8, 8), -1))
    rows = evaluate_blocks(gs, untrained, data, [0.5, 0.75])
    assert {r.method for r in rows} == set(METHODS)
    for s in (0.5, 0.75):
        at = {r.method: r for r in rows if r.sparsity == s}
        assert all(at["oracle"].gt_recall >= r.gt_recall - 1e-9 for r in at.values())
        assert len({round(r.density, 9) for r in at.values()}) == 1  # matched sparsity


def test_recall_is_the_kept_share_of_each_row():
    t = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
    m = torch.tensor([[True, False, False], [False, False, True]])
    assert recall(t, m) == pytest.approx((0.5 + 0.8) / 2)


def test_sparse_run_with_all_blocks_equals_dense_and_sparse_changes_output():
    model = tiny_llama(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, seed=0)
    lay = attention_layout(model)
    gates = GateSet(2, num_heads=4, head_dim=16, num_kv_heads=2, block_size=8, gate_dim=8, causal=True, rope_theta=lay.rope_theta)
    ids = torch.randint(0, 256, (2, 45))  # 45 tokens: a ragged last block
    with torch.no_grad():
        dense = final_hidden(model, ids)

    def everything(*, q, **kw):
        n = -(-q.shape[2] // 8)
        return torch.ones(q.shape[0], q.shape[1], n, n, dtype=torch.bool).tril()

    out, dens = sparse_forward(model, ids, everything, block_size=8)
    torch.testing.assert_close(out, dense, atol=1e-5, rtol=1e-5)
    assert dens == [1.0, 1.0]
    sel = method_selector("gate", 0.7, gates)
    out2, dens2 = sparse_forward(model, ids, sel, block_size=8)
    assert all(0 < d < 1 for d in dens2) and torch.isfinite(out2).all()
    assert not torch.allclose(out2, dense, atol=1e-4)


def test_head_output_cosine_is_one_with_every_block():
    q, k, v = torch.randn(3, 40, 16), torch.randn(3, 40, 16), torch.randn(3, 40, 16)
    full = torch.ones(5, 5, dtype=torch.bool)
    assert head_output_cosine(q[0], k[0], v[0], full, block_size=8, causal=False, scaling=0.25) == pytest.approx(1.0, abs=1e-5)
    one = torch.eye(5, dtype=torch.bool)
    assert head_output_cosine(q[0], k[0], v[0], one, block_size=8, causal=False, scaling=0.25) < 0.99


def test_explorer_view_is_a_pure_function_of_its_controls():
    pytest.importorskip("plotly")
    from companion.seer_attention.explorer import ExplorerData, explorer_view

    n, H, N, d = 8, 2, 64, 16
    gt = torch.softmax(torch.randn(H, n, n) * 2, -1)
    data = ExplorerData(gt=[gt], mass=[gt], scores=[torch.softmax(torch.randn(H, n, n), -1)],
                        qkv={0: (torch.randn(H, N, d), torch.randn(H, N, d), torch.randn(H, N, d), 0.25)}, block_size=8, causal=False)
    fig, text = explorer_view(data, layer=0, head=1, rule="top-k", sparsity=0.75)
    assert len(fig.data) == 3 and "keeps 25% of blocks" in text and "cosine" in text
    fig2, text2 = explorer_view(data, layer=0, head=1, rule="top-k", sparsity=0.75)
    assert text == text2 and fig.to_json() == fig2.to_json()
    _, t3 = explorer_view(data, layer=0, head=0, rule="threshold", threshold=0.1)
    assert "layer 0, head 0" in t3
    with pytest.raises(ParameterError, match="layer"):
        explorer_view(data, layer=3, head=0)
    with pytest.raises(ParameterError, match="rule"):
        explorer_view(data, layer=0, head=0, rule="median")

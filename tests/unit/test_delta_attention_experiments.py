"""Δ Attention (paper 09): the experiment drivers (MiniLM loop, recall toy, GPU path on the CPU, explorer)."""

import math
import os

import torch

if not torch.cuda.is_available():   # transformers imports triton: pick the CPU interpreter first
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import plotly.graph_objects as go  # noqa: E402
import pytest  # noqa: E402
from transformers import BertConfig, BertModel

from companion.delta_attention import Method, delta_plan
from companion.delta_attention.attention import dense_mask, masked_attention, sink_window_mask
from companion.delta_attention.diagnostics import cosine_rows, spearman_rows
from companion.delta_attention.explorer import make_explorer_update
from companion.delta_attention.figures import ladder_figure, mask_picture
from companion.delta_attention.gpu import bytes_needed, check_free_memory, delta_prefill, delta_prefill_unfused, sparse_index, sparse_prefill
from companion.delta_attention.minilm import compare, dense_rows_probs, position_error, run_minilm
from companion.delta_attention.recall import RecallTask, TinyCausalLM, recall_metrics
from companion_kernels.block_sparse import index_to_dense


@pytest.fixture(scope="module")
def tiny_bert():
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=64, attn_implementation="eager")
    return BertModel(cfg).eval()


def test_minilm_loop_dense_equals_hf_forward(tiny_bert):
    ids = torch.randint(0, 100, (2, 40), generator=torch.Generator().manual_seed(1))
    trace = run_minilm(tiny_bert, ids, Method("dense", causal=False), last_rows=8)
    with torch.no_grad():
        ref = tiny_bert(input_ids=ids).last_hidden_state
    torch.testing.assert_close(trace.hidden[-1], ref, atol=1e-5, rtol=1e-5)
    assert len(trace.attn_out) == 3 and trace.q_last[0].shape == (2, 4, 8, 8)


def test_minilm_diagnostics_of_dense_are_perfect(tiny_bert):
    ids = torch.randint(0, 100, (1, 40), generator=torch.Generator().manual_seed(2))
    dense = run_minilm(tiny_bert, ids, Method("dense", causal=False))
    df = compare(dense, dense)
    assert np.allclose(df.cos_attn, 1) and np.allclose(df.spearman, 1) and np.allclose(df.final_cos, 1)
    sparse = run_minilm(tiny_bert, ids, Method("sparse", sink=2, window=4, causal=False))
    err = position_error(sparse, dense)
    assert err.shape == (3, 40) and err.min() >= -1e-9 and err.max() > 1e-4


def test_spearman_against_the_dense_ranks_ranked_once(tiny_bert):
    """``compare`` ranks the dense run's decode rows once per layer (memo on the dense trace) and reuses them for
    every method: the values equal a direct ``spearman_rows`` of the two runs' rows, and a second compare with the
    same dense trace ranks nothing again."""
    ids = torch.randint(0, 100, (2, 40), generator=torch.Generator().manual_seed(5))
    dense = run_minilm(tiny_bert, ids, Method("dense", causal=False), last_rows=8)
    sparse = run_minilm(tiny_bert, ids, Method("sparse", sink=2, window=4, causal=False), last_rows=8)
    df = compare(sparse, dense)
    for layer in range(3):
        want = spearman_rows(dense_rows_probs(sparse.q_last[layer], sparse.k[layer]),
                             dense_rows_probs(dense.q_last[layer], dense.k[layer]))
        assert df.spearman[layer] == float(want.mean())
    memo = {layer: id(r) for layer, r in dense.ranks.items()}
    assert sorted(memo) == [0, 1, 2]
    compare(run_minilm(tiny_bert, ids, Method("delta", sink=2, window=4, gamma=4, tail=4, causal=False), last_rows=8), dense)
    assert {layer: id(r) for layer, r in dense.ranks.items()} == memo


def test_isolated_cosine_is_the_layer_alone_on_the_dense_inputs(tiny_bert):
    """``cos_attn_isolated``: each layer's sparse attention on the dense model's own Q, K, V, computed by hand here
    from a dense layer loop; layer 1 sees the same inputs in both runs, so there it equals ``cos_attn``."""
    ids = torch.randint(0, 100, (2, 40), generator=torch.Generator().manual_seed(4))
    method = Method("sparse", sink=2, window=4, causal=False)
    dense = run_minilm(tiny_bert, ids, Method("dense", causal=False))
    df = compare(run_minilm(tiny_bert, ids, method), dense)
    mask = sink_window_mask(40, sink=2, window=4, causal=False)
    for layer, (q, k, v, scaling) in enumerate(dense.qkv):
        o = masked_attention(q, k, v, mask, sm_scale=scaling).transpose(1, 2).reshape(2, 40, -1)
        want = cosine_rows(o, dense.attn_out[layer]).mean(dim=1)
        assert df.cos_attn_isolated_windows[layer] == pytest.approx(tuple(want.tolist()), abs=1e-6)
    assert df.cos_attn_isolated[0] == pytest.approx(df.cos_attn[0], abs=1e-6)
    assert abs(df.cos_attn_isolated[2] - df.cos_attn[2]) > 1e-4       # deeper, the inputs differ


def test_explorer_update_is_pure_and_labelled(tiny_bert):
    ids = torch.randint(0, 100, (1, 48), generator=torch.Generator().manual_seed(3))
    update = make_explorer_update(tiny_bert, ids, tail=8)
    fig, readout = update(window=8, sink=2, gamma=4)
    assert isinstance(fig, go.Figure) and "compute" in readout
    heat = [t for t in fig.data if isinstance(t, go.Heatmap)]
    assert len(heat) == 2 and np.asarray(heat[0].z).shape == (3, 48)           # 48 positions, no binning
    assert fig.layout.title.text and fig.layout.xaxis.title.text and fig.layout.yaxis.title.text
    fig2, readout2 = update(window=8, sink=2, gamma=4)
    assert readout2 == readout and np.array_equal(np.asarray(fig2.data[1].z), np.asarray(heat[1].z))
    _, r1 = update(window=48, sink=2, gamma=4)                      # full window: no error at all
    assert "sparse 0.0000" in r1
    _, r_g1 = update(window=8, sink=2, gamma=1)                     # γ = 1: Δ run is dense
    assert "sparse + Δ 0.0000" in r_g1


def test_figures_have_titles():
    fig = mask_picture(32, sink=2, window=4, gamma=4, tail=4)
    assert fig.layout.title.text and fig.layout.xaxis.title.text
    rows = [{"N": n, "contender": c, "gamma": g, "ms": ms} for n, c, g, ms in
            [(1024, "sparse", None, 1.0), (2048, "sparse", None, 2.0), (1024, "SDPA flash", None, 3.0),
             (1024, "sparse + Δ", 64, 1.5), (2048, "Δ only", 64, 0.5), (2048, "SDPA cuDNN", None, None)]]
    fig = ladder_figure(rows, "t")
    assert {t.name for t in fig.data} == {"sparse", "SDPA flash", "sparse + Δ γ=64"}


# ---------------------------------------------------------------- recall toy

def test_recall_task_structure():
    task = RecallTask(length=96, pairs=6, queries=4, num_keys=10, num_values=10, num_filler=10)
    tok, tgt = task.sample(16, torch.Generator().manual_seed(0))
    assert tok.shape == (16, 96) and tgt.sum(1).eq(4).all()
    for b in range(16):
        row = tok[b].tolist()
        pairs = {row[i]: row[i + 1] for i in range(task.query_start) if 1 <= row[i] < 11}
        assert len(pairs) == 6
        for p in torch.nonzero(tgt[b]).flatten().tolist():
            assert p >= task.query_start and pairs[row[p]] == row[p + 1]


def test_recall_model_methods_reduce_to_dense():
    task = RecallTask(length=64, pairs=4, queries=4, num_keys=8, num_values=8, num_filler=8)
    torch.manual_seed(0)
    model = TinyCausalLM(task.vocab, d=32, layers=2, heads=4).eval()
    tok, _ = task.sample(3, torch.Generator().manual_seed(1))
    p = task.query_start
    with torch.no_grad():
        ref = model(tok)
        for m in (Method("dense"), Method("sparse", sink=0, window=p), Method("delta", sink=1, window=3, gamma=1, tail=0)):
            torch.testing.assert_close(model(tok, m, prefill_len=p), ref, atol=1e-5, rtol=1e-5)
        sparse = model(tok, Method("sparse", sink=1, window=3), prefill_len=p)
        assert (sparse - ref).abs().max() > 1e-4
    met = recall_metrics(model, task, None, batch=8)
    assert 0 <= met["accuracy"] <= 1 and met["nll"] > 0 and 0 < met["p_correct"] < 1


# ---------------------------------------------------------------- GPU path, run with the references on the CPU

def test_gpu_path_reference_semantics():
    n, hq, hkv, d, block = 200, 4, 2, 32, 64
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, hq, n, d, generator=g)
    k, v = (torch.randn(1, hkv, n, d, generator=g) for _ in range(2))
    index, count, kept = sparse_index(n, sink=32, window=64, block_size=block)
    assert 0 < kept < 1
    # the sparse pass equals masked attention with the block mask expanded to tokens
    blocks = index_to_dense(index[0, 0], count[0, 0], math.ceil(n / block))
    tok_mask = blocks.repeat_interleave(block, 0).repeat_interleave(block, 1)[:n, :n] & dense_mask(n)
    sp = sparse_prefill(q, k, v, index, count, block_size=block, impl="reference")
    torch.testing.assert_close(sp, masked_attention(q, k, v, tok_mask), atol=1e-5, rtol=1e-5)
    fused = delta_prefill(q, k, v, index, count, gamma=16, tail=32, block_size=block, impl="reference")
    unfused = delta_prefill_unfused(q, k, v, index, count, gamma=16, tail=32, block_size=block, impl="reference")
    torch.testing.assert_close(fused, unfused, atol=1e-5, rtol=1e-5)
    dense = masked_attention(q, k, v, dense_mask(n))
    rows = delta_plan(n, 16, 32).dense_rows()
    torch.testing.assert_close(fused[:, :, rows], dense[:, :, rows], atol=1e-5, rtol=1e-5)


def test_bytes_needed_at_one_million_tokens():
    gib = bytes_needed(1 << 20) / 2 ** 30          # q 8 + k,v 4 + three 8-GiB buffers = 36 GiB, +10 %
    assert gib == pytest.approx(39.6, abs=0.1)


def test_free_memory_check_says_what_a_million_tokens_need(monkeypatch):
    """The million-token runs check free GPU memory first (issue: 'say what they need')."""
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (20 * 2 ** 30, 80 * 2 ** 30))
    with pytest.raises(MemoryError, match=r"N=1048576: needs about 39\.6 GiB of GPU memory, 20\.0 GiB free"):
        check_free_memory(1 << 20)
    need, free = check_free_memory(1 << 17)        # 128k fits in 20 GiB
    assert need == bytes_needed(1 << 17) and free == 20 * 2 ** 30


def test_heatmap_binning_keeps_means():
    from companion.delta_attention.explorer import bin_positions

    x, b = bin_positions(np.arange(14.0).reshape(2, 7), 3)      # bins of 3: [0:3], [3:6], [6:7]
    assert x.tolist() == [0, 3, 6]
    assert b.tolist() == [[1.0, 4.0, 6.0], [8.0, 11.0, 13.0]]


def _hand_loop(model, ids, method):
    """The layer loop written out by hand from BERT's modules: the reference for the session path."""
    from companion.delta_attention import delta_attention

    b, n = ids.shape
    heads = model.config.num_attention_heads
    h = model.embeddings(input_ids=ids, token_type_ids=torch.zeros_like(ids))
    outs, hidden = [], []
    for layer in model.encoder.layer:
        sa = layer.attention.self
        d = sa.attention_head_size

        def split(x):
            return x.view(b, n, heads, d).transpose(1, 2)

        ctx = delta_attention(split(sa.query(h)), split(sa.key(h)), split(sa.value(h)), method).transpose(1, 2).reshape(b, n, -1)
        a = layer.attention.output(ctx, h)
        h = layer.output(layer.intermediate(a), a)
        outs.append(ctx)
        hidden.append(h)
    return outs, hidden


@pytest.mark.parametrize("method", [Method("sparse", sink=2, window=4, causal=False),
                                    Method("delta", sink=2, window=4, gamma=4, tail=8, causal=False),
                                    Method("recompute", sink=1, window=3, gamma=8, tail=8, causal=False)])
def test_minilm_session_equals_hand_written_layer_loop(tiny_bert, method):
    ids = torch.randint(0, 100, (2, 40), generator=torch.Generator().manual_seed(4))
    impl = tiny_bert.config._attn_implementation
    trace = run_minilm(tiny_bert, ids, method, last_rows=8)
    assert tiny_bert.config._attn_implementation == impl                      # the session restores the model
    with torch.no_grad():
        outs, hidden = _hand_loop(tiny_bert, ids, method)
    for got, want in zip(trace.attn_out + trace.hidden, outs + hidden):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


def test_minilm_runs_memo_is_shared(tiny_bert):
    from companion.delta_attention.minilm import MiniLMRuns, shift_through_depth

    ids = torch.randint(0, 100, (1, 40), generator=torch.Generator().manual_seed(5))
    runs = MiniLMRuns(tiny_bert, ids, last_rows=8, keep=2)
    a, b, c = (Method("sparse", sink=s, window=4, causal=False) for s in (1, 2, 3))
    ta = runs.get(a)
    assert runs.get(a) is ta and runs.get(Method("dense", causal=False)) is runs.dense
    runs.get(b), runs.get(c)                                                  # keep=2: a is dropped
    assert runs.get(a) is not ta
    torch.testing.assert_close(runs.get(a).hidden[-1], ta.hidden[-1], atol=0, rtol=0)
    with_memo = shift_through_depth(tiny_bert, ids, [a, b], last_rows=8, runs=runs)
    without = shift_through_depth(tiny_bert, ids, [a, b], last_rows=8)
    assert with_memo.equals(without)

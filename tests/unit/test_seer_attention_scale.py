"""SeerAttention GPU section (paper 01): the planted decoder and the pipeline of the GPU script, tiny."""

import pytest
import torch

from companion.seer_attention.data import byte_windows
from companion.models.attention import dense_attention, attention_session
from companion.seer_attention.ops import block_mass_map
from companion.seer_attention.synthetic import BOS, VERTICAL_MARKER, planted_decoder, with_bos


def test_planted_heads_show_their_patterns():
    model, names = planted_decoder(num_layers=1, num_heads=4, head_dim=32, max_position=2048, rope_theta=1e6)
    assert names == ["local (narrow)", "A-shape (sink + local)", "slash (offset 1024)", "vertical (document boundaries)"]
    ids = with_bos(byte_windows(1, 1536, seed=2))
    assert ids[0, 0] == BOS and bool((ids == VERTICAL_MARKER).any())
    maps = {}

    def handler(*, layer, q, k, v, causal, scaling, **kw):
        maps[layer] = block_mass_map(q, k, block_size=64, causal=True, sm_scale=scaling)[0]
        return dense_attention(q, k, v, causal, scaling)

    with torch.no_grad(), attention_session(model, handler):
        model(input_ids=ids)
    m = maps[0]
    rows = slice(18, 24)  # late query blocks
    near = lambda h, lo, hi: float(sum(torch.diagonal(m[h], -o)[18 - o:24 - o].sum() for o in range(lo, hi + 1)) / 6)  # noqa: E731
    assert near(0, 0, 1) > 0.8  # local: the diagonal band
    assert float(m[1, rows, 0].mean()) > 0.2 and near(1, 0, 1) > 0.3  # A-shape: sink + band
    assert near(2, 15, 17) > 0.6  # slash: ~1024 tokens = 16 blocks back
    marker_blocks = sorted({int(i) // 64 for i in torch.nonzero(ids[0] == VERTICAL_MARKER)[:, 0]} | {0})
    assert float(m[3, rows][:, marker_blocks].sum(-1).mean()) > 0.7  # vertical: the document boundaries


def test_gpu_pipeline_runs_tiny_on_cpu():
    from companion.seer_attention.scale import distil_long, gate_masks, time_attention

    res, model, gates = distil_long(seq_len=256, n_train=2, n_test=1, steps=3, num_heads=2, head_dim=32, num_layers=1, long_factor=2,
                      device="cpu", dtype=torch.float32, impl="reference", sparsities=(0.5,), log=lambda *a: None)
    assert {r["method"] for r in res["recall"]} >= {"gate", "gate (no block RoPE)", "oracle", "a-shape"}
    assert {r["length"] for r in res["recall"]} == {"train_len", "long"}
    masks = gate_masks(model, gates, 320, sparsities=(0.5,))
    assert all(m.shape == (1, 2, 5, 5) and m.dtype == torch.bool for m in masks.values())
    rows = time_attention(masks, 320, heads=4, head_dim=32, flex=False, device="cpu", log=lambda *a: None)
    sparse = [r for r in rows if r["mask"] != "dense"]
    assert len(sparse) == len(masks) and all(r["max_abs_err_vs_masked_sdpa"] < 1e-5 for r in sparse)


@pytest.mark.gpu
def test_gpu_timing_path_on_cuda():
    from companion_kernels.block_sparse import random_block_mask

    from companion.seer_attention.scale import time_attention

    masks = {"random 50%": random_block_mask(1, 4, 32, 0.5, device="cuda")}
    rows = time_attention(masks, 2048, heads=8, head_dim=128, flex=False, log=lambda *a: None)
    sparse = [r for r in rows if r["backend"] == "block-sparse Triton"]
    assert sparse and sparse[0]["max_abs_err_vs_masked_sdpa"] < 2e-2 and sparse[0]["ms"] > 0

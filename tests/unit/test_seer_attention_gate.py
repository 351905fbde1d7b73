"""SeerAttention gate (paper 01): pooling, block RoPE, the gate's scores, save/load, bad input."""

import pytest
import torch
import torch.nn.functional as F

from companion.core import ParameterError
from companion.seer_attention.gate import AttnGate, GateSet, block_pool, block_rope, count_parameters, n_blocks


@pytest.mark.parametrize("N,B", [(37, 8), (5, 8), (32, 8), (1, 4)])
def test_block_pool_matches_torch_ceil_mode(N, B):
    x = torch.randn(2, 3, N, 5, dtype=torch.float64)
    n = n_blocks(N, B)
    xt = x.permute(0, 1, 3, 2).reshape(6, 5, N)  # pool along the last axis with torch's ceil_mode pooling
    ref_avg = F.avg_pool1d(xt, B, B, ceil_mode=True).reshape(2, 3, 5, n).permute(0, 1, 3, 2)
    ref_max = F.max_pool1d(xt, B, B, ceil_mode=True).reshape(2, 3, 5, n).permute(0, 1, 3, 2)
    ref_min = -F.max_pool1d(-xt, B, B, ceil_mode=True).reshape(2, 3, 5, n).permute(0, 1, 3, 2)
    torch.testing.assert_close(block_pool(x, B, "avg"), ref_avg)
    torch.testing.assert_close(block_pool(x, B, "max"), ref_max)
    torch.testing.assert_close(block_pool(x, B, "min"), ref_min)
    # the partial last block is averaged over its real tokens only
    last = x[..., (n - 1) * B:, :]
    torch.testing.assert_close(block_pool(x, B, "avg")[..., -1, :], last.mean(-2))


def test_block_rope_equals_hf_llama_rope_at_block_starts():
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    d, B, n, theta = 16, 8, 6, 500.0
    cfg = LlamaConfig(hidden_size=d * 2, num_attention_heads=2, head_dim=d, rope_theta=theta)
    rot = LlamaRotaryEmbedding(cfg)
    x = torch.randn(1, 2, n, d)
    pos = (B * torch.arange(n) + 3)[None]  # block starts with an offset of 3
    cos, sin = rot(x, pos)
    ref, _ = apply_rotary_pos_emb(x, x, cos, sin)
    torch.testing.assert_close(block_rope(x, B, theta, position_offset=3), ref, atol=1e-5, rtol=1e-5)


def test_gate_scores_are_row_stochastic_and_causal():
    g = AttnGate(num_heads=4, head_dim=8, block_size=8, gate_dim=8, causal=True, rope_theta=1e4)
    q, k = torch.randn(2, 4, 45, 8), torch.randn(2, 4, 45, 8)  # 45 = 5 blocks of 8 + 5 tokens
    s = g.scores(q, k)
    assert s.shape == (2, 4, 6, 6)
    torch.testing.assert_close(s.sum(-1), torch.ones(2, 4, 6))
    assert torch.all(s.triu(1) == 0)
    # bidirectional: no zeros forced
    gb = AttnGate(num_heads=4, head_dim=8, block_size=8, gate_dim=8, causal=False)
    assert torch.all(gb.scores(q, k) > 0)


def test_sequence_shorter_than_a_block_gives_one_block():
    g = AttnGate(num_heads=2, head_dim=8, block_size=64, gate_dim=8, causal=True, rope_theta=1e4)
    s = g.scores(torch.randn(1, 2, 10, 8), torch.randn(1, 2, 10, 8))
    torch.testing.assert_close(s, torch.ones(1, 2, 1, 1))


def test_block_rope_makes_scores_depend_on_relative_block_position_only():
    # identical pooled features in every block: scores must be Toeplitz and shift-invariant
    g = AttnGate(num_heads=1, head_dim=8, block_size=4, gate_dim=8, causal=False, rope_theta=100.0)
    q = torch.randn(1, 1, 1, 8).expand(1, 1, 24, 8)
    k = torch.randn(1, 1, 1, 8).expand(1, 1, 24, 8)
    lg = g(q, k)[0, 0]
    for delta in range(-5, 6):
        d = torch.diagonal(lg, delta)
        torch.testing.assert_close(d, d[0].expand_as(d), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(g(q, k, position_offset=1000), g(q, k), atol=1e-4, rtol=1e-4)
    # without RoPE the same input gives a constant map
    g0 = AttnGate(num_heads=1, head_dim=8, block_size=4, gate_dim=8, causal=False, rope_theta=None)
    lg0 = g0(q, k)[0, 0]
    torch.testing.assert_close(lg0, lg0[0, 0].expand_as(lg0))


def test_gqa_key_side_is_shared_within_a_group():
    g = AttnGate(num_heads=4, head_dim=8, block_size=4, gate_dim=8, num_kv_heads=2, causal=False)
    with torch.no_grad():
        g.w_q[1] = g.w_q[0]
        g.w_q[3] = g.w_q[2]
    q = torch.randn(1, 1, 16, 8).expand(1, 4, 16, 8)
    k = torch.randn(1, 2, 16, 8)
    lg = g(q, k)
    torch.testing.assert_close(lg[:, 0], lg[:, 1])
    torch.testing.assert_close(lg[:, 2], lg[:, 3])
    assert not torch.allclose(lg[:, 0], lg[:, 2])


def test_parameter_count_of_minilm_gates():
    gs = GateSet(6, num_heads=12, head_dim=32, block_size=16, gate_dim=32, causal=False)
    assert count_parameters(gs) == 6 * (12 * 32 * 32 + 12 * 3 * 32 * 32) == 294912


def test_save_load_roundtrip(tmp_path):
    gs = GateSet(2, num_heads=4, head_dim=8, block_size=8, gate_dim=8, num_kv_heads=2, causal=True, rope_theta=1e4)
    path = gs.save(tmp_path / "g.safetensors", metadata={"note": "test"})
    back = GateSet.load(path)
    assert back.config() == gs.config()
    q, k = torch.randn(1, 4, 30, 8), torch.randn(1, 2, 30, 8)
    torch.testing.assert_close(back[1](q, k), gs[1](q, k))
    assert not list(tmp_path.glob(".*tmp"))  # no temporary file left behind
    (tmp_path / "bad.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(Exception):
        GateSet.load(tmp_path / "bad.safetensors")
    with pytest.raises(FileNotFoundError):
        GateSet.load(tmp_path / "missing.safetensors")


@pytest.mark.parametrize(
    "kwargs,name",
    [
        (dict(block_size=0), "block_size"),
        (dict(num_kv_heads=3), "num_kv_heads"),
        (dict(rope_theta=-1.0), "rope_theta"),
        (dict(rope_theta=1e4, gate_dim=7), "gate_dim"),
        (dict(k_pool=("max", "median")), "k_pool"),
    ],
)
def test_bad_gate_parameters_name_the_parameter(kwargs, name):
    base = dict(num_heads=4, head_dim=8, block_size=8, gate_dim=8)
    base.update(kwargs)
    with pytest.raises(ParameterError, match=name):
        AttnGate(**base)


def test_bad_qk_shapes_are_explained():
    g = AttnGate(num_heads=4, head_dim=8, block_size=8, gate_dim=8)
    with pytest.raises(ValueError, match="query heads"):
        g(torch.randn(1, 3, 16, 8), torch.randn(1, 4, 16, 8))
    with pytest.raises(ValueError, match="head_dim"):
        g(torch.randn(1, 4, 16, 7), torch.randn(1, 4, 16, 7))
    with pytest.raises(ValueError, match="same batch and length"):
        g(torch.randn(1, 4, 16, 8), torch.randn(1, 4, 17, 8))
    with pytest.raises(ParameterError, match="pooling"):
        block_pool(torch.randn(3, 4), 2, "sum")

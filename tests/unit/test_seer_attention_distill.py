"""SeerAttention self-distillation (paper 01): teacher capture, ground truth, KL loss, training."""

import copy

import pytest
import torch

from companion.models import capture_attention, tiny_gpt2, tiny_llama
from companion.seer_attention.distill import collect_teacher, distill, distill_loss, heldout_kl, kl_rows
from companion.seer_attention.gate import GateSet
from companion.models.attention import AttentionCaptureError, attention_layout, attention_session
from companion.seer_attention.ops import block_mass_map, pooled_attention_map, pooled_attention_map_rbuffer


@pytest.fixture(scope="module")
def llama():
    return tiny_llama(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, seed=0)


def _gates(model, block_size=16, seed=0):
    lay = attention_layout(model)
    torch.manual_seed(seed)
    return GateSet(lay.num_layers, num_heads=lay.num_heads, head_dim=lay.head_dim, num_kv_heads=lay.num_kv_heads,
                   block_size=block_size, gate_dim=16, causal=lay.causal, rope_theta=lay.rope_theta)


def test_layout_of_tiny_llama(llama):
    lay = attention_layout(llama)
    assert (lay.num_layers, lay.num_heads, lay.num_kv_heads, lay.head_dim, lay.causal) == (2, 4, 2, 16, True)
    assert lay.rope_theta == 10000.0


def test_teacher_matches_eager_attention_of_the_model(llama):
    """gt from the session's post-RoPE Q/K equals the max-pool of the eager probabilities, and the
    session's pre-RoPE Q/K are what the foundation's capture_attention sees (N mod B != 0)."""
    ids = torch.randint(0, 256, (2, 50))
    B = 16
    with torch.no_grad(), capture_attention(llama) as cap:
        llama(input_ids=ids)
    seen = {}

    def handler(*, layer, q_pre, k_pre, q, k, v, causal, scaling, position_offset):
        seen[layer] = (q_pre, k_pre, pooled_attention_map(q, k, block_size=B, causal=causal, sm_scale=scaling))
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scaling)

    with torch.no_grad(), attention_session(llama, handler):
        llama(input_ids=ids)
    assert llama.config._attn_implementation == "eager"  # restored
    for layer in range(2):
        q_pre, k_pre, gt = seen[layer]
        torch.testing.assert_close(q_pre, cap.q[layer])
        torch.testing.assert_close(k_pre, cap.k[layer])
        p = torch.nn.functional.pad(cap.probs[layer], (0, 14, 0, 14))  # 50 -> 64 tokens
        ref = p.reshape(2, 4, 4, B, 4, B).amax(dim=(3, 5))
        ref = ref / ref.sum(-1, keepdim=True)
        torch.testing.assert_close(gt, ref, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("causal,N,B", [(True, 45, 8), (False, 45, 8), (True, 5, 8), (True, 64, 16)])
def test_rbuffer_algorithm_equals_dense_ground_truth_fp64(causal, N, B):
    q, k = torch.randn(1, 2, N, 8, dtype=torch.float64), torch.randn(1, 2, N, 8, dtype=torch.float64)
    dense = pooled_attention_map(q, k, block_size=B, causal=causal)
    for tile in (B, 2 * B):
        rb = pooled_attention_map_rbuffer(q, k, block_size=B, causal=causal, kv_tile=tile)
        assert (rb - dense).abs().max() < 1e-6


def test_mass_map_rows_sum_to_one_and_match_explicit_probabilities():
    q, k = torch.randn(1, 2, 37, 8), torch.randn(1, 1, 37, 8)  # GQA: one key head
    m = block_mass_map(q, k, block_size=8, causal=True, chunk=8)
    torch.testing.assert_close(m.sum(-1), torch.ones(1, 2, 5))
    s = (q @ k.expand(1, 2, 37, 8).transpose(-1, -2)) / 8 ** 0.5
    p = torch.softmax(s.masked_fill(torch.ones(37, 37).triu(1).bool(), float("-inf")), -1)
    p = torch.nn.functional.pad(p, (0, 3, 0, 3)).reshape(1, 2, 5, 8, 5, 8).sum(-1).sum(-2)
    p = p / torch.tensor([8, 8, 8, 8, 5.0])[:, None]
    torch.testing.assert_close(m, p, atol=1e-5, rtol=1e-5)


@pytest.mark.filterwarnings("ignore:reduction")
def test_loss_equals_official_kldivloss_sum_over_layers():
    """10 * sum_l KLDivLoss('mean')(log_softmax(logits_l), gt_l) for a bidirectional gate (finite logits)."""
    gs = GateSet(2, num_heads=2, head_dim=4, block_size=4, gate_dim=4, causal=False)
    from companion.seer_attention.distill import TeacherData

    data = TeacherData(block_size=4, causal=False)
    for _ in range(2):
        data.qp.append(torch.randn(3, 2, 5, 4))
        data.kp.append(torch.randn(3, 2, 5, 12))
        data.gt.append(torch.softmax(torch.randn(3, 2, 5, 5), -1))
    ours = distill_loss(gs, data)
    kld = torch.nn.KLDivLoss()  # the official loss object ('mean' reduction)
    ref = 10 * sum(kld(torch.log_softmax(gs[l].logits_from_pooled(data.qp[l], data.kp[l]), -1), data.gt[l]) for l in range(2))
    torch.testing.assert_close(ours, ref)
    # KL is zero when the gate reproduces the target exactly
    gt = data.gt[0]
    assert kl_rows(gt, gt.log()).abs().max() < 1e-6


def test_distillation_lowers_heldout_kl_and_keeps_the_model_frozen():
    from companion.seer_attention.data import byte_windows
    from companion.seer_attention.synthetic import planted_decoder, with_bos

    model, _ = planted_decoder(num_layers=2, num_heads=4, head_dim=16, max_position=512, rope_theta=1e4)
    ids = with_bos(byte_windows(5, 128, seed=1))
    gates = _gates(model, block_size=16)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    train = collect_teacher(model, gates, ids[:3], batch_size=3)
    test = collect_teacher(model, gates, ids[3:], batch_size=2)
    assert train.gt[0].shape == (3, 4, 8, 8) and train.kp[0].shape == (3, 4, 8, 48)
    kl0 = sum(heldout_kl(gates, test))
    hist = distill(gates, train, steps=60, lr=1e-2, warmup=5, eval_data=test, eval_every=20)
    assert sum(heldout_kl(gates, test)) < 0.7 * kl0
    assert hist["loss"][-1] < hist["loss"][0]
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])
    assert all(p.grad is None for p in model.parameters())


def test_causal_gates_drop_the_first_quarter_of_rows_by_default(llama):
    ids = torch.randint(0, 256, (2, 64))
    gates = _gates(llama, block_size=8)
    data = collect_teacher(llama, gates, ids)
    g2 = copy.deepcopy(gates)
    torch.manual_seed(1)
    distill(gates, data, steps=1, lr=1e-3)
    torch.manual_seed(1)
    distill(g2, data, steps=1, lr=1e-3, drop_first_frac=0.0)
    assert not torch.allclose(gates[0].w_q, g2[0].w_q)


def test_models_whose_attention_cannot_be_captured_raise_clearly():
    with pytest.raises(AttentionCaptureError, match="query/key"):
        attention_layout(tiny_gpt2(n_embd=32, n_layer=1, n_head=2))  # fused c_attn projection
    with pytest.raises(AttentionCaptureError, match="Hugging Face"):
        attention_layout(torch.nn.Linear(3, 3))


def test_padding_masks_are_refused(llama):
    gates = _gates(llama, block_size=8)
    ids = torch.randint(0, 256, (2, 32))
    mask = torch.ones(2, 32, dtype=torch.long)
    mask[0, -5:] = 0

    def handler(**kw):
        raise AssertionError("not reached")

    with pytest.raises(ValueError, match="padding"), torch.no_grad(), attention_session(llama, handler):
        llama(input_ids=ids, attention_mask=mask)
    with pytest.raises(ValueError, match="bidirectional"):
        collect_teacher(llama, GateSet(2, num_heads=4, head_dim=16, num_kv_heads=2, block_size=8, gate_dim=8, causal=False), ids)
    assert llama.config._attn_implementation == "eager"
    del gates


def test_lr_schedule_is_linear_warmup_then_cosine_to_zero_like_transformers():
    """``lr_at`` against transformers' ``get_cosine_schedule_with_warmup`` (linear warm-up, cosine decay to 0): the
    same after the warm-up; during it ours is one step ahead (its first step trains at lr / warmup, not at 0)."""
    from transformers import get_cosine_schedule_with_warmup

    from companion.seer_attention.distill import lr_at

    steps, warmup, lr = 120, 20, 1e-3
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    hf = get_cosine_schedule_with_warmup(opt, num_warmup_steps=warmup, num_training_steps=steps)
    want = [lr * hf.lr_lambdas[0](s) for s in range(steps + 1)]
    got = [lr_at(s, steps, lr, warmup) for s in range(steps)]
    assert got[:warmup] == pytest.approx(want[1:warmup + 1], rel=1e-12)
    assert got[warmup:] == pytest.approx(want[warmup:steps], rel=1e-12, abs=1e-15)
    assert got[0] == pytest.approx(lr / warmup) and lr_at(warmup, steps, lr, warmup) == pytest.approx(lr)

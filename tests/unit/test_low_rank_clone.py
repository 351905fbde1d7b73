"""companion.low_rank_clone: soft pruning, activation clone, Lemma 1, merge, KL, baselines, bad input."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from companion.core import ParameterError
from companion.low_rank_clone import clone as C
from companion.low_rank_clone import experiments as E
from companion.models import tiny_llama


def llama(d=32, layers=2, heads=4, ffn=48, vocab=64, seed=0):
    return tiny_llama(vocab_size=vocab, hidden_size=d, num_layers=layers, num_heads=heads, intermediate_size=ffn, seed=seed)


def bert(d=48, layers=2, heads=4, ffn=64, vocab=80, seed=0):
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=vocab, hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads,
                     intermediate_size=ffn, max_position_embeddings=64, attn_implementation="eager")
    return BertModel(cfg, add_pooling_layer=False).eval()


IDS = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(1))


# --- Lemma 1 and the identity case ------------------------------------------------------------------

def test_lemma1_exact_clone_gives_projected_output():
    assert C.lemma1_gap() < 1e-6
    assert C.lemma1_gap(d_t=40, d_s=40, d_ff=16, seed=3) < 1e-6


@pytest.mark.parametrize("width", ["student", "teacher"])
def test_identity_projection_reproduces_the_teacher_llama(width):
    t = llama()
    lrc = C.LowRankClone(t, C.LRCConfig(d_student=32, norm_init="teacher", attn_out_width=width))
    C.set_projections(lrc, torch.eye(32))
    with torch.no_grad():
        out = lrc(IDS)
    assert torch.allclose(out["student"].logits, out["teacher"].logits, atol=1e-5)
    assert len(out["clone"]) == 2 * 7 and max(float(v) for v in out["clone"].values()) < 1e-10


def test_identity_projection_reproduces_the_teacher_bert():
    t = bert()
    lrc = C.LowRankClone(t, C.LRCConfig(d_student=48, norm_init="teacher"))
    C.set_projections(lrc, torch.eye(48))
    ids = IDS % 80
    with torch.no_grad():
        out = lrc(ids)
    assert torch.allclose(out["student"].last_hidden_state, out["teacher"].last_hidden_state, atol=1e-5)
    assert {m for (_, m) in out["clone"]} == {"q", "k", "v", "up", "attn_out", "ffn_out"}
    assert max(float(v) for v in out["clone"].values()) < 1e-10


def test_clone_terms_are_nonzero_for_random_projections():
    lrc = C.LowRankClone(llama(), C.LRCConfig(d_student=16))
    with torch.no_grad():
        out = lrc(IDS)
    assert all(float(v) > 0 for v in out["clone"].values())
    # the attention-output term in teacher width differs from the paper's student-width term
    lrc_t = C.LowRankClone(llama(), C.LRCConfig(d_student=16, attn_out_width="teacher"))
    with torch.no_grad():
        out_t = lrc_t(IDS)
    assert abs(float(out_t["clone"][(0, "attn_out")]) - float(out["clone"][(0, "attn_out")])) > 1e-8


# --- structure: shapes, what trains, merge ----------------------------------------------------------

def test_student_shapes_keep_heads_head_dim_and_ffn():
    t = llama(d=32, heads=4, ffn=48)
    lrc = C.LowRankClone(t, C.LRCConfig(d_student=12))
    a, m = lrc.student.model.layers[0].self_attn, lrc.student.model.layers[0].mlp
    assert a.q_proj.weight.shape == (32, 12) and a.o_proj.weight.shape == (12, 32)
    assert m.up_proj.weight.shape == (48, 12) and m.down_proj.weight.shape == (12, 48)
    assert lrc.student.model.embed_tokens.weight.shape == (64, 12) and lrc.student.lm_head.weight.shape == (64, 12)
    # W_S = W_T P (reader) and Pᵀ W_T (writer)
    p_q, p_o = lrc.projection(0, "q"), lrc.projection(0, "o")
    assert torch.allclose(a.q_proj.weight, t.model.layers[0].self_attn.q_proj.weight @ p_q)
    assert torch.allclose(a.o_proj.weight, p_o.t() @ t.model.layers[0].self_attn.o_proj.weight)


def test_only_projections_and_norms_get_gradients():
    t = llama()
    lrc = C.LowRankClone(t, C.LRCConfig(d_student=16))
    loss, parts = C.lrc_loss(lrc, IDS)
    loss.backward()
    assert all(p.grad is None for p in t.parameters())
    trainable = {id(p) for p in lrc.trainable_parameters()}
    assert all(p.grad is not None for p in lrc.proj.values())
    for name, p in lrc.student.named_parameters():
        if id(p) not in trainable:
            assert p.grad is None, name
        else:
            assert "norm" in name or name.endswith(".proj"), name
    n_proj = 2 * 7 + 2
    assert len(lrc.proj) == n_proj and lrc.n_trainable() == n_proj * 32 * 16 + (2 * 2 + 1) * 16
    assert parts["task"] > 0 and parts["clone"] > 0


def test_tied_and_shared_projections_reduce_parameters():
    t = llama()
    base = C.LowRankClone(t, C.LRCConfig(d_student=16)).n_trainable()
    tied = C.LowRankClone(t, C.LRCConfig(d_student=16, tie_word_emb_proj=True))
    assert base - tied.n_trainable() == 32 * 16 and tied.projection(0, "lm") is tied.projection(0, "emb")
    shared = C.LowRankClone(t, C.LRCConfig(d_student=16, share_qkv_gate_up=True))
    assert base - shared.n_trainable() == 2 * 3 * 32 * 16
    assert shared.projection(1, "k") is shared.projection(1, "q") and shared.projection(1, "up") is shared.projection(1, "gate")


@pytest.mark.parametrize("family", ["llama", "bert"])
def test_merged_student_equals_the_projected_one(family):
    t = llama() if family == "llama" else bert()
    lrc = C.LowRankClone(t, C.LRCConfig(d_student=16))
    with torch.no_grad():  # move the norms off their init so merge must carry them
        for p in lrc.trainable_parameters():
            p.add_(0.05 * torch.randn_like(p))
    ids = IDS if family == "llama" else IDS % 80
    merged = C.merge(lrc, C.LRCConfig(d_student=16))
    assert type(merged) is type(t) and not any(hasattr(m, "parametrizations") for m in merged.modules())
    with torch.no_grad():
        a = lrc.student.eval()(input_ids=ids)
        b = merged(input_ids=ids)
    key = "logits" if family == "llama" else "last_hidden_state"
    assert torch.allclose(a[key], b[key], atol=1e-5)


def test_merge_with_another_config_is_refused():
    lrc = C.LowRankClone(llama(), C.LRCConfig(d_student=16))
    with pytest.raises(ParameterError, match="config"):
        C.merge(lrc, C.LRCConfig(d_student=16, attn_out_width="teacher"))


# --- losses -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("t2", [False, True])
def test_kl_matches_f_kl_div(t2):
    g = torch.Generator().manual_seed(0)
    s, t = torch.randn(3, 5, 11, generator=g), torch.randn(3, 5, 11, generator=g)
    T = 4.0
    ref = F.kl_div(F.log_softmax(s / T, -1), F.log_softmax(t / T, -1), log_target=True, reduction="batchmean")
    # by hand: KL(teacher || student) summed over tokens and vocabulary, divided by the batch size 3
    p_t = F.softmax(t / T, -1)
    by_hand = (p_t * (F.log_softmax(t / T, -1) - F.log_softmax(s / T, -1))).sum() / 3
    got = C.kd_kl(s, t, T, t2=t2)
    assert torch.allclose(got, ref * (T * T if t2 else 1.0)) and torch.allclose(ref, by_hand, atol=1e-6)
    assert float(C.kd_kl(t, t, T)) == pytest.approx(0.0, abs=1e-7)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lm_loss_matches_hugging_face_labels_loss(seed):
    """lm_loss on a model's logits is Hugging Face's own ``labels=`` loss on the same model and ids (shift by one,
    mean over every predicted token); an unshifted or sum-reduced loss would differ."""
    model = llama(seed=seed).eval()
    ids = torch.randint(0, 64, (3, 17), generator=torch.Generator().manual_seed(10 + seed))
    with torch.no_grad():
        out = model(input_ids=ids, labels=ids)
        ours = C.lm_loss(out.logits, ids)
        unshifted = F.cross_entropy(out.logits.reshape(-1, 64), ids.reshape(-1))
    assert torch.allclose(ours, out.loss, rtol=1e-6, atol=1e-6)
    assert not torch.allclose(unshifted, out.loss, rtol=1e-3, atol=1e-3)
    # the committed byte-level teacher (a LlamaForCausalLM) too, on bytes
    if seed == 0:
        teacher = E.load_causal_teacher()
        byte_ids = torch.tensor([list(b"def lm_loss(logits, input_ids):\n    return cross_entropy")])
        with torch.no_grad():
            out = teacher(input_ids=byte_ids, labels=byte_ids)
            assert torch.allclose(C.lm_loss(out.logits, byte_ids), out.loss, rtol=1e-6, atol=1e-6)


def test_masked_mse_ignores_padding():
    a, b = torch.zeros(2, 3, 4), torch.ones(2, 3, 4)
    b[:, 2] = 100.0
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    assert float(C.masked_mse(a, b, mask)) == pytest.approx(1.0)
    assert float(C.masked_mse(a, b)) > 1.0


def test_geometry_scores_on_known_cases():
    x = np.random.default_rng(0).standard_normal((10, 6))
    cos = (x / np.linalg.norm(x, axis=1, keepdims=True)) @ (x / np.linalg.norm(x, axis=1, keepdims=True)).T
    s = E.geometry_scores(cos, cos)
    assert s["spearman"] == pytest.approx(1.0) and s["retrieval"] == 1.0
    assert E.geometry_scores(-cos, cos)["spearman"] == pytest.approx(-1.0)


# --- hard pruning baseline --------------------------------------------------------------------------

def test_selection_projection_and_hard_pruning_slice_the_teacher():
    imp = torch.tensor([0.1, 5.0, 0.3, 4.0, 2.0])
    p = C.selection_projection(imp, 3)
    assert p.shape == (5, 3) and p.sum() == 3 and p.argmax(0).tolist() == [1, 3, 4]
    t = llama()
    imp = torch.arange(32.0).flip(0)  # keeps channels 0..15
    s = E.hard_pruned_student(t, 16, imp)
    tq = t.model.layers[0].self_attn.q_proj.weight
    assert torch.equal(s.model.layers[0].self_attn.q_proj.weight, tq[:, :16])
    assert torch.equal(s.model.layers[1].mlp.down_proj.weight, t.model.layers[1].mlp.down_proj.weight[:16])
    assert torch.equal(s.model.norm.weight, t.model.norm.weight[:16])
    assert all(p.requires_grad for p in s.parameters())


def test_causal_training_runs_and_learns():
    t = llama(d=32, vocab=256)
    data = {"train": torch.randint(0, 256, (3000,)), "val": torch.randint(0, 256, (600,)), "seq_len": 16}
    for m in E.CAUSAL_METHODS:
        r = E.train_causal(m, t, data, d_student=16, steps=3, batch=4, lr=1e-2, eval_every=3)
        assert r["curve"]["step"] == [0, 3] and len(r["train_loss"]) == 3 and np.isfinite(r["final_val_loss"])
    assert E.tokens_to_reach({"tokens": [0, 10, 20], "val_loss": [3.0, 2.0, 1.0]}, 2.0) == 10
    assert E.tokens_to_reach({"tokens": [0, 10], "val_loss": [3.0, 2.5]}, 2.0) is None


def test_lr_schedule_warms_up_then_decays_linearly_to_zero():
    f = [E.lr_factor(s, 100, 0.1) for s in range(100)]
    assert f[:10] == pytest.approx([(i + 1) / 10 for i in range(10)])
    assert f[10] == pytest.approx(1.0) and f[55] == pytest.approx(0.5) and f[99] == pytest.approx(1 / 90)
    assert all(a >= b for a, b in zip(f[10:], f[11:]))
    assert E.lr_factor(3, 100, None) == 1.0 and E.lr_factor(0, 1000, 0.005) == pytest.approx(0.2)
    t = llama(d=32, vocab=256)
    data = {"train": torch.randint(0, 256, (3000,)), "val": torch.randint(0, 256, (600,)), "seq_len": 16}
    with pytest.raises(ParameterError, match="warmup_ratio"):
        E.train_causal("LRC", t, data, d_student=16, steps=2, batch=4, lr=1e-2, warmup_ratio=1.5)


# --- bad input --------------------------------------------------------------------------------------

@pytest.mark.parametrize("kw,name", [({"d_student": 0}, "d_student"), ({"d_student": -3}, "d_student"),
                                     ({"d_student": 8, "alpha": -0.1}, "alpha"), ({"d_student": 8, "temperature": 0.0}, "temperature"),
                                     ({"d_student": 8, "attn_out_width": "both"}, "attn_out_width"),
                                     ({"d_student": 8, "clone_terms": ("q", "x")}, "clone_terms")])
def test_bad_config_raises(kw, name):
    with pytest.raises(ParameterError, match=name):
        C.LRCConfig(**kw)


def test_bad_teachers_raise():
    with pytest.raises(ParameterError, match="d_student"):
        C.LowRankClone(llama(d=32), C.LRCConfig(d_student=33))
    with pytest.raises(ParameterError, match="norm_init"):
        C.LowRankClone(llama(d=32), C.LRCConfig(d_student=16, norm_init="teacher"))
    t = llama()
    del t.model.layers[0].mlp.gate_proj
    with pytest.raises(ValueError, match="gate_proj"):
        C.LowRankClone(t, C.LRCConfig(d_student=8))
    with pytest.raises(ValueError, match="neither"):
        C.LowRankClone(torch.nn.Linear(3, 3), C.LRCConfig(d_student=2))
    t = llama()
    t.lm_head = torch.nn.Linear(32, 65, bias=False)
    with pytest.raises(ParameterError, match="tie_word_emb_proj"):
        C.LowRankClone(t, C.LRCConfig(d_student=8, tie_word_emb_proj=True))
    with pytest.raises(TypeError):
        C.LowRankClone(llama(), {"d_student": 8})
    with pytest.raises(ValueError, match="temperature"):
        C.kd_kl(torch.zeros(1, 3), torch.zeros(1, 3), temperature=-1.0)


# --- the GPU study's stages on the smoke profile -------------------------------------------------------

def _ctx(left_s=float("inf"), **profile):
    """A stage context on the smoke profile (with ``profile`` changes) that has ``left_s`` seconds."""
    import time

    from companion.core.stages import StageContext
    from companion.low_rank_clone.scale import SMOKE_PROFILE

    return StageContext(profile={**SMOKE_PROFILE, **profile}, device="cpu", log=lambda *a: None, results={},
                        until=time.perf_counter() + left_s)


def test_teacher_schedule_warms_up_then_decays_to_zero_at_its_time():
    from companion.low_rank_clone.study import teacher_lr_factor

    assert teacher_lr_factor(0, 0.0, 90.0, warmup_steps=100) == pytest.approx(0.01)
    assert teacher_lr_factor(49, 1.0, 90.0, warmup_steps=100) == pytest.approx(0.5)  # warm-up below the decay line
    assert teacher_lr_factor(500, 45.0, 90.0, warmup_steps=100) == pytest.approx(0.5)  # half the time: half the rate
    assert teacher_lr_factor(500, 90.0, 90.0) == 0.0 and teacher_lr_factor(500, 95.0, 90.0) == 0.0


def test_teacher_stage_records_a_curve_that_learns(monkeypatch):
    """From a near-uniform start (ln 256 nats per byte) the teacher's validation loss falls; its tokens are
    steps × teacher_batch × seq_len and the final loss is the curve's last point; it ends frozen. A clock that
    advances 2 ms per reading makes the number of steps independent of the machine's speed."""
    import itertools

    from companion.low_rank_clone import study as S

    clock = itertools.count(0.0, 0.002)
    monkeypatch.setattr(S.time, "perf_counter", lambda: next(clock))
    ctx = _ctx(teacher_seconds=0.3, teacher_eval_every=10)
    t = S.teacher(ctx)
    p, curve = ctx.profile, t["curve"]
    assert t["tokens"] == t["steps"] * p["teacher_batch"] * p["seq_len"] and t["text_bytes"]["val"] > 0
    assert curve["step"][0] == 0 and curve["step"][-1] == t["steps"] and curve["tokens"][-1] == t["tokens"]
    assert curve["val_loss"][0] == pytest.approx(np.log(256), abs=0.1)
    assert t["val_loss"] == curve["val_loss"][-1] < curve["val_loss"][0] - 0.5
    assert len(t["train_loss"]["step"]) == len(t["train_loss"]["loss"]) > 0
    assert ctx.shared["teacher_val_loss"] == t["val_loss"]
    assert not any(x.requires_grad for x in ctx.shared["teacher"].parameters())


def test_students_stage_needs_the_teacher_stage():
    from companion.low_rank_clone.study import students

    with pytest.raises(RuntimeError, match="teacher,students_1"):
        students(_ctx(), index=1)


def test_students_stage_same_budget_per_seed_and_reproducible():
    """Each seed stage trains the three students on one token budget, from the seed profile seed + index; the
    same index gives the same numbers, another index other ones; tokens to the target follow the curves."""
    from companion.low_rank_clone import study as S
    from companion.low_rank_clone.experiments import CAUSAL_METHODS

    ctx = _ctx(teacher_seconds=0.05, seed=3, target_loss=5.4)
    S.teacher(ctx)
    one, again, other = S.students(ctx, index=1), S.students(ctx, index=1), S.students(ctx, index=0)
    p = ctx.profile
    assert (one["seed"], other["seed"]) == (4, 3) and list(one["runs"]) == list(CAUSAL_METHODS)
    budget = p["student_steps"] * p["batch"] * p["seq_len"]
    assert all(r["curve"]["tokens"][-1] == budget and r["curve"]["tokens"] == one["runs"]["LRC"]["curve"]["tokens"]
               for r in one["runs"].values())
    assert one == {**again, "runs": {m: {**r, "seconds": one["runs"][m]["seconds"]} for m, r in again["runs"].items()}}
    assert one["runs"]["LRC"]["final_val_loss"] != other["runs"]["LRC"]["final_val_loss"]
    for m, r in one["runs"].items():
        assert one["tokens_to_target"][m] == E.tokens_to_reach(r["curve"], 5.4)
        assert r["final_val_loss"] == r["curve"]["val_loss"][-1]
    assert one["teacher_val_loss"] == ctx.shared["teacher_val_loss"] and one["d_student"] == p["teacher"]["hidden_size"] // 2
    ctx.profile["warmup_ratio"] = 1.5
    with pytest.raises(ParameterError, match="parameter warmup_ratio="):
        S.students(ctx, index=0)


def test_throughput_stage_without_the_teacher_stage():
    """Alone (a --stages call) the stage times an untrained teacher of the profile's shape; the factored
    projection x Pᵀ W_Tᵀ equals the materialised x (W_T P)ᵀ."""
    from companion.low_rank_clone.study import throughput

    out = throughput(_ctx())
    assert out["ratio"] == pytest.approx(out["plain_ms"] / out["lrc_ms"], rel=1e-3) and out["lrc_tok_s"] > 0
    assert out["max_abs_diff"] < 1e-6 and out["shape"] == _ctx().profile["linear_shape"]

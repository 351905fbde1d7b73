"""The GPU study on the CPU: its vocabularies make W_h well-posed (full rank) at the GPU widths (checked without
training), the growth of the new model from the old one (shapes, function preserved), early stopping, and stage
bodies on tiny inputs."""

import math
import time

import pytest
import torch

from companion.core import ParameterError, limit_threads
from companion.core.stages import StageContext
from companion.lorasuite import study, transfer_matrix
from companion.lorasuite.fixture import build_model, new_vocab, old_vocab
from companion.lorasuite.lft import train
from companion.lorasuite.scale import GPU_PROFILE, SMOKE_PROFILE
from companion.lorasuite.transfer_matrix import common_tokens
from companion.lorasuite.vocab import WordVocab, check_shared_tokens, gpu_vocabs, pieces, word_vocab


@pytest.fixture(autouse=True)
def _one_thread():
    with limit_threads(1):
        yield


@pytest.fixture(scope="module")
def vocabs():
    vo, vn, _ = gpu_vocabs(GPU_PROFILE)
    return vo, vn


def test_gpu_vocabularies_share_far_more_than_d_old_tokens(vocabs):
    vo, vn = vocabs
    d_old = GPU_PROFILE["old"]["hidden"]
    assert len(vo) == GPU_PROFILE["vocab"]["old"] and len(vn) == GPU_PROFILE["vocab"]["new"]
    shared = check_shared_tokens(vo, vn, d_old)
    assert shared >= 4 * d_old
    assert vo.get_vocab() != vn.get_vocab()  # an upgrade: different sizes, sets and order


def test_w_h_is_full_rank_at_the_gpu_widths(vocabs):
    vo, vn = vocabs
    d_o, d_n = GPU_PROFILE["old"]["hidden"], GPU_PROFILE["new"]["hidden"]
    g = torch.Generator().manual_seed(0)
    E_o = torch.randn(len(vo), d_o, generator=g) * 0.02  # the models' init (std 0.02), no training
    Q, _ = torch.linalg.qr(torch.randn(d_n, d_o, generator=g, dtype=torch.float64))
    Q = Q.T.float()  # (d_o, d_n) orthonormal rows: a known map
    io, inn, _ = common_tokens(vo.get_vocab(), vn.get_vocab())
    E_n = torch.randn(len(vn), d_n, generator=g) * 0.02
    E_n[inn] = E_o[io] @ Q
    res = transfer_matrix(E_o, E_n, io, inn)
    assert res["rank"] == d_o and res["n_common"] >= d_o
    assert tuple(res["W_h"].shape) == (d_o, d_n)
    assert res["r2"] > 1 - 1e-8
    assert torch.allclose(res["W_h"], Q, atol=1e-4)


def test_the_char_pair_of_the_first_h200_run_is_refused_before_training():
    with pytest.raises(ParameterError, match="shared tokens"):
        check_shared_tokens(old_vocab(), new_vocab(), GPU_PROFILE["old"]["hidden"])
    assert check_shared_tokens(old_vocab(), new_vocab(), 64) == 91  # the CPU fixture's pair is fine at d = 64


def test_word_vocab_is_lossless_and_falls_back_to_characters():
    text = "def spam(eggs):\n    return eggs ~ 1\n"
    assert "".join(pieces(text)) == text
    v = word_vocab(text * 3, 40, list("abcdefghijklmnopqrstuvwxyz():=1 \n"))
    ids = v.encode("return eggs")
    assert ids.tolist() == [v.stoi["return"], v.stoi[" "], v.stoi["eggs"]]
    assert v.encode("zz").tolist() == [v.stoi["z"], v.stoi["z"]]  # an unknown word spelled out
    assert v.encode("~").tolist() == [0]  # an unknown character is <unk>
    assert WordVocab("ab", ["ab", "a", "cd"]).tokens == ["<unk>", "a", "b", "ab", "cd"]  # "a" not repeated
    with pytest.raises(ParameterError):
        word_vocab(text, 3, list("abcdef"))


def test_train_stops_at_its_time_limit():
    model = build_model(20, 16, 1, 2, 32, seed=0)
    data = torch.randint(0, 20, (64, 9))
    h = train(model, data, lr=1e-3, steps=50, batch=8, time_limit_s=0.0)
    assert len(h["train"]) == 1 and h["stop"] == "time"


def _ctx(profile, left=math.inf):
    """A stage's context on the CPU with ``left`` seconds to use."""
    return StageContext(profile=profile, device="cpu", log=lambda *a: None, results={}, until=time.perf_counter() + left)


def test_a_task_outside_the_fixture_packages_is_refused_before_any_text():
    with pytest.raises(ParameterError, match="task"):
        gpu_vocabs({**GPU_PROFILE, "task": "os"})


def test_grow_and_seed_stages_need_the_models_of_the_earlier_stages():
    with pytest.raises(RuntimeError, match="--stages pretrain_old,grow"):
        study.run_grow(_ctx(SMOKE_PROFILE))
    with pytest.raises(RuntimeError, match="--stages pretrain_old,grow,seed2"):
        study.run_seed(2, _ctx(SMOKE_PROFILE))


@pytest.fixture(scope="module")
def grown():
    """The smoke profile's old model, the new one grown from it (trained 3 steps further) and the stage results."""
    with limit_threads(1):
        ctx = _ctx(SMOKE_PROFILE)
        out = {name: fn(ctx) for name, fn in (("vocab", study.run_vocab), ("pretrain_old", study.run_pretrain_old),
                                              ("grow", study.run_grow))}
    return ctx, out


def test_grow_builds_the_new_shapes_from_the_old_model_and_preserves_its_function(grown):
    ctx, out = grown
    P, new = SMOKE_PROFILE, ctx.shared["new_model"]
    c = new.config
    assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.intermediate_size, c.vocab_size) == (
        P["new"]["hidden"], P["new"]["layers"], P["new"]["heads"], P["new"]["ffn"], P["vocab"]["new"])
    assert out["grow"]["parameters"] == sum(p.numel() for p in new.parameters())
    # before its further training the grown model computes the old one's function on shared tokens (fp32)
    assert out["grow"]["function_gap"] < 1e-5
    # the old layers sit where the growth put them, the inserted positions hold the new layers
    assert [n for _, n in out["grow"]["layer_pairs"]] == [i for i in range(P["new"]["layers"]) if i not in P["new"]["inserted"]]
    assert out["grow"]["train"]["steps"] == P["grow_steps"]


def test_function_gap_is_zero_for_the_same_model_and_not_for_another():
    vo = old_vocab()
    a, b = build_model(len(vo), 16, 1, 2, 32, seed=0), build_model(len(vo), 16, 1, 2, 32, seed=1)
    assert study.function_gap(a, a, vo, vo) == 0.0
    assert study.function_gap(a, b, vo, vo) > 0.1


def test_a_seed_stage_sets_every_arm_beside_the_new_model_alone(grown):
    ctx, _ = grown
    with limit_threads(1):
        e = study.run_seed(1, ctx)
    P = SMOKE_PROFILE
    assert e["seed"] == P["seed"] + 1 and e["n_samples"] == P["lft_samples"] and not e["skipped"]
    assert [a["lr"] for a in e["lft"]] == [a["lr"] for a in e["scratch"]] == P["lrs"]
    assert e["new_base"] == pytest.approx(study.evaluate(ctx.shared["new_model"], ctx.shared["task"]["B_val_new"]), abs=1e-4)
    full = e["full"]
    assert full["curve"][0] == [0, e["new_base"]] and full["val"] == min(v for _, v in full["curve"])
    assert full["stop"] in ("patience", "steps") and full["steps"] <= P["full_max_steps"]
    assert all(math.isfinite(x) for x in (e["old_base"], e["old_lora"]["val"], e["transferred"], e["lft"][0]["val"]))
    assert e["lft"][0]["seconds"] >= e["transfer"]["seconds"]  # an LFT's time includes the transfer's


def test_train_stops_when_the_validation_loss_stops_falling():
    model = build_model(20, 16, 1, 2, 32, seed=0)
    data, val = torch.randint(0, 20, (64, 9)), torch.randint(0, 20, (8, 9))
    # a validation loss of 0 at step 0 cannot be beaten: it stops after `patience` evaluations
    h = train(model, data, lr=1e-3, steps=50, batch=8, val=val, val0=0.0, eval_every=5, patience=2)
    assert h["stop"] == "patience" and len(h["train"]) == 10 and h["steps"] == [0, 5, 10]
    h = train(model, data, lr=1e-3, steps=6, batch=8, val=val, eval_every=5, patience=5)
    assert h["stop"] == "steps" and len(h["train"]) == 6
    with pytest.raises(ParameterError, match="patience"):
        train(model, data, lr=1e-3, steps=5, patience=2)


def test_svd_stage_is_close_to_the_best_rank_r_error_and_stops_without_time():
    rows = study.run_svd(_ctx({**SMOKE_PROFILE, "svd_dims": [32, 48], "svd_rank": 4}))
    assert [r["d"] for r in rows] == [32, 48] and all(0 <= r["rel_err"] < 1e-3 for r in rows)
    assert study.run_svd(_ctx(SMOKE_PROFILE, left=5.0)) == []  # the first size needs 10 s

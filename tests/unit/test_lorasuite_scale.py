"""The GPU study on the CPU: its vocabularies make W_h well-posed (full rank) at the GPU widths (checked without
training), and stage bodies on tiny inputs."""

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
    assert len(h["train"]) == 1


def _ctx(profile, left=math.inf):
    """A stage's context on the CPU with ``left`` seconds to use."""
    return StageContext(profile=profile, device="cpu", log=lambda *a: None, results={}, until=time.perf_counter() + left)


def test_a_task_outside_the_fixture_packages_is_refused_before_any_text():
    with pytest.raises(ParameterError, match="task"):
        gpu_vocabs({**GPU_PROFILE, "task": "os"})


def test_task_stage_needs_the_models_of_the_pretrain_stage():
    with pytest.raises(RuntimeError, match="--stages pretrain,task"):
        study.run_task(_ctx(SMOKE_PROFILE))


def test_svd_stage_is_close_to_the_best_rank_r_error_and_stops_without_time():
    rows = study.run_svd(_ctx({**SMOKE_PROFILE, "svd_dims": [32, 48], "svd_rank": 4}))
    assert [r["d"] for r in rows] == [32, 48] and all(0 <= r["rel_err"] < 1e-3 for r in rows)
    assert study.run_svd(_ctx(SMOKE_PROFILE, left=5.0)) == []  # the first size needs 10 s

"""companion.lorasuite: known truths of every step (exact small cases, oracles, invariants, peft)."""

import itertools

import numpy as np
import pytest
import torch

from companion.core import ParameterError, limit_threads
from companion.lorasuite import (
    PAPER,
    ModelSpec,
    brute_force_head_mapping,
    brute_force_layer_mapping,
    check_compatible,
    head_mapping,
    head_similarity,
    head_transfer,
    hsic1,
    hsic1_matrix,
    layer_mapping,
    linear_cka,
    load_transferred,
    low_rank,
    save_adapter,
    transfer_adapter,
    transfer_matrix,
)
from companion.lorasuite.fixture import CharVocab, build_model, new_vocab, old_vocab, upgrade
from companion.lorasuite.mapping import head_similarity_explicit, repeat_kv_heads
from companion.lorasuite.transfer import (
    adapter_from_state,
    adapter_to_state,
    alg2_transfer,
    layer_weights,
    lora_config,
    merged_model,
)
from companion.lorasuite.transfer_matrix import common_tokens


@pytest.fixture(autouse=True)
def _one_thread():
    with limit_threads(1):
        yield
ATTN = ["q_proj", "k_proj", "v_proj", "o_proj"]


def test_identity():
    assert PAPER.notebook == "12_lorasuite"


# ------------------------------------------------------------------------------------------ Alg. 1

@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("shape", [(5, 7), (7, 5), (4, 4)])
@pytest.mark.parametrize("offset", [None, 0, 1, 2])
def test_dp_equals_brute_force(seed, shape, offset):
    S = np.random.default_rng(seed).random(shape)
    lm = layer_mapping(S, "dp", offset)
    pairs, best = brute_force_layer_mapping(S, offset)
    assert lm["total"] == pytest.approx(best, abs=1e-12)
    assert lm["pairs"] == pairs  # ties have probability zero for continuous S


def test_layer_rules_are_order_preserving_and_bounded():
    S = np.random.default_rng(1).random((4, 6))
    for rule in ("dp", "greedy", "proportional"):
        pairs = layer_mapping(S, rule, 2)["pairs"]
        new = [b for _, b in pairs]
        assert [a for a, _ in pairs] == [0, 1, 2, 3] and new == sorted(set(new)) and max(new) <= 5
    assert layer_mapping(S, "proportional")["pairs"] == [(0, 0), (1, 2), (2, 3), (3, 5)]
    assert all(b - a <= 1 for a, b in layer_mapping(S, "greedy", 1)["pairs"])
    assert layer_mapping(S, "dp")["total"] >= layer_mapping(S, "greedy")["total"] - 1e-12


def test_layer_mapping_bad_input():
    with pytest.raises(ParameterError, match="offset"):
        layer_mapping(np.ones((3, 4)), "dp", -1)
    with pytest.raises(ParameterError, match="rule"):
        layer_mapping(np.ones((3, 4)), "hungarian")
    with pytest.raises(ParameterError):
        layer_mapping(np.full((2, 2), np.nan))


# ------------------------------------------------------------------------------------------ Hungarian

@pytest.mark.parametrize("shape", [(2, 2), (4, 6), (6, 6), (6, 4), (3, 5)])
@pytest.mark.parametrize("seed", range(3))
def test_hungarian_equals_brute_force(shape, seed):
    S = np.random.default_rng(10 + seed).standard_normal(shape)
    hm = head_mapping(S)
    pairs, best = brute_force_head_mapping(S)
    assert hm["total"] == pytest.approx(best, abs=1e-12) and hm["pairs"] == pairs


def test_factorised_head_similarity_equals_explicit():
    g = torch.Generator().manual_seed(0)
    d_o, d_n, dh, Ho, Hn = 12, 18, 3, 4, 6
    old = {"q": torch.randn(Ho * dh, d_o, generator=g), "k": torch.randn(Ho * dh, d_o, generator=g),
           "v": torch.randn(Ho * dh, d_o, generator=g), "o": torch.randn(d_o, Ho * dh, generator=g)}
    new = {"q": torch.randn(Hn * dh, d_n, generator=g), "k": torch.randn(Hn * dh, d_n, generator=g),
           "v": torch.randn(Hn * dh, d_n, generator=g), "o": torch.randn(d_n, Hn * dh, generator=g)}
    W = torch.randn(d_o, d_n, generator=g)
    assert torch.allclose(head_similarity(old, new, W, Ho, Hn), head_similarity_explicit(old, new, W, Ho, Hn), atol=1e-5)


def test_repeat_kv_heads_layout():
    W = torch.arange(2 * 2 * 3, dtype=torch.float32).reshape(4, 3)  # 2 K/V heads of d_h = 2
    R = repeat_kv_heads(W, n_kv=2, n_rep=2)
    assert torch.equal(R, torch.cat([W[:2], W[:2], W[2:], W[2:]]))


# ------------------------------------------------------------------------------------------ CKA

def test_hsic_matrix_equals_literal_estimator():
    g = torch.Generator().manual_seed(1)
    X = torch.randn(2, 20, 5, generator=g, dtype=torch.float64)
    Y = torch.randn(3, 20, 7, generator=g, dtype=torch.float64)
    H = hsic1_matrix(X, Y)
    for i, j in itertools.product(range(2), range(3)):
        assert H[i, j].item() == pytest.approx(hsic1(X[i] @ X[i].T, Y[j] @ Y[j].T), rel=1e-9)


def test_cka_invariances():
    g = torch.Generator().manual_seed(2)
    X = torch.randn(64, 10, generator=g, dtype=torch.float64)
    Y = X @ torch.randn(10, 6, generator=g, dtype=torch.float64) + 0.5 * torch.randn(64, 6, generator=g, dtype=torch.float64)
    Qm, _ = torch.linalg.qr(torch.randn(10, 10, generator=g, dtype=torch.float64))
    assert linear_cka(X, X) == pytest.approx(1.0, abs=1e-12)
    c = linear_cka(X, Y)
    assert 0 < c < 1
    assert linear_cka(X @ Qm, Y) == pytest.approx(c, abs=1e-9)
    assert linear_cka(3.7 * X, Y) == pytest.approx(c, abs=1e-9)
    assert linear_cka(X, 0.2 * Y) == pytest.approx(c, abs=1e-9)
    with pytest.raises(ParameterError):
        hsic1_matrix(X[None, :3], X[None, :3])  # n < 4


# ------------------------------------------------------------------------------------------ SVD

def test_low_rank_is_eckart_young():
    g = torch.Generator().manual_seed(3)
    M = torch.randn(12, 9, generator=g, dtype=torch.float64).float()
    A, B, s = low_rank(M, 4)
    assert A.shape == (4, 9) and B.shape == (12, 4)
    err = torch.linalg.norm(M.double() - (B @ A).double())
    assert err.item() == pytest.approx(float(torch.sqrt((s[4:].double() ** 2).sum())), rel=1e-4)
    A9, B9, _ = low_rank(M, 9)
    assert torch.allclose(B9 @ A9, M, atol=1e-4)
    with pytest.raises(ParameterError, match="rank"):
        low_rank(M, 10)


# ------------------------------------------------------------------------------------------ models

def _random_adapter(model, rank=2, layers=None, targets=ATTN, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = {}
    for i in layers if layers is not None else range(model.config.num_hidden_layers):
        w = layer_weights(model, i)
        for m in targets:
            W = w[m.split("_")[0]]
            out[(i, m)] = (0.1 * torch.randn(rank, W.shape[1], generator=g), 0.1 * torch.randn(W.shape[0], rank, generator=g))
    return out


def test_identical_models_scale_by_head_gram():
    """W_h = I, identical models, identity head map: ΔW_Q[a] ↦ (W_Q[a] W_Q[a]ᵀ) ΔW_Q[a]; ΔW_O[:, a] ↦ ΔW_O[:, a] W_O[:, a]ᵀ W_O[:, a]."""
    m = build_model(40, 16, 1, 2, 32, seed=4)
    spec = ModelSpec.from_config(m.config)
    w = layer_weights(m, 0)
    ad = _random_adapter(m, rank=3)
    deltas = {k[0]: B @ A for (_, k), (A, B) in ad.items()}
    out = head_transfer(w, w, deltas, torch.eye(16), spec, spec, [(0, 0), (1, 1)])
    dh = spec.head_dim
    for k in "qkv":
        for a in range(2):
            r = slice(a * dh, (a + 1) * dh)
            expect = w[k][r] @ w[k][r].T @ deltas[k][r]
            assert torch.allclose(out[k][r], expect, atol=1e-6)
            assert not torch.allclose(out[k][r], deltas[k][r], atol=1e-3)  # not the adapter unchanged
    for a in range(2):
        r = slice(a * dh, (a + 1) * dh)
        assert torch.allclose(out["o"][:, r], deltas["o"][:, r] @ w["o"][:, r].T @ w["o"][:, r], atol=1e-6)
    # with a single head and the identity map, Alg. 2's whole-matrix form is the same computation
    one = build_model(40, 8, 1, 1, 16, seed=5)
    s1, w1 = ModelSpec.from_config(one.config), layer_weights(one, 0)
    d1 = {k[0]: B @ A for (_, k), (A, B) in _random_adapter(one).items()}
    code, whole = head_transfer(w1, w1, d1, torch.eye(8), s1, s1, [(0, 0)]), alg2_transfer(w1, w1, d1, torch.eye(8))
    assert all(torch.allclose(code[k], whole[k], atol=1e-6) for k in "qkvo")


def test_gqa_target_averages_each_group():
    old = build_model(40, 16, 1, 4, 32, seed=6)
    gqa = build_model(40, 24, 1, 6, 32, seed=7, kv_heads=2)
    mha = build_model(40, 24, 1, 6, 32, seed=7)
    sd = mha.state_dict()
    for k in ("k_proj", "v_proj"):  # the MHA twin repeats the GQA model's K/V heads
        sd[f"model.layers.0.self_attn.{k}.weight"] = repeat_kv_heads(gqa.state_dict()[f"model.layers.0.self_attn.{k}.weight"], 2, 3)
    for k, v in gqa.state_dict().items():
        if "k_proj" not in k and "v_proj" not in k:
            sd[k] = v
    mha.load_state_dict(sd)
    so, sg, sm = (ModelSpec.from_config(x.config) for x in (old, gqa, mha))
    deltas = {k[0]: B @ A for (_, k), (A, B) in _random_adapter(old).items()}
    W = torch.randn(16, 24, generator=torch.Generator().manual_seed(0))
    pairs = [(0, 4), (1, 0), (2, 2), (3, 5)]
    g_out = head_transfer(layer_weights(old, 0), layer_weights(gqa, 0), deltas, W, so, sg, pairs)
    m_out = head_transfer(layer_weights(old, 0), layer_weights(mha, 0), deltas, W, so, sm, pairs)
    assert g_out["k"].shape == (2 * 4, 24) and g_out["q"].shape == (24, 24)
    assert torch.allclose(g_out["k"], m_out["k"].reshape(2, 3, 4, 24).mean(1).reshape(8, 24), atol=1e-5)
    assert torch.allclose(g_out["q"], m_out["q"], atol=1e-5) and torch.allclose(g_out["o"], m_out["o"], atol=1e-5)
    res = transfer_adapter(old, gqa, _random_adapter(old), W_h=W, layer_pairs=[(0, 0)])
    assert res["adapter"][(0, "k_proj")][1].shape == (8, 2)


def test_upgrade_preserves_function_and_the_maps_recover_it():
    vo, vn = old_vocab(), new_vocab()
    old = build_model(len(vo), 16, 2, 2, 32, seed=8)
    with torch.no_grad():  # non-trivial norm gains, which the upgrade folds into the next maps
        for n, p in old.named_parameters():
            if "norm" in n:
                p.mul_(1 + 0.5 * torch.rand(p.shape, generator=torch.Generator().manual_seed(1)))
    new, truth = upgrade(old, vo, vn, hidden=24, layers=3, heads=3, ffn=48, inserted=(1,))
    shared = [c for c in vo.tokens[1:] if c in vn.stoi]
    text = "".join(shared)
    with torch.no_grad():
        lo = old(input_ids=vo.encode(text)[None]).logits[0][:, [vo.stoi[c] for c in shared]]
        ln = new(input_ids=vn.encode(text)[None]).logits[0][:, [vn.stoi[c] for c in shared]]
    assert torch.allclose(lo, ln, atol=1e-3 * lo.abs().max().item())
    io, inn, _ = common_tokens(vo.get_vocab(), vn.get_vocab())
    Wh = transfer_matrix(old.model.embed_tokens.weight, new.model.embed_tokens.weight, io, inn)
    assert Wh["r2"] > 0.999999 and torch.allclose(Wh["W_h"], truth["Q"], atol=1e-4)
    so, sn = ModelSpec.from_config(old.config), ModelSpec.from_config(new.config)
    for o_i, n_i in truth["layer_pairs"]:
        sim = head_similarity(layer_weights(old, o_i), layer_weights(new, n_i), Wh["W_h"], so.heads, sn.heads)
        assert [b for _, b in head_mapping(sim.numpy())["pairs"]] == truth["head_slots"][o_i]


def test_bad_inputs():
    vo = CharVocab("abcdefgh")
    m = build_model(len(vo), 16, 1, 2, 32)
    io, inn, _ = common_tokens(vo.get_vocab(), CharVocab("abc").get_vocab())
    with pytest.raises(ParameterError, match="common tokens"):
        transfer_matrix(m.model.embed_tokens.weight, m.model.embed_tokens.weight, io, inn)
    base = ModelSpec("llama", "silu", 16, 2, 2, 2, 8, 32, 10)
    with pytest.raises(ParameterError, match="architecture"):
        check_compatible(base, ModelSpec("gpt_neox", "silu", 16, 2, 2, 2, 8, 32, 10))
    with pytest.raises(ParameterError, match="activation"):
        check_compatible(base, ModelSpec("llama", "gelu", 16, 2, 2, 2, 8, 32, 10))
    with pytest.raises(ParameterError, match="head_dim"):
        check_compatible(base, ModelSpec("llama", "silu", 24, 2, 2, 2, 12, 32, 10))
    ad = _random_adapter(m)
    with pytest.raises(ParameterError, match="target"):
        transfer_adapter(m, m, {**ad, (0, "fc1"): ad[(0, "q_proj")]}, W_h=torch.eye(16), layer_pairs=[(0, 0)])
    with pytest.raises(ParameterError, match="rank"):
        transfer_adapter(m, m, ad, W_h=torch.eye(16), layer_pairs=[(0, 0)], rank=17)
    with pytest.raises(ParameterError, match="W_h"):
        transfer_adapter(m, m, ad, W_h=torch.eye(8), layer_pairs=[(0, 0)])
    with pytest.raises(ParameterError, match="target"):
        load_transferred(m, {(0, "up_proj"): ad[(0, "q_proj")]}, lora_config(2, 2, ATTN))


# ------------------------------------------------------------------------------------------ peft

def test_adapter_loads_in_upstream_peft_and_matches_merged(tmp_path):
    from peft import PeftModel

    m = build_model(30, 16, 2, 2, 32, seed=9)
    ad = _random_adapter(m, rank=2, layers=[1])
    cfg = lora_config(2, 4.0, ATTN)
    assert adapter_from_state(adapter_to_state(ad)).keys() == ad.keys()
    save_adapter(tmp_path / "ad", ad, cfg)
    peft_model = PeftModel.from_pretrained(m, str(tmp_path / "ad"))  # upstream peft, no fork
    assert {".layers.0." in n for n, _ in peft_model.named_parameters() if "lora_" in n} == {False}  # only layer 1
    ids = torch.randint(0, 30, (2, 12), generator=torch.Generator().manual_seed(0))
    merged = merged_model(build_model(30, 16, 2, 2, 32, seed=9), ad, scaling=2.0)
    with torch.no_grad():
        assert torch.allclose(peft_model(input_ids=ids).logits, merged(input_ids=ids).logits, atol=1e-5)


def test_uncovered_layers_get_zero_frozen_adapters():
    m = build_model(30, 16, 3, 2, 32, seed=10)
    ad = _random_adapter(m, rank=2, layers=[0, 2])
    model = load_transferred(m, ad, lora_config(2, 2, ATTN))
    ids = torch.randint(0, 30, (2, 10), generator=torch.Generator().manual_seed(1))
    model(input_ids=ids).logits.sum().backward()
    for name, p in model.named_parameters():
        if "lora_" not in name:
            continue
        if ".layers.1." in name:
            assert not p.requires_grad and p.grad is None and float(p.abs().max()) == 0.0
        else:
            assert p.requires_grad and p.grad is not None


# ------------------------------------------------------------------------------------------ fixture, pipeline, explorer

@pytest.fixture(scope="module")
def fx():
    from companion.lorasuite.fixture import fixture_ready, load_fixture

    if not fixture_ready():
        pytest.skip("the cached fixture data/lorasuite/ is missing (python -m companion.lorasuite.fixture)")
    return load_fixture(build=False)


@pytest.fixture(scope="module")
def suite(fx):
    from companion.lorasuite.pipeline import lorasuite

    return lorasuite(fx, n_minibatches=2, tokens=64)


def test_pipeline_on_the_fixture(fx, suite):
    from companion.lorasuite.pipeline import experiment, recovery

    assert suite["W_h"]["W_h"].shape == (64, 96) and 0 < suite["W_h"]["r2"] <= 1
    assert len(suite["layer_map"]["pairs"]) == 4 and set(suite["adapter"]) == {
        (b, m) for _, b in suite["layer_map"]["pairs"] for m in ATTN}
    assert all(A.shape[0] == 4 for A, _ in suite["adapter"].values())
    res = experiment(fx, suite, n_samples=16, epochs=1, lrs=(1e-3,), seeds=(0,))
    assert res["sizes"]["steps"] == 1 and len(res["lft"][1e-3][0]["val"]) == 2
    assert all(np.isfinite(v) for v in res["val"].values())
    rec = recovery(fx, suite)
    assert 0 <= rec["head_recovery"] <= 1 and rec["cka_minibatches"] == 2 and rec["cka_tokens"] == 64
    with pytest.raises(ParameterError, match="n_samples"):
        experiment(fx, suite, n_samples=8)


def test_explorer_view_is_pure_and_controls_match(fx, suite):
    import plotly.graph_objects as go

    from companion.lorasuite.explorer import ExplorerData, explorer_controls, explorer_view

    h = {"steps": [0, 1], "val": [3.0, 2.9], "train": [3.0]}
    res = {"lft": {1e-3: [h]}, "scratch": {1e-3: [h]}, "val": {"new_base": 3.0, "full_lora": 2.0, "transferred": 3.0},
           "sizes": {"n_samples": 16, "steps": 1, "full_steps": 250}}
    data = ExplorerData(fx=fx, terms={"task": suite["terms"]}, W_h=suite["W_h"], res=res)
    fig, readout = explorer_view(data, n_minibatches=2, rule="dp", old_layer=1)
    again, readout2 = explorer_view(data, n_minibatches=2, rule="dp", old_layer=1)
    assert isinstance(fig, go.Figure) and fig.to_json() == again.to_json() and readout == readout2
    assert "Σ CKA" in readout and "val loss" in readout
    controls = explorer_controls(data)
    assert set(controls) == {"source", "n_minibatches", "offset", "rule", "old_layer"}
    explorer_view(data, **{k: c.value for k, c in controls.items()})
    _, r_prop = explorer_view(data, n_minibatches=1, rule="proportional", offset=0)
    assert "0→0, 1→2, 2→3, 3→5" in r_prop
    for bad in (dict(rule="hungarian"), dict(offset=-1), dict(n_minibatches=3), dict(old_layer=4), dict(source="web")):
        with pytest.raises(ParameterError):
            explorer_view(data, **bad)


def test_transferred_delta_keeps_rank_r(suite):
    """Rows of ΔW_new lie in the row space of ΔW_old W_h (Q/K/V), columns in W_hᵀ's image of ΔW_old's (O):
    rank(ΔW_new) ≤ r, so the SVD back to rank r is exact."""
    assert max(suite["tail"].values()) < 1e-5
    assert all(v > 0 for v in suite["norm_ratio"].values())


def _save_tiny(folder, words, hidden, layers, heads, seed):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<pad>": 1, **{w: i + 2 for i, w in enumerate(words)}}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", pad_token="<pad>")
    model = build_model(len(vocab), hidden, layers, heads, 2 * hidden, seed=seed)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return model


def test_transfer_checkpoints_from_local_folders(tmp_path):
    """The real-pair entry point on two tiny local checkpoints (different vocabularies, width, depth, heads)."""
    from peft import PeftModel, get_peft_model

    from companion.lorasuite.pipeline import transfer_checkpoints

    words_old = [f"w{i}" for i in range(40)]
    words_new = [f"w{i}" for i in range(5, 50)]
    old = _save_tiny(tmp_path / "old", words_old, 16, 2, 2, 0)
    _save_tiny(tmp_path / "new", words_new, 24, 3, 3, 1)
    peft_old = get_peft_model(old, lora_config(2, 2, ATTN))
    with torch.no_grad():
        for n, p in peft_old.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.1)
    peft_old.save_pretrained(tmp_path / "adapter")
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(words_old, 12)) for _ in range(16)]
    out = transfer_checkpoints(str(tmp_path / "old"), str(tmp_path / "new"), str(tmp_path / "adapter"),
                               str(tmp_path / "moved"), texts)
    assert out["n_common"] == 37 and len(out["layer_pairs"]) == 2
    new = build_model(47, 24, 3, 3, 48, seed=1)
    loaded = PeftModel.from_pretrained(new, str(tmp_path / "moved"))
    assert {int(n.split("layers.")[1].split(".")[0]) for n, _ in loaded.named_parameters() if "lora_" in n} == {
        b for _, b in out["layer_pairs"]}


def test_ffn_rules():
    from companion.lorasuite.transfer_matrix import ffn_transfer_matrix

    m = build_model(30, 16, 1, 2, 40, seed=11)
    w = layer_weights(m, 0)
    W_i = ffn_transfer_matrix(w["up"], w["up"], torch.eye(16))
    h = torch.randn(5, 16, generator=torch.Generator().manual_seed(0))
    u = h @ w["up"].T
    assert W_i.shape == (40, 40) and torch.allclose(u @ W_i, u, atol=1e-4)  # identity on the reachable activations
    new = build_model(30, 24, 1, 3, 60, seed=12)
    ad = _random_adapter(m, rank=2, targets=["up_proj", "down_proj"])
    res = transfer_adapter(m, new, ad, W_h=torch.randn(16, 24, generator=torch.Generator().manual_seed(1)),
                           layer_pairs=[(0, 0)])
    A, B = res["adapter"][(0, "up_proj")]
    assert A.shape == (2, 24) and B.shape == (60, 2)
    A, B = res["adapter"][(0, "down_proj")]
    assert A.shape == (2, 60) and B.shape == (24, 2)

"""companion.diverse_sampling: exact answers on small cases, theorem invariants, peers where installed,
bad input, and the explorer without a browser."""

import itertools

import numpy as np
import plotly.graph_objects as go
import pytest
import torch

from companion.core import ParameterError, limit_threads
from companion.diverse_sampling import PAPER
from companion.diverse_sampling import estimators as E
from companion.diverse_sampling import sampler as SM
from companion.diverse_sampling import scale as DS
from companion.diverse_sampling import study as ST
from companion.diverse_sampling import textqa as TQ
from companion.diverse_sampling import toy as T
from companion.diverse_sampling.explorer import explorer_controls, explorer_view


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with limit_threads(1):  # tiny models on a busy two-core machine only gain contention from more threads
        yield


def test_identity():
    assert PAPER.notebook == "19_diverse_sampling" and PAPER.arxiv == "2510.21310"


# ----------------------------------------------------------------------------------------- Eq. 5

def test_tilt_is_eq5_on_candidates_and_identity_at_lambda_zero():
    rng = np.random.default_rng(0)
    logp = SM.log_softmax(rng.normal(size=10))
    cand = SM.topk_candidates(logp, 4)
    assert list(cand) == list(np.argsort(-logp)[:4])
    pen = np.array([0.9, 0.1, 0.0, 0.5])
    lq = SM.tilted_logprobs(logp, cand, pen, 2.0)
    expect = np.exp(logp).copy()
    expect[cand] *= np.exp(-2.0 * pen)
    assert np.allclose(np.exp(lq), expect / expect.sum())
    assert np.allclose(SM.tilted_logprobs(logp, cand, pen, 0.0), logp)


def test_aggregations_and_empty_set():
    e = np.array([[0.2, 0.9, 0.4], [0.0, 0.0, 1.0]])
    assert np.allclose(SM.aggregate(e, "max"), [0.9, 1.0])
    assert np.allclose(SM.aggregate(e, "mean"), [0.5, 1 / 3])
    assert np.allclose(SM.aggregate(e, "median"), [0.4, 0.0])
    assert np.array_equal(SM.aggregate(np.zeros((3, 0)), "max"), np.zeros(3))


@pytest.mark.parametrize("bad", [dict(lam=-0.1), dict(k=0), dict(k=11), dict(aggregation="min"), dict(n=0),
                                 dict(e_target=1.5), dict(e_target=-0.1), dict(eta=-1.0)])
def test_bad_steering_parameters(bad):
    args = dict(lam=1.0, k=3, vocab_size=10, aggregation="max", n=2, eta=0.0, e_target=0.3)
    args.update(bad)
    with pytest.raises(ParameterError) as err:
        SM.check_steering(**args)
    assert next(iter(bad)) in str(err.value)


# ----------------------------------------------------------------------------------------- estimators

def test_weights_ess_and_zero_proposal():
    w = E.importance_weights([[-1.0, -2.0], [-1.0, -1.0]], [[-1.0, -2.0], [-2.0, -1.0]])
    assert np.allclose(E.normalise(w), np.array([1.0, np.e]) / (1 + np.e))
    assert E.ess_fraction(np.ones(5)) == pytest.approx(1.0)
    assert E.ess_fraction([1.0, 0, 0, 0]) == pytest.approx(0.25)
    with pytest.raises(ParameterError, match="logq"):
        E.importance_weights([-1.0, -1.0], [-1.0, -np.inf])


def test_semantic_entropy_exact_and_weighted():
    assert E.semantic_entropy([0, 0, 1, 1]) == pytest.approx(np.log(2))
    assert E.semantic_entropy([0, 1], [3.0, 1.0]) == pytest.approx(-(0.75 * np.log(0.75) + 0.25 * np.log(0.25)))
    assert E.semantic_entropy([5, 5, 5]) == 0.0


def _lm_polygraph_semantic_entropy():
    """lm-polygraph's ``SemanticEntropy``, imported without running its packages' ``__init__`` files: they import
    openai, datasets and more that this estimator does not use (``make setup`` installs lm-polygraph with
    ``--no-deps``)."""
    import importlib
    import importlib.util
    import sys
    import types
    from pathlib import Path

    spec = importlib.util.find_spec("lm_polygraph")
    if spec is None:
        pytest.skip("lm-polygraph is not installed (make setup installs it)")
    root = Path(list(spec.submodule_search_locations)[0])
    for name, folder in (("lm_polygraph", root), ("lm_polygraph.utils", root / "utils"),
                         ("lm_polygraph.estimators", root / "estimators")):
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [str(folder)]
            sys.modules[name] = package
    return importlib.import_module("lm_polygraph.estimators.semantic_entropy").SemanticEntropy


def test_semantic_entropy_matches_lm_polygraph():
    SemanticEntropy = _lm_polygraph_semantic_entropy()
    labels = [0, 0, 1, 2, 2, 2, 3, 0]
    c2s = [[i for i, c in enumerate(labels) if c == k] for k in sorted(set(labels))]
    peer = SemanticEntropy(class_probability_estimation="frequency")
    got = peer({"sample_texts": [["x"] * len(labels)],
                "semantic_classes_entail": {"class_to_sample": [c2s], "sample_to_class": [labels]}})
    assert float(got[0]) == pytest.approx(E.semantic_entropy(labels), abs=1e-12)


def test_naive_control_variate_is_zero_and_refused():
    rng = np.random.default_rng(1)
    w, x = rng.random(9), rng.normal(size=9)
    assert abs(E.naive_cv_correction(w, x)) < 1e-12
    with pytest.raises(ParameterError, match="known_mean"):
        E.control_variate([0, 1, 1], [1, 1, 1], [0.1, 0.2, 0.3], known_mean=None)


def test_control_variate_removes_a_linear_error_exactly():
    # Y depends on the cluster; Z = Y shifted: alpha* = 1 and H_cv = mean(Y) - (mean(Z) - 0) = the shift
    labels = [0, 0, 0, 1]
    y = -np.log(np.array([0.75, 0.75, 0.75, 0.25]))
    h_cv, alpha = E.control_variate(labels, np.ones(4), y - 2.0, known_mean=0.0)
    assert alpha == pytest.approx(1.0) and h_cv == pytest.approx(2.0)


def test_chain_rule_cv_has_mean_zero_under_p_exactly():
    m = T.ToyModel(np.array([0.5, 0.3, 0.2]), np.array([[0.9, 0.1], [0.5, 0.5], [0.2, 0.8]]))
    h1 = -np.sum(m.cluster_probs * np.log(m.cluster_probs))
    total = 0.0
    for c, j in itertools.product(range(3), range(2)):
        p = m.cluster_probs[c] * m.paraphrase_probs[c, j]
        h2 = -np.sum(m.paraphrase_probs[c] * np.log(m.paraphrase_probs[c]))
        z = E.chain_rule_cv([[np.log(m.cluster_probs[c]), np.log(m.paraphrase_probs[c, j])]], [[h1, h2]])[0]
        total += p * z
    assert abs(total) < 1e-12


def test_mutual_information_exact_cases():
    a = [0, 0, 1, 1]
    assert E.mutual_information(a, [0, 1, 0, 1]) == pytest.approx(0.0, abs=1e-12)  # product joint
    assert E.mutual_information(a, a) == pytest.approx(np.log(2))  # identical answers: I = H


def test_rouge_l_known_values_and_peer():
    assert E.rouge_l("it is paris", "paris") == pytest.approx(0.5)
    assert E.rouge_l("the answer is red", "blue") == 0.0
    assert E.rouge_l("Paris!", "paris") == 1.0
    rs = pytest.importorskip("rouge_score.rouge_scorer")
    scorer = rs.RougeScorer(["rougeL"])
    for p, r in [("the answer is red", "red"), ("a b c d", "b d e"), ("x y", "y x")]:
        assert E.rouge_l(p, r) == pytest.approx(scorer.score(r, p)["rougeL"].fmeasure)


def test_jackknife_of_the_mean_is_the_standard_error():
    x = np.random.default_rng(2).normal(size=20)
    est, se = E.jackknife(x, np.mean)
    assert est == pytest.approx(x.mean()) and se == pytest.approx(x.std(ddof=1) / np.sqrt(20))


def test_greedy_clustering_bidirectional():
    items = ["red", "the answer is red", "blue", "reddish"]
    key = lambda s: s.split()[-1]  # noqa: E731
    one_way = lambda a, b: key(a) == key(b) or (a == "reddish" and key(b) == "red")  # noqa: E731
    assert E.greedy_cluster(items, one_way) == [0, 0, 1, 2]


# ----------------------------------------------------------------------------------------- the exact toy

def test_toy_lambda_zero_is_iid_and_steering_covers_more():
    m = T.zipf_toy()
    assert m.true_se == pytest.approx(1.5064, abs=1e-4)
    iid = T.simulate(m, n=8, trials=500, lam=0.0, seed=0)
    assert np.allclose(iid["logq"], iid["logp"], atol=1e-12)
    s = T.summary(m, n=8, trials=1500, lam=3.0, seed=0)
    assert s["covered"]["steered"] > 1.5 * s["covered"]["iid"]
    assert s["bias"]["steered"] > 0.1 and s["rmse"]["steered_is_cv"] < s["rmse"]["steered_is"]
    assert np.allclose(s["steered_sim"]["logq"][:, 0], s["steered_sim"]["logp"][:, 0], atol=1e-12)


def test_toy_vectorised_estimates_match_the_estimators():
    m = T.zipf_toy()
    sim = T.simulate(m, n=6, trials=5, lam=2.0, aggregation="mean", seed=3)
    is_cv = T.estimates(sim, cv=True)["se"]
    is_ = T.estimates(sim)["se"]
    for t in range(5):
        w = E.importance_weights(sim["logp"][t], sim["logq"][t])
        z = E.chain_rule_cv(sim["logp"][t], sim["entropy"][t])
        assert is_[t] == pytest.approx(E.semantic_entropy(sim["clusters"][t], w))
        assert is_cv[t] == pytest.approx(E.control_variate(sim["clusters"][t], w, z)[0])


def test_toy_is_estimate_converges_to_the_truth():
    m = T.zipf_toy()
    c = T.cluster_error_curve(m, ns=[4, 32], trials=1500, lam=2.0, seed=0)
    assert c["error_l1_is"][1] < 0.7 * c["error_l1_is"][0]
    assert c["bias_l1_is"][1] < 0.05 < c["bias_l1_unweighted"][1]


# ----------------------------------------------------------------------------------------- Alg. 1 / Alg. 2

def _toy_lm(m):
    """The two-token toy as callables: tokens 0..K-1 meanings, K..K+m-1 forms, K+m = eos."""
    K, mm = m.paraphrase_probs.shape
    eos = K + mm

    def next_logprobs(toks):
        out = np.full(K + mm + 1, -np.inf)
        if len(toks) == 0:
            out[:K] = np.log(m.cluster_probs)
        elif len(toks) == 1:
            out[K:K + mm] = np.log(m.paraphrase_probs[toks[0]])
        else:
            out[eos] = 0.0
        return out

    def score(cands, done):
        return np.array([[float(c[0] == s[0]) for s in done] for c in cands])

    return next_logprobs, score, eos


def test_steered_sample_lambda_zero_first_sample_and_weights():
    m = T.zipf_toy(4, 2, 1.0)
    nl, score, eos = _toy_lm(m)
    with np.errstate(divide="ignore"):
        iid = SM.steered_sample(nl, score, n=5, lam=0.0, k=4, eos=eos, max_len=4, vocab_size=eos + 1, rng=1)
        st = SM.steered_sample(nl, score, n=5, lam=50.0, k=4, eos=eos, max_len=4, vocab_size=eos + 1, rng=1)
    assert all(np.allclose(s.logq, s.logp) for s in iid)
    assert np.allclose(st[0].logq, st[0].logp)  # empty S: unpenalised
    assert len({s.tokens[0] for s in st[:4]}) == 4  # λ = 50: the first four answers take four meanings
    arr = SM.sequence_arrays(st)
    w = E.importance_weights(arr["logp"], arr["logq"])
    assert np.all(np.isfinite(w)) and 0 < E.ess_fraction(w) <= 1


def test_adaptive_lambda_follows_the_schedule():
    m = T.zipf_toy(4, 2, 1.0)
    nl, score, eos = _toy_lm(m)
    with np.errstate(divide="ignore"):
        out = SM.steered_sample(nl, score, n=3, lam=0.0, k=4, eos=eos, max_len=4, vocab_size=eos + 1, adaptive=True,
                                eta=2.0, e_target=0.3, rng=0)
    assert out[0].expected_similarity == [0.0] * len(out[0].lam) and out[0].lam == [0.0] * len(out[0].lam)  # S empty
    for s in out:
        prev = 0.0
        for t in range(len(s.lam)):  # λ_t is set before step t's draw, from that step's expected similarity
            assert s.lam[t] == pytest.approx(max(0.0, prev + 2.0 * (s.expected_similarity[t] - 0.3)))
            prev = s.lam[t]


def _neutral_prefix_lm(probs):
    """Answers "the <meaning> <eos>": a neutral first word, then the meaning word (tokens 0..K-1), as in the
    templated text's "the answer is <key>"; the similarity is 1 only for a candidate holding a sampled meaning."""
    K = len(probs)
    the, eos = K, K + 1

    def next_logprobs(toks):
        out = np.full(K + 2, -np.inf)
        if len(toks) == 0:
            out[the] = 0.0
        elif len(toks) == 1:
            out[:K] = np.log(probs)
        else:
            out[eos] = 0.0
        return out

    def score(cands, done):
        return np.array([[float(any(t < K and t in s for t in c)) for s in done] for c in cands])

    return next_logprobs, score, eos


def test_adaptive_lambda_steers_before_the_meaning_word():
    """Updating λ from the token just drawn left λ = 0 until after the meaning word, so the
    'adaptive' answers were IID draws (ESS/N = 1, q = p). Set before each draw, λ acts on the meaning word."""
    nl, score, eos = _neutral_prefix_lm(np.array([0.85, 0.05, 0.05, 0.05]))
    with np.errstate(divide="ignore"):
        out = SM.steered_sample(nl, score, n=8, lam=0.0, k=4, eos=eos, max_len=4, vocab_size=eos + 1, adaptive=True,
                                eta=3.0, rng=0)
    assert all(s.lam[0] == 0.0 for s in out)  # the neutral word: nothing to steer yet
    assert max(s.lam[1] for s in out[1:]) > 1.0  # at the meaning word, λ is already up
    gap = max(abs(q - p) for s in out for p, q in zip(s.logp, s.logq))
    arr = SM.sequence_arrays(out)
    ess = E.ess_fraction(E.importance_weights(arr["logp"], arr["logq"]))
    assert gap > 0.5 and ess < 0.95, (gap, ess)


def test_mdm_sampler_identity_unbiased_and_diverse():
    # exact denoiser of the two-position toy: position 0 meaning, position 1 form (offset K); MASK = K + m
    m = T.zipf_toy(4, 2, 1.0)
    K, mm = 4, 2
    mask = K + mm
    joint = m.cluster_probs[:, None] * m.paraphrase_probs  # (K, m)

    def denoise(seq):
        out = np.full((2, K + mm + 1), -np.inf)
        with np.errstate(divide="ignore"):
            if seq[1] == mask:
                out[0, :K] = np.log(joint.sum(1))
            else:
                col = joint[:, seq[1] - K]
                out[0, :K] = np.log(col / col.sum())
            if seq[0] == mask:
                out[1, K:K + mm] = np.log(joint.sum(0))
            else:
                row = joint[seq[0]]
                out[1, K:K + mm] = np.log(row / row.sum())
        return out

    def score(cands, done):
        return np.array([[float(c[0] != mask and c[0] == s[0]) for s in done] for c in cands])

    iid = SM.steered_mdm_sample(denoise, score, n=4, length=2, mask_id=mask, vocab_size=mask + 1, lam=0.0, k=4, rng=0)
    assert all(np.allclose(s.logq, s.logp) for s in iid)
    covered_st, covered_iid, est = [], [], []
    for seed in range(150):
        st = SM.steered_mdm_sample(denoise, score, n=4, length=2, mask_id=mask, vocab_size=mask + 1, lam=3.0, k=4,
                                   rng=seed)
        ii = SM.steered_mdm_sample(denoise, score, n=4, length=2, mask_id=mask, vocab_size=mask + 1, lam=0.0, k=4,
                                   rng=10_000 + seed)
        arr = SM.sequence_arrays(st)
        w = E.normalise(E.importance_weights(arr["logp"], arr["logq"]))
        est.append(sum(wi for wi, s in zip(w, st) if s.tokens[0] == 0))
        covered_st.append(len({s.tokens[0] for s in st}))
        covered_iid.append(len({s.tokens[0] for s in ii}))
    assert np.mean(covered_st) > np.mean(covered_iid) + 0.3
    assert abs(np.mean(est) - m.cluster_probs[0]) < 0.08  # IS recovers p(meaning 0) under steering


def test_logits_processor_on_a_tiny_gpt2():
    from companion.models import tiny_gpt2

    model = tiny_gpt2(vocab_size=32, n_embd=32, n_layer=1, n_head=2, n_positions=16, seed=0)
    prompt = torch.tensor([[1, 2, 3]])
    kw = dict(do_sample=True, max_new_tokens=4, top_k=0, top_p=1.0, temperature=1.0, pad_token_id=0)
    torch.manual_seed(5)
    base = model.generate(prompt, **kw)
    tilt0 = SM.DiversityTilt(lambda ids, cand: np.zeros(cand.shape), lam=0.0, k=5, vocab_size=32)
    torch.manual_seed(5)
    out0 = model.generate(prompt, logits_processor=[tilt0], **kw)
    tilt0.finish(out0)
    assert torch.equal(base, out0) and np.allclose(tilt0.logp, tilt0.logq, atol=1e-5)
    pen = lambda ids, cand: (cand.numpy() % 2).astype(float)  # noqa: E731 - penalise odd token ids
    tilt = SM.DiversityTilt(pen, lam=2.0, k=5, vocab_size=32)
    torch.manual_seed(6)
    out = model.generate(prompt, logits_processor=[tilt], **kw)
    tilt.finish(out)
    assert tilt.logq.shape == (1, 4)
    with torch.no_grad():
        logits = model(out).logits[0, 2:-1].double()
    lp = torch.log_softmax(logits, -1).numpy()
    assert np.allclose(tilt.logp[0], lp[np.arange(4), out[0, 3:].numpy()], atol=1e-4)
    for t in range(4):
        cand = SM.topk_candidates(lp[t], 5)
        lq = SM.tilted_logprobs(lp[t], cand, (cand % 2).astype(float), 2.0)
        assert tilt.logq[0, t] == pytest.approx(lq[int(out[0, 3 + t])], abs=1e-4)


# ----------------------------------------------------------------------------------------- partial NLI

def test_prefix_pairs_labels():
    from companion.diverse_sampling import similarity as S

    answers = ["red", "the answer is red", "blue", "the answer is blue"]
    pairs = S.prefix_pairs(answers, [0, 0, 1, 1])
    lab = {(p[0], p[1]): p[2] for p in pairs}
    assert lab[(("the answer is", True), ("red", False))] == S.NEUTRAL
    assert lab[(("red", True), ("the answer is red", False))] == S.ENTAIL
    assert lab[(("the answer is blue", True), ("red", False))] == S.CONTRADICT
    assert lab[(("red", False), ("blue", False))] == S.CONTRADICT


def test_partial_nli_needs_trunc_in_the_tokenizer():
    from companion.diverse_sampling import similarity as S

    class Tok:
        def get_vocab(self):
            return {"a": 0}

    with pytest.raises(ParameterError, match="trunc_token"):
        S.PartialNLI(Tok(), torch.nn.Linear(2, 2))


@pytest.fixture(scope="module")
def minilm_nli():
    from companion.diverse_sampling import similarity as S

    return S.load_partial_nli(seed=0)


def test_minilm_partial_nli_unit_norm_trunc_and_training(minilm_nli):
    from companion.diverse_sampling import similarity as S

    nli = minilm_nli
    ids, _ = nli._ids(["the answer is", "red"], [True, False])
    assert int((ids == nli.trunc_id).sum()) == 1 and nli.tokenizer.convert_ids_to_tokens(nli.trunc_id) == "[unused0]"
    emb = nli.embed(["the answer is", "red"], [True, False])
    assert torch.allclose(emb.norm(dim=-1), torch.ones(2), atol=1e-5)
    before = [p.detach().clone() for p in nli.encoder.parameters()][:3]
    answers = ["red", "the answer is red", "blue", "the answer is blue"]
    info = S.train_partial_nli(nli, S.prefix_pairs(answers, [0, 0, 1, 1]), steps=3, head_steps=30, seed=0)
    assert info["losses"][-1] < info["losses"][0] and info["accuracy"] > 0.8
    assert all(torch.equal(a, b) for a, b in zip(before, list(nli.encoder.parameters())[:3]))  # encoder frozen
    e = nli.similarity([("red", True), ("blue", True)], ["the answer is red"])
    assert e.shape == (2, 1) and e[0, 0] > e[1, 0]


# ----------------------------------------------------------------------------------------- text version

@pytest.fixture(scope="module")
def small_text():
    qa = TQ.make_qa(2, seed=0)
    model, losses = TQ.train_lm(qa, steps=60, seed=0)
    return qa, model, losses, TQ.model_truth(model, qa)


def test_text_data_lm_and_truth(small_text):
    qa, model, losses, truth = small_text
    assert len(qa.items) == 6 and all(abs(sum(it.probs.values()) - 1) < 1e-9 for it in qa.items)
    _, _, w = TQ.training_set(qa)
    assert w.sum().item() == pytest.approx(len(qa.items), rel=1e-5)
    assert losses[-1] < losses[0]
    for t in truth:
        assert abs(sum(t["probs"].values()) - 1) < 1e-9 and -1e-9 <= t["outside"] < 0.5 and t["se"] >= 0


def test_text_experiment_with_the_oracle_similarity(small_text):
    qa, model, _, truth = small_text
    r = TQ.run_text_experiment(model, ST.OracleNLI(qa), qa, truth, n=6, lam=3.0, k=4, seeds=(0,))
    assert r["iid"].shape == (1, 6) and np.all(np.isfinite(r["steered_is_cv"]))
    assert r["covered_steered"].mean() >= r["covered_iid"].mean()
    assert np.all((r["ess"] > 0) & (r["ess"] <= 1 + 1e-9))


def test_auroc_handles_one_class():
    assert np.isnan(TQ.auroc([0.1, 0.2], [0, 0]))
    assert TQ.auroc([0.1, 0.9], [0, 1]) == 1.0


# ----------------------------------------------------------------------------------------- explorer, scale

def test_explorer_view_is_pure_and_controls_match(small_text):
    qa, model, _, truth = small_text
    for text in (None, {"data": qa, "model": model, "nli": ST.OracleNLI(qa), "truth": truth}):
        data = {"toy": T.zipf_toy(), "text": text}
        controls = explorer_controls(data)
        fig, readout = explorer_view(data, **{k: c.value for k, c in controls.items()})
        again, _ = explorer_view(data, **{k: c.value for k, c in controls.items()})
        assert isinstance(fig, go.Figure) and fig.to_json() == again.to_json() and "clusters IID" in readout
    explorer_view(data, adaptive=True, prefix="the answer is", lam=2.0, k=3, n=4, aggregation="median",
                  estimator="iid", question=0)
    for bad in (dict(lam=-1.0), dict(k=0), dict(n=0), dict(aggregation="min"), dict(estimator="x"), dict(prefix="z"),
                dict(question=99)):
        with pytest.raises(ParameterError):
            explorer_view(data, **bad)


def test_scale_recorded_and_oracle():
    rec = DS.recorded()
    assert rec["complete"] and len(rec["sweep"]) == 10 and sorted(rec["profile"]["ns"]) == sorted(DS.GPU_PROFILE["ns"])
    assert all(DS.GPU_PROFILE[k] == v for k, v in rec["profile"].items() if k != "ns")  # the study it was run with
    qa = TQ.make_qa(1)
    o = ST.OracleNLI(qa)
    assert o.similarity([("the answer is", True), ("red", True)], ["the answer is red"]).ravel().tolist() == [0.0, 1.0]


def _points(ratio_seeds=((2.0, 3.0), (1.0, 4.0))):
    out = []
    for seed, (iid, st) in enumerate(ratio_seeds):
        out.append({"n": 4, "schedule": "fixed λ=3", "lam": 3.0, "adaptive": False, "k": 4, "seed": seed,
                    "covered_iid": iid, "covered_steered": st, "auroc_truth": 0.9, "ess": 0.5 + 0.5 * seed,
                    "auroc": {e: (None if seed and e == "iid" else 0.7 + 0.1 * (e == "steered_is")) for e in ST.ESTIMATORS},
                    "bias": {e: -0.1 * (seed + 1) for e in ST.ESTIMATORS}, "rmse": {e: 0.2 for e in ST.ESTIMATORS},
                    "seconds": 1.0, "samples": 100})
    return out


def test_sweep_rows_keep_one_value_per_seed():
    (row,) = ST.sweep_rows(_points())
    assert row["seeds"] == [0, 1] and row["covered_ratio_seeds"] == pytest.approx([1.5, 4.0])
    assert row["ess_seeds"] == pytest.approx([0.5, 1.0]) and row["auroc_iid"] == pytest.approx(0.7)
    assert row["auroc_gain_seeds"][0] == pytest.approx(0.1) and row["auroc_gain_seeds"][1] is None
    assert row["bias_seeds"]["steered_is_cv"] == pytest.approx([-0.1, -0.2]) and row["ms_per_sample"] == 10.0


def _tiny_profile(**over):
    return {**DS.SMOKE_PROFILE, "ns": [3], "seeds": [0, 1], **over}


def test_sweep_stages_on_the_oracle_stop_at_the_deadline_and_check_the_schedule():
    """The study's stages on the explicit oracle in this process (``workers = 0``): one row per (N, schedule)
    with its per-seed values; with no time left only the first point runs; a profile of another adaptive
    schedule is refused before anything is built."""
    from companion.core.stages import StageContext

    profile = _tiny_profile(nli_encoder=ST.ORACLE, workers=0, ns=[3, 4])
    ctx = StageContext(profile=profile, device="cpu", log=lambda *a: None, results={})
    assert ST.text_model(ctx)["scorer"].startswith("oracle")
    rows = ST.sweep(ctx)
    assert [(r["n"], r["adaptive"]) for r in rows] == [(3, False), (3, True), (4, False), (4, True)]
    assert all(len(r["covered_ratio_seeds"]) == len(r["rmse_seeds"]["iid"]) == 2 for r in rows)
    ctx.until = 0.0
    assert [len(r["seeds"]) for r in ST.sweep(ctx)] == [1] and len(ST.k_sweep(ctx)) == 1
    bad = StageContext(profile={**profile, "adaptive_schedule": "post-draw"}, device="cpu", log=print, results={})
    with pytest.raises(ParameterError, match="adaptive_schedule"):
        ST.text_model(bad)


def test_a_missing_encoder_fails_the_study_instead_of_falling_back():
    from companion.core.stages import run_stages
    from companion.models import ModelUnavailableError

    ctx_profile = _tiny_profile(nli_encoder="build/no-such-encoder")
    with pytest.raises(ModelUnavailableError, match="does not exist"):
        ST.build_text(ctx_profile, 0, "cpu")
    payload = run_stages(DS.STAGES, ctx_profile, log=lambda *a: None)
    assert {s["state"] for s in payload["stages"].values()} == {"failed"}
    assert "no-such-encoder" in payload["stages"]["text_model"]["error"]
    assert ST.encoder_source("build/minilm-fp16") == str(ST.REPO / "build" / "minilm-fp16")
    assert ST.encoder_source(DS.GPU_PROFILE["nli_encoder"]).startswith(str(ST.REPO))  # relative to the repository
    for bad in ("", ST.ORACLE, None):
        with pytest.raises(ParameterError, match="nli_encoder"):
            ST.encoder_source(bad)
    with pytest.raises(ParameterError, match="workers"):
        ST.worker_pool({}, 0)


def test_points_in_worker_processes_equal_the_sequential_run():
    """Two spawned workers with the MiniLM partial NLI give exactly the points of the run in this process."""
    text = ST.build_text(_tiny_profile(), 0, "cpu")
    assert text["scorer"].startswith("MiniLM partial NLI")
    state = ST.worker_state(text, _tiny_profile())
    specs = [{"n": 3, "schedule": s, "lam": 3.0, "adaptive": a, "k": 2, "seed": seed}
             for s, a in (("fixed λ=3", False), ("adaptive η=3", True)) for seed in (0, 1)]
    here = ST.run_points(specs, state=state)
    pool = ST.worker_pool(state, 2)
    try:
        there = ST.run_points(specs, pool=pool)
        cut = ST.run_points(specs, pool=pool, left=lambda: 0.0, log=lambda *a: None)  # deadline: the first point, kept
    finally:
        pool.terminate()
    strip = lambda ps: [{k: v for k, v in p.items() if k != "seconds"} for p in ps]  # noqa: E731
    assert strip(here) == strip(there) and [p["seed"] for p in there] == [0, 1, 0, 1]
    assert 1 <= len(cut) <= len(specs) and strip(cut)[0] == strip(here)[0]

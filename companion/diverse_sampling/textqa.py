"""The text version: templated QA with known paraphrase clusters, a tiny word LM, steered decoding (Alg. 1).

**Data.** Three question types (colour, city, count), ``questions_per_type`` questions each. Each question
has a distribution over meaning clusters (the answer keys of its type) drawn so that some questions are
easy (one dominant meaning) and some are confused; its reference answer is the dominant meaning for easy
questions and a random supported meaning for confused ones, so the model's greedy answer is often wrong
exactly where its semantic entropy is high. Every meaning has two paraphrases, ``"<key>"`` and
``"the answer is <key>"``: the prefixes ``"the"``, ``"the answer"``, ``"the answer is"`` do not yet decide the
meaning (neutral for the partial NLI). Training text is ``question ? answer <eos>`` drawn from these
distributions.

**Model.** A tiny word-level GRU LM (:class:`WordLM`), trained in the notebook on the exact expected
cross-entropy of the templated answers (a full batch of every question-answer pair weighted by its data
probability: fast and deterministic). A GRU, not ``companion.models.tiny_gpt2``: Hugging Face's per-call
overhead made the GPT-2 several times slower on two cores; the Hugging Face path is the
:class:`~companion.diverse_sampling.sampler.DiversityTilt` logits processor, tested on a tiny GPT-2.
Its own semantic entropy per question, the target of the estimators, is computed exactly by scoring every
templated answer under the model (teacher forcing); the mass on answers outside the template is reported.

**Estimation** (App. B.4): samples clustered greedily by bidirectional entailment of the partial NLI
(answers only: every sample of a question shares the prompt), SE with unit weights (IID) or ``p/q`` weights
(steered), the chain-rule control variate; correctness of the greedy answer by ROUGE-L F1 > 0.3 against
the reference; AUROC of SE for predicting errors with a jackknife standard error over questions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from companion.core import check_float, check_int
from companion.diverse_sampling import estimators as E
from companion.diverse_sampling.sampler import sequence_arrays, steered_sample

TYPES = {
    "colour": ("what colour is the {} ?", ["bird", "car", "door", "hat", "cup", "kite", "boat", "lamp"],
               ["red", "blue", "green", "yellow", "black", "white"]),
    "city": ("where does {} live ?", ["anna", "ben", "carl", "dora", "emil", "fay", "gus", "hana"],
             ["paris", "rome", "tokyo", "cairo", "lima", "oslo"]),
    "count": ("how many {} are in the box ?", ["apples", "pens", "coins", "cards", "keys", "shells", "stones", "beads"],
              ["two", "three", "four", "five", "six", "seven"]),
}
FORMS = ("{}", "the answer is {}")
EOS = "<eos>"
CORRECT_ROUGE = 0.3  # the paper's correctness threshold on ROUGE-L F1

__all__ = ["CORRECT_ROUGE", "QA", "QAData", "WordLM", "auroc", "make_qa", "model_truth", "nli_training_answers",
           "run_text_experiment", "sample_question", "train_lm", "training_set"]


@dataclass
class QA:
    question: str
    qtype: str
    probs: dict  # key -> probability of that meaning
    reference: str
    easy: bool


@dataclass
class QAData:
    items: list
    vocab: list
    index: dict = field(default_factory=dict)

    def encode(self, words) -> list[int]:
        return [self.index[w] for w in words]

    def answers(self, qtype: str) -> list[tuple[str, str]]:
        """Every templated answer of a type as ``(text, key)``."""
        return [(f.format(key), key) for key in TYPES[qtype][2] for f in FORMS]


def make_qa(questions_per_type: int = 6, seed: int = 0) -> QAData:
    """Generated templated QA (half the questions easy, half confused), with its word vocabulary."""
    check_int("questions_per_type", questions_per_type, lo=1, hi=8)
    rng = np.random.default_rng(seed)
    items = []
    for qtype, (tmpl, subjects, keys) in TYPES.items():
        for n, subj in enumerate(subjects[:questions_per_type]):
            easy = n % 2 == 0
            support = rng.choice(len(keys), size=1 + (0 if easy else int(rng.integers(2, 5))), replace=False)
            if easy:
                p = {keys[support[0]]: 0.9}
                rest = [kk for kk in keys if kk != keys[support[0]]]
                for kk in rng.choice(rest, size=2, replace=False):
                    p[str(kk)] = 0.05
                ref = keys[support[0]]
            else:
                w = rng.dirichlet(np.full(len(support), 2.0))
                p = {keys[s]: float(x) for s, x in zip(support, w)}
                ref = keys[int(rng.choice(support))]
            items.append(QA(tmpl.format(subj), qtype, p, ref, easy))
    words = sorted({w for it in items for w in it.question.split()} | {w for _, (_, _, ks) in TYPES.items() for w in ks}
                   | {w for f in FORMS for w in f.format("").split()})
    vocab = [EOS, *words]
    return QAData(items, vocab, {w: i for i, w in enumerate(vocab)})


class WordLM(torch.nn.Module):
    """A tiny word-level GRU language model (embedding, one GRU layer, tied-size output)."""

    def __init__(self, vocab_size: int, dim: int = 64, seed: int = 0):
        super().__init__()
        check_int("dim", dim, lo=4)
        torch.manual_seed(seed)
        self.emb = torch.nn.Embedding(vocab_size, dim)
        self.rnn = torch.nn.GRU(dim, dim, batch_first=True)
        self.out = torch.nn.Linear(dim, vocab_size)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """``(B, L)`` token ids -> ``(B, L, V)`` next-token logits."""
        return self.out(self.rnn(self.emb(ids))[0])


def training_set(data: QAData) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every (question, templated answer) with its data probability ``p(c | q) / |forms|``: padded ids, answer
    labels (-100 elsewhere) and weights. Training on it minimises the expected cross-entropy exactly."""
    rows = []
    for it in data.items:
        q = data.encode(it.question.split())
        for key, pc in it.probs.items():
            for f in FORMS:
                rows.append((q, data.encode(f.format(key).split()) + [data.index[EOS]], pc / len(FORMS)))
    width = max(len(q) + len(a) for q, a, _ in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for r, (q, a, _) in enumerate(rows):
        seq = q + a
        ids[r, : len(seq)] = torch.tensor(seq)
        labels[r, len(q): len(seq)] = torch.tensor(a)
    weights = torch.tensor([w for _, _, w in rows], dtype=torch.float32)
    return ids, labels, weights / weights.sum() * len(data.items)


def train_lm(data: QAData, *, steps: int = 80, lr: float = 2e-2, dim: int = 64, seed: int = 0, device: str = "cpu"):
    """Train :class:`WordLM` with AdamW on the exact expected answer cross-entropy (full batch); returns
    ``(model, losses)`` (losses in nats per question)."""
    check_int("steps", steps, lo=1)
    check_float("lr", lr, lo=0.0, lo_open=True)
    model = WordLM(len(data.vocab), dim, seed).to(device).train()
    ids, labels, weights = (t.to(device) for t in training_set(data))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses = []
    for _ in range(steps):
        logits = model(ids)[:, :-1]
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels[:, 1:], ignore_index=-100,
                                                reduction="none").sum(1)
        loss = (weights * nll).sum() / len(data.items)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model.eval(), losses


class _LM:
    """Cached ``next_logprobs`` of one question for :func:`steered_sample`."""

    def __init__(self, model, data: QAData, question: str):
        self.model, self.data = model, data
        self.q = data.encode(question.split())
        self.cache: dict = {}

    @torch.no_grad()
    def __call__(self, toks: tuple) -> np.ndarray:
        if toks not in self.cache:
            dev = next(self.model.parameters()).device
            ids = torch.tensor([self.q + list(toks)], device=dev)
            self.cache[toks] = torch.log_softmax(self.model(ids)[0, -1].double(), -1).cpu().numpy()
        return self.cache[toks]

    def sequence_logprob(self, words: list[str]) -> float:
        toks = self.data.encode(words) + [self.data.index[EOS]]
        return float(sum(self(tuple(toks[:t]))[toks[t]] for t in range(len(toks))))

    def greedy(self, max_len: int = 6) -> str:
        toks: tuple = ()
        for _ in range(max_len):
            y = int(np.argmax(self(toks)))
            if y == self.data.index[EOS]:
                break
            toks = toks + (y,)
        return " ".join(self.data.vocab[t] for t in toks)


def model_truth(model, data: QAData) -> list[dict]:
    """Per question: the model's exact cluster probabilities over the templated answers, its SE (over
    those, renormalised), the mass left outside the template and the greedy answer with its correctness."""
    out = []
    for it in data.items:
        lm = _LM(model, data, it.question)
        mass: dict = {}
        for text, key in data.answers(it.qtype):
            mass[key] = mass.get(key, 0.0) + np.exp(lm.sequence_logprob(text.split()))
        total = sum(mass.values())
        p = np.array([v / total for v in mass.values()])
        p = p[p > 0]
        greedy = lm.greedy()
        out.append({"probs": {k: v / total for k, v in mass.items()}, "se": float(-np.sum(p * np.log(p))),
                    "outside": float(1 - total), "greedy": greedy,
                    "correct": E.rouge_l(greedy, it.reference) > CORRECT_ROUGE})
    return out


def _scorer(nli, data: QAData, eos: int):
    def score(cands, done):
        items = [(" ".join(data.vocab[t] for t in c if t != eos), c[-1] != eos) for c in cands]
        answers = [" ".join(data.vocab[t] for t in s) for s in done]
        return nli.similarity(items, answers)
    return score


def sample_question(model, nli, data: QAData, item: QA, *, n: int, lam: float, k: int, aggregation: str = "max",
                    adaptive: bool = False, eta: float = 1.0, seed: int = 0, max_len: int = 6, lm=None) -> dict:
    """``n`` answers to one question by Alg. 1 (``lam = 0``: IID) and their estimates."""
    lm = lm or _LM(model, data, item.question)
    eos = data.index[EOS]
    samples = steered_sample(lm, _scorer(nli, data, eos), n=n, lam=lam, k=k, aggregation=aggregation, eos=eos,
                             max_len=max_len, vocab_size=len(data.vocab), adaptive=adaptive, eta=eta, rng=seed)
    texts = [" ".join(data.vocab[t] for t in s.tokens) for s in samples]
    labels = E.greedy_cluster(texts, nli.entails)
    arr = sequence_arrays(samples)
    w = E.importance_weights(arr["logp"], arr["logq"])
    z = E.chain_rule_cv(arr["logp"], arr["entropy"])
    keys = [next((kk for kk in TYPES[item.qtype][2] if kk in t.split()), t) for t in texts]
    return {"texts": texts, "labels": labels, "keys": keys, "samples": samples,
            "se_unweighted": E.semantic_entropy(labels), "se_is": E.semantic_entropy(labels, w),
            "se_is_cv": E.control_variate(labels, w, z)[0], "ess": E.ess_fraction(w),
            "covered": len(set(keys)), "lam_path": [s.lam for s in samples]}


def auroc(scores, errors) -> float:
    """AUROC of ``scores`` for predicting ``errors`` (nan when only one class is present)."""
    from sklearn.metrics import roc_auc_score

    e = np.asarray(errors, dtype=int)
    if e.min() == e.max():
        return float("nan")
    return float(roc_auc_score(e, np.asarray(scores, dtype=float)))


def run_text_experiment(model, nli, data: QAData, truth: list[dict], *, n: int, lam: float, k: int,
                        aggregation: str = "max", adaptive: bool = False, eta: float = 1.0, seeds=(0,)) -> dict:
    """IID vs steered on every question for each seed: SE estimates, clusters covered, ESS/N, AUROC.

    Returns per-seed arrays plus the AUROC of each estimator (``auroc_seeds``: one per seed; ``auroc``: their
    mean and std; a jackknife SE over questions) and of the model's exact SE (the ceiling at this scale).
    """
    errors = np.array([not t["correct"] for t in truth])
    true_se = np.array([t["se"] for t in truth])
    res: dict = {"iid": [], "steered_unweighted": [], "steered_is": [], "steered_is_cv": [],
                 "covered_iid": [], "covered_steered": [], "ess": [], "lam_paths": [], "agree": []}
    from sklearn.metrics import adjusted_rand_score

    for seed in seeds:
        rows = {key: [] for key in res}
        for q, it in enumerate(data.items):
            lm = _LM(model, data, it.question)
            a = sample_question(model, nli, data, it, n=n, lam=0.0, k=k, aggregation=aggregation, seed=1000 * seed + q, lm=lm)
            b = sample_question(model, nli, data, it, n=n, lam=lam, k=k, aggregation=aggregation, adaptive=adaptive,
                                eta=eta, seed=1000 * seed + q + 500, lm=lm)
            rows["iid"].append(a["se_unweighted"])
            rows["steered_unweighted"].append(b["se_unweighted"])
            rows["steered_is"].append(b["se_is"])
            rows["steered_is_cv"].append(b["se_is_cv"])
            rows["covered_iid"].append(a["covered"])
            rows["covered_steered"].append(b["covered"])
            rows["ess"].append(b["ess"])
            rows["lam_paths"].append(b["lam_path"])
            rows["agree"].append(adjusted_rand_score(b["keys"], b["labels"]) if len(set(b["keys"])) > 1 else
                                 float(len(set(b["labels"])) == 1))
        for key in res:
            res[key].append(rows[key])
    out = {key: (np.array(v, dtype=float) if key != "lam_paths" else v) for key, v in res.items()}
    out["errors"], out["true_se"] = errors, true_se
    out["auroc"], out["auroc_seeds"] = {}, {}
    for key in ("iid", "steered_unweighted", "steered_is", "steered_is_cv"):
        vals = [auroc(s, errors) for s in out[key]]
        out["auroc_seeds"][key] = vals  # one per seed (nan where the errors have one class)
        finite = [v for v in vals if np.isfinite(v)]
        out["auroc"][key] = (float(np.mean(finite)), float(np.std(finite))) if finite else (float("nan"), float("nan"))
        out[f"rmse_{key}"] = float(np.sqrt(np.mean((out[key] - true_se[None]) ** 2)))
    out["auroc_jackknife_se"] = {}
    for key in ("iid", "steered_is"):
        if len(errors) >= 3 and 0 < errors.sum() < len(errors) - 1:
            _, se = E.jackknife(np.column_stack([out[key][0], errors]), lambda a: auroc(a[:, 0], a[:, 1]))
        else:
            se = float("nan")
        out["auroc_jackknife_se"][key] = se  # leave-one-question-out, first seed
    out["auroc_truth"] = auroc(true_se, errors)
    out["n"], out["lam"], out["k"], out["seeds"] = n, lam, k, list(seeds)
    out["n_questions"] = len(data.items)
    return out


def nli_training_answers(data: QAData) -> tuple[list, list, list]:
    """Every templated answer with its meaning id and question-type group, for
    :func:`~companion.diverse_sampling.similarity.prefix_pairs`."""
    answers, keys, groups = [], [], []
    for g, qtype in enumerate(TYPES):
        for text, key in data.answers(qtype):
            answers.append(text)
            keys.append(key)
            groups.append(g)
    ids = {k: i for i, k in enumerate(sorted(set(keys)))}
    return answers, [ids[k] for k in keys], groups

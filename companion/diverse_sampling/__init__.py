"""Paper 19: diversity-steered sampling for semantic uncertainty quantification.

Park & Cho,
*Efficient semantic uncertainty quantification in language models via diversity-steered sampling*,
NeurIPS 2025 (arXiv 2510.21310; official code
https://github.com/jiwoncpark/diversity_steered_sampling, not inspected here).

Sampling ``N`` answers IID from an LLM covers few meanings; the paper tilts the proposal away from
meanings already drawn, ``q~(y_t | y_<t) ∝ p(y_t | y_<t) exp(−λ max_{s∈S} E(y_≤t ⊕ [TRUNC], s))`` (Eq. 5; Eq. 7 for
masked diffusion), with ``E`` the bidirectional entailment of an NLI model fine-tuned on partial text, and
undoes the bias of the semantic-entropy estimate with self-normalised importance weights ``p/q`` and a
control variate.

* :mod:`~companion.diverse_sampling.sampler` -- Eq. 5 / Alg. 1 (generic and as a Hugging Face
  ``LogitsProcessor``), Eq. 7 / Alg. 2, aggregation, top-k, adaptive λ;
* :mod:`~companion.diverse_sampling.estimators` -- weights, ESS/N, semantic entropy, the chain-rule control
  variate (and the refused naive one), MI from pairs, ROUGE-L, jackknife, greedy entailment clustering;
* :mod:`~companion.diverse_sampling.toy` -- the exact two-token toy with known clusters;
* :mod:`~companion.diverse_sampling.similarity` -- the partial-sequence NLI on MiniLM with ``[TRUNC]``;
* :mod:`~companion.diverse_sampling.textqa` -- templated QA, a tiny word LM, steered text sampling, AUROC;
* :mod:`~companion.diverse_sampling.study` -- the stages of the one-GPU study;
* :mod:`~companion.diverse_sampling.scale` -- the study's profiles and its recorded results;
* :mod:`~companion.diverse_sampling.claims`, :mod:`~companion.diverse_sampling.explorer`,
  :mod:`~companion.diverse_sampling.figures` -- the notebook's rows, explorer and figures.
"""

from companion.core import Paper

PAPER = Paper(
    number="19",
    slug="diverse_sampling",
    title="Efficient semantic uncertainty quantification in language models via diversity-steered sampling",
    arxiv="2510.21310",
    code="https://github.com/jiwoncpark/diversity_steered_sampling",
    venue="NeurIPS 2025",
)

from companion.diverse_sampling.estimators import (  # noqa: E402
    chain_rule_cv,
    cluster_probs,
    control_variate,
    ess_fraction,
    greedy_cluster,
    importance_weights,
    jackknife,
    mutual_information,
    naive_cv_correction,
    normalise,
    rouge_l,
    semantic_entropy,
)
from companion.diverse_sampling.sampler import (  # noqa: E402
    AGGREGATIONS,
    E_TARGET,
    DiversityTilt,
    Sample,
    aggregate,
    steered_mdm_sample,
    steered_sample,
    tilted_logprobs,
    topk_candidates,
)
from companion.diverse_sampling.toy import ToyModel, simulate, summary, zipf_toy  # noqa: E402

__all__ = [
    "AGGREGATIONS",
    "E_TARGET",
    "PAPER",
    "DiversityTilt",
    "Sample",
    "ToyModel",
    "aggregate",
    "chain_rule_cv",
    "cluster_probs",
    "control_variate",
    "ess_fraction",
    "greedy_cluster",
    "importance_weights",
    "jackknife",
    "mutual_information",
    "naive_cv_correction",
    "normalise",
    "rouge_l",
    "semantic_entropy",
    "simulate",
    "steered_mdm_sample",
    "steered_sample",
    "summary",
    "tilted_logprobs",
    "topk_candidates",
    "zipf_toy",
]

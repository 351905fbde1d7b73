"""LoRASuite: Efficient LoRA Adaptation Across Large Language Model Upgrades (paper 12).

Paper: Yanan Li, Fanxu Meng, Muhan Zhang, Shiai Zhu, Shangguang Wang, Mengwei Xu, *LoRASuite: Efficient
LoRA Adaptation Across Large Language Model Upgrades*, NeurIPS 2025, arXiv 2505.13515; official code
https://github.com/YananLi18/LoRASuite.

A LoRA adapter ΔW = B A trained on an old model is carried to an upgraded model (new vocabulary, width,
FFN size, depth, head count, MHA ↔ GQA) through maps computed from the two models' known weights, then
briefly fine-tuned: the transfer matrix W_h = E_o[c]⁺ E_n[c] over the shared tokens; a layer map that
maximises the summed minibatch CKA under an order-preserving dynamic programme (Alg. 1); a head map per
layer pair by the Hungarian algorithm on the cosine of the heads' W_QK, W_VO forms; the per-head transfer
of each ΔW, cut back to rank r by SVD (Alg. 2); and a lightweight fine-tuning (LFT) on about 100 samples
with no warm-up and a higher learning rate.

* :mod:`~companion.lorasuite.transfer_matrix` - W_h and its fit, W_i (§3.1);
* :mod:`~companion.lorasuite.cka` - minibatch CKA with the unbiased HSIC₁ estimator (§3.2);
* :mod:`~companion.lorasuite.mapping` - Alg. 1's layer DP (and greedy / proportional rules), head
  similarity and the Hungarian head map (§3.2-3.3);
* :mod:`~companion.lorasuite.transfer` - the per-head transfer (the code's form and Alg. 2's), SVD,
  up/down rules, the peft adapter in and out, the zero frozen adapters of LFT (§3.4);
* :mod:`~companion.lorasuite.lft` - LoRA / LFT training and evaluation (§3.5, §4);
* :mod:`~companion.lorasuite.fixture` - the CPU stand-in: an old and an upgraded char-level Llama;
* :mod:`~companion.lorasuite.vocab` - the word-level vocabulary pair of the GPU study;
* :mod:`~companion.lorasuite.pipeline` - the whole method, the experiment the notebook runs, and
  ``transfer_checkpoints`` for real Hugging Face pairs (local folders; nothing is downloaded);
* :mod:`~companion.lorasuite.explorer`, :mod:`~companion.lorasuite.claims`, :mod:`~companion.lorasuite.figures` -
  the notebook's explorer, claim rows and figures;
* :mod:`~companion.lorasuite.scale` - the one-GPU study and its recorded results; its stages' bodies in
  :mod:`~companion.lorasuite.study`.
"""

from companion.core import Paper

PAPER = Paper(
    number='12',
    slug='lorasuite',
    title='LoRASuite: Efficient LoRA Adaptation Across Large Language Model Upgrades',
    arxiv='2505.13515',
    code='https://github.com/YananLi18/LoRASuite',
    venue='NeurIPS 2025',
)

from companion.lorasuite.cka import cka_from_terms, hsic1, hsic1_matrix, layer_cka_terms, linear_cka  # noqa: E402
from companion.lorasuite.mapping import (  # noqa: E402
    LAYER_RULES,
    brute_force_head_mapping,
    brute_force_layer_mapping,
    head_mapping,
    head_similarity,
    layer_mapping,
)
from companion.lorasuite.transfer import (  # noqa: E402
    ModelSpec,
    check_compatible,
    head_transfer,
    load_transferred,
    low_rank,
    save_adapter,
    transfer_adapter,
)
from companion.lorasuite.transfer_matrix import common_tokens, ffn_transfer_matrix, transfer_matrix  # noqa: E402

__all__ = [
    "LAYER_RULES",
    "PAPER",
    "ModelSpec",
    "brute_force_head_mapping",
    "brute_force_layer_mapping",
    "check_compatible",
    "cka_from_terms",
    "common_tokens",
    "ffn_transfer_matrix",
    "head_mapping",
    "head_similarity",
    "head_transfer",
    "hsic1",
    "hsic1_matrix",
    "layer_cka_terms",
    "layer_mapping",
    "linear_cka",
    "load_transferred",
    "low_rank",
    "save_adapter",
    "transfer_adapter",
    "transfer_matrix",
]

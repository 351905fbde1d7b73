"""Paper 11: Low-Rank Clone (LRC).

Hao, Huang, Liu, Xiao, Ren, Yu, *A Token is Worth over 1,000 Tokens: Efficient Knowledge Distillation
through Low-Rank Clone*, NeurIPS 2025 (spotlight), arXiv 2505.12781; official code
https://github.com/CURRENTF/LowRankClone.

A small student is built from a frozen teacher's weights through trainable low-rank projections,
``W^S_m = W^T_m W^p_m`` (soft pruning, Eq. 1-2), and trained to clone the teacher's activations, the
FFN's gate/up/output signals included (Eq. 4-6): ``L = L_LM + L_KL + α L_clone``. Lemma 1: cloning
h_up and h_gate exactly makes the student's FFN output the teacher's projected by the same W^p_down, so
no alignment matrices are needed.

* :mod:`~companion.low_rank_clone.clone` -- the projections as ``torch.nn.utils.parametrize`` on Hugging
  Face Llama / BERT modules, the clone losses, the KL term, :func:`merge`, Lemma 1;
* :mod:`~companion.low_rank_clone.experiments` -- the MiniLM (encoder) study with ablations and the
  TinyBERT-style baseline; the causal study (LRC, random init + KD, hard pruning + KD);
* :mod:`~companion.low_rank_clone.study_io` -- saving and loading a study without its models;
* :mod:`~companion.low_rank_clone.explorer`, :mod:`~companion.low_rank_clone.figures`,
  :mod:`~companion.low_rank_clone.claims` -- the notebook's explorer, figures and claim rows;
* :mod:`~companion.low_rank_clone.study` -- the stages of the one-GPU study (teacher, three students per seed, throughput);
* :mod:`~companion.low_rank_clone.scale` -- its profiles, stage list and recorded results (no plotly).
"""

from companion.core import Paper
from companion.low_rank_clone.clone import (
    TERMS,
    LowRankClone,
    LRCConfig,
    ProjectFromTeacher,
    kd_kl,
    lemma1_gap,
    lrc_loss,
    merge,
    selection_projection,
    set_projections,
    student_like,
)

PAPER = Paper(
    number="11",
    slug="low_rank_clone",
    title="A Token is Worth over 1,000 Tokens: Efficient Knowledge Distillation through Low-Rank Clone",
    arxiv="2505.12781",
    code="https://github.com/CURRENTF/LowRankClone",
    venue="NeurIPS 2025",
)

__all__ = [
    "PAPER",
    "TERMS",
    "LRCConfig",
    "LowRankClone",
    "ProjectFromTeacher",
    "kd_kl",
    "lemma1_gap",
    "lrc_loss",
    "merge",
    "selection_projection",
    "set_projections",
    "student_like",
]

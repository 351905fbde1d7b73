"""Paper 17: GAIN-RL, angle-concentration-guided data selection for RL fine-tuning.

Wang, Ke, Ye, Lin, Fu, Zhang, Keutzer, Xu, Chen, *Angles Don't Lie: Unlocking Training-Efficient RL Through
the Model's Own Signals*, NeurIPS 2025 (spotlight), arXiv 2506.02281; official code
https://github.com/wangqinsi1/GAINRL.

For a linear layer, ``‖∇_W L‖_F² = Σ_{i,j} (δ_i·δ_j)(x_i·x_j)``: token states that point alike give large
gradients. GAIN-RL ranks the RL prompts once by the angle concentration of their hidden states at the last
block's ``mlp.up_proj`` input (``C = C_intra + w·C_inter``), samples each epoch around a centre μ_t over that
ranking, ``p_t(r) ∝ exp(−(r − μ_t)²/2σ²)``, and moves
``μ_{t+1} = μ_t + clip(n·tanh(α(acc_t − β)) + n·tanh(γ·ang_t), adj_min, adj_max)``.

* :mod:`~companion.gain_rl.angle` -- the gradient identity, C_intra / C_inter from segment sums and their
  explicit oracle, the released ``data_processor.py`` formula as it is, the online angle signal, the hook;
* :mod:`~companion.gain_rl.sampler` -- the Gaussian sampler over ranks, the μ update (and the TRL path's
  one-epoch lag behind a flag), uniform and DAPO-style filtering baselines;
* :mod:`~companion.gain_rl.grpo` -- GRPO written out (the patched TRL trainer's loss) and the curriculum loop;
* :mod:`~companion.gain_rl.trl_sampler` -- the ordering and the schedule inside TRL's ``GRPOTrainer`` (a sampler and
  a small subclass fed by the trainer's rollouts; imports TRL only when used, so not imported here);
* :mod:`~companion.gain_rl.policy` -- the character policy (the shared Qwen-shaped tiny decoder), generated
  arithmetic, the SFT warm start;
* :mod:`~companion.gain_rl.experiments` -- pool signals (concentration, gradient norms, Spearman) and the
  sampler comparison;
* :mod:`~companion.gain_rl.study` -- the stages of the one-GPU study;
* :mod:`~companion.gain_rl.explorer`, :mod:`~companion.gain_rl.figures`, :mod:`~companion.gain_rl.claims`,
  :mod:`~companion.gain_rl.scale` -- the notebook's explorer, figures, claim rows, the study's profiles and
  its recorded results.
"""

from companion.core import Paper
from companion.gain_rl.angle import (
    capture_inputs,
    concentration,
    concentration_explicit,
    cosine_matrix,
    grad_norm_sq,
    hook_name,
    online_angle,
    released_metric,
    released_slices,
)
from companion.gain_rl.grpo import completion_mask, group_advantages, grpo_loss, run_curriculum, steps_to_target
from companion.gain_rl.policy import Problems, SFTRecipe, char_lm, load_or_train_sft, make_problems
from companion.gain_rl.sampler import (
    FilterSampler,
    GainSampler,
    UniformSampler,
    end_of_pool_epoch,
    gaussian_probs,
    gaussian_sample,
    mu_step,
    replay_mu,
)

PAPER = Paper(
    number="17",
    slug="gain_rl",
    title="Angles Don't Lie: Unlocking Training-Efficient RL Through the Model's Own Signals",
    arxiv="2506.02281",
    code="https://github.com/wangqinsi1/GAINRL",
)

__all__ = [
    "PAPER",
    "FilterSampler",
    "GainSampler",
    "Problems",
    "SFTRecipe",
    "UniformSampler",
    "capture_inputs",
    "char_lm",
    "completion_mask",
    "concentration",
    "concentration_explicit",
    "cosine_matrix",
    "end_of_pool_epoch",
    "gaussian_probs",
    "gaussian_sample",
    "grad_norm_sq",
    "group_advantages",
    "grpo_loss",
    "hook_name",
    "load_or_train_sft",
    "make_problems",
    "mu_step",
    "online_angle",
    "released_metric",
    "released_slices",
    "replay_mu",
    "run_curriculum",
    "steps_to_target",
]

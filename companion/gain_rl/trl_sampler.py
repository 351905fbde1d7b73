"""GAIN-RL inside TRL: the angle ordering and the Gaussian schedule as the sampler of TRL's ``GRPOTrainer``.

The paper's released training script (``trl_gainrl/gainrl_trainer.py``) runs a patched TRL ``GRPOTrainer`` and
a ``TrainerCallback`` that, at every ``on_epoch_begin``, replaces
``train_dataloader.base_dataloader.batch_sampler.sampler`` with a list of freshly drawn indices. This module
plugs the same three steps into an unpatched TRL (written against 1.16) through the trainer's own sampler hook,
``GRPOTrainer._get_train_sampler``, reusing the package's pieces rather than copies of them:

1. **Angle-based reordering** (paper, Sec. 4, step 1): :func:`angle_scores` runs one prefill of every prompt
   (``prefix + question + suffix``) and scores it by ``C = C_intra + w·C_inter`` at the input of the last
   block's ``mlp.up_proj`` (:func:`companion.gain_rl.angle.concentration`; ``w = 8`` as in the released
   ``data_processor.py``); :func:`rank_prompts` sorts the training set by ``C``, descending
   (:func:`companion.gain_rl.experiments.rank_pool`).
2. **Gaussian sampling** (step 2): each epoch, :class:`GainRLSampler` asks the package's
   :class:`~companion.gain_rl.sampler.GainSampler` for ``subset`` distinct prompts over ranks ``r`` with
   ``p_t(r) ∝ exp(−(r − μ_t)²/(2σ²))`` and lays them out as TRL's ``RepeatSampler`` does (chunks of
   ``generation_batch_size / num_generations`` prompts, each prompt ``num_generations`` times, each chunk
   ``num_iterations × steps_per_generation`` times), so TRL's grouping of completions is unchanged. Within an
   epoch the prompts come in rank order, as the released sampler's ``sample_indices.sort()`` gives them.
3. **Dynamic update** (step 3): :class:`GainRLTrainer` feeds the sampler from its own rollouts: every
   generation batch's rewards (``_calculate_rewards``, weighted over the reward functions as TRL sums them,
   gathered over processes) and, for every sequence the loss sees, the online angle signal of
   :func:`companion.gain_rl.angle.online_angle` at the same ``up_proj`` input over the prompt and the
   completion (``_compute_loss``, as the patched trainer's hook does). At ``on_epoch_end``
   ``μ_{t+1} = μ_t + clip(n·tanh(α(acc_t − β)) + n·tanh(γ·ang_t), adj_min, adj_max)``
   (:func:`companion.gain_rl.sampler.mu_step`), ``acc_t`` = the epoch's mean reward / ``reward_scale`` (2.0
   for the paper's 2.0/0.0 reward), ``ang_t`` = the epoch's mean angle signal.

Usage (``order`` from :func:`rank_prompts`, or from any ranking you trust)::

    gain = GainSampler(order, subset=256, sigma=1000, n=500, reward_scale=2.0)
    trainer = GainRLTrainer(model="path/or/id", reward_funcs=[reward], args=paper_config("out"),
                            train_dataset=ds, processing_class=tok, gain=gain)
    trainer.train()
    trainer.gain_sampler.epochs      # per epoch: μ used, prompts drawn, signals, μ after the update

Deviations from the released TRL path, each on purpose:

* the subset is drawn with the **updated** μ (the verl sampler); the released callback draws with the old μ
  (``center_index=mean`` while returning ``mean_new``): ``GainSampler(lag=True)`` reproduces that lag;
* the per-epoch signals are means over every rollout (accuracy) and every sequence of every loss forward
  (angle) of the epoch, gathered over processes, so every process draws the same subset; the released
  reward function averages them in blocks of 4 (its hard-coded prompts per chunk) on one process;
* the hook is the last ``mlp.up_proj`` found by name (:func:`up_proj_name`), not the hard-coded
  ``model.layers.23.mlp.up_proj``; the angle is taken over valid tokens only (left padding of the prompt
  and the padding after the end of the completion are skipped).

Not covered: iterable data sets (the schedule indexes the training set), and resuming from a TRL checkpoint
(μ and the sampler's random state are not saved with it; ``gain.history`` has μ to start again from).

TRL is imported only when :class:`GainRLTrainer` or :func:`paper_config` is used; the rest of the package,
and :class:`GainRLSampler` itself, do not need it.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch.utils.data import Sampler

from companion.core import ParameterError, check_float, check_int
from companion.gain_rl.angle import capture_inputs, concentration, online_angle
from companion.gain_rl.experiments import rank_pool
from companion.gain_rl.sampler import GainSampler

__all__ = ["GainRLSampler", "GainRLTrainer", "angle_scores", "paper_config", "rank_prompts", "sequence_angles",
           "toy_problem", "up_proj_name"]


# ------------------------------------------------------------------------------------------- ordering

def up_proj_name(model, layer: int = -1) -> str:
    """The name of the ``layer``-th module whose name ends in ``mlp.up_proj`` (the last block by default): the
    paper's hook point, whatever the wrapper (``model.layers.N.mlp.up_proj`` in Llama / Qwen2, with
    ``base_model.model.`` in front under PEFT)."""
    names = [n for n, _ in model.named_modules() if n.endswith("mlp.up_proj")]
    if not names:
        raise ParameterError("model", type(model).__name__,
                             "a model with `mlp.up_proj` modules (Llama, Qwen2, Mistral, ...); otherwise pass "
                             "hook= the name of the module whose input holds the hidden states")
    check_int("layer", layer, lo=-len(names), hi=len(names) - 1)
    return names[layer]


@torch.no_grad()
def angle_scores(model, tokenizer, questions, prefix: str, suffix: str = "", *, inter_weight: float = 8.0,
                 hook: str | None = None, batch_size: int = 32) -> np.ndarray:
    """``C = C_intra + w·C_inter`` of every prompt ``prefix + question + suffix`` (paper, Sec. 4, step 1).

    The three pieces are tokenized apart (special tokens with the prefix only) so the segment spans are exact:
    the prefix is the fixed instruction (for a chat model, the rendered template up to the question), the
    question its own span, the suffix (e.g. the assistant header) belongs to neither. One prefill per prompt,
    batched over prompts of equal token length; the states are the input of ``hook``
    (:func:`up_proj_name` by default)."""
    check_float("inter_weight", inter_weight, lo=0.0)
    check_int("batch_size", batch_size, lo=1)
    questions = list(questions)
    if not questions:
        raise ParameterError("questions", questions, "a non-empty list of question strings")
    name = hook or up_proj_name(model)

    def ids(text, special):
        return list(tokenizer(text, add_special_tokens=special)["input_ids"]) if text else []

    pre, suf = ids(prefix, True), ids(suffix, False)
    if not pre:
        raise ParameterError("prefix", prefix, "a non-empty instruction prefix (C_inter needs it)")
    rows = [pre + ids(q, False) + suf for q in questions]
    by_len: dict[int, list[int]] = {}
    for i, r in enumerate(rows):
        by_len.setdefault(len(r), []).append(i)
    scores = np.full(len(rows), np.nan)
    dev = next(model.parameters()).device
    was = model.training
    model.eval()
    try:
        for T, members in by_len.items():
            question = (len(pre), T - len(suf))
            for s in range(0, len(members), batch_size):
                part = members[s:s + batch_size]
                x = torch.tensor([rows[i] for i in part], device=dev)
                with capture_inputs(model, name) as store:
                    model(input_ids=x)
                c = concentration(store[name], (0, len(pre)), question, inter_weight)
                scores[part] = c["total"].cpu().numpy()
    finally:
        model.train(was)
    return scores


def rank_prompts(model, tokenizer, questions, prefix: str, suffix: str = "", **kwargs) -> np.ndarray:
    """The training-set indices sorted by :func:`angle_scores`, descending (rank 0 = the most concentrated):
    the ``order`` of a :class:`~companion.gain_rl.sampler.GainSampler`."""
    return rank_pool(angle_scores(model, tokenizer, questions, prefix, suffix, **kwargs))


def sequence_angles(states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The online angle signal (:func:`~companion.gain_rl.angle.online_angle`) of each row of ``states [B, T, d]``
    over its valid tokens ``mask [B, T]`` (1 = valid, anywhere in the row: TRL pads prompts on the left and
    completions on the right); the valid tokens are packed to the left in order first."""
    if states.shape[:2] != mask.shape:
        raise ValueError(f"states {tuple(states.shape)} and mask {tuple(mask.shape)} must agree on [B, T]")
    valid = mask.bool()
    order = torch.argsort((~valid).to(torch.int8), dim=1, stable=True)
    packed = states.gather(1, order[..., None].expand(-1, -1, states.shape[-1]))
    return online_angle(packed, valid.sum(1))


# -------------------------------------------------------------------------------------------- sampler

class GainRLSampler(Sampler):
    """The GAIN-RL schedule as a ``torch.utils.data.Sampler`` in the layout of TRL's ``RepeatSampler``.

    Each ``iter()`` (one epoch) draws ``gain.subset`` prompts with :meth:`GainSampler.draw` (around the current
    μ) and yields them in chunks of ``batch_size`` prompts, each index ``mini_repeat_count`` times in a row, each
    chunk ``repeat_count`` times. :meth:`observe_rewards` (one generation batch's rewards, in the order the
    sampler gave the prompts) and :meth:`observe_angles` collect the epoch's signals; :meth:`end_epoch` moves μ
    with :meth:`GainSampler.update` (also done by the next ``iter()`` if signals are pending). ``epochs`` records
    per epoch ``mu_used``, ``items``, ``rollouts``, ``sequences``, ``mean_reward``, ``ang``, ``mu_after``;
    ``prompt_accuracy`` maps a training-set index to the mean accuracy (reward / ``reward_scale``) of its last
    group of completions."""

    def __init__(self, gain: GainSampler, *, mini_repeat_count: int = 1, batch_size: int = 1, repeat_count: int = 1):
        if not isinstance(gain, GainSampler):
            raise ParameterError("gain", type(gain).__name__, "a companion.gain_rl.sampler.GainSampler")
        self.mini_repeat_count = check_int("mini_repeat_count", mini_repeat_count, lo=1)
        self.batch_size = check_int("batch_size", batch_size, lo=1)
        self.repeat_count = check_int("repeat_count", repeat_count, lo=1)
        if gain.subset % batch_size:
            raise ParameterError("subset", gain.subset, f"a multiple of the prompts per generation batch, {batch_size} "
                                 "(generation_batch_size / num_generations)")
        self.gain = gain
        self.epochs: list[dict] = []
        self.prompt_accuracy: dict[int, float] = {}
        self._chunks: list[np.ndarray] = []
        self._next_chunk = 0
        self._reset_signals()

    def _reset_signals(self):
        self._reward_sum, self._reward_n, self._ang_sum, self._ang_n = 0.0, 0, 0.0, 0

    def __len__(self) -> int:
        return self.gain.subset * self.mini_repeat_count * self.repeat_count

    def __iter__(self):
        if self._reward_n:
            self.end_epoch()
        items = self.gain.draw()
        self._chunks = [items[s:s + self.batch_size] for s in range(0, len(items), self.batch_size)]
        self._next_chunk = 0
        self.epochs.append({"mu_used": float(self.gain.history[-1]["mu_used"]), "items": items.copy()})
        for chunk in self._chunks:
            for _ in range(self.repeat_count):
                for i in chunk:
                    for _ in range(self.mini_repeat_count):
                        yield int(i)

    def observe_rewards(self, rewards) -> None:
        """One generation batch's total rewards (NaN = unscorable, skipped), in the sampler's order."""
        r = torch.as_tensor(rewards).detach().double().flatten().cpu().numpy()
        ok = ~np.isnan(r)
        self._reward_sum += float(r[ok].sum())
        self._reward_n += int(ok.sum())
        if self._next_chunk < len(self._chunks):
            chunk = self._chunks[self._next_chunk]
            self._next_chunk += 1
            if len(r) == len(chunk) * self.mini_repeat_count:
                groups, oks = r.reshape(len(chunk), -1), ok.reshape(len(chunk), -1)
                for i, g, o in zip(chunk, groups, oks):
                    if o.any():
                        self.prompt_accuracy[int(i)] = float(g[o].mean()) / self.gain.reward_scale

    def observe_angles(self, angles) -> None:
        """Online angle signals of sequences the loss saw (non-finite values skipped)."""
        a = torch.as_tensor(angles).detach().double().flatten().cpu().numpy()
        a = a[np.isfinite(a)]
        self._ang_sum += float(a.sum())
        self._ang_n += len(a)

    def end_epoch(self) -> float | None:
        """Move μ by the epoch's signals (``ang = 0`` if no angle was observed); None if no reward was."""
        if not self._reward_n:
            return None
        mean_reward = self._reward_sum / self._reward_n
        ang = self._ang_sum / self._ang_n if self._ang_n else 0.0
        mu = self.gain.update(mean_reward, ang)
        if self.epochs:
            self.epochs[-1].update(rollouts=self._reward_n, sequences=self._ang_n, mean_reward=mean_reward, ang=ang,
                                   mu_after=mu)
        self._reset_signals()
        return mu


# -------------------------------------------------------------------------------------------- trainer

@functools.cache
def _trainer_class():
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    class _EpochEnd(TrainerCallback):
        def __init__(self, sampler: GainRLSampler):
            self.sampler = sampler

        def on_epoch_end(self, args, state, control, **kwargs):
            self.sampler.end_epoch()

    class GainRLTrainer(GRPOTrainer):
        """TRL's ``GRPOTrainer`` with the GAIN-RL sampler (see :mod:`companion.gain_rl.trl_sampler`).

        Takes ``GRPOTrainer``'s arguments plus ``gain`` (a :class:`~companion.gain_rl.sampler.GainSampler` whose
        ``order`` is a permutation of the training set's indices) and ``hook`` (the module whose input holds the
        hidden states of the angle signal; the last ``mlp.up_proj`` by default). ``trainer.gain_sampler`` is the
        :class:`GainRLSampler`."""

        def __init__(self, *args, gain: GainSampler, hook: str | None = None, **kwargs):
            super().__init__(*args, **kwargs)
            ds = self.train_dataset
            if ds is None or not hasattr(ds, "__len__"):
                raise ParameterError("train_dataset", type(ds).__name__, "a map-style dataset (GAIN-RL indexes it)")
            n = len(ds)
            order = np.asarray(getattr(gain, "order", []))
            if len(order) != n or order.min() < 0 or order.max() >= n:
                raise ParameterError("gain", f"order of {len(order)} items",
                                     f"a GainSampler whose order is a permutation of the training set's {n} indices")
            self.gain_sampler = GainRLSampler(
                gain, mini_repeat_count=self.num_generations,
                batch_size=self.args.generation_batch_size // self.num_generations,
                repeat_count=self.num_iterations * self.args.steps_per_generation)
            self.angle_hook = hook or up_proj_name(self.accelerator.unwrap_model(self.model))
            self.add_callback(_EpochEnd(self.gain_sampler))

        def _get_train_sampler(self, dataset=None):
            return self.gain_sampler

        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            if self.model.training:
                total = (rewards_per_func * self.reward_weights.to(rewards_per_func.device)[None]).nansum(dim=1)
                total[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
                self.gain_sampler.observe_rewards(total)
            return rewards_per_func

        def _compute_loss(self, model, inputs):
            if not self.model.training:
                return super()._compute_loss(model, inputs)
            with capture_inputs(self.accelerator.unwrap_model(model), self.angle_hook) as store:
                loss = super()._compute_loss(model, inputs)
            mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
            angles = sequence_angles(store[self.angle_hook], mask)
            self.gain_sampler.observe_angles(self.accelerator.gather(angles.detach()))
            return loss

    GainRLTrainer.__module__, GainRLTrainer.__qualname__ = __name__, "GainRLTrainer"
    return GainRLTrainer


def paper_config(output_dir: str, **overrides):
    """A TRL ``GRPOConfig`` with the released script's settings (``G = 8``, ``β = 0.005``, lr 1e-6 constant,
    AdamW β₂ 0.99, weight decay 0.1, gradient norm 0.1, completions of 512 tokens, per-device batch 16 with 16
    accumulation steps) and the loss of its patched trainer (:func:`companion.gain_rl.grpo.grpo_loss`), which
    two of TRL 1.16's defaults change: ``loss_type="grpo"`` (per-sequence mean, then mean; TRL's default
    ``"dapo"`` averages over all tokens) and ``use_bias_correction_kl=False`` (TRL's default multiplies the KL
    term by the importance ratio, which changes its gradient even on-policy). ``overrides`` replace any of
    them. Not set here: vLLM, 8-bit AdamW; bf16 is TRL's default (``bf16=False`` for fp32 on a CPU)."""
    from trl import GRPOConfig

    base = dict(num_generations=8, beta=0.005, loss_type="grpo", use_bias_correction_kl=False, learning_rate=1e-6,
                lr_scheduler_type="constant", adam_beta1=0.9, adam_beta2=0.99, weight_decay=0.1, max_grad_norm=0.1,
                max_completion_length=512, per_device_train_batch_size=16, gradient_accumulation_steps=16,
                report_to="none")
    base.update(overrides)
    return GRPOConfig(output_dir=output_dir, **base)


# ------------------------------------------------------------------------------------ a toy for tests

def toy_problem(n_prompts: int = 16, *, hidden: int = 32, layers: int = 2, seed: int = 0, folder=None) -> dict:
    """A tiny offline setup for the tests and the notebook: a character tokenizer built in-process with the
    ``tokenizers`` library (the vocabulary of :mod:`companion.gain_rl.policy`, ``$`` as end of sequence), a
    random tiny Llama (:func:`companion.models.tiny_llama`), ``n_prompts`` sums ``"2+2=4; a+b="`` as a
    ``datasets.Dataset`` (columns ``prompt``, ``answer``, ``idx``), the questions and prefix / suffix for
    :func:`rank_prompts`, and ``reward``: 2.0 × the fraction of the answer's characters the completion has in
    place (a graded stand-in for the paper's 2.0/0.0, so a random model gets varied rewards). With ``folder``
    the model and tokenizer are saved there and loaded back (TRL builds its reference model from that path when
    ``beta > 0``); ``"model"`` is then the path and ``"net"`` the same weights in memory (for :func:`rank_prompts`)."""
    from datasets import Dataset
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from companion.gain_rl.policy import END, PREFIX, SUFFIX, VOCAB, make_problems
    from companion.models import tiny_llama

    check_int("n_prompts", n_prompts, lo=1)
    vocab = {"<pad>": 0, **{c: i + 1 for i, c in enumerate(VOCAB)}}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tk.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token=END, unk_token="<pad>")
    model = tiny_llama(vocab_size=len(vocab), hidden_size=hidden, num_layers=layers, num_heads=4,
                       intermediate_size=2 * hidden, max_position=64, seed=seed)
    model.config.pad_token_id, model.config.eos_token_id, model.config.bos_token_id = 0, vocab[END], None
    model.generation_config.pad_token_id, model.generation_config.eos_token_id = 0, vocab[END]
    model.generation_config.bos_token_id = None
    if folder is not None:
        model.save_pretrained(folder)
        tok.save_pretrained(folder)
    pr = make_problems(n_prompts, seed)
    questions = [pr.question(i) for i in range(n_prompts)]
    answers = [str(int(a)) for a in pr.answers]
    ds = Dataset.from_dict({"prompt": [PREFIX + q + SUFFIX for q in questions], "answer": answers,
                            "idx": list(range(n_prompts))})

    def reward(prompts, completions, answer, **kwargs):
        return [2.0 * sum(x == y for x, y in zip(c, a)) / len(a) for c, a in zip(completions, answer)]

    return {"model": model if folder is None else str(folder), "net": model, "tokenizer": tok, "dataset": ds,
            "questions": questions, "prefix": PREFIX, "suffix": SUFFIX, "reward": reward}


def __getattr__(name):
    if name == "GainRLTrainer":
        return _trainer_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

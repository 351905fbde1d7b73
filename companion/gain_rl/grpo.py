"""GRPO written out, and the curriculum loop that feeds it (uniform, GAIN-RL or DAPO-style filtering).

The loss is the one the paper's patched TRL trainer optimises (``trl_gainrl/trl/trainer/grpo_trainer.py``):
for a group of ``G`` completions of one prompt with rewards ``r_1..r_G``,

    A_k = (r_k − mean(r)) / (std(r) + 1e-4)                  (std unbiased, as ``torch.std``)
    KL_t = exp(ref_t − logp_t) − (ref_t − logp_t) − 1         (k3 estimator against the frozen start)
    ℓ_t = −( exp(logp_t − logp_t.detach()) · A_k − β · KL_t )
    L = mean_k [ Σ_t ℓ_t m_t / Σ_t m_t ]                      (m: completion tokens up to the end mark)

with ``G = 8``, ``β = 0.005`` and binary reward (the paper's 2.0/0.0 with ``reward_scale = 2``).
``exp(logp − logp.detach())`` is 1 in value and carries ``∇ logp``: one policy-gradient step per batch,
no clipping, as in that trainer.

With ``old_logp`` (the policy that sampled, when a batch is reused: TRL's ``num_iterations > 1``) the ratio
``ρ_t = exp(logp_t − old_t)`` is clipped as in PPO / GRPO (DeepSeekMath, Eq. 3):

    ℓ_t = −( min(ρ_t A_k, clip(ρ_t, 1 − ε_low, 1 + ε_high) A_k) − β · KL_t )

With ``old_t = logp_t.detach()`` it is the formula above (``ρ = 1`` inside the clip). TRL's ``GRPOTrainer``
computes the same with ``loss_type="grpo"`` and ``use_bias_correction_kl=False`` (its default ``True`` multiplies
``KL_t`` by ``ρ_t``); ``tests/unit/test_gain_rl_trl.py`` compares the two on one batch.

:func:`run_curriculum` is one RL run: each epoch the sampler picks the prompts (``draw``), the policy
samples ``G`` completions each (temperature 1), the loss is minimised in ``minibatches`` AdamW steps
(weight decay 0.1, gradient norm clipped at 0.1, constant learning rate, as the paper), the epoch's mean
reward and mean online angle signal (:func:`companion.gain_rl.angle.online_angle` at the last block's
``mlp.up_proj`` input, prompt and completion) go to ``sampler.update``, and greedy accuracy on a held-out
set is measured. The learning rate is the tiny model's (the paper's 1e-6 is for 0.5B-7B models).
"""

from __future__ import annotations

import copy
import time

import numpy as np
import torch
import torch.nn.functional as F

from companion.core import check_float, check_int
from companion.gain_rl.angle import capture_inputs, hook_name, online_angle
from companion.gain_rl.policy import END_ID, Problems, generate, greedy_accuracy, reward
from companion.gain_rl.sampler import FilterSampler

__all__ = ["completion_logps", "completion_mask", "group_advantages", "grpo_loss", "run_curriculum",
           "steps_to_target"]


def group_advantages(rewards: torch.Tensor, group: int, eps: float = 1e-4) -> torch.Tensor:
    """``(r − mean_g) / (std_g + eps)`` per consecutive group of ``group`` rewards."""
    check_int("group", group, lo=2)
    if rewards.numel() % group:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group}")
    r = rewards.view(-1, group)
    return ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + eps)).reshape(-1)


def completion_mask(completions: torch.Tensor) -> torch.Tensor:
    """1 for completion tokens up to and including the first end mark (all when there is none)."""
    is_end = (completions == END_ID).int()
    after = torch.cumsum(is_end, 1) - is_end  # end marks strictly before t
    return (after == 0).float()


def grpo_loss(logp: torch.Tensor, ref_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
              beta: float = 0.005, *, old_logp: torch.Tensor | None = None, epsilon_low: float = 0.2,
              epsilon_high: float | None = None) -> torch.Tensor:
    """The patched TRL trainer's GRPO loss on per-token log-probabilities ``[B, T]`` (see the module doc); with
    ``old_logp``, the ratio to that policy clipped to ``[1 − epsilon_low, 1 + epsilon_high]`` (``epsilon_high``
    defaults to ``epsilon_low``)."""
    check_float("beta", beta, lo=0.0)
    d = ref_logp - logp
    kl = torch.exp(d) - d - 1
    if old_logp is None:
        per_token = -(torch.exp(logp - logp.detach()) * advantages[:, None] - beta * kl)
    else:
        check_float("epsilon_low", epsilon_low, lo=0.0)
        epsilon_high = epsilon_low if epsilon_high is None else epsilon_high
        check_float("epsilon_high", epsilon_high, lo=0.0)
        ratio = torch.exp(logp - old_logp)
        adv = advantages[:, None]
        clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
        per_token = -(torch.min(ratio * adv, clipped * adv) - beta * kl)
    return ((per_token * mask).sum(1) / mask.sum(1)).mean()


def completion_logps(model, prompts: torch.Tensor, completions: torch.Tensor, angle_hook: str | None = None):
    """Per-token log-probabilities ``[B, A]`` of ``completions`` after ``prompts`` (and, with ``angle_hook``,
    the online angle signal of every sequence over its prompt and valid completion tokens)."""
    ids = torch.cat([prompts, completions], 1)
    P = prompts.shape[1]
    if angle_hook is None:
        logits = model(ids)
        ang = None
    else:
        with capture_inputs(model, angle_hook) as store:
            logits = model(ids)
        lengths = P + completion_mask(completions).sum(1).long()
        ang = online_angle(store[angle_hook], lengths)
    logp = torch.log_softmax(logits[:, P - 1:-1].float(), -1).gather(-1, completions[..., None]).squeeze(-1)
    return logp, ang


def steps_to_target(curve, target: float):
    """The first epoch (1-based) whose accuracy reaches ``target`` (None if never)."""
    for i, acc in enumerate(curve):
        if acc >= target:
            return i + 1
    return None


def run_curriculum(policy, ref, pool: Problems, eval_set: Problems, sampler, *, epochs: int, group: int = 8,
                   lr: float = 1e-3, beta: float = 0.005, minibatches: int = 2, weight_decay: float = 0.1,
                   max_grad_norm: float = 0.1, reward_scale: float = 1.0, seed: int = 0,
                   snapshot_epoch: int | None = None, max_seconds: float | None = None) -> dict:
    """One GRPO run from a copy of ``policy`` (``ref`` frozen for the KL) under ``sampler``.

    Returns ``{"sampler", "eval_acc" (epochs+1 values, the start first), "mean_reward", "ang", "mu_used",
    "mu_after" (μ after each epoch's update; both empty for a sampler without μ), "prompts_trained", "rollouts",
    "seconds", "epoch_seconds", "snapshot" (state dict at ``snapshot_epoch`` or None)}``: plain numbers and
    lists (and the snapshot), never the trained model object. ``max_seconds`` stops after the epoch that passes
    it (the GPU profile's wall-clock budget)."""
    check_int("epochs", epochs, lo=1)
    check_int("group", group, lo=2)
    check_int("minibatches", minibatches, lo=1)
    check_float("lr", lr, lo=0.0, lo_open=True)
    check_float("reward_scale", reward_scale, lo=0.0, lo_open=True)
    model = copy.deepcopy(policy).train().requires_grad_(True)
    ref = copy.deepcopy(ref).eval().requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    dev = next(model.parameters()).device
    gen = torch.Generator(device=dev).manual_seed(seed)
    hook = hook_name(model)
    out = {"sampler": sampler.name, "eval_acc": [greedy_accuracy(model, eval_set)], "mean_reward": [], "ang": [],
           "mu_used": [], "mu_after": [], "prompts_trained": [], "trained": [], "rollouts": 0, "snapshot": None, "epoch_seconds": []}
    t0 = time.perf_counter()
    for epoch in range(epochs):
        if max_seconds is not None and time.perf_counter() - t0 > max_seconds:
            break
        t_epoch = time.perf_counter()
        items = sampler.draw()
        if hasattr(sampler, "mu") and sampler.history:
            out["mu_used"].append(sampler.history[-1]["mu_used"])
        batch = pool.subset(items)
        batch_prompts, batch_targets = batch.prompts.to(dev), batch.targets.to(dev)
        model.eval()
        comps = generate(model, batch_prompts, greedy=False, group=group, generator=gen)
        model.train()
        out["rollouts"] += len(comps)
        rewards = reward(comps, batch_targets.repeat_interleave(group, 0), reward_scale)
        keep = np.arange(len(items))
        if isinstance(sampler, FilterSampler):  # DAPO dynamic sampling: drop all-equal groups
            mixed = (rewards.view(-1, group).std(1) > 0).cpu().numpy()
            keep = np.flatnonzero(mixed)[:sampler.subset]
        out["prompts_trained"].append(len(keep))
        out["trained"].append(np.asarray(items)[keep].tolist())
        signal_reward = float(rewards.mean())
        angs = []
        if len(keep):
            rows = (torch.as_tensor(keep)[:, None] * group + torch.arange(group)[None]).reshape(-1).to(dev)
            prompts = batch_prompts.repeat_interleave(group, 0)[rows]
            comps_k, rewards_k = comps[rows], rewards[rows]
            adv = group_advantages(rewards_k, group)
            mask = completion_mask(comps_k)
            chunks = np.array_split(np.arange(len(keep)), min(minibatches, len(keep)))
            for chunk in chunks:
                sel = (torch.as_tensor(chunk)[:, None] * group + torch.arange(group)[None]).reshape(-1).to(dev)
                with torch.no_grad():
                    ref_logp, _ = completion_logps(ref, prompts[sel], comps_k[sel])
                logp, ang = completion_logps(model, prompts[sel], comps_k[sel], angle_hook=hook)
                loss = grpo_loss(logp, ref_logp, adv[sel], mask[sel], beta)
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
                opt.step()
                angs.append(ang.detach())
        ang_mean = float(torch.cat(angs).mean()) if angs else 0.0
        out["mean_reward"].append(signal_reward)
        out["ang"].append(ang_mean)
        sampler.update(signal_reward, ang_mean)
        if hasattr(sampler, "mu"):
            out["mu_after"].append(float(sampler.mu))
        if dev.type == "cuda":
            torch.cuda.synchronize()
        out["epoch_seconds"].append(time.perf_counter() - t_epoch)  # training time only, evaluation excluded
        out["eval_acc"].append(greedy_accuracy(model, eval_set))
        if snapshot_epoch is not None and epoch + 1 == snapshot_epoch:
            out["snapshot"] = {k: v.detach().clone() for k, v in model.state_dict().items()}
    out["seconds"] = time.perf_counter() - t0
    return out


def answer_nll(model, problems: Problems) -> torch.Tensor:
    """Per-problem teacher-forced NLL of the answer (mean over its tokens up to the end mark)."""
    dev = next(model.parameters()).device
    targets = problems.targets.to(dev)
    ids = torch.cat([problems.prompts.to(dev), targets], 1)
    P = problems.prompts.shape[1]
    logits = model(ids)[:, P - 1:-1]
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), reduction="none")
    mask = completion_mask(targets)
    return (nll.view_as(mask) * mask).sum(1) / mask.sum(1)

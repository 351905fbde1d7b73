"""Paper 17 (GAIN-RL) inside TRL (trl==1.16.0, the `papers` extra): the sampler against TRL's RepeatSampler and the
package's GainSampler, the angle ordering against the explicit T×T oracle, a few CPU steps of TRL's GRPOTrainer
under the GAIN-RL schedule (tiny Llama and character tokenizer built in-process, nothing downloaded), and the
package's GRPO loss against TRL's own ``_compute_loss`` on one batch."""

import numpy as np
import pytest
import torch

from companion.core import ParameterError
from companion.gain_rl import angle as A
from companion.gain_rl import grpo as G
from companion.gain_rl import sampler as S
from companion.gain_rl import trl_sampler as TS
from companion.gain_rl.experiments import rank_pool

trl = pytest.importorskip("trl")
# TRL 1.16 calls transformers' renamed gradient-checkpointing API; nothing to act on here
pytestmark = pytest.mark.filterwarnings("ignore:.*gradient_checkpointing.*:FutureWarning")

# μ must move in a few epochs of a random tiny model: a low target accuracy β and a small σ over 16 prompts
SCHEDULE = dict(sigma=3.0, n=2.0, alpha=2.0, beta=0.05, reward_scale=2.0)
GROUP = 4
LOSS_ATOL = 1e-6      # fp32 on the CPU; measured differences are ~1e-8
GRAD_RTOL = 1e-5      # max |Δ∇| / max |∇| over all parameters; measured ~2e-7


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return TS.toy_problem(16, folder=tmp_path_factory.mktemp("gain_trl") / "model")


# ---------------------------------------------------------------------------------------------- sampler

def test_sampler_layout_is_trls_and_schedule_is_the_packages():
    """Each epoch yields the package GainSampler's draw in TRL's RepeatSampler layout; the μ update is
    GainSampler.update on the epoch's mean reward and angle; the next epoch draws with the updated μ."""
    from trl.trainer.utils import RepeatSampler

    order = np.random.default_rng(0).permutation(40)
    smp = TS.GainRLSampler(S.GainSampler(order, subset=12, seed=3, **SCHEDULE), mini_repeat_count=GROUP,
                           batch_size=3, repeat_count=2)
    twin = S.GainSampler(order, subset=12, seed=3, **SCHEDULE)
    rng = np.random.default_rng(1)
    for epoch in range(3):
        got = list(smp)
        items = twin.draw()
        layout = RepeatSampler(items, mini_repeat_count=GROUP, batch_size=3, repeat_count=2, shuffle=False)
        assert got == [int(items[i]) for i in layout] and len(got) == len(smp) == 12 * GROUP * 2
        rewards = [rng.choice([0.0, 2.0], size=3 * GROUP) for _ in range(4)]  # one per generation batch
        for r in rewards:
            smp.observe_rewards(torch.tensor(r))
        angles = rng.uniform(0.1, 0.5, size=24)
        smp.observe_angles(angles)
        mu = smp.end_epoch()
        assert mu == twin.update(float(np.mean(rewards)), float(np.mean(angles)))
        rec = smp.epochs[epoch]
        assert rec["rollouts"] == 4 * 3 * GROUP and rec["sequences"] == 24 and rec["mu_after"] == mu
        chunk0 = items[:3]
        assert smp.prompt_accuracy[int(chunk0[1])] == pytest.approx(rewards[0][GROUP:2 * GROUP].mean() / 2)
    assert [e["mu_used"] for e in smp.epochs[1:]] == [e["mu_after"] for e in smp.epochs[:-1]]
    assert smp.epochs[1]["mu_used"] > 0  # the schedule moved
    assert smp.end_epoch() is None  # nothing observed since


def test_trl_is_imported_lazily():
    """No module-level TRL import: the package, and the sampler, work without it."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(TS))
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = [a.name for n in top for a in n.names] + [n.module or "" for n in top if isinstance(n, ast.ImportFrom)]
    assert not [m for m in names if m == "trl" or m.startswith("trl.")], names


def test_sampler_pending_signals_update_on_next_epoch_and_errors():
    order = np.arange(20)
    a = TS.GainRLSampler(S.GainSampler(order, subset=4, seed=0, **SCHEDULE), mini_repeat_count=2, batch_size=2)
    b = TS.GainRLSampler(S.GainSampler(order, subset=4, seed=0, **SCHEDULE), mini_repeat_count=2, batch_size=2)
    seconds = []
    for smp, explicit in ((a, True), (b, False)):
        first = list(smp)
        smp.observe_rewards(torch.tensor([2.0, 2.0, 0.0, float("nan")]))  # NaN: unscorable, skipped
        smp.observe_angles(torch.tensor([0.3, float("nan")]))
        if explicit:
            smp.end_epoch()
        seconds.append(list(smp))  # without end_epoch(), the next epoch applies the pending update first
    assert seconds[0] == seconds[1]
    assert a.gain.history[0]["mu_after"] == b.gain.history[0]["mu_after"] > 0
    assert a.epochs[0]["mean_reward"] == pytest.approx(4 / 3) and a.epochs[0]["ang"] == pytest.approx(0.3)
    assert a.prompt_accuracy == {first[0]: 1.0, first[2]: 0.0}
    with pytest.raises(ParameterError, match="subset"):
        TS.GainRLSampler(S.GainSampler(order, subset=5, **SCHEDULE), batch_size=2)
    with pytest.raises(ParameterError, match="gain"):
        TS.GainRLSampler(S.UniformSampler(20, 4))


# ---------------------------------------------------------------------------------------------- angles

def test_sequence_angles_skip_left_and_right_padding():
    torch.manual_seed(0)
    states = torch.randn(3, 9, 6, dtype=torch.float64)
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 0, 0], [1] * 9, [0, 1, 1, 1, 1, 1, 1, 1, 0]])
    got = TS.sequence_angles(states, mask)
    want = torch.stack([A.online_angle_explicit(states[b][mask[b].bool()]) for b in range(3)])
    assert torch.allclose(got.double(), want.double(), atol=1e-6)


def test_angle_scores_match_the_explicit_oracle_and_rank(toy):
    net, tok = toy["net"], toy["tokenizer"]
    name = TS.up_proj_name(net)
    assert name == "model.layers.1.mlp.up_proj"
    questions = toy["questions"][:6] + ["7+8", "123+45"]  # two other lengths: batched by length
    scores = TS.angle_scores(net, tok, questions, toy["prefix"], toy["suffix"])
    p = len(toy["prefix"])
    for i, q in enumerate(questions):
        ids = torch.tensor([tok(toy["prefix"] + q + toy["suffix"])["input_ids"]])
        with A.capture_inputs(net, name) as store:
            net(input_ids=ids)
        want = A.concentration_explicit(store[name], (0, p), (p, p + len(q)))["total"]
        assert scores[i] == pytest.approx(float(want), abs=1e-5)
    order = TS.rank_prompts(net, tok, questions, toy["prefix"], toy["suffix"])
    assert order.tolist() == rank_pool(scores).tolist()
    with pytest.raises(ParameterError, match="model"):
        TS.up_proj_name(torch.nn.Linear(2, 2))
    with pytest.raises(ParameterError, match="prefix"):
        TS.angle_scores(net, tok, questions, "")


# ------------------------------------------------------------------------------------------ GRPOTrainer

def test_grpo_trainer_runs_the_gain_schedule(toy, tmp_path):
    """Two epochs of TRL's GRPOTrainer: the prompts it rolls out each epoch are the package GainSampler's draws,
    μ moves by the package's update from the trainer's own rewards and angles, and TRL's advantages are
    group_advantages of those rewards."""
    order = TS.rank_prompts(toy["net"], toy["tokenizer"], toy["questions"], toy["prefix"], toy["suffix"])
    calls, advantages = [], []

    def reward(prompts, completions, answer, idx, **kwargs):
        out = toy["reward"](prompts, completions, answer)
        calls.append((list(idx), out))
        return out

    class Spy(TS.GainRLTrainer):
        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            advantages.append(out["advantages"].detach().clone())
            return out

    subset, epochs = 4, 2
    cfg = TS.paper_config(str(tmp_path / "out"), use_cpu=True, bf16=False, per_device_train_batch_size=2 * GROUP,
                          gradient_accumulation_steps=1, num_generations=GROUP, max_completion_length=4,
                          num_train_epochs=epochs, learning_rate=1e-3, save_strategy="no", logging_steps=100,
                          disable_tqdm=True, seed=0)
    trainer = Spy(model=toy["model"], reward_funcs=[reward], args=cfg, train_dataset=toy["dataset"],
                  processing_class=toy["tokenizer"], gain=S.GainSampler(order, subset=subset, seed=0, **SCHEDULE))
    trainer.train()

    smp = trainer.gain_sampler
    per_epoch = subset // 2  # generation batches of 2 prompts
    assert len(calls) == epochs * per_epoch and len(smp.epochs) == epochs
    twin = S.GainSampler(order, subset=subset, seed=0, **SCHEDULE)
    for e in range(epochs):
        batch = calls[e * per_epoch:(e + 1) * per_epoch]
        idx = [i for ids, _ in batch for i in ids]
        rewards = torch.tensor([r for _, out in batch for r in out])
        assert idx == [int(i) for i in twin.draw() for _ in range(GROUP)]          # what TRL rolled out
        rec = smp.epochs[e]
        assert rec["rollouts"] == rec["sequences"] == subset * GROUP
        assert rec["mean_reward"] == pytest.approx(float(rewards.mean()), abs=1e-6)
        assert 0 < rec["ang"] <= 1
        assert rec["mu_after"] == twin.update(rec["mean_reward"], rec["ang"])       # the package's update
        for k, (_, out) in enumerate(batch):
            want = G.group_advantages(torch.tensor(out), GROUP)
            assert torch.allclose(advantages[e * per_epoch + k], want, atol=1e-5)
    assert smp.epochs[1]["mu_used"] == smp.epochs[0]["mu_after"] > 0              # no one-epoch lag
    with pytest.raises(ParameterError, match="gain"):
        TS.GainRLTrainer(model=toy["model"], reward_funcs=[reward], args=cfg, train_dataset=toy["dataset"],
                         processing_class=toy["tokenizer"], gain=S.GainSampler(np.arange(10), subset=4, **SCHEDULE))


# ------------------------------------------------------------------------------------------------ loss

def _batch(seed=0, B=2 * GROUP, P=6, C=5, V=16):
    g = torch.Generator().manual_seed(seed)
    prompt_mask = torch.ones(B, P, dtype=torch.long)
    prompt_mask[::3, :2] = 0                                       # left padding, as TRL pads prompts
    prompt_ids = torch.randint(1, V, (B, P), generator=g).masked_fill(prompt_mask == 0, 0)
    completion_mask = torch.ones(B, C, dtype=torch.long)
    completion_mask[1::2, 3:] = 0                                  # ended early
    completion_ids = torch.randint(1, V, (B, C), generator=g)
    rewards = torch.tensor([2.0, 0, 1, 0, 0, 0, 2, 2])
    return g, prompt_ids, prompt_mask, completion_ids, completion_mask, rewards


def _grads(model):
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def test_grpo_loss_equals_trls_loss(toy, tmp_path):
    """On one batch (left-padded prompts, completions of unequal length) through one model: the package's
    grpo_loss (logits of a plain forward, log-softmax, group_advantages) equals TRL's GRPOTrainer._compute_loss
    (its fused chunked log-prob head) in value and parameter gradient, off-policy with the ratio clipped
    (ε = 0.2) and β = 0.005; on-policy too. TRL's default use_bias_correction_kl=True keeps the value but
    changes the KL gradient, which paper_config turns off."""
    cfg = TS.paper_config(str(tmp_path / "out"), use_cpu=True, bf16=False, per_device_train_batch_size=2 * GROUP,
                          gradient_accumulation_steps=1, num_generations=GROUP, max_completion_length=5,
                          save_strategy="no")
    trainer = trl.GRPOTrainer(model=toy["model"], reward_funcs=[toy["reward"]], args=cfg,
                              train_dataset=toy["dataset"], processing_class=toy["tokenizer"])
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop; the loss divides by it
    model = trainer.model.train()
    g, prompt_ids, prompt_mask, completion_ids, completion_mask, rewards = _batch()
    ids, am = torch.cat([prompt_ids, completion_ids], 1), torch.cat([prompt_mask, completion_mask], 1)
    P = prompt_ids.shape[1]

    def ours_logp():
        logits = model(input_ids=ids, attention_mask=am).logits
        return torch.log_softmax(logits[:, P - 1:-1].float(), -1).gather(-1, completion_ids[..., None]).squeeze(-1)

    with torch.no_grad():
        lp = ours_logp()
    ref = lp + 0.3 * torch.randn(lp.shape, generator=g)
    old = lp + 0.4 * torch.randn(lp.shape, generator=g)
    adv = G.group_advantages(rewards, GROUP)
    ratio, m = torch.exp(lp - old), completion_mask.bool()
    clipped = ((ratio < 0.8) & (adv[:, None] < 0)) | ((ratio > 1.2) & (adv[:, None] > 0))
    assert clipped[m].any() and not clipped[m].all()  # the clip binds on some tokens, not all

    def both(advantages, old_logp):
        inputs = dict(prompt_ids=prompt_ids, prompt_mask=prompt_mask, completion_ids=completion_ids,
                      completion_mask=completion_mask, advantages=advantages, ref_per_token_logps=ref,
                      num_items_in_batch=completion_mask.sum())
        if old_logp is not None:
            inputs["old_per_token_logps"] = old_logp
        model.zero_grad()
        theirs = trainer._compute_loss(model, inputs)
        theirs.backward()
        g_theirs = _grads(model)
        model.zero_grad()
        mine = G.grpo_loss(ours_logp(), ref, advantages, completion_mask.float(), cfg.beta, old_logp=old_logp,
                           epsilon_low=cfg.epsilon, epsilon_high=cfg.epsilon_high)
        mine.backward()
        return float(theirs.detach()), float(mine.detach()), g_theirs, _grads(model)

    for advantages, old_logp in ((adv, old), (adv, None)):
        lt, lo, gt, go = both(advantages, old_logp)
        assert abs(lt - lo) <= LOSS_ATOL
        assert float((gt - go).abs().max()) <= GRAD_RTOL * float(go.abs().max())
    trainer.args.use_bias_correction_kl = True  # TRL's default: KL × ratio
    lt, lo, gt, go = both(torch.zeros_like(adv), None)  # the KL term alone
    assert abs(lt - lo) <= LOSS_ATOL and float((gt - go).abs().max()) > 0.1 * float(go.abs().max())

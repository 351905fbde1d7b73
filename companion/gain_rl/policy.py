"""The CPU stand-in for the paper's policy: a tiny character-level transformer on generated arithmetic.

The paper fine-tunes Qwen2.5 / Llama-3.2 instruct models (0.5B-7B) on GSM8K, MATH and DeepScaleR with a
fixed chat prompt: a system prompt and a one-shot "What is 2+2?" exchange (a fixed **instruction prefix**,
110 tokens in Qwen's template), then the **question**, then the template's assistant header (6 tokens).
Here the same three segments are kept, in characters::

    "2+2=4; " + "23+41" + "="      ->  completion "64$"   ($ ends the answer)
     prefix (7)  question (5) suffix (1)

The policy (:func:`char_lm`: the shared :class:`~companion.models.tiny.TinyCausalLM` over this vocabulary) is
Qwen-shaped so the paper's hook point exists under the same name: pre-RMSNorm blocks
``layers.<i>`` with ``self_attn.{q,k,v,o}_proj``, ``post_attention_layernorm`` and a SwiGLU
``mlp.{gate,up,down}_proj``; the angle metric reads the **input of** ``layers.<L-1>.mlp.up_proj``
(the post-attention-norm output), as ``data_processor.py`` does. Learned absolute positions instead of
RoPE (a context of at most 32 characters needs nothing more), and a KV cache for batched sampling.
Operands are two digits (10-99; ``terms`` of them, 2 here and in the GPU run), so every prompt has
the same length and batches need no padding; answers have 2 or 3 digits.

The SFT warm start (:func:`sft`) trains on fresh random problems until the greedy accuracy on a held-out
set first reaches ``target_acc`` = 30 % at a check every 10 steps, so GRPO starts from a partly able
policy, as RL fine-tuning of an instruct model does (accuracy jumps near there: the committed fixture
stopped at 45.7 %, above the spec's 20-40 %). :func:`load_or_train_sft` keeps it as a committed
safetensors fixture (``data/gain_rl/``) and trains it here when the recipe differs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

from companion.core import ParameterError, check_float, check_int, repo_path
from companion.models.tiny import TinyCausalLM

PREFIX = "2+2=4; "
SUFFIX = "="
END = "$"
VOCAB = "0123456789+=;$ "
STOI = {c: i for i, c in enumerate(VOCAB)}
END_ID = STOI[END]
ANSWER_LEN = 4  # at most three digits and the end mark
FIXTURE = "data/gain_rl/sft_policy.safetensors"
FORMAT = "companion.gain_rl.sft_policy/1"

__all__ = ["ANSWER_LEN", "END", "END_ID", "PREFIX", "SUFFIX", "VOCAB", "Problems", "SFTRecipe", "char_lm", "decode",
           "encode", "generate", "greedy_accuracy", "load_or_train_sft", "make_problems", "prompt_text", "reward",
           "segments", "sft"]


def encode(text: str) -> list[int]:
    """Character ids; an unknown character is an error naming it."""
    bad = sorted({c for c in text if c not in STOI})
    if bad:
        raise ValueError(f"characters {bad} are not in the vocabulary {VOCAB!r}")
    return [STOI[c] for c in text]


def decode(ids) -> str:
    return "".join(VOCAB[int(i)] for i in ids)


def prompt_text(*operands: int) -> str:
    return PREFIX + "+".join(str(int(x)) for x in operands) + SUFFIX


def segments(prefix: str = PREFIX, question: str = "10+10", suffix: str = SUFFIX) -> dict:
    """Token spans ``{"prefix": (0, p), "question": (p, p+q), "suffix": (p+q, T)}`` of a prompt built from the
    three strings (one token per character). An empty prefix or question is an error: the angle metric
    needs both segments."""
    if not isinstance(prefix, str) or not prefix:
        raise ParameterError("prefix", prefix, "a non-empty instruction prefix (C_inter needs it)")
    if not isinstance(question, str) or not question:
        raise ParameterError("question", question, "a non-empty question (C_intra needs it)")
    p, q = len(prefix), len(question)
    return {"prefix": (0, p), "question": (p, p + q), "suffix": (p + q, p + q + len(suffix))}


@dataclass
class Problems:
    """Sums of two-digit operands (``operands [N, terms]``): prompt ids ``[N, T]`` and target completion ids
    ``[N, ANSWER_LEN]`` (padded with the end mark after it)."""

    operands: np.ndarray
    prompts: torch.Tensor
    targets: torch.Tensor

    def __len__(self) -> int:
        return len(self.operands)

    def subset(self, idx) -> "Problems":
        idx = np.asarray(idx, dtype=int)
        t = torch.as_tensor(idx)
        return Problems(self.operands[idx], self.prompts[t], self.targets[t])

    @property
    def a(self) -> np.ndarray:
        return self.operands[:, 0]

    @property
    def b(self) -> np.ndarray:
        return self.operands[:, 1]

    @property
    def answers(self) -> np.ndarray:
        return self.operands.sum(1)

    def question(self, i: int) -> str:
        return "+".join(str(int(x)) for x in self.operands[i])


def make_problems(n: int, seed: int, lo: int = 10, hi: int = 99, terms: int = 2) -> Problems:
    """``n`` sums of ``terms`` operands drawn uniformly from ``[lo, hi]`` (two digits) by ``seed`` (2 to 10
    terms keep the answer within three digits)."""
    check_int("n", n, lo=1)
    check_int("terms", terms, lo=2, hi=10)
    if not (10 <= lo <= hi <= 99):
        raise ParameterError("lo/hi", (lo, hi), "10 <= lo <= hi <= 99 (two-digit operands)")
    rng = np.random.default_rng(seed)
    ops = rng.integers(lo, hi + 1, (n, terms))
    prompts = torch.tensor([encode(prompt_text(*row)) for row in ops], dtype=torch.long)
    targets = torch.full((n, ANSWER_LEN), END_ID, dtype=torch.long)
    for i, s in enumerate(ops.sum(1)):
        ids = encode(f"{s}{END}")
        targets[i, :len(ids)] = torch.tensor(ids)
    return Problems(ops, prompts, targets)


# ---------------------------------------------------------------------------------------------- model

def char_lm(d: int = 64, layers: int = 2, heads: int = 4, max_len: int = 32, mlp_ratio: int = 2) -> TinyCausalLM:
    """The policy: the shared Qwen-shaped :class:`~companion.models.tiny.TinyCausalLM` over :data:`VOCAB`
    (``layers.<i>.mlp.up_proj`` as in Qwen2.5, where the angle metric reads its states)."""
    return TinyCausalLM(len(VOCAB), d, layers, heads, max_len=max_len, mlp_ratio=mlp_ratio)


# -------------------------------------------------------------------------------------- generation

@torch.no_grad()
def generate(model, prompts: torch.Tensor, *, greedy: bool, group: int = 1, generator: torch.Generator | None = None,
             temperature: float = 1.0) -> torch.Tensor:
    """Completions ``[B·group, ANSWER_LEN]``, ``group`` consecutive rows per prompt (GRPO's group). The prompts
    (all of one length) are prefilled once and their key/value cache repeated ``group`` times; after the end
    mark every position holds the end mark."""
    check_int("group", group, lo=1)
    logits, cache = model(prompts, return_cache=True)
    if group > 1:
        cache = [(k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)) for k, v in cache]
        logits = logits.repeat_interleave(group, 0)
    logits = logits[:, -1].float()
    pos = prompts.shape[1]
    done = torch.zeros(len(logits), dtype=torch.bool, device=logits.device)
    out = []
    for step in range(ANSWER_LEN):
        if greedy:
            nxt = logits.argmax(-1)
        else:
            nxt = torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=generator).squeeze(1)
        nxt = torch.where(done, torch.full_like(nxt, END_ID), nxt)
        done |= nxt == END_ID
        out.append(nxt)
        if step + 1 < ANSWER_LEN:
            logits, cache = model(nxt[:, None], cache=cache, start=pos + step, return_cache=True)
            logits = logits[:, -1].float()
    return torch.stack(out, 1)


def reward(completions: torch.Tensor, targets: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """``scale`` for an exact answer (digits then the end mark), else 0 (the paper's 2.0 / 0.0 with scale 2)."""
    return (completions == targets).all(1).float() * scale


@torch.no_grad()
def greedy_accuracy(model, problems: Problems, batch: int = 512) -> float:
    was = model.training
    model.eval()
    hits = 0
    dev = next(model.parameters()).device
    for s in range(0, len(problems), batch):
        comp = generate(model, problems.prompts[s:s + batch].to(dev), greedy=True)
        hits += int(reward(comp, problems.targets[s:s + batch].to(dev)).sum())
    model.train(was)
    return hits / len(problems)


# -------------------------------------------------------------------------------------------- SFT

@dataclass(frozen=True)
class SFTRecipe:
    """How the warm-start policy is made (stored in the fixture's metadata)."""

    d: int = 64
    layers: int = 2
    heads: int = 4
    mlp_ratio: int = 2
    terms: int = 2
    seed: int = 0
    batch: int = 64
    lr: float = 3e-3
    target_acc: float = 0.30
    max_steps: int = 3000
    check_every: int = 10
    eval_n: int = 256


def _sft_loss(model, prompts, targets):
    ids = torch.cat([prompts, targets], 1)
    logits = model(ids[:, :-1])
    P = prompts.shape[1]
    pred = logits[:, P - 1:]  # positions predicting the completion
    return F.cross_entropy(pred.reshape(-1, pred.shape[-1]), targets.reshape(-1))


def build(recipe: "SFTRecipe") -> TinyCausalLM:
    return char_lm(recipe.d, recipe.layers, recipe.heads, mlp_ratio=recipe.mlp_ratio)


def sft(recipe: SFTRecipe = SFTRecipe(), device="cpu", max_seconds: float | None = None) -> tuple[TinyCausalLM, dict]:
    """Train a :func:`char_lm` policy on fresh problems until greedy accuracy on ``eval_n`` held-out problems
    (seed ``10_000 + seed``) first reaches ``target_acc`` (checked every ``check_every`` steps), or
    ``max_steps`` / ``max_seconds`` run out."""
    import time

    check_float("target_acc", recipe.target_acc, lo=0.0, hi=1.0, lo_open=True)
    torch.manual_seed(recipe.seed)
    model = build(recipe).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=0.0)
    held = make_problems(recipe.eval_n, 10_000 + recipe.seed, terms=recipe.terms)
    step, acc, losses = 0, 0.0, []
    model.train()
    t0 = time.perf_counter()
    while step < recipe.max_steps and (max_seconds is None or time.perf_counter() - t0 < max_seconds):
        batch = make_problems(recipe.batch, 1_000_000 + recipe.seed * 100_003 + step, terms=recipe.terms)
        loss = _sft_loss(model, batch.prompts.to(device), batch.targets.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        step += 1
        if step % recipe.check_every == 0:
            acc = greedy_accuracy(model, held)
            if acc >= recipe.target_acc:
                break
    model.eval()
    return model, {"steps": step, "held_out_acc": acc, "final_loss": float(np.mean(losses[-10:]))}


def load_or_train_sft(recipe: SFTRecipe = SFTRecipe(), path: str | None = FIXTURE) -> tuple[TinyCausalLM, dict]:
    """The committed warm-start policy when its recipe equals ``recipe``; otherwise trained here
    (``info["source"]`` says which, with the recipe differences)."""
    from companion.core.checkpoints import differences, load_state

    info = {"source": "trained here"}
    if path:
        file = repo_path(path) if not str(path).startswith("/") else path
        try:
            state, meta = load_state(file, format=FORMAT, what="GAIN-RL SFT policy", required=("recipe",))
        except FileNotFoundError:
            info["why"] = f"no fixture at {path}"
        else:
            diff = differences(asdict(recipe), meta["recipe"])
            if not diff:
                model = build(recipe)
                model.load_state_dict(state)
                model.eval()
                return model, {"source": f"fixture {path}", **meta.get("result", {})}
            info["why"] = "; ".join(diff)
    model, result = sft(recipe)
    return model, {**info, **result}

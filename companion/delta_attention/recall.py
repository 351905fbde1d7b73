"""Experiment B of paper 09 (Δ Attention): key→value recall after a sparse prefill, dense decode.

The paper's failure mode (Sec. 3, RULER): a sparse prefill shifts the hidden states from which the
KV cache is built, so dense decoding queries no longer find the right keys (StreamingLLM 2K + dense
decode scores 0 % on MultiKey-3 at 131K; with Δ 44 %). A small causal transformer is trained here
(densely) on a synthetic multi-query associative-recall task:

    [filler] k1 v1 k2 v2 … kP vP [filler …] ka va kb vb …   (the last Q pairs are queries)

and evaluated with the prompt before the query region prefilled by a `Method` (sparse sink + window,
recompute, Δ) and the query region decoded densely against that cache. Teacher-forced dense decode of
the query region equals computing those rows densely over the prefill's K/V in one pass (causal), which
is what `forward(..., prefill_len=P)` does in every layer. The model is our own nanoGPT-style block
(pre-LayerNorm, rotary positions) so that its attention can be swapped per row range;
`companion.models.tiny_llama` hides its attention inside Hugging Face modules.

Deviation for the CPU budget: the keys are "smeared" with the previous position's (Olsson et al.
2022), so an induction head forms within ~300 steps; without it a 2-layer model stays on the
plateau for longer than a notebook can train here. The cost: the model can retrieve in layer 1,
whose keys come from the token embeddings, which no prefill method changes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from companion.core import ParameterError, check_int
from companion.delta_attention.attention import Method, delta_attention
from companion.models.rope import apply_rope, rope_cos_sin
from companion_kernels.query_sparse import query_sparse_attention


@dataclass(frozen=True)
class RecallTask:
    """Vocabulary: 0 = pad (unused), keys [1, 1+K), values [1+K, 1+K+V), filler [1+K+V, 1+K+V+F)."""

    length: int = 256
    pairs: int = 12
    queries: int = 8
    num_keys: int = 32
    num_values: int = 32
    num_filler: int = 32

    def __post_init__(self):
        check_int("pairs", self.pairs, lo=1, hi=self.num_keys)
        check_int("queries", self.queries, lo=1, hi=self.pairs)
        check_int("length", self.length, lo=2 * (self.pairs + self.queries) + 8)

    @property
    def vocab(self) -> int:
        return 1 + self.num_keys + self.num_values + self.num_filler

    @property
    def query_start(self) -> int:
        """First position of the query region (decoded densely at evaluation)."""
        return self.length - 2 * self.queries

    def sample(self, batch: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """(tokens [B, L], target mask [B, L]): targets are the values that follow a query key."""
        L, P, Q = self.length, self.pairs, self.queries
        k0, v0, f0 = 1, 1 + self.num_keys, 1 + self.num_keys + self.num_values
        tokens = torch.randint(f0, f0 + self.num_filler, (batch, L), generator=generator)
        keys = torch.argsort(torch.rand(batch, self.num_keys, generator=generator), dim=1)[:, :P] + k0
        values = torch.randint(v0, v0 + self.num_values, (batch, P), generator=generator)
        # the pairs sit at a random offset in the first part of the prompt
        room = self.query_start - 2 * P
        offset = torch.randint(0, max(1, room // 2), (batch,), generator=generator)
        ar = torch.arange(P)
        rows = torch.arange(batch)[:, None]
        tokens[rows, offset[:, None] + 2 * ar] = keys
        tokens[rows, offset[:, None] + 2 * ar + 1] = values
        pick = torch.argsort(torch.rand(batch, P, generator=generator), dim=1)[:, :Q]
        qpos = self.query_start + 2 * torch.arange(Q)
        tokens[rows, qpos] = torch.gather(keys, 1, pick)
        tokens[rows, qpos + 1] = torch.gather(values, 1, pick)
        target = torch.zeros(batch, L, dtype=torch.bool)
        target[:, qpos] = True                                   # predict the token after a query key
        return tokens, target


def notebook_task(length: int = 128, pairs: int = 8) -> RecallTask:
    """The notebook's task: `length` tokens, `pairs` key-value pairs, min(8, pairs) queries, 16 keys /
    values / fillers."""
    return RecallTask(length=length, pairs=pairs, queries=min(8, pairs), num_keys=16, num_values=16, num_filler=16)


def rotary(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary position embedding (RoPE, half-split form) of x [B, H, N, D] at positions 0 … N−1
    (``companion.models.rope``)."""
    cos, sin = rope_cos_sin(x.shape[-2], x.shape[-1], base=base, device=x.device)
    return apply_rope(x, cos, sin)


class Block(nn.Module):
    """Pre-LN block. With `smear=True` each head's keys are smeared with the previous position's
    (k_t <- σ(α) k_t + (1 − σ(α)) k_{t−1}, α learned per head; Olsson et al. 2022's "smeared keys"),
    which lets this layer form an induction head without a previous-token head below it."""

    def __init__(self, d: int, heads: int, smear: bool = False):
        super().__init__()
        self.heads = heads
        self.smear = nn.Parameter(torch.zeros(heads, 1, 1)) if smear else None
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def attend(self, x, method: Method | None, prefill_len: int | None):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if self.smear is not None:
            a = torch.sigmoid(self.smear)
            k = a * k + (1 - a) * F.pad(k, (0, 0, 1, 0))[:, :, :n]
        q, k = rotary(q), rotary(k)
        if method is None or method.mode == "dense":
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            p = n if prefill_len is None else prefill_len
            pre = delta_attention(q[:, :, :p], k[:, :, :p], v[:, :, :p], method)   # sparse (+Δ) prefill
            if p < n:                                                            # dense decode rows
                rows = torch.arange(p, n, device=x.device)
                dec = query_sparse_attention(q, k, v, rows, causal=True)
                out = torch.cat([pre, dec], dim=2)
            else:
                out = pre
        return self.proj(out.transpose(1, 2).reshape(b, n, d))

    def forward(self, x, method=None, prefill_len=None):
        x = x + self.attend(self.ln1(x), method, prefill_len)
        return x + self.mlp(self.ln2(x))


class TinyCausalLM(nn.Module):
    """A pre-LN causal transformer (RoPE) whose attention takes a `Method`."""

    def __init__(self, vocab: int, d: int = 64, layers: int = 2, heads: int = 4,
                 smear_from: int = 0):
        super().__init__()
        check_int("d", d, lo=8)
        check_int("layers", layers, lo=1)
        if d % heads:
            raise ParameterError("d", d, f"a multiple of heads = {heads}")
        self.tok = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([Block(d, heads, smear=i >= smear_from) for i in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, tokens, method: Method | None = None, prefill_len: int | None = None):
        x = self.tok(tokens)
        for blk in self.blocks:
            x = blk(x, method, prefill_len)
        return self.head(self.ln(x))


def train_recall(task: RecallTask, *, steps: int = 300, batch: int = 32, d: int = 64, layers: int = 2,
                 heads: int = 4, lr: float = 3e-3, smear_from: int = 0,
                 seed: int = 0) -> tuple[TinyCausalLM, list[float]]:
    """Train densely on fresh samples each step (AdamW, cosine decay); returns (model, losses)."""
    check_int("steps", steps, lo=1)
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    model = TinyCausalLM(task.vocab, d=d, layers=layers, heads=heads, smear_from=smear_from)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 30) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    losses = []
    model.train()
    for _ in range(steps):
        tokens, target = task.sample(batch, g)
        logits = model(tokens[:, :-1])
        tgt = torch.where(target[:, :-1], tokens[:, 1:], torch.full_like(tokens[:, 1:], -100))
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    model.eval()
    return model, losses


@torch.no_grad()
def recall_metrics(model: TinyCausalLM, task: RecallTask, method: Method | None, *, batch: int = 256,
                   seed: int = 1234) -> dict:
    """After a `method` prefill + dense decode: accuracy (argmax) on the query values, the mean
    negative log-likelihood of the right value (nats), and the mean probability given to it."""
    g = torch.Generator().manual_seed(seed)
    tokens, target = task.sample(batch, g)
    logits = model(tokens[:, :-1], method, prefill_len=task.query_start)
    logp = torch.log_softmax(logits.double(), dim=-1)
    nxt = tokens[:, 1:]
    t = target[:, :-1]
    lp = logp.gather(-1, nxt[..., None])[..., 0][t]
    hit = (logits.argmax(-1) == nxt)[t]
    return {"accuracy": float(hit.double().mean()), "nll": float(-lp.mean()), "p_correct": float(lp.exp().mean())}


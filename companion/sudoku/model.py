"""A GPT-2 trained by imitation on DFS transcripts, with the multi-target loss (paper 06, Section 3.2).

Paper: Giannoulis, Pantis, Tzamos, NeurIPS 2025 (arXiv 2509.22023); official code
``dfs_approach/sudoku`` (minGPT decoder, 8 layers, 8 heads, d = 576, FFN 6d, dropout 0.1, 1000
learned positions, vocabulary 1001, untied output head; AdamW lr 1e-4, betas (0.9, 0.95), weight
decay 0.1 on linear weights, 5 warm-up steps then linear decay, gradient clip 1.0, batch 32, 3M steps).

**Model.** transformers' ``GPT2LMHeadModel`` built from a config (no weights downloaded), untied head
and exact GELU as in the official minGPT. Sizes are parameters: the CPU notebook uses 2 layers,
8 heads, d = 128 (4x4), the GPU script 8 layers, 16 heads, d = 256, FFN 4d (9x9; the bf16 checkpoint
stays under 15 MB). Many small heads trained markedly faster than fewer wide ones in the 4x4 runs.

**Multi-target loss (L2 in the paper's naming, eq. in Sec. 3.2).** At position t the label set S_t
holds every valid next token; ``L = -sum_{i in S_t} log p_i``. The official code averages over all
(position, target) pairs (``loss = -z[Y].mean()``); :func:`multi_target_loss` does the same.
**L1 ("expected trials", Sec. 4).** ``-log sum_{i in S_t} p_i`` per position, averaged over
positions: the log of the expected number of trials of a guesser sampling from p.

**Decoding.** Greedy, capped (the paper: 500 tokens), with a KV cache and left padding so many
puzzles decode at once; the answer is the last value written to each cell (the official
``edit_preds``). ``protocol=True`` (an addition, reported beside the paper's plain greedy decoding)
restricts the argmax to tokens the transcript grammar allows - moves only into empty cells of the
current branch, ``0`` only on a full board, the right level tokens - without any Sudoku rule, so the
values stay the model's; small models mostly fail at exactly this bookkeeping (writing a filled
cell again, ending early).

**Data augmentation (deviation).** The paper streams fresh puzzles. Here a pool of transcripts is
mapped through random Sudoku symmetries on the fly (:func:`augment_batch`): the token map of a
symmetry sends a DFS transcript of a puzzle, with its label sets, to a DFS transcript of the image
puzzle (rules and minimum-candidate guesses are equivariant; the clue prefix is re-sorted into cell
order). It multiplies a small pool of puzzles by up to 2 * 6^8 * 9! at no cost.

**Scale (deviation).** lr and steps are set for minutes, not the paper's 168 GPU-hours: a larger
learning rate (1.5e-3 to 2e-3), held constant and decayed linearly over the last ``decay_frac`` of
the run (the paper decays over all 3M steps), and dropout 0. The loss is computed where a label
exists only (the clue positions have none) - the same value as over all positions, for less compute.
In the 4x4 runs the official loss (mean over label pairs) learned far faster than a per-position
mean or L1 at the rule steps.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from companion.core import ParameterError, check_choice, check_float, check_int
from companion.core.atomic import write_atomic
from companion.sudoku.board import PAD, SOLVED, START, VOCAB_SIZE, board_size, move_token, parse_board
from companion.sudoku.replay import final_board, guesses_in

LOSS_KINDS = ("l2", "l2-position", "l1")


@dataclass
class GPTConfig:
    """Sizes of the decoder (``n_positions`` bounds the transcript length)."""

    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 128
    n_inner: int | None = None  # None: 4 * n_embd
    n_positions: int = 128
    dropout: float = 0.0
    tie_embeddings: bool = False  # the official minGPT has an untied output head

    def check(self) -> "GPTConfig":
        check_int("n_layer", self.n_layer, lo=1, hi=48)
        check_int("n_head", self.n_head, lo=1, hi=64)
        check_int("n_embd", self.n_embd, lo=8, hi=4096)
        check_int("n_positions", self.n_positions, lo=16, hi=4096)
        check_float("dropout", self.dropout, lo=0.0, hi=1.0, hi_open=True)
        if self.n_embd % self.n_head:
            raise ParameterError("n_embd", self.n_embd, f"a multiple of n_head={self.n_head}")
        return self


def make_gpt2(config: GPTConfig, seed: int = 0, attn_implementation: str = "sdpa"):
    """A randomly initialised GPT2LMHeadModel over the 1001-token vocabulary (untied head)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config.check()
    hf = GPT2Config(
        vocab_size=VOCAB_SIZE,
        n_positions=config.n_positions,
        n_embd=config.n_embd,
        n_layer=config.n_layer,
        n_head=config.n_head,
        n_inner=config.n_inner,
        resid_pdrop=config.dropout,
        embd_pdrop=config.dropout,
        attn_pdrop=config.dropout,
        activation_function="gelu",  # exact GELU, as the official minGPT's nn.GELU()
        bos_token_id=START,
        eos_token_id=SOLVED,
        pad_token_id=None,  # padding only ever follows the end token, so no attention mask is needed
        tie_word_embeddings=config.tie_embeddings,
    )
    hf._attn_implementation = attn_implementation
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(hf)
    model.sudoku_config = config
    return model


def n_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


# ----------------------------------------------------------------------------------- data
@dataclass
class TranscriptBatch:
    """Padded transcripts: ``tokens [B, T]`` (PAD after the end), ``labels [B, T, K]`` (label set of the
    *next* token at each position, -1 padded), ``n_clues [B]``, ``lengths [B]``; ``n`` the board size."""

    tokens: torch.Tensor
    labels: torch.Tensor
    n_clues: torch.Tensor
    lengths: torch.Tensor
    n: int

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def to(self, device) -> "TranscriptBatch":
        return TranscriptBatch(self.tokens.to(device), self.labels.to(device), self.n_clues.to(device), self.lengths.to(device), self.n)

    def index(self, idx) -> "TranscriptBatch":
        return TranscriptBatch(self.tokens[idx], self.labels[idx], self.n_clues[idx], self.lengths[idx], self.n)


def transcript_arrays(t, max_len: int | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """``(tokens [L] int16, labels [L, K] int16)`` of one transcript (labels = next token's set, -1 padded)."""
    L = len(t)
    if max_len is not None and L > max_len:
        return None
    K = max((len(c) for c in t.choices if c is not None), default=1)
    labels = np.full((L, K), -1, dtype=np.int16)
    for pos in range(L - 1):
        c = t.choices[pos + 1]
        if c:
            labels[pos, : len(c)] = sorted(c)
    return np.asarray(t.tokens, dtype=np.int16), labels


def stack_arrays(items, n: int, max_len: int | None = None) -> TranscriptBatch:
    """A :class:`TranscriptBatch` from ``(tokens, labels, n_clues)`` triples (see :func:`transcript_arrays`)."""
    if not items:
        raise ValueError("no transcripts to encode")
    T = max_len or max(len(tk) for tk, _, _ in items)
    K = max(lb.shape[1] for _, lb, _ in items)
    tokens = np.full((len(items), T), PAD, dtype=np.int64)
    labels = np.full((len(items), T, K), -1, dtype=np.int16)
    n_clues = np.zeros(len(items), dtype=np.int64)
    lengths = np.zeros(len(items), dtype=np.int64)
    for i, (tk, lb, nc) in enumerate(items):
        if len(tk) > T:
            raise ValueError(f"a transcript of {len(tk)} tokens is longer than max_len={T}")
        tokens[i, : len(tk)] = tk
        labels[i, : len(tk), : lb.shape[1]] = lb
        n_clues[i], lengths[i] = nc, len(tk)
    return TranscriptBatch(torch.from_numpy(tokens), torch.from_numpy(labels), torch.from_numpy(n_clues), torch.from_numpy(lengths), n)


def encode_transcripts(transcripts, max_len: int | None = None) -> TranscriptBatch:
    """Pad transcripts into tensors; the target of position t is ``transcript.choices[t + 1]``."""
    if not transcripts:
        raise ValueError("no transcripts to encode")
    n = transcripts[0].n
    if any(t.n != n for t in transcripts):
        raise ValueError("all transcripts must have the same board size")
    items = []
    for t in transcripts:
        tk, lb = transcript_arrays(t)
        items.append((tk, lb, t.n_clues))
    return stack_arrays(items, n, max_len)


def symmetry_maps(n: int, count: int, gen: torch.Generator | None = None, device="cpu") -> torch.Tensor:
    """``count`` random symmetry token maps ``[count, VOCAB_SIZE]`` (vectorised; same law as
    :func:`companion.sudoku.generator.random_symmetry` and :func:`symmetry_token_map`)."""
    b = 2 if n == 4 else 3
    B = count
    bands = torch.rand(B, b, generator=gen).argsort(1)
    inner = torch.rand(B, b, b, generator=gen).argsort(2)
    rows = (bands[:, :, None] * b + inner).reshape(B, n)  # rows[j] = source row of target row j
    bands = torch.rand(B, b, generator=gen).argsort(1)
    inner = torch.rand(B, b, b, generator=gen).argsort(2)
    cols = (bands[:, :, None] * b + inner).reshape(B, n)
    digits = torch.cat([torch.zeros(B, 1, dtype=torch.long), torch.rand(B, n, generator=gen).argsort(1) + 1], 1)
    transpose = torch.rand(B, generator=gen) < 0.5
    inv_r, inv_c = rows.argsort(1), cols.argsort(1)
    r, c, v = torch.meshgrid(torch.arange(n), torch.arange(n), torch.arange(1, n + 1), indexing="ij")
    r, c, v = r.reshape(-1), c.reshape(-1), v.reshape(-1)
    src_tok = 100 * (r + 1) + 10 * (c + 1) + v
    x = torch.where(transpose[:, None], c[None], r[None])
    y = torch.where(transpose[:, None], r[None], c[None])
    tr = inv_r.gather(1, x)
    tc = inv_c.gather(1, y)
    tv = digits.gather(1, v[None].expand(B, -1))
    table = torch.arange(VOCAB_SIZE).repeat(B, 1)
    table[:, src_tok] = 100 * (tr + 1) + 10 * (tc + 1) + tv
    return table.to(device)


def augment_batch(batch: TranscriptBatch, maps: torch.Tensor) -> TranscriptBatch:
    """Apply one token map per transcript to tokens and labels, then re-sort the clues by cell."""
    maps = maps.to(batch.tokens.device)
    B, T = batch.tokens.shape
    n = batch.n
    tok = maps.gather(1, batch.tokens)
    lab = batch.labels.long()
    flat = lab.clamp(min=0).view(B, -1)
    mapped = maps.gather(1, flat).view_as(lab)
    lab = torch.where(lab >= 0, mapped, lab).to(batch.labels.dtype)
    pos = torch.arange(T, device=tok.device).expand(B, T)
    cell = (tok // 100 - 1) * n + (tok // 10 % 10 - 1)
    key = torch.where(pos < batch.n_clues[:, None], cell, T * T + pos)
    order = key.argsort(dim=1)
    tok = tok.gather(1, order)
    return TranscriptBatch(tok, lab, batch.n_clues, batch.lengths, n)


# ----------------------------------------------------------------------------------- loss
def multi_target_loss(logits: torch.Tensor, labels: torch.Tensor, kind: str = "l2") -> torch.Tensor:
    """Multi-target loss over label sets ``labels [B, T, K]`` (-1 padded) for ``logits [B, T, V]``.

    ``"l2"``: ``-mean over (position, target) pairs of log p`` (the official ``-z[Y].mean()``);
    ``"l2-position"``: the same with every position weighted equally (an ablation);
    ``"l1"``: ``-mean over positions of log sum_{i in S} p_i``. ``labels`` may also be ``[N, K]``
    with ``logits [N, V]`` (positions already selected).
    """
    check_choice("kind", kind, LOSS_KINDS)
    logp = torch.log_softmax(logits.float(), dim=-1)
    lab = labels.long()
    mask = lab >= 0
    g = logp.gather(-1, lab.clamp(min=0))
    if kind == "l2":
        return -(g * mask).sum() / mask.sum().clamp(min=1)
    if kind == "l2-position":
        per = (g * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        has = mask.any(-1)
        return -(per[has]).mean()
    has = mask.any(-1)
    lse = torch.logsumexp(g.masked_fill(~mask, float("-inf")), dim=-1)
    return -(lse[has]).mean()


# ----------------------------------------------------------------------------------- training
@dataclass
class TrainConfig:
    steps: int = 300
    seconds: float | None = None  # stop early when the wall clock passes this budget
    batch_size: int = 64
    lr: float = 1e-3
    warmup: int = 5
    weight_decay: float = 0.1
    clip: float = 1.0
    augment: bool = True
    loss: str = "l2"
    amp: bool = True  # bf16 autocast on CUDA (on the CPU autocast costs more than it saves for these sizes)
    decay_frac: float = 1.0  # the last fraction of the steps (or seconds) decays linearly to 0; 1.0 = all
    log_every: int = 10
    seed: int = 0


def _param_groups(model, weight_decay):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.ndim >= 2 and "wte" not in name and "wpe" not in name else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def train_model(model, data: TranscriptBatch, cfg: TrainConfig, device="cpu", progress=None) -> dict:
    """Imitation training on transcripts (AdamW, warm-up then linear decay, clipping).

    Returns a history ``{"step": [...], "loss": [...], "seconds": float, "steps": int,
    "sequences": int, "tokens": int}``. ``progress(step, loss)`` is called every ``log_every`` steps.
    """
    check_int("steps", cfg.steps, lo=1)
    check_int("batch_size", cfg.batch_size, lo=1)
    check_float("lr", cfg.lr, lo=0.0, lo_open=True)
    check_choice("loss", cfg.loss, LOSS_KINDS)
    device = torch.device(device)
    model.to(device).train()
    opt = torch.optim.AdamW(_param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(0.9, 0.95), foreach=True)

    t0 = time.perf_counter()

    def lr_factor(step):
        warm = min(1.0, (step + 1) / max(1, cfg.warmup))
        if cfg.seconds is not None:  # progress measured on the wall-clock budget
            progress = (time.perf_counter() - t0) / cfg.seconds
        else:
            progress = step / max(1, cfg.steps)
        decay = min(1.0, (1.0 - progress) / max(cfg.decay_frac, 1e-9))
        return warm * max(0.02 if cfg.seconds is not None else 0.0, decay)

    use_amp = cfg.amp and device.type == "cuda"
    gen = torch.Generator().manual_seed(cfg.seed)
    data_dev = data.to(device)
    hist = {"step": [], "loss": []}
    seen_tokens = torch.zeros((), dtype=torch.long, device=device)
    step = 0
    for step in range(cfg.steps):
        idx = torch.randint(len(data), (min(cfg.batch_size, len(data)),), generator=gen).to(device)
        batch = data_dev.index(idx)
        T = int(batch.lengths.max())
        batch = TranscriptBatch(batch.tokens[:, :T], batch.labels[:, :T], batch.n_clues, batch.lengths, batch.n)
        if cfg.augment:
            batch = augment_batch(batch, symmetry_maps(data.n, len(batch), gen, device))
        for group in opt.param_groups:
            group["lr"] = cfg.lr * lr_factor(step)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_amp):
            # the output head only where a label exists (the clue positions and the end have none):
            # the same loss as on every position, for less compute
            hidden = model.transformer(input_ids=batch.tokens).last_hidden_state
            keep = (batch.labels >= 0).any(-1)
            logits = model.lm_head(hidden[keep])
        loss = multi_target_loss(logits, batch.labels[keep], cfg.loss)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        opt.step()
        seen_tokens += batch.lengths.sum()
        if step % cfg.log_every == 0 or step == cfg.steps - 1:
            hist["step"].append(step)
            hist["loss"].append(float(loss.detach()))
            if progress:
                progress(step, hist["loss"][-1])
        if cfg.seconds is not None and time.perf_counter() - t0 > cfg.seconds:
            break
    model.eval()
    hist.update(seconds=time.perf_counter() - t0, steps=step + 1, sequences=(step + 1) * cfg.batch_size, tokens=int(seen_tokens))
    return hist


# ----------------------------------------------------------------------------------- decoding
def prompt_tokens(puzzle) -> list[int]:
    """The clues in cell order followed by the start token."""
    b = parse_board(puzzle)
    n = board_size(b)
    return [move_token(c, v, n) for c, v in enumerate(b) if v] + [START]


@torch.no_grad()
def label_accuracy(model, data: TranscriptBatch, batch_size: int = 256) -> dict:
    """Teacher-forced accuracy: the share of labelled positions whose argmax is in the label set, split
    by what the label is (a rule move, a guess, ``101``, ``102``, ``0``, a level) - the paper's "cell
    accuracy" per token type."""
    model.eval()
    device = next(model.parameters()).device
    hits: dict = {}
    for start in range(0, len(data), batch_size):
        b = data.index(slice(start, start + batch_size)).to(device)
        T = int(b.lengths.max())
        logits = model(input_ids=b.tokens[:, :T]).logits
        pred = logits.argmax(-1)
        lab = b.labels[:, :T].long()
        has = (lab >= 0).any(-1)
        ok = (lab == pred[..., None]).any(-1)
        first = lab[..., 0]
        kinds = {
            "move": (first >= 111) & (first <= 999),
            "101": first == 101,
            "102": first == 102,
            "0": first == SOLVED,
            "level": (first >= 1) & (first <= 99),
        }
        for name, m in {"all": has, **kinds}.items():
            m = m & has
            a, c = hits.get(name, (0, 0))
            hits[name] = (a + int((ok & m).sum()), c + int(m.sum()))
    return {k: (a / c if c else float("nan")) for k, (a, c) in hits.items()}


def _cache_keyword(model) -> str:
    """``cache`` (transformers >= 5.2x) or ``past_key_values`` (older): the KV-cache argument name."""
    import inspect

    return "cache" if "cache" in inspect.signature(type(model).forward).parameters else "past_key_values"


def _cache_of(res):
    cache = getattr(res, "cache", None)
    return cache if cache is not None else getattr(res, "past_key_values", None)


@torch.no_grad()
def greedy_decode(
    model, puzzles, max_total: int = 500, batch_size: int = 256, device=None, protocol: bool = False
) -> list[list[int]]:
    """Greedy transcripts (prompt included) for many puzzles at once, stopping at ``0`` or ``max_total``.

    ``protocol=False`` is the paper's evaluation: plain argmax. ``protocol=True`` takes the argmax
    among the tokens the transcript grammar allows (:class:`companion.sudoku.replay.ProtocolState`:
    moves only into empty cells of the current branch, ``0`` only on a full board, the right level
    tokens); it never checks the Sudoku rules, so the values are still the model's.
    """
    from companion.sudoku.replay import ProtocolState

    check_int("max_total", max_total, lo=2)
    device = torch.device(device) if device is not None else next(model.parameters()).device
    model.eval()
    boards = [parse_board(p) for p in puzzles]
    prompts = [prompt_tokens(b) for b in boards]
    limit = min(max_total, model.config.n_positions)
    cache_kw = _cache_keyword(model)
    out: list[list[int]] = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start : start + batch_size]
        B = len(chunk)
        L = max(len(p) for p in chunk)
        ids = torch.full((B, L), PAD, dtype=torch.long)
        attn = torch.zeros((B, L), dtype=torch.long)
        for i, p in enumerate(chunk):
            ids[i, L - len(p) :] = torch.tensor(p)
            attn[i, L - len(p) :] = 1
        ids, attn = ids.to(device), attn.to(device)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        states = None
        if protocol:
            states = [ProtocolState(b, board_size(b)) for b in boards[start : start + B]]

        def pick(logits, done_list):
            if states is None:
                return logits.argmax(-1)
            mask = np.zeros((B, VOCAB_SIZE), dtype=bool)
            for i, st in enumerate(states):
                if not done_list[i]:
                    st.fill_mask(mask[i])
                if not mask[i].any():
                    mask[i, SOLVED] = True
            m = torch.from_numpy(mask).to(logits.device)
            return logits.float().masked_fill(~m, float("-inf")).argmax(-1)

        res = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True)
        past = _cache_of(res)
        done_list = [False] * B
        nxt = pick(res.logits[:, -1], done_list)
        cur = pos[:, -1].clone()
        seqs = [list(p) for p in chunk]
        while True:
            nxt_cpu = nxt.tolist()
            for i in range(B):
                if done_list[i]:
                    continue
                seqs[i].append(nxt_cpu[i])
                if states is not None:
                    states[i].push(nxt_cpu[i])
                if nxt_cpu[i] == SOLVED or len(seqs[i]) >= limit or (states is not None and states[i].done):
                    done_list[i] = True
            if all(done_list):
                break
            done = torch.tensor(done_list, device=device)
            attn = torch.cat([attn, torch.ones((B, 1), dtype=attn.dtype, device=device)], dim=1)
            cur = torch.where(done, cur, cur + 1)
            kw = {cache_kw: past}
            res = model(input_ids=nxt[:, None], attention_mask=attn, position_ids=cur[:, None], use_cache=True, **kw)
            past = _cache_of(res)
            nxt = pick(res.logits[:, -1], done_list)
        out.extend(seqs)
    return out


def is_valid_completion(puzzle, board) -> bool:
    """Whether ``board`` is a complete valid grid that keeps every clue of ``puzzle``."""
    from companion.sudoku.board import find_conflict

    p = parse_board(puzzle)
    if len(board) != len(p) or 0 in board:
        return False
    if any(pv and pv != bv for pv, bv in zip(p, board)):
        return False
    return find_conflict(tuple(board)) is None


def evaluate_model(
    model, puzzles, solutions=None, max_total: int = 500, batch_size: int = 256, device=None, protocol: bool = False
) -> dict:
    """Board accuracy (the last value per cell equals the solution; a valid completion where no
    solution is given), the share that ends with ``0``, and the guesses per puzzle."""
    seqs = greedy_decode(model, puzzles, max_total=max_total, batch_size=batch_size, device=device, protocol=protocol)
    n = board_size(parse_board(puzzles[0]))
    correct, ended, guesses = [], [], []
    for i, (p, s) in enumerate(zip(puzzles, seqs)):
        board = final_board(s, n)
        if solutions is not None and solutions[i] is not None:
            correct.append(tuple(board) == tuple(solutions[i]))
        else:
            correct.append(is_valid_completion(p, board))
        ended.append(s[-1] == SOLVED)
        guesses.append(guesses_in(s, n))
    correct_a = np.array(correct, dtype=bool)
    return {
        "board_accuracy": float(correct_a.mean()) if len(correct_a) else float("nan"),
        "ended": float(np.mean(ended)) if ended else float("nan"),
        "correct": correct_a,
        "guesses": np.array(guesses),
        "sequences": seqs,
    }


@torch.no_grad()
def next_token_probs(model, tokens) -> torch.Tensor:
    """Teacher-forced next-token distributions at every position of one sequence: ``[T, VOCAB]``."""
    model.eval()
    device = next(model.parameters()).device
    ids = torch.tensor([list(tokens)], dtype=torch.long, device=device)[:, : model.config.n_positions]
    return torch.softmax(model(input_ids=ids).logits[0].float(), -1).cpu()


# ----------------------------------------------------------------------------------- checkpoints
def save_checkpoint(model, path, meta: dict | None = None, dtype: torch.dtype = torch.bfloat16) -> Path:
    """Save weights with safetensors (``dtype``, default bf16) plus the config and ``meta`` as metadata."""
    from safetensors.torch import save_file

    state = {k: v.detach().to("cpu", dtype).contiguous() for k, v in model.state_dict().items() if v.is_floating_point()}
    metadata = {"gpt_config": json.dumps(asdict(model.sudoku_config)), "meta": json.dumps(meta or {})}
    return write_atomic(path, lambda tmp: save_file(state, tmp, metadata=metadata))


def load_checkpoint(path, device="cpu"):
    """``(model, meta)`` from :func:`save_checkpoint`; weights are loaded in float32."""
    from safetensors import safe_open

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}")
    with safe_open(str(path), framework="pt") as f:
        md = f.metadata() or {}
        if "gpt_config" not in md:
            raise ValueError(f"{path} is not a Sudoku checkpoint (no gpt_config metadata)")
        state = {k: f.get_tensor(k).float() for k in f.keys()}
    config = GPTConfig(**json.loads(md["gpt_config"]))
    model = make_gpt2(config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not m.endswith(".attn.bias") and not m.endswith("masked_bias")]
    if missing or unexpected:
        raise ValueError(f"checkpoint {path} does not match the model: missing {missing[:3]}, unexpected {unexpected[:3]}")
    return model.to(device).eval(), json.loads(md.get("meta", "{}"))

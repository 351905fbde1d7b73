"""The notebook's experiments: LRC on all-MiniLM-L6-v2 (encoder stand-in) and on a tiny causal LLaMA.

**Encoder (MiniLM) experiment.** Teacher: the pretrained all-MiniLM-L6-v2 (d_T = 384, 6 layers, 12
heads of 32, FFN 1536). Students of width d_S: LRC (projections + norms trained; L_sent + α L_clone),
LRC ablations without the FFN clone terms (up, ffn_out) or without the attention terms (q, k, v,
attn_out), and a **TinyBERT-style** baseline: the same-shape student, randomly initialised, every weight
trained, with L_sent + α Σ_l MSE(h^S_l W_l, h^T_l) on the hidden states through learned alignment
matrices W_l (what LRC's Lemma 1 makes unnecessary). Data: 32-token windows of standard-library
docstrings; evaluation on ``n_eval`` held-out docstrings (their first 32 tokens): Spearman correlation
between the teacher's and the student's pairwise-cosine matrices of mean-pooled embeddings, and top-1
retrieval agreement (each sentence's nearest neighbour is the same under both models).

**Causal experiment.** Teacher: a tiny byte-level LLaMA (``data/low_rank_clone/``, made by
``make_teacher.py`` there). Students at d_T/2: LRC (L_LM + L_KL(T) + α L_clone), random init + KD
(L_LM + L_KL), and Minitron-style hard width pruning (keep the d_S residual channels of largest
activation importance, then train every weight with L_LM + L_KL). Validation cross-entropy against
training tokens.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from companion.core import check_choice, check_float, check_int, repo_path
from companion.low_rank_clone.clone import (
    ATTN_TERMS,
    FFN_TERMS,
    TERMS,
    LowRankClone,
    LRCConfig,
    cosine_matrix,
    kd_kl,
    layer_modules,
    lm_loss,
    lrc_loss,
    mean_pool,
    merge,
    selection_projection,
    sentence_loss,
    set_projections,
    student_like,
)
from companion.models import stdlib_texts

VARIANTS = {
    "LRC": TERMS,
    "LRC without FFN clone": tuple(t for t in TERMS if t not in FFN_TERMS),
    "LRC without attention clone": tuple(t for t in TERMS if t not in ATTN_TERMS),
}
BASELINE = "TinyBERT-style"
CAUSAL_METHODS = ("LRC", "random init + KD", "hard pruning + KD")
TEACHER_DIR = "data/low_rank_clone"


# --------------------------------------------------------------------------------------------------
# data


def docstring_data(tokenizer, *, n_eval: int = 200, seq_len: int = 32, n_train: int = 2000, seed: int = 0) -> dict:
    """Training windows and held-out evaluation sentences (token ids, no padding) from stdlib docstrings."""
    check_int("n_eval", n_eval, lo=8, hi=400)
    check_int("seq_len", seq_len, lo=8, hi=128)
    texts = stdlib_texts(None, min_chars=200, seed=seed)
    eval_texts, train_texts = texts[:n_eval], texts[n_eval:]
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    body = seq_len - 2

    def ids(t):
        return tokenizer(t, add_special_tokens=False)["input_ids"]

    ev = [[cls] + ids(t)[:body] + [sep] for t in eval_texts]
    ev = [x for x in ev if len(x) == seq_len]
    windows = []
    for t in train_texts:
        tok = ids(t)
        for s in range(0, len(tok) - body + 1, body):
            windows.append([cls] + tok[s:s + body] + [sep])
        if len(windows) >= n_train:
            break
    rng = np.random.default_rng(seed)
    train = torch.tensor(windows[:n_train])[torch.from_numpy(rng.permutation(min(n_train, len(windows))))]
    return {"train": train, "eval": torch.tensor(ev), "eval_texts": eval_texts, "seq_len": seq_len}


def byte_data(*, seq_len: int = 64, seed: int = 0, n_val_texts: int = 60) -> dict:
    """Bytes of standard-library docstrings, split by docstring into train and validation."""
    texts = stdlib_texts(None, min_chars=200, seed=seed)
    val = "\n".join(texts[:n_val_texts]).encode("utf-8", "replace")
    train = "\n".join(texts[n_val_texts:]).encode("utf-8", "replace")
    as_t = lambda b: torch.frombuffer(bytearray(b), dtype=torch.uint8).long()  # noqa: E731
    return {"train": as_t(train), "val": as_t(val), "seq_len": seq_len}


def byte_batch(data: torch.Tensor, batch: int, seq_len: int, gen: torch.Generator) -> torch.Tensor:
    starts = torch.randint(0, len(data) - seq_len - 1, (batch,), generator=gen)
    return data[starts[:, None] + torch.arange(seq_len)[None]]


# --------------------------------------------------------------------------------------------------
# evaluation


@torch.no_grad()
def sentence_embeddings(model: nn.Module, ids: torch.Tensor, batch: int = 100) -> torch.Tensor:
    model.eval()
    return torch.cat([mean_pool(model(input_ids=ids[i:i + batch]).last_hidden_state, None).float().cpu()
                      for i in range(0, len(ids), batch)])


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation of two vectors (ties get their average rank)."""
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def geometry_scores(student_cos: np.ndarray, teacher_cos: np.ndarray) -> dict:
    """Spearman between the upper triangles of the two pairwise-cosine matrices, and top-1 retrieval
    agreement (the fraction of sentences whose nearest other sentence is the same for both)."""
    n = teacher_cos.shape[0]
    iu = np.triu_indices(n, 1)
    s, t = student_cos.copy(), teacher_cos.copy()
    np.fill_diagonal(s, -np.inf)
    np.fill_diagonal(t, -np.inf)
    return {"spearman": spearman(student_cos[iu], teacher_cos[iu]),
            "retrieval": float(np.mean(s.argmax(1) == t.argmax(1)))}


def clone_terms_probe(lrc: LowRankClone, ids: torch.Tensor) -> dict:
    """Every clone term (all seven, whatever the run trains) per layer on a probe batch."""
    cfg = lrc.config
    lrc.config = LRCConfig(**{**cfg.as_dict(), "clone_terms": TERMS})
    try:
        with torch.no_grad():
            out = lrc(ids)
    finally:
        lrc.config = cfg
    return {f"{i}:{m}": round(float(v), 6) for (i, m), v in out["clone"].items()}


def singular_values(lrc: LowRankClone) -> dict:
    out = {}
    with torch.no_grad():
        for name, p in lrc.proj.items():
            out[name] = [round(float(x), 5) for x in torch.linalg.svdvals(p.float())]
    return out


# --------------------------------------------------------------------------------------------------
# encoder training


def _snap_steps(steps: int, snapshots: int) -> list[int]:
    return sorted({int(round(x)) for x in np.linspace(0, steps, snapshots + 1)})


def train_encoder_lrc(teacher, data: dict, *, d_student: int, terms=TERMS, alpha: float = 0.2, steps: int = 100,
                      batch: int = 16, lr: float = 3e-3, snapshots: int = 4, seed: int = 0, teacher_cos=None,
                      attn_out_width: str = "student") -> dict:
    """LRC on a BERT teacher; returns curves, snapshots (eval cosine matrix, scores, clone terms,
    projection singular values) and the trained :class:`LowRankClone` under ``"model"``. Runs on the
    teacher's device (``data``'s token ids are moved there)."""
    check_int("steps", steps, lo=1)
    check_int("batch", batch, lo=2)
    check_float("lr", lr, lo=0.0, lo_open=True)
    cfg = LRCConfig(d_student=d_student, alpha=alpha, clone_terms=tuple(terms), attn_out_width=attn_out_width)
    torch.manual_seed(seed)
    device = next(teacher.parameters()).device
    lrc = LowRankClone(teacher, cfg, seed=seed).to(device)
    opt = torch.optim.Adam(lrc.trainable_parameters(), lr=lr, betas=(0.9, 0.999))
    train, eval_ids = data["train"].to(device), data["eval"].to(device)
    if teacher_cos is None:
        teacher_cos = cosine_matrix(sentence_embeddings(teacher, eval_ids)).numpy()
    probe = eval_ids[:8]
    gen = torch.Generator().manual_seed(seed)
    snaps, curve = [], {"step": [], "task": [], "clone": []}
    snap_at = set(_snap_steps(steps, snapshots))
    t0 = time.perf_counter()
    for step in range(steps + 1):
        if step in snap_at:
            snaps.append(_snapshot(lrc.student, eval_ids, teacher_cos, step, lrc=lrc, probe=probe))
            lrc.student.train()
        if step == steps:
            break
        idx = torch.randint(0, len(train), (batch,), generator=gen)
        loss, parts = lrc_loss(lrc, train[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(lrc.trainable_parameters(), 1.0)
        opt.step()
        curve["step"].append(step)
        curve["task"].append(parts["task"])
        curve["clone"].append(parts["clone"])
    return {"method": "LRC", "terms": list(terms), "d_student": d_student, "alpha": alpha, "steps": steps,
            "batch": batch, "curve": curve, "snapshots": snaps, "final": snaps[-1]["scores"],
            "seconds": time.perf_counter() - t0, "trainable": lrc.n_trainable(), "model": lrc}


def _snapshot(student, eval_ids, teacher_cos, step, lrc=None, probe=None) -> dict:
    cos = cosine_matrix(sentence_embeddings(student, eval_ids)).numpy()
    snap = {"step": step, "scores": geometry_scores(cos, teacher_cos), "cos": cos.astype(np.float32)}
    if lrc is not None:
        snap["clone_terms"] = clone_terms_probe(lrc, probe)
        snap["singular_values"] = singular_values(lrc)
    return snap


class TinyBertStudent(nn.Module):
    """A randomly initialised student of the LRC student's shape and the learned alignment matrices W_l
    (d_S -> d_T) of TinyBERT's hidden-state loss, one per hidden state (embeddings + each layer)."""

    def __init__(self, teacher, d_student: int, seed: int = 0):
        super().__init__()
        self.student = student_like(teacher, d_student, seed=seed).train()
        n = teacher.config.num_hidden_layers + 1
        d_t = teacher.config.hidden_size
        self.align = nn.ModuleList(nn.Linear(d_student, d_t, bias=False) for _ in range(n))


def train_encoder_tinybert(teacher, data: dict, *, d_student: int, alpha: float = 0.2, steps: int = 100, batch: int = 16,
                           lr: float = 3e-3, snapshots: int = 4, seed: int = 0, teacher_cos=None) -> dict:
    """The TinyBERT-style baseline: L_sent + α Σ_l MSE(h^S_l W_l, h^T_l), every student weight trained."""
    torch.manual_seed(seed)
    device = next(teacher.parameters()).device
    model = TinyBertStudent(teacher, d_student, seed=seed).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    train, eval_ids = data["train"].to(device), data["eval"].to(device)
    if teacher_cos is None:
        teacher_cos = cosine_matrix(sentence_embeddings(teacher, eval_ids)).numpy()
    gen = torch.Generator().manual_seed(seed)
    snaps, curve = [], {"step": [], "task": [], "clone": []}
    snap_at = set(_snap_steps(steps, snapshots))
    t0 = time.perf_counter()
    for step in range(steps + 1):
        if step in snap_at:
            snaps.append(_snapshot(model.student, eval_ids, teacher_cos, step))
            model.student.train()
        if step == steps:
            break
        ids = train[torch.randint(0, len(train), (batch,), generator=gen)]
        with torch.no_grad():
            t_out = teacher(input_ids=ids, output_hidden_states=True)
        s_out = model.student(input_ids=ids, output_hidden_states=True)
        task = sentence_loss(s_out.last_hidden_state, t_out.last_hidden_state)
        hid = sum(F.mse_loss(w(hs), ht) for w, hs, ht in zip(model.align, s_out.hidden_states, t_out.hidden_states))
        loss = task + alpha * hid
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        curve["step"].append(step)
        curve["task"].append(task.item())
        curve["clone"].append(hid.item())
    return {"method": BASELINE, "terms": [], "d_student": d_student, "alpha": alpha, "steps": steps, "batch": batch,
            "curve": curve, "snapshots": snaps, "final": snaps[-1]["scores"], "seconds": time.perf_counter() - t0,
            "trainable": sum(p.numel() for p in model.parameters()), "model": model}


def run_encoder_study(teacher, data: dict, *, d_student: int, steps: int, batch: int, lr: float, alpha: float,
                      snapshots: int, seed: int = 0, variants=tuple(VARIANTS), baseline: bool = True) -> dict:
    """LRC, its ablations and the TinyBERT-style baseline from the same seed and batches, on the teacher's device."""
    teacher_cos = cosine_matrix(sentence_embeddings(teacher, data["eval"].to(next(teacher.parameters()).device))).numpy()
    runs = {}
    for name in variants:
        runs[name] = train_encoder_lrc(teacher, data, d_student=d_student, terms=VARIANTS[name], alpha=alpha, steps=steps,
                                       batch=batch, lr=lr, snapshots=snapshots, seed=seed, teacher_cos=teacher_cos)
    if baseline:
        runs[BASELINE] = train_encoder_tinybert(teacher, data, d_student=d_student, alpha=alpha, steps=steps, batch=batch,
                                                lr=lr, snapshots=snapshots, seed=seed, teacher_cos=teacher_cos)
    return {"teacher_cos": teacher_cos.astype(np.float32), "runs": runs, "d_student": d_student,
            "d_teacher": int(teacher.config.hidden_size), "n_layers": int(teacher.config.num_hidden_layers)}


# --------------------------------------------------------------------------------------------------
# causal teacher and students


def teacher_path() -> Path:
    return repo_path(TEACHER_DIR)


def load_causal_teacher(path=None):
    """The committed tiny byte-level LLaMA teacher (safetensors + config.json) as a LlamaForCausalLM."""
    from safetensors.torch import load_file
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = Path(path) if path is not None else teacher_path()
    if not (folder / "config.json").exists() or not (folder / "model.safetensors").exists():
        raise FileNotFoundError(f"no teacher checkpoint in {folder}: run `python {TEACHER_DIR}/make_teacher.py`")
    cfg = LlamaConfig(**json.loads((folder / "config.json").read_text())["config"])
    cfg._attn_implementation = "eager"
    model = LlamaForCausalLM(cfg)
    state = {k: v.float() for k, v in load_file(str(folder / "model.safetensors")).items()}
    model.load_state_dict(state, strict=False)
    if cfg.tie_word_embeddings:
        model.tie_weights()
    return model.eval()


@torch.no_grad()
def causal_val_loss(model: nn.Module, val: torch.Tensor, *, seq_len: int, n_batches: int = 2, batch: int = 16) -> float:
    gen = torch.Generator().manual_seed(1234)
    was = model.training
    model.eval()
    out = float(np.mean([lm_loss(model(input_ids=(ids := byte_batch(val, batch, seq_len, gen))).logits, ids).item()
                         for _ in range(n_batches)]))
    model.train(was)
    return out


@torch.no_grad()
def channel_importance(teacher, data: torch.Tensor, *, seq_len: int, batches: int = 4, batch: int = 16) -> torch.Tensor:
    """Minitron's activation-based importance of residual channel c: Σ over every RMSNorm output in the
    network of the mean over tokens of |norm output_c| on calibration batches."""
    gen = torch.Generator().manual_seed(99)
    total = torch.zeros(teacher.config.hidden_size, device=next(teacher.parameters()).device)
    norms = [n for lyr in layer_modules(teacher, "llama") for n in lyr["norms"]] + [teacher.model.norm]
    acts = []
    hooks = [n.register_forward_hook(lambda _m, _i, o: acts.append(o.detach().abs().mean((0, 1)))) for n in norms]
    try:
        for _ in range(batches):
            teacher(input_ids=byte_batch(data, batch, seq_len, gen).to(total.device))
    finally:
        for h in hooks:
            h.remove()
    for a in acts:
        total += a
    return total.cpu()


def hard_pruned_student(teacher, d_student: int, importance: torch.Tensor) -> nn.Module:
    """Minitron-style width pruning: every weight's residual axis sliced to the ``d_student`` most
    important channels (LRC with a fixed 0/1 selection projection, merged), norms sliced too; every
    weight trainable."""
    teacher = copy.deepcopy(teacher).cpu()
    lrc = LowRankClone(teacher, LRCConfig(d_student=d_student))
    sel = selection_projection(importance.cpu(), d_student)
    set_projections(lrc, sel)
    student = merge(lrc)
    keep = sel.argmax(0)
    with torch.no_grad():
        t_norms = [n for lyr in layer_modules(teacher, "llama") for n in lyr["norms"]] + [teacher.model.norm]
        s_norms = [n for lyr in layer_modules(student, "llama") for n in lyr["norms"]] + [student.model.norm]
        for tn, sn in zip(t_norms, s_norms):
            sn.weight.copy_(tn.weight[keep])
    for p in student.parameters():
        p.requires_grad_(True)
    return student.train()


def lr_factor(step: int, steps: int, warmup_ratio: float | None) -> float:
    """The learning-rate multiplier at ``step``: 1 when ``warmup_ratio`` is None (constant), else the paper's
    schedule (§4.1: linear warm-up over ``warmup_ratio`` of the steps, 0.005 there, then linear decay to 0)."""
    if warmup_ratio is None:
        return 1.0
    warm = max(1, round(warmup_ratio * steps))
    if step < warm:
        return (step + 1) / warm
    return max(0.0, (steps - step) / max(1, steps - warm))


def train_causal(method: str, teacher, data: dict, *, d_student: int, steps: int, batch: int, lr: float, alpha: float = 0.2,
                 temperature: float = 40.0, eval_every: int = 10, seed: int = 0, device=None, val_batches: int = 2,
                 warmup_ratio: float | None = None) -> dict:
    """One causal student, trained for ``steps`` on byte windows; validation loss every ``eval_every`` steps.
    The learning rate follows :func:`lr_factor` (constant by default)."""
    check_choice("method", method, CAUSAL_METHODS)
    if warmup_ratio is not None:
        check_float("warmup_ratio", warmup_ratio, lo=0.0, hi=1.0)
    device = torch.device(device or "cpu")
    seq_len = data["seq_len"]
    torch.manual_seed(seed)
    teacher = teacher.to(device)
    if method == "LRC":
        lrc = LowRankClone(teacher, LRCConfig(d_student=d_student, alpha=alpha, temperature=temperature), seed=seed).to(device)
        params, student = lrc.trainable_parameters(), lrc.student
    else:
        if method == "random init + KD":
            student = student_like(teacher, d_student, seed=seed)
        else:
            imp = channel_importance(teacher, data["train"], seq_len=seq_len)
            student = hard_pruned_student(teacher, d_student, imp)
        student = student.to(device).train()
        for p in student.parameters():
            p.requires_grad_(True)
        params = list(student.parameters())
    opt = torch.optim.Adam(params, lr=lr)
    gen = torch.Generator().manual_seed(seed)
    curve = {"step": [], "tokens": [], "val_loss": []}
    train_loss = []
    t0 = time.perf_counter()
    for step in range(steps + 1):
        if step % eval_every == 0 or step == steps:
            curve["step"].append(step)
            curve["tokens"].append(step * batch * seq_len)
            curve["val_loss"].append(causal_val_loss(student, data["val"].to(device), seq_len=seq_len, n_batches=val_batches))
        if step == steps:
            break
        ids = byte_batch(data["train"], batch, seq_len, gen).to(device)
        if method == "LRC":
            loss, parts = lrc_loss(lrc, ids)
            train_loss.append(parts["lm"])
        else:
            with torch.no_grad():
                t_logits = teacher(input_ids=ids).logits
            s_logits = student(input_ids=ids).logits
            ce = lm_loss(s_logits, ids)
            loss = ce + kd_kl(s_logits, t_logits, temperature)
            train_loss.append(ce.item())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        for g in opt.param_groups:
            g["lr"] = lr * lr_factor(step, steps, warmup_ratio)
        opt.step()
    return {"method": method, "d_student": d_student, "steps": steps, "batch": batch, "seq_len": seq_len, "curve": curve,
            "train_loss": train_loss, "final_val_loss": curve["val_loss"][-1], "seconds": time.perf_counter() - t0,
            "trainable": sum(p.numel() for p in params)}


def tokens_to_reach(curve: dict, target: float) -> int | None:
    """The first evaluated token count at which the validation loss is <= ``target`` (None if never)."""
    for tok, v in zip(curve["tokens"], curve["val_loss"]):
        if v <= target:
            return int(tok)
    return None


def run_causal_study(teacher, data: dict, *, d_student: int, steps: int, batch: int, lr: float, alpha: float = 0.2,
                     eval_every: int = 10, seed: int = 0, device=None) -> dict:
    runs = {m: train_causal(m, teacher, data, d_student=d_student, steps=steps, batch=batch, lr=lr, alpha=alpha,
                            eval_every=eval_every, seed=seed, device=device) for m in CAUSAL_METHODS}
    teacher_loss = causal_val_loss(teacher, data["val"].to(next(teacher.parameters()).device), seq_len=data["seq_len"])
    return {"runs": runs, "teacher_val_loss": teacher_loss, "d_student": d_student,
            "d_teacher": int(teacher.config.hidden_size)}

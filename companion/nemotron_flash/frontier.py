"""The data behind the latency-frontier explorer: cached tiny runs, per-operator decode timings, Pareto fronts.

A model here is ``depth`` blocks of [operator, FFN] split into three stages (early, middle, late), one operator
per stage from attention ``"a"``, DeltaNet ``"deltanet"`` and Mamba2 ``"m2"``; the width is derived from the
parameter budget for the all-attention (LLaMA) model of that depth (:func:`explorer_width`), so hybrids at one
(budget, depth) share a width and their parameter counts differ a little (reported).

* **Loss**: the validation loss of a short character-LM run of every (budget, depth, pattern), trained once and
  committed (``python -m companion.nemotron_flash.frontier --out data/nemotron_flash/explorer_runs.csv``; rerunning it
  resumes a partial file, and the view marks a pattern without a cached run): a
  proxy, as the paper's search uses short-training perplexity as one.
* **Latency**: composed from measured layer steps (:func:`measure_layer_table`, live on this CPU in the notebook;
  on the H200 by the benchmark): attention's decode step at every width, context and batch; DeltaNet's, Mamba2's
  and the FFN's once per width and batch, at the shortest context, and reused for every context (their state has
  a fixed size, so their step is taken to be independent of the context: assumed here, not re-measured); plus the
  embedding/norm/LM-head step. A model's decode time per token is the sum over its layers (:func:`composed_ms`),
  as latency look-up tables in architecture search work. The sum is not checked against whole-model timings
  here: it leaves out what a whole model adds between layers (Python dispatch, cache bookkeeping), so it is a
  look-up-table estimate, not a measured model latency.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import types
from pathlib import Path

import numpy as np
import torch

from companion.core import check_choice, check_int, repo_path, time_ms
from companion.nemotron_flash.depth_width import width_for_depth
from companion.nemotron_flash.model import HybridConfig, _rope

EXPLORER_OPS = ("a", "deltanet", "m2")
TIMED_OPS = ("a", "deltanet", "m2", "f")
EXPLORER_BUDGETS = (100_000, 400_000)
EXPLORER_DEPTHS = (3, 6, 12)
EXPLORER_CONTEXTS = (128, 1024, 8192)
EXPLORER_BATCHES = (1, 16)
RUNS_CSV = ("data", "nemotron_flash", "explorer_runs.csv")
HEAD_DIM = 8


def stage_layer_types(depth: int, early: str, middle: str, late: str) -> tuple:
    """``depth`` blocks [op, "f"], the first ⌈depth/3⌉ with ``early`` and so on (remainders go to early stages)."""
    check_int("depth", depth, lo=3)
    ops = [check_choice(n, o, EXPLORER_OPS) for n, o in (("early", early), ("middle", middle), ("late", late))]
    sizes = [depth // 3 + (1 if i < depth % 3 else 0) for i in range(3)]
    out = []
    for op, n in zip(ops, sizes):
        out += [op, "f"] * n
    return tuple(out)


def hybrid_config(layer_types, width: int, vocab_size: int = 100) -> HybridConfig:
    return HybridConfig(vocab_size=vocab_size, hidden_size=width, layer_types=layer_types, kq_head_dim=HEAD_DIM,
                        v_head_dim=HEAD_DIM, mamba_headdim=HEAD_DIM, mamba_d_state=HEAD_DIM, max_position=16384)


def explorer_width(depth: int, budget: int) -> int:
    """The width (multiple of 8) putting the all-attention model of ``depth`` blocks nearest ``budget``."""
    return width_for_depth(depth, budget, multiple=HEAD_DIM,
                           make=lambda d, w: hybrid_config(("a", "f") * d, w))


# --------------------------------------------------------------------------------------------- timings
def _fake_cache(cfg, device, context):
    return types.SimpleNamespace(pos=torch.tensor(context, device=device), rope=_rope(cfg, device))


def make_layer_step(layer_type: str, width: int, *, context: int, batch: int, device="cpu"):
    """A closure decoding one token through one operator (pre-norm residual included) at ``context``
    (bf16 on CUDA, fp32 on the CPU); the cache position is reset before each call."""
    from companion.nemotron_flash.model import Block

    cfg = hybrid_config((layer_type,), width)
    cfg.max_position = max(cfg.max_position, context + 1)
    dtype = torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32
    block = Block(cfg, layer_type, 0).to(device=device, dtype=dtype)
    state = block.op.init_state(batch, context + 1, device, dtype)
    cache = _fake_cache(cfg, device, context)
    x = torch.randn(batch, 1, width, device=device, dtype=dtype)

    @torch.no_grad()
    def step():
        cache.pos.fill_(context)
        return block(x, cache, state)

    return step


def layer_step_ms(layer_type: str, width: int, *, context: int, batch: int, device="cpu", cpu_reps: int = 3,
                  rep_ms: int = 20) -> float:
    """Median ms of one cached decode step of one operator at ``context`` (:func:`make_layer_step`)."""
    step = make_layer_step(layer_type, width, context=context, batch=batch, device=device)
    return float(time_ms(step, device, warmup=5, rep=rep_ms, cpu_warmup=1, cpu_reps=cpu_reps))


def head_step_ms(width: int, *, batch: int, vocab_size: int = 100, device="cpu", cpu_reps: int = 3, rep_ms: int = 20):
    """Embedding lookup + final RMSNorm + LM head of one decode step."""
    from companion.nemotron_flash.model import RMSNorm

    dtype = torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32
    emb = torch.nn.Embedding(vocab_size, width).to(device=device, dtype=dtype)
    norm = RMSNorm(width).to(device=device, dtype=dtype)
    head = torch.nn.Linear(width, vocab_size, bias=False).to(device=device, dtype=dtype)
    ids = torch.zeros(batch, 1, dtype=torch.long, device=device)

    @torch.no_grad()
    def step():
        return head(norm(emb(ids)))

    return float(time_ms(step, device, warmup=5, rep=rep_ms, cpu_warmup=1, cpu_reps=cpu_reps))


def measure_layer_table(widths, contexts=EXPLORER_CONTEXTS, batches=EXPLORER_BATCHES, device="cpu",
                        cpu_reps: int = 3) -> dict:
    """Decode-step ms of every operator at every width × batch (and context for attention: the others keep a
    constant-size state, measured at the smallest context and reused for all contexts)."""
    rows, head = [], []
    for w, b in itertools.product(sorted(set(widths)), batches):
        head.append({"width": w, "batch": b, "ms": head_step_ms(w, batch=b, device=device, cpu_reps=cpu_reps)})
        for op in TIMED_OPS:
            if op == "a":
                for c in contexts:
                    rows.append({"op": op, "width": w, "context": c, "batch": b,
                                 "ms": layer_step_ms(op, w, context=c, batch=b, device=device, cpu_reps=cpu_reps)})
            else:
                ms = layer_step_ms(op, w, context=min(contexts), batch=b, device=device, cpu_reps=cpu_reps)
                rows.extend({"op": op, "width": w, "context": c, "batch": b, "ms": ms} for c in contexts)
    return {"rows": rows, "head": head, "contexts": list(contexts), "batches": list(batches)}


def _lookup(table, op, width, context, batch):
    for r in table["rows"]:
        if r["op"] == op and r["width"] == width and r["context"] == context and r["batch"] == batch:
            return r["ms"]
    raise KeyError(f"no timing for {op} at width {width}, context {context}, batch {batch}")


def composed_ms(table: dict, layer_types, width: int, context: int, batch: int) -> float:
    """Σ over layers of the measured step time + the embedding/head step."""
    head = next(h["ms"] for h in table["head"] if h["width"] == width and h["batch"] == batch)
    return head + sum(_lookup(table, t, width, context, batch) for t in layer_types)


def pareto_front(x, y, maximize_x: bool = False) -> list[int]:
    """Indices of the points no other point beats in both coordinates (y minimised; x minimised unless
    ``maximize_x``), sorted by x."""
    x = np.asarray(x, float) * (-1 if maximize_x else 1)
    y = np.asarray(y, float)
    order = np.lexsort((y, x))
    front, best = [], np.inf
    for i in order:
        if y[i] < best:
            front.append(int(i))
            best = y[i]
    return front


# ------------------------------------------------------------------------------------------------ runs
def load_runs(path=None) -> list[dict]:
    path = Path(path) if path else repo_path(*RUNS_CSV)
    ints = ("budget", "depth", "width", "params", "steps")
    with open(path, newline="") as f:
        return [{k: int(v) if k in ints else float(v) if k == "loss" else v for k, v in r.items()}
                for r in csv.DictReader(f)]


PRIORITY = (("a", "a", "a"), ("deltanet", "deltanet", "deltanet"), ("m2", "m2", "m2"), ("deltanet", "a", "m2"),
            ("m2", "a", "deltanet"), ("deltanet", "m2", "deltanet"), ("a", "m2", "a"), ("m2", "deltanet", "a"),
            ("a", "deltanet", "m2"))


def run_order():
    """Every (pattern, budget, depth): the uniform models and six hybrids first, so a partial file already spans
    every (budget, depth); then the other 18 patterns."""
    pats = list(PRIORITY) + [p for p in itertools.product(EXPLORER_OPS, repeat=3) if p not in PRIORITY]
    return [(p, b, d) for p in pats for b in EXPLORER_BUDGETS for d in EXPLORER_DEPTHS]


def make_runs(out, steps=30, batch=8, seq_len=48, seed=0, log=print):
    """Train every run of :func:`run_order` once; rows are appended to ``out`` as they finish and runs already
    there are skipped (the job can be resumed)."""
    from companion.nemotron_flash.model import HybridLM, n_parameters
    from companion.nemotron_flash.training import char_data, train_lm

    _, _, vocab = char_data()
    fields = ["budget", "depth", "width", "early", "middle", "late", "params", "steps", "loss"]
    out = Path(out)
    done = ({(r["early"], r["middle"], r["late"], r["budget"], r["depth"]) for r in load_runs(out)}
            if out.exists() else set())
    new_file = not out.exists()
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        if new_file:
            w.writeheader()
        for (e, m, l), budget, depth in run_order():
            if (e, m, l, budget, depth) in done:
                continue
            width = explorer_width(depth, budget)
            torch.manual_seed(seed)
            model = HybridLM(hybrid_config(stage_layer_types(depth, e, m, l), width, vocab))
            r = train_lm(model, steps=steps, batch=batch, seq_len=seq_len, seed=seed)
            row = {"budget": budget, "depth": depth, "width": width, "early": e, "middle": m, "late": l,
                   "params": n_parameters(model, non_embedding=True), "steps": steps, "loss": round(r["val_loss"], 5)}
            w.writerow(row)
            f.flush()
            log(row)


def main(argv=None):
    ap = argparse.ArgumentParser(description="the explorer's cached tiny runs")
    ap.add_argument("--out", default=str(repo_path(*RUNS_CSV)))
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    make_runs(args.out)


if __name__ == "__main__":
    main()


__all__ = ["EXPLORER_BATCHES", "EXPLORER_BUDGETS", "EXPLORER_CONTEXTS", "EXPLORER_DEPTHS", "EXPLORER_OPS",
           "composed_ms", "explorer_width", "hybrid_config", "layer_step_ms", "load_runs", "make_layer_step",
           "make_runs", "measure_layer_table", "pareto_front", "stage_layer_types"]

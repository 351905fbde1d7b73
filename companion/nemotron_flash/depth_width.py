"""Depth and width at a fixed parameter budget, and the paper's extended scaling law (Sec. 3 of the paper).

The paper's first finding: deep-thin models are more parameter-efficient, but batch-1 decode latency grows
roughly linearly with depth (every layer is a sequence of small, latency-bound kernels), so deep-thin models
need not lie on the accuracy-*latency* front. Here:

* :func:`llama_config` — a LLaMA-shaped decoder (attention + SwiGLU FFN per layer) of depth ``L`` and width
  ``d``; the CPU grid ``(L, d) ∈ {(2, 256), (4, 180), (8, 128), (16, 90)}`` keeps ``L·d²`` (so the non-embedding
  parameters, ≈ 12·L·d²) nearly constant; :func:`check_on_budget` refuses a pair off the budget beyond a
  tolerance; :func:`width_for_depth` derives the width of a depth at a budget.
* :func:`fit_scaling_law` — ``L(D, W, N) = L0 + a·D^{-α} + b·W^{-β} + c·N^{-γ}`` (D depth, W width, N training
  tokens) fitted with ``scipy.optimize.curve_fit`` on the smaller runs, with the error on held-out runs (the
  paper: ≤ 5.3% perplexity error when extrapolating [secondary]).
* ``python -m companion.nemotron_flash.depth_width --out data/nemotron_flash/depth_width_runs.csv`` — the tiny
  CPU runs the fit uses (committed with that command; rerunning it resumes a partial file).
"""

from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path

import numpy as np
import torch

from companion.core import ParameterError, check_float, check_int, repo_path
from companion.nemotron_flash.model import HybridConfig, HybridLM, n_parameters

DEPTH_WIDTH_GRID = ((2, 256), (4, 180), (8, 128), (16, 90))
BUDGET_TOLERANCE = 0.05   # a (depth, width) pair is "at the budget" within ±5% non-embedding parameters
RUNS_CSV = ("data", "nemotron_flash", "depth_width_runs.csv")


def head_dim_for(width: int, max_dim: int = 32) -> int:
    """The largest even divisor of ``width`` that is at most ``max_dim`` (RoPE needs even head dims)."""
    check_int("width", width, lo=2)
    for h in range(min(max_dim, width), 1, -1):
        if width % h == 0 and h % 2 == 0:
            return h
    raise ParameterError("width", width, "an even integer (attention heads need an even head dimension)")


def llama_config(depth: int, width: int, vocab_size: int = 256, **kw) -> HybridConfig:
    """``depth`` × [attention, SwiGLU FFN] at ``width`` (heads of :func:`head_dim_for` ``(width)``)."""
    check_int("depth", depth, lo=1)
    hd = head_dim_for(check_int("width", width, lo=2))
    return HybridConfig(vocab_size=vocab_size, hidden_size=width, layer_types=("a", "f") * depth,
                        kq_head_dim=hd, v_head_dim=hd, **kw)


def non_embedding_params(cfg: HybridConfig) -> int:
    """Parameters outside the embedding and LM head (the embedding is built with one row: it is not counted)."""
    from dataclasses import replace

    return n_parameters(HybridLM(replace(cfg, vocab_size=2, max_position=2)), non_embedding=True)


def check_on_budget(depth: int, width: int, budget: int, tolerance: float = BUDGET_TOLERANCE) -> int:
    """The pair's non-embedding parameter count; :class:`ParameterError` if it is off ``budget`` by more than
    ``tolerance`` (relative)."""
    check_int("budget", budget, lo=1)
    check_float("tolerance", tolerance, lo=0)
    n = non_embedding_params(llama_config(depth, width))
    if abs(n / budget - 1) > tolerance:
        raise ParameterError("width", width, f"a width that puts depth {depth} within ±{tolerance:.0%} of the "
                             f"{budget:,}-parameter budget (this pair has {n:,})")
    return n


def width_for_depth(depth: int, budget: int, multiple: int = 2, make=llama_config) -> int:
    """The width (a multiple of ``multiple``) whose config ``make(depth, width)`` is closest to ``budget``."""
    check_int("depth", depth, lo=1)
    check_int("budget", budget, lo=1)
    guess = max(multiple, int(round(math.sqrt(budget / (12 * depth)) / multiple)) * multiple)
    best = None
    for w in range(max(multiple, guess - 4 * multiple), guess + 4 * multiple + 1, multiple):
        try:
            n = non_embedding_params(make(depth, w))
        except ParameterError:
            continue
        if best is None or abs(n - budget) < abs(best[1] - budget):
            best = (w, n)
    if best is None:
        raise ParameterError("budget", budget, f"a budget reachable at depth {depth}")
    return best[0]


# ------------------------------------------------------------------------------------------- scaling law
def scaling_law(X, L0, a, alpha, b, beta, c, gamma):
    """``L0 + a·D^-α + b·W^-β + c·N^-γ`` with ``X = (D, W, N)``."""
    D, W, N = X
    return L0 + a * D ** -alpha + b * W ** -beta + c * N ** -gamma


PARAM_NAMES = ("L0", "a", "alpha", "b", "beta", "c", "gamma")


def load_runs(path=None) -> list[dict]:
    """The committed tiny runs (``depth, width, tokens, loss`` per row)."""
    path = Path(path) if path else repo_path(*RUNS_CSV)
    with open(path, newline="") as f:
        return [{k: (float(v) if k in ("tokens", "loss", "params") else int(v)) for k, v in row.items()}
                for row in csv.DictReader(f)]


def fit_scaling_law(runs: list[dict], holdout: str = "largest_tokens") -> dict:
    """Fit on the runs outside the held-out set, report the held-out relative errors of loss and perplexity.

    ``holdout``: ``"largest_tokens"`` (extrapolate in N: the last checkpoint of every run is held out) or
    ``"largest_model"`` (extrapolate in size: every row of the largest D·W² is held out)."""
    from scipy.optimize import curve_fit

    if holdout == "largest_tokens":
        nmax = max(r["tokens"] for r in runs)
        test = [r["tokens"] == nmax for r in runs]
    elif holdout == "largest_model":
        size = max(r["depth"] * r["width"] ** 2 for r in runs)
        test = [r["depth"] * r["width"] ** 2 == size for r in runs]
    else:
        raise ParameterError("holdout", holdout, "'largest_tokens' or 'largest_model'")
    arr = {k: np.array([r[k] for r in runs], dtype=float) for k in ("depth", "width", "tokens", "loss")}
    test = np.array(test)
    train = ~test
    if train.sum() < len(PARAM_NAMES) + 1 or test.sum() < 1:
        raise ParameterError("runs", len(runs), f"at least {len(PARAM_NAMES) + 1} fitting rows and one held-out row")
    X = np.stack([arr["depth"], arr["width"], arr["tokens"]])
    y = arr["loss"]
    p0 = [y.min() * 0.8, 1.0, 0.5, 1.0, 0.5, 10.0, 0.3]
    bounds = ([0, 0, 0, 0, 0, 0, 0], [y.min(), np.inf, 3, np.inf, 3, np.inf, 3])
    popt, _ = curve_fit(scaling_law, X[:, train], y[train], p0=p0, bounds=bounds, maxfev=20000)
    pred = scaling_law(X, *popt)
    rel = np.abs(pred - y) / y
    ppl_rel = np.abs(np.exp(pred) - np.exp(y)) / np.exp(y)
    return {"params": dict(zip(PARAM_NAMES, map(float, popt))), "holdout": holdout,
            "train_rel_error": float(rel[train].mean()), "test_rel_error": float(rel[test].mean()),
            "test_ppl_rel_error_max": float(ppl_rel[test].max()), "test_ppl_rel_error_mean": float(ppl_rel[test].mean()),
            "test_ppl_rel_errors": ppl_rel[test].tolist(),
            "n_train": int(train.sum()), "n_test": int(test.sum()), "pred": pred.tolist(), "is_test": test.tolist()}


def make_runs(out, depths=(1, 2, 4, 3), widths=(32, 48, 64, 96), steps=(25, 50, 100, 200), batch=16, seq_len=64,
              seed=0, log=print) -> None:
    """Train every (depth, width) LLaMA-shaped char-LM, recording the validation loss at each checkpoint; rows are
    appended to ``out`` run by run, and runs already in ``out`` are skipped (the job can be resumed)."""
    from companion.nemotron_flash.training import batches, char_data, evaluate

    train, val, vocab = char_data()
    out = Path(out)
    done = {(r["depth"], r["width"]) for r in load_runs(out)} if out.exists() else set()
    fields = ["depth", "width", "tokens", "loss", "params"]
    new_file = not out.exists()
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        if new_file:
            w.writeheader()
        for depth in depths:
            for width in widths:
                if (depth, width) in done:
                    continue
                torch.manual_seed(seed)
                model = HybridLM(llama_config(depth, width, vocab_size=vocab))
                opt = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.95))
                it = batches(train, batch, seq_len, seed)
                rows = []
                for step in range(1, max(steps) + 1):
                    for g in opt.param_groups:
                        g["lr"] = 3e-3 * min(1.0, step / 10)
                    loss = model.loss(next(it))
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    if step in steps:
                        rows.append({"depth": depth, "width": width, "tokens": float(step * batch * seq_len),
                                     "loss": round(evaluate(model, val, seq_len=seq_len), 5),
                                     "params": float(n_parameters(model, non_embedding=True))})
                w.writerows(rows)
                f.flush()
                log(rows[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(repo_path(*RUNS_CSV)))
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    make_runs(args.out)


if __name__ == "__main__":
    main()

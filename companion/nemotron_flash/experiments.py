"""The notebook's experiments, each a function of its parameters returning plain dicts (what the claims read).

* :func:`depth_width_latency` — the LLaMA-shaped grid at (nearly) constant parameters: batch-1 decode ms/token
  with the cache and throughput at a larger batch, measured with :mod:`~companion.nemotron_flash.latency`;
* :func:`operator_context_latency` — decode step time of each operator against context length;
* :func:`operator_equivalence` — chunked vs recurrent forms, and ours vs fla's naive references (CPU);
* :func:`weight_norm_study` — a char-LM with and without weight normalisation, norms tracked after each step;
* :func:`search_toy` — aging evolution with short-training fitness and measured CPU latency.
"""

from __future__ import annotations

import numpy as np
import torch

from companion.core import check_int, time_ms
from companion.nemotron_flash.depth_width import DEPTH_WIDTH_GRID, llama_config, non_embedding_params
from companion.nemotron_flash.frontier import hybrid_config, layer_step_ms
from companion.nemotron_flash.latency import decode_step_ms, device_name
from companion.nemotron_flash.model import HybridLM, n_parameters
from companion.nemotron_flash.operators import (
    delta_rule_chunked,
    delta_rule_recurrent,
    scalar_decay_chunked,
    scalar_decay_recurrent,
)
from companion.nemotron_flash.search import aging_evolution
from companion.nemotron_flash.training import char_data, train_lm


def depth_width_latency(grid=DEPTH_WIDTH_GRID, *, context: int = 256, batch: int = 64, device="cpu",
                        cpu_reps: int = 5) -> dict:
    """For each (L, d): non-embedding parameters, batch-1 decode ms/token at ``context``, tokens/s at ``batch``."""
    rows = []
    for depth, width in grid:
        cfg = llama_config(depth, width, max_position=max(4096, context + 1))
        model = HybridLM(cfg).to(device).eval()
        b1 = decode_step_ms(model, batch=1, context=context, device=device, cpu_reps=cpu_reps)
        bb = decode_step_ms(model, batch=batch, context=context, device=device, cpu_reps=max(1, cpu_reps // 2))
        rows.append({"depth": depth, "width": width, "params": non_embedding_params(cfg), "ms_batch1": b1["ms"],
                     "tokens_per_s": batch * 1e3 / bb["ms"], "mode": b1["mode"]})
    return {"rows": rows, "context": context, "batch": batch, "device": device_name(device)}


def operator_context_latency(*, width: int = 64, contexts=(128, 1024, 4096, 16384), batch: int = 16,
                             ops=("a", "deltanet", "gdn", "m2", "f"), device="cpu", cpu_reps: int = 3) -> dict:
    """``{op: [ms at each context]}``: one operator's cached decode step (its pre-norm residual included).

    On the CPU the repetitions are interleaved (one step of every (operator, context) per round) and the minimum
    over ``cpu_reps`` rounds is kept (the least-disturbed run, as ``timeit`` recommends): on a shared machine a
    single preemption costs more than a whole step of these tiny layers."""
    from companion.nemotron_flash.frontier import make_layer_step

    keys = [(op, c) for op in ops for c in contexts]
    if torch.device(device).type == "cuda":
        ms = {k: layer_step_ms(k[0], width, context=k[1], batch=batch, device=device) for k in keys}
    else:
        steps = {k: make_layer_step(k[0], width, context=k[1], batch=batch, device=device) for k in keys}
        for f in steps.values():
            f()  # warm-up
        times = {k: [] for k in keys}
        for _ in range(cpu_reps):
            for k in keys:
                times[k].append(time_ms(steps[k], device, cpu_warmup=0, cpu_reps=1))
        ms = {k: min(v) for k, v in times.items()}
    out = {op: [ms[(op, c)] for c in contexts] for op in ops}
    return {"ms": out, "contexts": list(contexts), "width": width, "batch": batch, "device": device_name(device)}


def operator_equivalence(*, T: int = 100, chunk_size: int = 16, seed: int = 0) -> dict:
    """Max |difference| between chunked and recurrent forms (DeltaNet, Gated DeltaNet, scalar decay) and between
    ours and fla's naive references where fla is installed (``None`` otherwise)."""
    check_int("T", T, lo=1)
    gen = torch.Generator().manual_seed(seed)
    B, H, K, V = 2, 2, 16, 8
    q = torch.randn(B, T, H, K, generator=gen)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1)
    v = torch.randn(B, T, H, V, generator=gen)
    beta = torch.rand(B, T, H, generator=gen)
    g = -0.3 * torch.rand(B, T, H, generator=gen)
    S0 = torch.randn(B, H, K, V, generator=gen)
    res = {}
    for name, gg in (("deltanet", None), ("gated_deltanet", g)):
        o1, s1 = delta_rule_recurrent(q, k, v, beta, gg, initial_state=S0)
        o2, s2 = delta_rule_chunked(q, k, v, beta, gg, initial_state=S0, chunk_size=chunk_size)
        res[name] = {"chunked_vs_recurrent": max(float((o1 - o2).abs().max()), float((s1 - s2).abs().max())),
                     "recurrent": (o1, s1)}
    o1, s1 = scalar_decay_recurrent(q, k, v, g, initial_state=S0)
    o2, s2 = scalar_decay_chunked(q, k, v, g, initial_state=S0, chunk_size=chunk_size)
    res["mamba2_ssd"] = {"chunked_vs_recurrent": max(float((o1 - o2).abs().max()), float((s1 - s2).abs().max())),
                         "recurrent": (o1, s1)}
    naive = fla_naive()
    if naive is None:
        for r in res.values():
            r["vs_fla"] = None
    else:
        tr = (lambda x: x.transpose(1, 2))
        o, s = naive["delta_rule_recurrence"](tr(q), tr(k), tr(v), tr(beta), initial_state=S0.clone())
        o1, s1 = res["deltanet"]["recurrent"]
        res["deltanet"]["vs_fla"] = max(float((tr(o) - o1).abs().max()), float((s - s1).abs().max()))
        o, s = naive["naive_recurrent_gated_delta_rule"](q, k, v, beta, g, initial_state=S0.clone(),
                                                          output_final_state=True)
        o1, s1 = res["gated_deltanet"]["recurrent"]
        res["gated_deltanet"]["vs_fla"] = max(float((o - o1).abs().max()), float((s - s1).abs().max()))
        o, s = naive["naive_recurrent_simple_gla"](q, k, v, g, initial_state=S0.clone())
        o1, s1 = res["mamba2_ssd"]["recurrent"]
        res["mamba2_ssd"]["vs_fla"] = max(float((o - o1).abs().max()), float((s - s1).abs().max()))
    for r in res.values():
        r.pop("recurrent")
    return {"ops": res, "T": T, "chunk_size": chunk_size}


def fla_naive() -> dict | None:
    """fla's naive reference functions (``fla/ops/{delta_rule,gated_delta_rule,simple_gla}/naive.py``), loaded
    from their files so that fla's package ``__init__`` (which imports Triton and all of fla, ~6 s of CPU) is not
    run; ``None`` when fla is not installed."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("fla")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(list(spec.submodule_search_locations)[0]) / "ops"
    out = {}
    for sub, names in (("delta_rule", ("delta_rule_recurrence",)),
                       ("gated_delta_rule", ("naive_recurrent_gated_delta_rule",)),
                       ("simple_gla", ("naive_recurrent_simple_gla",))):
        path = root / sub / "naive.py"
        if not path.exists():
            return None
        mspec = importlib.util.spec_from_file_location(f"_fla_naive_{sub}", path)
        mod = importlib.util.module_from_spec(mspec)
        mspec.loader.exec_module(mod)
        out.update({n: getattr(mod, n) for n in names})
    return out


def weight_norm_study(*, steps: int = 60, width: int = 64, depth: int = 2, seeds=(0,), batch: int = 16,
                      seq_len: int = 64, lr: float = 3e-3, placement: str = "after_step", exempt: str = "embedding") -> dict:
    """The same LLaMA-shaped char-LM (same init, same batches) trained plainly and with weight normalisation
    (with ``logits_norm``, as the released code pairs them), for each seed."""
    _, _, vocab = char_data()
    runs = {"plain": [], "weight_norm": []}
    for seed in seeds:
        for name in runs:
            torch.manual_seed(seed)
            model = HybridLM(llama_config(depth, width, vocab_size=vocab, logits_norm=name == "weight_norm"))
            r = train_lm(model, steps=steps, batch=batch, seq_len=seq_len, lr=lr, seed=seed,
                         weight_norm=placement if name == "weight_norm" else None, exempt=exempt,
                         record_norm_error=True)
            runs[name].append(r)
    return {"runs": runs, "seeds": list(seeds), "steps": steps, "width": width, "depth": depth,
            "placement": placement, "exempt": exempt,
            "max_norm_error": max(max(r["norm_error"]) for r in runs["weight_norm"]),
            "val_plain": [r["val_loss"] for r in runs["plain"]], "val_wn": [r["val_loss"] for r in runs["weight_norm"]]}


def search_toy(*, population: int = 8, sample: int = 3, cycles: int = 10, steps: int = 3, width: int = 16,
               latency_quantile: float = 0.75, latency_reps: int = 1, seed: int = 0, device="cpu") -> dict:
    """Aging evolution; fitness = validation loss after ``steps`` training steps (lr 1e-2, batch 8 x 32) of the
    genome's model at ``width``; latency = its measured batch-1 decode ms/token on this CPU. The latency limit is the
    ``latency_quantile`` of the initial population's latencies (so some children are rejected)."""
    _, _, vocab = char_data()
    lat_cache: dict = {}

    def build(g):
        torch.manual_seed(seed)
        return HybridLM(hybrid_config(g.layer_types(), width, vocab))

    def latency(g):
        if g not in lat_cache:
            lat_cache[g] = decode_step_ms(build(g).eval(), batch=1, context=64, device=device, cpu_reps=latency_reps)["ms"]
        return lat_cache[g]

    def fitness(g):
        return train_lm(build(g), steps=steps, batch=8, seq_len=32, lr=1e-2, seed=seed, warmup=1, eval_batches=2)["val_loss"]

    import random

    rng = random.Random(seed)
    from companion.nemotron_flash.search import random_genome

    initial = [random_genome(rng) for _ in range(population)]
    limit = float(np.quantile([latency(g) for g in initial], latency_quantile))
    out = aging_evolution(fitness, latency, population=population, sample=sample, cycles=cycles,
                          latency_limit=limit, seed=seed, initial=initial)
    out.update({"steps": steps, "width": width, "device": device_name(device),
                "initial_best": min(m["fitness"] for m in out["history"][:population])})
    out["params"] = {m["genome"]: n_parameters(HybridLM(hybrid_config(m["genome"].layer_types(), width, 2)),
                                               non_embedding=True) for m in out["history"]}
    return out

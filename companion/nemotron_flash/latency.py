"""One latency harness for every model: batch-1 decode time per token with a cache, and max-batch throughput.

The paper's central point is that *measured* latency on the target device, not parameter count, should pick
depth, width and operators. Everything here measures; nothing estimates from FLOPs.

* :func:`decode_step_ms` — the median time of one cached decode step at context ``T`` for batch ``B``
  (``companion.core.time_ms``: ``triton.testing.do_bench`` on CUDA, a median of repetitions on the CPU). The
  cache is a static buffer filled to ``T`` positions; the step always writes position ``T`` (the cache position
  is reset before each step), so every repetition costs what decoding token ``T + 1`` costs. Values in the cache
  do not change the cost, so no prefill is run for timing. On CUDA the step is captured in a CUDA graph where
  capture works (``mode`` says which was used: ``"cuda-graph"`` or ``"eager"``).
* :func:`decode_seconds` — the time to decode ``n_tokens`` after a prompt of ``prompt`` tokens, from the step
  time measured at a few contexts between ``prompt`` and ``prompt + n_tokens`` and integrated with the
  trapezoid rule (linear operators have a flat step time; attention's grows linearly with the context, so the
  trapezoid is exact up to timing noise). The paper decodes 8k tokens token by token; this is the scaled-down,
  stated version.
* :func:`max_batch_throughput` — tokens per second at the largest batch (doubling) whose cache fits in device
  memory (or ``max_batch``), with the same integration over the decode.
"""

from __future__ import annotations

import platform

import numpy as np
import torch

from companion.core import ParameterError, check_int, cuda_graph, time_ms


def device_name(device) -> str:
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def _check_device(device):
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ParameterError("device", str(device), "'cpu' on a machine without CUDA (GPU timing needs a GPU)")
    return device


def make_decode_step(model, *, batch: int, context: int, device, cuda_graphs: bool | str = "auto"):
    """``(step, mode)``: ``step()`` decodes one token at position ``context`` (memory tokens included)."""
    check_int("batch", batch, lo=1)
    check_int("context", context, lo=0)
    device = _check_device(device)
    cache = model.init_cache(batch, context + 1, device=device)
    cache.prefilled = True
    ids = torch.zeros(batch, 1, dtype=torch.long, device=device)

    @torch.no_grad()
    def eager():
        cache.pos.fill_(context)
        return model(ids, cache)

    if device.type != "cuda" or cuda_graphs is False:
        return eager, "eager"
    try:  # pragma: no cover - CUDA only
        replay = cuda_graph(eager)
        replay()
        torch.cuda.synchronize()
        return replay, "cuda-graph"
    except Exception as err:  # noqa: BLE001 - any capture failure falls back to eager, recorded in `mode`
        if cuda_graphs is True:
            raise
        torch.cuda.synchronize()
        return eager, f"eager (CUDA graph capture failed: {type(err).__name__})"


def decode_step_ms(model, *, batch: int = 1, context: int = 0, device="cpu", cuda_graphs="auto",
                   cpu_reps: int = 5, rep_ms: int = 50) -> dict:
    """``{"ms": median ms per decode step, "mode", "batch", "context"}``."""
    step, mode = make_decode_step(model, batch=batch, context=context, device=device, cuda_graphs=cuda_graphs)
    ms = time_ms(step, device, warmup=10, rep=rep_ms, cpu_warmup=1, cpu_reps=cpu_reps)
    return {"ms": float(ms), "mode": mode, "batch": batch, "context": context}


def decode_seconds(model, *, n_tokens: int, prompt: int = 0, batch: int = 1, points: int = 3, device="cpu",
                   cuda_graphs="auto", cpu_reps: int = 5, rep_ms: int = 50) -> dict:
    """Seconds to decode ``n_tokens`` after ``prompt`` tokens (integrated from ``points`` measured contexts)."""
    check_int("n_tokens", n_tokens, lo=1)
    check_int("points", points, lo=2)
    ctxs = sorted({int(c) for c in np.linspace(prompt, prompt + n_tokens - 1, points).round()})
    rows = [decode_step_ms(model, batch=batch, context=c, device=device, cuda_graphs=cuda_graphs,
                           cpu_reps=cpu_reps, rep_ms=rep_ms) for c in ctxs]
    ms = [r["ms"] for r in rows]
    if len(ctxs) == 1:
        total_ms = ms[0] * n_tokens
    else:  # mean step time over the decode (trapezoid) times the number of tokens
        x, y = np.asarray(ctxs, float), np.asarray(ms, float)
        total_ms = float(((y[1:] + y[:-1]) / 2 * np.diff(x)).sum()) / (x[-1] - x[0]) * n_tokens
    return {"seconds": total_ms / 1e3, "ms_per_token": total_ms / n_tokens, "contexts": ctxs, "step_ms": ms,
            "mode": rows[0]["mode"], "batch": batch, "n_tokens": n_tokens, "prompt": prompt}


def max_batch_throughput(model, *, n_tokens: int, prompt: int = 0, device="cpu", start: int = 1,
                         max_batch: int = 64, points: int = 2, cuda_graphs="auto", cpu_reps: int = 3,
                         rep_ms: int = 30, deadline=None) -> dict:
    """Tokens/s at the largest batch (``start, 2·start, …`` up to ``max_batch``) whose cache fits; every tried
    batch's throughput is kept. ``deadline`` (a ``time.perf_counter()`` value) stops the doubling early."""
    import time

    check_int("max_batch", max_batch, lo=1)
    tried, b = [], check_int("start", start, lo=1)
    while b <= max_batch:
        if deadline is not None and time.perf_counter() > deadline:
            break
        try:
            r = decode_seconds(model, n_tokens=n_tokens, prompt=prompt, batch=b, points=points, device=device,
                               cuda_graphs=cuda_graphs, cpu_reps=cpu_reps, rep_ms=rep_ms)
        except torch.OutOfMemoryError:  # pragma: no cover - GPU only
            torch.cuda.empty_cache()
            break
        tried.append({"batch": b, "tokens_per_s": b * n_tokens / r["seconds"], "ms_per_step": r["ms_per_token"],
                      "mode": r["mode"]})
        b *= 2
    if not tried:
        raise RuntimeError("no batch size fitted (even the first one ran out of memory or time)")
    best = max(tried, key=lambda t: t["tokens_per_s"])
    return {"tokens_per_s": best["tokens_per_s"], "batch": best["batch"], "largest_batch": tried[-1]["batch"],
            "tried": tried}

"""ScaleKV (paper 03) on one GPU: a larger next-scale model, attention latency per scale, and the fused selection kernel.

Run from the repository root on the H200 machine (about 2-3 minutes)::

    python benchmarks/scalekv_gpu.py            # writes benchmarks/results/scalekv_gpu.json
    python benchmarks/scalekv_gpu.py --smoke    # tiny CPU version of every part, writes to /tmp/scalekv_smoke/

What it does (details in ``companion/scalekv/bench.py``):

1. Trains a larger ``TinyVAR`` (10 scales up to 16x16 = 655 tokens, 8 layers, width 256, 8 heads)
   on scikit-learn's digits for ``--train-seconds``, calibrates the ASI on 20 images and runs the
   Table 1 protocol on 100: every method (ScaleKV, uniform SnapKV, PyramidKV, StreamingLLM, sliding
   window) at 4 / 10 / 20 % of the cache with the official 16-token window; PSNR and token
   agreement against the full cache, teacher-forced hidden-state error, retained K/V bytes.
2. Times one attention layer (SDPA, bf16, 28 heads of 128 = Infinity-8B) at every scale of the
   1024^2 schedule, with the full cache and with a cache compressed to 650 tokens (the paper's 10 %).
3. Times the fused Triton selection (window scores -> max-pool -> top-k -> gather) against its
   PyTorch reference, eager and ``torch.compile``-d, at Infinity-8B geometry (batch 2 = one image with
   guidance, and 16 = the paper's batch 8 with guidance) on random tensors, and records the share of
   kept indices on which both agree.

Results are saved after every part, so a run stopped by a time limit keeps what it measured.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from companion.core import save_results  # noqa: E402
from companion.scalekv.bench import analytic_memory, attention_latency, larger_model_protocol, selection_timing  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny CPU run of every part (reference paths, wall-clock timing), results to /tmp")
    ap.add_argument("--train-seconds", type=float, default=60.0, help="training time of the larger model")
    ap.add_argument("--budget-s", type=float, default=200.0, help="skip the compiled reference once this much time has passed")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile-d reference")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    log = lambda *a: print(*a, flush=True)  # noqa: E731

    if args.smoke:
        device, out_dir = torch.device("cpu"), "/tmp/scalekv_smoke"
    else:
        if not torch.cuda.is_available():
            log("no CUDA device: this benchmark needs a GPU (run with --smoke on a CPU to check it end to end)")
            return 2
        device, out_dir = torch.device("cuda"), None
        torch.backends.cuda.matmul.allow_tf32 = True

    payload = {"protocol": "larger TinyVAR on digits (Table 1 protocol, fidelity to the full cache); one SDPA layer per scale "
                           "at Infinity-8B geometry (bf16), full vs 650-token cache; fused selection vs PyTorch reference, "
                           "random tensors; medians of triton.testing.do_bench",
               "smoke": bool(args.smoke), "complete": False, "analytic_memory": analytic_memory()}

    def save():
        payload["total_seconds"] = round(time.perf_counter() - t_start, 1)
        return save_results("scalekv_gpu", payload, out_dir=out_dir)

    save()
    log("== 1. larger model, Table 1 protocol")
    if args.smoke:
        payload["larger_model"] = larger_model_protocol(device, sides=(1, 2, 3, 4, 6, 8), layers=2, dim=32, heads=2, train_seconds=2.0,
                                                        max_steps=20, batch_size=8, fractions=(0.1, 0.3), n_cal=4, n_eval=6,
                                                        window_size=4, log=log)
    else:
        payload["larger_model"] = larger_model_protocol(device, train_seconds=args.train_seconds, log=log)
    lm = payload["larger_model"]
    for r in lm["rows"]:
        log(f"  {r['method']:<10} {r['fraction']:.0%}: PSNR {r['psnr']:6.2f} dB, agreement {r['agreement']:.3f}, "
            f"hidden error {r['hidden_error']:.4f}, memory {r['memory_fraction']:.3f}")
    save()

    log("== 2. attention latency per scale (one layer)")
    if args.smoke:
        payload["latency"] = attention_latency(device, sides=(1, 2, 4, 6, 8, 12, 16), geometry=dict(layers=1, heads=2, head_dim=32),
                                               batch=1, budget=65, dtype=torch.float32, log=log)
    else:
        payload["latency"] = attention_latency(device, batch=16, log=log)
        payload["latency_batch"] = 16
    full_ms = sum(r["full_ms"] for r in payload["latency"])
    comp_ms = sum(r["compressed_ms"] for r in payload["latency"])
    payload["latency_total"] = {"full_ms": round(full_ms, 4), "compressed_ms": round(comp_ms, 4), "speedup": round(full_ms / comp_ms, 3)}
    log(f"  all scales: {full_ms:.3f} ms full vs {comp_ms:.3f} ms compressed ({full_ms / comp_ms:.2f}x)")
    save()

    log("== 3. fused selection vs PyTorch reference")
    rows = []
    if args.smoke:
        rows += selection_timing(device, geometry=dict(layers=1, heads=2, head_dim=32), batch=1, cases=((300, 12), (600, 16)),
                                 capacity=64, dtype=torch.float32, log=log)
    else:
        for batch in (2, 16):
            compile_ok = not args.no_compile and (time.perf_counter() - t_start) < args.budget_s
            part = selection_timing(device, batch=batch, compile_reference=compile_ok, log=log)
            for r in part:
                r["batch"] = batch
                r["label"] = f"B={batch}, " + r["label"]
            rows += part
            payload["selection"] = rows
            save()
    payload["selection"] = rows
    payload["complete"] = True
    path = save()
    log(f"wrote {path} in {payload['total_seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Paper 08 (DartQuant) on one GPU: QR-Orth vs Cayley per step at n = 4096 and 8192; the fused Triton kernel
(X R, per-token INT4 fake-quant, Whip sums) against eager PyTorch and torch.compile at 32768 tokens × d = 4096
(TB/s, TFLOP/s, speed-up, agreement on the GPU); and, for two byte-level LLaMA-layout models trained for
seconds on local text, W4A4KV4 perplexity (held-out source and docstrings) for no rotation, QuaRot, DartQuant
and end-to-end Cayley R1 training, with the calibration wall time and peak memory of DartQuant against the
end-to-end training (see companion/dartquant/scale.py). This is the issue's "dartquant_calibration" benchmark.

    PYTHONPATH=. python benchmarks/dartquant_gpu.py           # H200: about 2 minutes; writes benchmarks/results/dartquant_gpu.json
    PYTHONPATH=. python benchmarks/dartquant_gpu.py --smoke   # CPU: tiny model, kernel in the Triton interpreter; temp folder

Needs torch, transformers, numpy, triton; not plotly.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny CPU run; results go to a temp folder")
    parser.add_argument("--out-dir", default=None, help="folder for dartquant_gpu.json (default benchmarks/results)")
    parser.add_argument("--deadline", type=float, default=150.0, help="seconds after which later stages are skipped")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    if args.smoke:  # the kernel runs in the Triton interpreter on the CPU; set before triton.jit decorates it
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch

    if not args.smoke and not torch.cuda.is_available():
        print("no CUDA device: run with --smoke on a CPU", file=sys.stderr)
        return 2
    from companion.core import save_results
    from companion.dartquant.scale import RESULTS_NAME, run_scale_up

    out_dir = args.out_dir or (tempfile.mkdtemp(prefix="dartquant_") if args.smoke else None)
    command = " ".join(["PYTHONPATH=. python benchmarks/dartquant_gpu.py", *(sys.argv[1:] if argv is None else argv)])

    def save(payload):
        return save_results(RESULTS_NAME, {"command": command, **payload}, out_dir=out_dir)

    t0 = time.perf_counter()
    payload = run_scale_up(smoke=args.smoke, seed=args.seed, deadline_s=args.deadline,
                           log=lambda *a: print(*a, flush=True), save=save)
    path = save(payload)
    print(f"wrote {path} after {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

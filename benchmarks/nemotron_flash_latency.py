"""Paper 15 on one GPU: batch-1 decode latency and max-batch throughput of an NF-1B-shaped hybrid against a
Qwen3-0.6B-shaped transformer (random weights, one harness for both, CUDA graphs where capture works, HF
``generate`` timed too), the depth-width grid, operator microbenchmarks (fla's Triton kernels vs our PyTorch)
and the explorer's per-operator timings. See companion/nemotron_flash/scale.py for what is measured.

    PYTHONPATH=. python benchmarks/nemotron_flash_latency.py              # H200: <= 150 s; writes benchmarks/results/nemotron_flash_latency.json
    PYTHONPATH=. python benchmarks/nemotron_flash_latency.py --smoke      # CPU: tiny models, seconds, writes to a temp folder

Needs torch, numpy, transformers (triton for the CUDA timer; fla-core for the fla comparison, optional); not plotly.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny CPU run; results go to a temp folder")
    parser.add_argument("--out-dir", default=None, help="folder for nemotron_flash_latency.json (default benchmarks/results)")
    parser.add_argument("--deadline", type=float, default=None, help="seconds after which later stages are skipped (default 140)")
    parser.add_argument("--n-tokens", type=int, default=None, help="tokens decoded (default 8192)")
    parser.add_argument("--max-batch", type=int, default=None, help="largest batch tried for throughput (default 1024)")
    args = parser.parse_args(argv)

    import torch

    if not args.smoke and not torch.cuda.is_available():
        print("no CUDA device: run with --smoke on a CPU", file=sys.stderr)
        return 2
    from companion.core import save_results
    from companion.nemotron_flash.scale import RESULTS_NAME, run_scale_up

    out_dir = args.out_dir or (tempfile.mkdtemp(prefix="nemotron_flash_") if args.smoke else None)
    command = " ".join(["PYTHONPATH=. python benchmarks/nemotron_flash_latency.py", *(sys.argv[1:] if argv is None else argv)])

    def save(payload):
        return save_results(RESULTS_NAME, {"command": command, **payload}, out_dir=out_dir)

    t0 = time.perf_counter()
    payload = run_scale_up(smoke=args.smoke, deadline_s=args.deadline, n_tokens=args.n_tokens, max_batch=args.max_batch,
                           log=lambda *a: print(*a, flush=True), save=save)
    path = save(payload)
    print(f"wrote {path} after {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

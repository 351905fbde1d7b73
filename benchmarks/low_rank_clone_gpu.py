"""Paper 11 on one GPU: Low-Rank Clone's training efficiency (see companion/low_rank_clone/scale.py).

A byte-level LLaMA-layout teacher trained from scratch on local text, then students at d/2 by LRC,
random init + KD and Minitron-style hard pruning + KD on the same batches (tokens to a validation loss),
LRC's step throughput against plain training of the same student, and a projected linear layer with
W_S = W_T P materialised against the factored x Pᵀ W_Tᵀ.

    PYTHONPATH=. python benchmarks/low_rank_clone_gpu.py          # H200: about 150 s; writes benchmarks/results/low_rank_clone_gpu.json
    PYTHONPATH=. python benchmarks/low_rank_clone_gpu.py --smoke  # CPU: tiny models, seconds, writes to a temp folder

Needs torch, transformers, numpy (triton for the CUDA timer); not plotly.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny CPU run; results go to a temp folder")
    parser.add_argument("--out-dir", default=None, help="folder for low_rank_clone_gpu.json (default benchmarks/results)")
    parser.add_argument("--deadline", type=float, default=170.0, help="seconds after which optional stages are skipped")
    args = parser.parse_args(argv)

    import torch

    if not args.smoke and not torch.cuda.is_available():
        print("no CUDA device: run with --smoke on a CPU", file=sys.stderr)
        return 2
    from companion.core import save_results
    from companion.low_rank_clone.scale import RESULTS_NAME, run_scale_up

    out_dir = args.out_dir or (tempfile.mkdtemp(prefix="low_rank_clone_") if args.smoke else None)
    command = " ".join(["PYTHONPATH=. python benchmarks/low_rank_clone_gpu.py", *(sys.argv[1:] if argv is None else argv)])

    def save(payload):
        return save_results(RESULTS_NAME, {"command": command, **payload}, out_dir=out_dir)

    t0 = time.perf_counter()
    payload = run_scale_up(smoke=args.smoke, deadline_s=args.deadline, log=lambda *a: print(*a, flush=True), save=save)
    path = save(payload)
    print(f"wrote {path} after {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Paper 12 (LoRASuite) on one GPU: an ≈85M → ≈180M char-level Llama upgrade (wider, deeper, more heads, GQA
target) trained from scratch on local text, LoRA adapters on two tasks, LoRASuite's transfer, LFT swept over
sample counts and learning rates beside LoRA(n) from scratch, wall time and peak memory against LoRA(full)
retraining, and the SVD step at d = 2048 / 4096 (see companion/lorasuite/scale.py for what is measured).

    PYTHONPATH=. python benchmarks/lorasuite_gpu.py           # H200: ~150 s; writes benchmarks/results/lorasuite_gpu.json
    PYTHONPATH=. python benchmarks/lorasuite_gpu.py --smoke   # CPU: tiny models, a minute; writes to a temp folder

Needs torch, transformers, peft, scipy (triton for the CUDA timer); not plotly.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny CPU run; results go to a temp folder")
    parser.add_argument("--out-dir", default=None, help="folder for lorasuite_gpu.json (default benchmarks/results)")
    parser.add_argument("--budget", type=float, default=None, help="seconds after which later stages are skipped (140)")
    args = parser.parse_args(argv)

    import torch

    if not args.smoke and not torch.cuda.is_available():
        print("no CUDA device: run with --smoke on a CPU", file=sys.stderr)
        return 2
    from companion.core import save_results
    from companion.lorasuite.scale import RESULTS_NAME, run_scale_up

    out_dir = args.out_dir or (tempfile.mkdtemp(prefix="lorasuite_") if args.smoke else None)
    command = " ".join(["PYTHONPATH=. python benchmarks/lorasuite_gpu.py", *(sys.argv[1:] if argv is None else argv)])

    def save(payload):
        return save_results(RESULTS_NAME, {"command": command, **payload}, out_dir=out_dir)

    t0 = time.perf_counter()
    payload = run_scale_up(smoke=args.smoke, budget_s=args.budget, log=lambda *a: print(*a, flush=True), save=save)
    path = save(payload)
    print(f"wrote {path} after {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

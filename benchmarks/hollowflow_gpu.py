"""Paper 13 (HollowFlow) on one GPU: the time of one RK4 step with exact likelihood against n for the fully
connected baseline (n·d VJPs) and HollowFlow (d VJPs, k = 7 and k = ⌈√n⌉), fitted exponents, the forward /
divergence split; the Triton segment-sum kernel against index_add_ on NoBGNN's pruned line-edge lists; and
briefly trained LJ13 and LJ55 models with ESS, ESS_rem and EffSU
(see companion/hollowflow/scale.py for what is measured).

    PYTHONPATH=. python benchmarks/hollowflow_gpu.py --deadline 330   # H200: about 4.5 min; writes benchmarks/results/hollowflow_gpu.json
    PYTHONPATH=. python benchmarks/hollowflow_gpu.py --smoke  # CPU: tiny sizes, the kernel in the Triton interpreter

Each size is timed at the batch a memory model allows (companion.hollowflow.scale.bytes_per_sample), halved
on CUDA out-of-memory down to one sample (a size that still fails is recorded as skipped), and scaled
linearly to 1,000 samples; the batches used are in the JSON, which is written even when a stage fails.

Needs torch, numpy, scipy (triton for the CUDA timer); not plotly.
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
    parser.add_argument("--out-dir", default=None, help="folder for hollowflow_gpu.json (default benchmarks/results)")
    parser.add_argument("--deadline", type=float, default=None,
                        help="seconds after which remaining stages are skipped (default: GPU_PROFILE['deadline_s'], 330)")
    args = parser.parse_args(argv)
    if args.smoke:  # the kernel stage runs the Triton kernel in the CPU interpreter (set before any triton.jit)
        os.environ.setdefault("TRITON_INTERPRET", "1")

    import torch

    if not args.smoke and not torch.cuda.is_available():
        print("no CUDA device: run with --smoke on a CPU", file=sys.stderr)
        return 2
    if args.smoke:
        torch.set_num_threads(1)
    from companion.core import save_results
    from companion.hollowflow.scale import GPU_PROFILE, RESULTS_NAME, run_scale_up

    deadline = GPU_PROFILE["deadline_s"] if args.deadline is None else args.deadline

    out_dir = args.out_dir or (tempfile.mkdtemp(prefix="hollowflow_") if args.smoke else None)
    command = " ".join(["PYTHONPATH=. python benchmarks/hollowflow_gpu.py", *(sys.argv[1:] if argv is None else argv)])

    def save(payload):
        return save_results(RESULTS_NAME, {"command": command, **payload}, out_dir=out_dir)

    t0 = time.perf_counter()
    try:
        payload = run_scale_up(smoke=args.smoke, deadline_s=deadline, log=lambda *a: print(*a, flush=True), save=save)
    except Exception as err:  # noqa: BLE001 - the JSON is always written
        payload = {"smoke": args.smoke, "errors": [f"{type(err).__name__}: {err}"], "likelihood_step": []}
        print(f"failed: {payload['errors'][0]}", file=sys.stderr)
    path = save(payload)
    print(f"wrote {path} after {time.perf_counter() - t0:.0f} s")
    if payload.get("errors"):
        print("errors: " + "; ".join(payload["errors"]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

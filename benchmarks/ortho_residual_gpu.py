"""Paper 10 on one GPU: the SmolLM-135M-shaped decoder with and without the orthogonal residual update
(training curves, per-layer statistics), the step-time overhead eager and under torch.compile, and the
bf16 study (see companion/ortho_residual/scale.py for what is measured).

    PYTHONPATH=. python benchmarks/ortho_residual_gpu.py      # H200: ~5 minutes; writes benchmarks/results/ortho_residual_gpu.json
    PYTHONPATH=. python benchmarks/ortho_residual_gpu.py --smoke   # CPU: tiny model, seconds, writes to a temp folder
    PYTHONPATH=. python benchmarks/ortho_residual_gpu.py --only bf16   # H200: ~3 minutes; reruns the bf16-coefficient
        # study alone (3 seeds, bf16 residual stream) into the recorded JSON, keeping its other stages

Needs torch, numpy (triton for the CUDA timer); not plotly.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny CPU run; results go to a temp folder")
    parser.add_argument("--out-dir", default=None, help="folder for ortho_residual_gpu.json (default benchmarks/results)")
    parser.add_argument("--train-seconds", type=float, default=None, help="training time per model")
    parser.add_argument("--bf16-seconds", type=float, default=None, help="training time of the bf16-coefficient study")
    parser.add_argument("--bf16-seeds", type=int, default=None, help="seeds of the bf16-coefficient study (default 3)")
    parser.add_argument("--only", choices=("all", "bf16"), default="all",
                        help="bf16: rerun the bf16-coefficient study alone into the recorded results")
    parser.add_argument("--deadline", type=float, default=330.0, help="seconds after which optional stages are skipped")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile timing")
    args = parser.parse_args(argv)

    import torch

    if not args.smoke and not torch.cuda.is_available():
        print("no CUDA device: run with --smoke on a CPU", file=sys.stderr)
        return 2
    from companion.core import save_results
    from companion.ortho_residual.scale import RESULTS_NAME, recorded, run_bf16_study, run_scale_up

    out_dir = args.out_dir or (tempfile.mkdtemp(prefix="ortho_residual_") if args.smoke else None)
    command = " ".join(["PYTHONPATH=. python benchmarks/ortho_residual_gpu.py", *(sys.argv[1:] if argv is None else argv)])

    def save(payload):
        path = save_results(RESULTS_NAME, {"command": command, **payload}, out_dir=out_dir)
        return path

    t0 = time.perf_counter()
    log = lambda *a: print(*a, flush=True)  # noqa: E731
    if args.only == "bf16":
        previous = recorded() if not args.smoke else {"smoke": True}
        if previous is None:
            print("no recorded results to add the study to: run the whole benchmark first", file=sys.stderr)
            return 2
        payload = run_bf16_study(previous, smoke=args.smoke, bf16_seconds=args.bf16_seconds, bf16_seeds=args.bf16_seeds,
                                 deadline_s=args.deadline, command=command, log=log)
        path = save_results(RESULTS_NAME, payload, out_dir=out_dir)  # the recorded run's command and stamps stay
    else:
        payload = run_scale_up(smoke=args.smoke, train_seconds=args.train_seconds, bf16_seconds=args.bf16_seconds,
                               bf16_seeds=args.bf16_seeds, compile_timing=not args.no_compile, deadline_s=args.deadline,
                               log=log, save=save)
        path = save(payload)
    print(f"wrote {path} after {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

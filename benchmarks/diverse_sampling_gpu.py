"""Paper 19 on one GPU machine: the templated-QA word LM (24 questions, wider), the MiniLM partial NLI (or
the templates' oracle similarity where the MiniLM package is missing), and a sweep of N in {4 ... 64}, fixed
vs adaptive λ, and k over three seeds: AUROC of SE (IID vs steered + IS), clusters covered, ESS/N, ms per sample (see
companion/diverse_sampling/scale.py).

    PYTHONPATH=. python benchmarks/diverse_sampling_gpu.py          # H200: about 45 s (3 seeds, oracle scorer); writes benchmarks/results/diverse_sampling_gpu.json
    PYTHONPATH=. python benchmarks/diverse_sampling_gpu.py --smoke  # CPU: tiny sizes, under a minute, writes to a temp folder

Needs torch, numpy, scikit-learn, transformers (MiniLM optional); not plotly.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny CPU run; results go to a temp folder")
    parser.add_argument("--out-dir", default=None, help="folder for diverse_sampling_gpu.json (default benchmarks/results)")
    parser.add_argument("--deadline", type=float, default=None, help="seconds after which the remaining sweep points are skipped")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import torch

    if not args.smoke and not torch.cuda.is_available():
        print("no CUDA device: run with --smoke on a CPU", file=sys.stderr)
        return 2
    from companion.core import limit_threads, save_results
    from companion.diverse_sampling.scale import GPU_PROFILE, RESULTS_NAME, SMOKE_PROFILE, run_scale_up

    cfg = dict(SMOKE_PROFILE if args.smoke else GPU_PROFILE)
    if args.deadline is not None:
        cfg["deadline_s"] = float(args.deadline)
    out_dir = args.out_dir or (tempfile.mkdtemp(prefix="diverse_sampling_") if args.smoke else None)
    command = " ".join(["PYTHONPATH=. python benchmarks/diverse_sampling_gpu.py", *(sys.argv[1:] if argv is None else argv)])
    device = "cuda" if torch.cuda.is_available() and not args.smoke else "cpu"
    t0 = time.perf_counter()
    with limit_threads(1):  # per-token sampling of tiny models: threads only add overhead
        payload = run_scale_up(cfg, seed=args.seed, device=device, log=lambda *a: print(*a, flush=True))
    path = save_results(RESULTS_NAME, {"command": command, "smoke": args.smoke, **payload}, out_dir=out_dir)
    print(f"wrote {path} after {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

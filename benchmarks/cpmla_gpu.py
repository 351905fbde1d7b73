"""CPMLA on one GPU: cooperative training on upsampled digits, sample quality (KID / MMD on fixed random
features), sampling time per 1k samples against T, and ablations over the Hessian and the L-BFGS cap of the
inverse mirror map (paper 14; see companion/cpmla/scale.py for what is measured and why).

    python benchmarks/cpmla_gpu.py                 # H200: about 2-3 minutes; writes benchmarks/results/cpmla_gpu.json
    python benchmarks/cpmla_gpu.py --out DIR       # write DIR/cpmla_gpu.json instead
    python benchmarks/cpmla_gpu.py --smoke         # CPU: tiny sizes, results to a temp folder

Needs torch, numpy and scikit-learn (for the bundled digits); not plotly.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny CPU run; results go to a temp folder")
    parser.add_argument("--out", default=None, help="folder for cpmla_gpu.json (default benchmarks/results)")
    args = parser.parse_args(argv)

    import torch

    if not args.smoke and not torch.cuda.is_available():
        print("no CUDA device: run with --smoke on a CPU", file=sys.stderr)
        return 2
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from companion.core import save_results, seed_everything
    from companion.cpmla.scale import GPU_PROFILE, RESULTS_NAME, SMOKE_PROFILE, run_scale_up

    seed_everything(0)
    device = "cuda" if torch.cuda.is_available() and not args.smoke else "cpu"
    config = SMOKE_PROFILE if args.smoke else GPU_PROFILE
    result = run_scale_up(config, device=device, log=lambda m: print(m, flush=True))
    result["command"] = "python benchmarks/cpmla_gpu.py" + (" --smoke" if args.smoke else "")
    out_dir = tempfile.mkdtemp() if args.smoke and args.out is None else args.out
    path = save_results(RESULTS_NAME, result, out_dir=out_dir)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

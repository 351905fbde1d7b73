"""Paper 17 (GAIN-RL) on one GPU: angle-metric timing, layer-wise angle/gradient correlation, and GRPO with
uniform / GAIN / DAPO-style filtered sampling over 3 seeds on a ~25M-parameter character policy.

    PYTHONPATH=. python benchmarks/gain_rl_gpu.py            # one H200, about 150 s
    PYTHONPATH=. python benchmarks/gain_rl_gpu.py --smoke    # a tiny CPU run of the same code

Writes ``benchmarks/results/gain_rl_gpu.json`` (``--smoke``: ``gain_rl_gpu_smoke.json`` in ``--out-dir`` or a
temporary folder) through ``companion.core.save_results`` (device, torch, triton, date).
"""

from __future__ import annotations

import argparse
import sys
import tempfile

import torch

from companion.core import save_results
from companion.gain_rl.scale import GPU_PROFILE, RESULTS_NAME, SMOKE_PROFILE, run_scale_up


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out-dir", default=None, help="where the JSON goes (default benchmarks/results)")
    args = ap.parse_args(argv)
    command = " ".join(["PYTHONPATH=. python benchmarks/gain_rl_gpu.py", *(sys.argv[1:] if argv is None else argv)])
    if args.smoke:
        torch.set_num_threads(1)
        result = run_scale_up(SMOKE_PROFILE, device="cpu", seed=args.seed)
        out_dir = args.out_dir or tempfile.mkdtemp(prefix="gain_rl_smoke_")
        path = save_results(RESULTS_NAME + "_smoke", {"command": command, **result}, out_dir)
    else:
        if not torch.cuda.is_available():
            print("needs CUDA (use --smoke for a CPU check)")
            return 2
        torch.backends.cuda.matmul.allow_tf32 = True
        result = run_scale_up(GPU_PROFILE, device="cuda", seed=args.seed)
        path = save_results(RESULTS_NAME, {"command": command, **result},
                            args.out_dir)
    print(f"wrote {path} ({result['total_seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

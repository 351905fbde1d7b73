"""Paper 07 (GMV) on one GPU: GCN / GIN / GraphGPS × GMV and its baselines on a larger, noisier planted-motif
set, the sub-network sweep 2–10, label noise and label ratios, inference latency.

    python benchmarks/graph_multiview_gpu.py              # one H200, at most about 150 s (--deadline 120 skips later stages)
    python benchmarks/graph_multiview_gpu.py --smoke      # tiny CPU run (writes to /tmp unless --out-dir)
    python benchmarks/graph_multiview_gpu.py --stages heads_sweep,latency_ms --resume benchmarks/results/graph_multiview_gpu.json
                                                          # complete a study over several calls (other stages kept)
    python benchmarks/graph_multiview_gpu.py --stages heads_sweep --resume benchmarks/results/graph_multiview_gpu.json
                                                          # redo one stage (here the sweep recorded before the fix of
                                                          # the M > 2 label weights); every other stage is kept as is

Results: ``benchmarks/results/graph_multiview_gpu.json`` through ``companion.core.save_results`` (written after
every stage, so a deadline still leaves a valid file). The TU sets, OGB, REDDIT and COLLAB are not available
offline and are marked "not reproduced".
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from companion.core import save_results  # noqa: E402
from companion.graph_multiview.scale import GPU_PROFILE, RESULTS_NAME, SMOKE_PROFILE, STAGES, run_scale_up  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="tiny CPU run")
    ap.add_argument("--deadline", type=float, default=120.0, help="seconds after which later stages are skipped")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out-dir", default=None, help="results folder (default: benchmarks/results; /tmp for --smoke)")
    ap.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated subset of {', '.join(STAGES)}")
    ap.add_argument("--resume", default=None, help="an earlier JSON of the same profile whose other stages are kept")
    args = ap.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() and not args.smoke else "cpu"
    if device == "cpu" and not args.smoke:
        ap.error("no CUDA device: use --smoke for a CPU run")
    out = args.out_dir or (tempfile.mkdtemp(prefix="gmv-smoke-") if args.smoke else None)
    torch.set_num_threads(2 if args.smoke else 8)
    previous = json.loads(open(args.resume, encoding="utf-8").read()) if args.resume else None
    payload = run_scale_up(SMOKE_PROFILE if args.smoke else GPU_PROFILE, device=device, deadline=args.deadline,
                           seed=args.seed, save=lambda p: save_results(RESULTS_NAME, {**p, "smoke": args.smoke}, out),
                           stages=[s for s in args.stages.split(",") if s], previous=previous)
    path = save_results(RESULTS_NAME, {**payload, "smoke": args.smoke}, out)
    print(f"wrote {path} in {payload['seconds']} s; skipped: {payload['skipped'] or 'nothing'}")


if __name__ == "__main__":
    main()

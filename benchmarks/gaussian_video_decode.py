"""Paper 05 (4DGCPro) on one GPU: progressive decode + dequantise + render per frame for l = 1..L on a
synthetic 3-D Gaussian scene, through the paper's H.264 path (x264 via PyAV, FFmpeg decode) and a zlib
bitstream for comparison, and the Triton tile rasteriser against gsplat (timed first: ``rasterization`` end
to end and ``rasterize_to_pixels`` alone, then ours on the same projected inputs and tile lists; mean and
max absolute pixel difference) and the per-tile PyTorch splatter. A gsplat that cannot load or fails is
recorded in the JSON and the run goes on. See companion/gaussian_video/scale.py for what is measured.

    PYTHONPATH=. python benchmarks/gaussian_video_decode.py            # H200: about a minute; writes benchmarks/results/gaussian_video_decode.json
    COMPANION_GSPLAT_SO=/path/to/gsplat_cuda.so PYTHONPATH=. python benchmarks/gaussian_video_decode.py   # with a prebuilt gsplat extension
    PYTHONPATH=. python benchmarks/gaussian_video_decode.py --smoke    # CPU: tiny scene, Triton interpreter, gsplat recorded as unavailable; writes to a temp folder

Needs torch, numpy, triton, av (PyAV with libx264); gsplat optional; not plotly.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny CPU run (Triton interpreter); results go to a temp folder")
    parser.add_argument("--out-dir", default=None, help="folder for gaussian_video_decode.json (default benchmarks/results)")
    parser.add_argument("--deadline", type=float, default=120.0, help="seconds after which later layer counts are skipped")
    parser.add_argument("--n-gaussians", type=int, default=None, help="override the scene size")
    args = parser.parse_args(argv)

    if args.smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel module is imported
    import torch

    if not args.smoke and not torch.cuda.is_available():
        print("no CUDA device: run with --smoke on a CPU", file=sys.stderr)
        return 2
    from companion.core import save_results
    from companion.gaussian_video.scale import GPU_PROFILE, RESULTS_NAME, SMOKE_PROFILE, run_scale_up

    out_dir = args.out_dir or (tempfile.mkdtemp(prefix="gaussian_video_") if args.smoke else None)
    command = " ".join(["PYTHONPATH=. python benchmarks/gaussian_video_decode.py", *(sys.argv[1:] if argv is None else argv)])
    profile = dict(SMOKE_PROFILE if args.smoke else GPU_PROFILE)
    if args.n_gaussians:
        profile["n_gaussians"] = args.n_gaussians

    def save(payload):
        return save_results(RESULTS_NAME, {"command": command, **payload}, out_dir=out_dir)

    t0 = time.perf_counter()
    payload = run_scale_up(smoke=args.smoke, deadline_s=args.deadline, log=lambda *a: print(*a, flush=True),
                           save=save, profile=profile)
    path = save(payload)
    print(f"wrote {path} after {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

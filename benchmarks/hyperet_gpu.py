"""HyperET on one GPU: the fused HRA kernel timed against eager PyTorch and the closed form, and a larger
multi-granularity alignment run (paper 02; see companion.hyperet.scale.py for what is measured).

    python benchmarks/hyperet_gpu.py            # H200: ~2 minutes; writes benchmarks/results/hyperet_gpu.json
    python benchmarks/hyperet_gpu.py --smoke    # CPU: tiny sizes, Triton interpreter, writes to a temp folder

Needs torch, triton, numpy, scikit-learn; not plotly, geoopt or the MiniLM package (the prompt
embeddings come from companion/hyperet/prompt_embeddings.npz).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny CPU run (Triton interpreter); results go to a temp folder")
    parser.add_argument("--skip-align", action="store_true", help="only the kernel benchmark")
    args = parser.parse_args(argv)

    import torch

    if args.smoke and not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"  # before the kernel module is imported
    elif not torch.cuda.is_available():
        print("no CUDA device: run with --smoke on a CPU", file=sys.stderr)
        return 2

    from companion.core import save_results, seed_everything
    from companion.hyperet.scale import kernel_benchmark, scaled_alignment

    seed_everything(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    start = time.perf_counter()
    payload = {"smoke": args.smoke}

    if args.smoke:
        payload["kernel"] = kernel_benchmark(layers=1, width=32, dtype=torch.float32, device=device, smoke=True)
    else:
        payload["kernel"] = kernel_benchmark(layers=24, width=1024, dtype=torch.bfloat16, device=device)
    for row in payload["kernel"]["rows"]:
        print(f"{row['structure']:>8}  {row['impl']:<45} fwd {row['fwd_ms']:8.3f} ms  fwd+bwd {row['fwd_bwd_ms']:8.3f} ms  dev {row['rel_dev_from_fp64_identity']:.1e}")
    kernel_ok = all(r.get("fwd_rel_err_vs_reference_fp32", 0) < 1e-2 and r.get("grad_rel_err_vs_reference_fp32", 0) < 1e-2 for r in payload["kernel"]["rows"])
    payload["kernel_matches_reference"] = kernel_ok
    print(f"kernel matches reference: {kernel_ok}  ({time.perf_counter() - start:.0f} s)")

    if not args.skip_align:
        try:
            # the extra "HRA diag (q,v) fused" variant only when the kernel checked out
            payload["alignment"] = scaled_alignment(device=device, smoke=args.smoke, fused_variant=kernel_ok)
            for row in payload["alignment"]["rows"]:
                print(f"{row['variant']:<24} fine {row['acc_fine']:.3f} mid {row['acc_mid']:.3f} coarse {row['acc_coarse']:.3f} share {row['trainable_share_%']:.2f}% step {row['step_ms']:.1f} ms")
        except Exception:  # keep the kernel numbers even if the training run fails
            payload["alignment_error"] = traceback.format_exc()
            print(payload["alignment_error"], file=sys.stderr)

    payload["total_seconds"] = time.perf_counter() - start
    out_dir = tempfile.mkdtemp(prefix="hyperet_smoke_") if args.smoke else None
    path = save_results("hyperet_gpu", payload, out_dir=out_dir)
    print(f"wrote {path} in {payload['total_seconds']:.0f} s")
    return 0 if "alignment_error" not in payload else 1


if __name__ == "__main__":
    sys.exit(main())

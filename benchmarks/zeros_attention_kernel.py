"""ZeroS chunked Triton kernel vs the explicit reference, the official scan, SDPA flash and
flash-linear-attention (paper 04, ZeroS, NeurIPS 2025).

    python benchmarks/zeros_attention_kernel.py            # on one H200: T = 2k..64k, H=16, d=64, bf16
    python benchmarks/zeros_attention_kernel.py --smoke    # tiny CPU run (Triton interpreter), checks the script

Writes ``benchmarks/results/zeros_attention_kernel.json`` (the smoke run writes to a temporary
folder instead, never over the GPU results). flash-linear-attention is optional: if
``fla.ops.linear_attn.chunk_linear_attn`` imports it is measured in the same run, otherwise the JSON
says it was absent and the notebook compares with the anchors' fla numbers, labelled as anchors.
Each contender runs inside ``try``; a failing one is recorded with its error. Expected runtime on an
H200: about 1.5-3 minutes (compile and autotune included); ``--budget`` caps it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny CPU run under TRITON_INTERPRET=1")
    p.add_argument("--budget", type=float, default=170.0, help="seconds after which only our kernel keeps running")
    p.add_argument("--T", type=int, nargs="*", default=None, help="sequence lengths (default 2048..65536)")
    args = p.parse_args(argv)

    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton.jit decorates the kernels
    import torch

    from companion.core import save_results
    from companion.zeros_attention.bench import run_kernel_benchmark

    if args.smoke:
        torch.set_num_threads(2)
        payload = run_kernel_benchmark(args.T or [64, 96], B=1, H=2, d=16, dtype=torch.float32, device="cpu",
                                       ref_max_T=128, scan_max_T=128, budget_s=args.budget)
        out = save_results("zeros_attention_kernel_smoke", {"smoke": True, **payload},
                           out_dir=tempfile.mkdtemp(prefix="zeros_smoke_"))
        print(f"smoke results: {out}")
        bad = [r for r in payload["rows"] if r["op"] == "ours" and ("fwd_error" in r or "fwdbwd_error" in r)]
        return 1 if bad else 0
    if not torch.cuda.is_available():
        print("this benchmark needs a CUDA GPU; use --smoke on a CPU", file=sys.stderr)
        return 2
    payload = run_kernel_benchmark(args.T or (2048, 4096, 8192, 16384, 32768, 65536), B=1, H=16, d=64,
                                   dtype=torch.bfloat16, device="cuda", budget_s=args.budget)
    out = save_results("zeros_attention_kernel", payload)
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

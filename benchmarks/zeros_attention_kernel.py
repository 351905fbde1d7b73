"""ZeroS chunked Triton kernel vs flash-linear-attention and SDPA flash, forward and forward+backward
(paper 04, ZeroS, NeurIPS 2025; issue 28).

    python benchmarks/zeros_attention_kernel.py            # one H200: T = 2k, 8k, 32k, 64k, H=16, d=64, bf16
    python benchmarks/zeros_attention_kernel.py --smoke    # tiny CPU run (Triton interpreter), checks the script

At every T the peers run first (fla ``chunk_linear_attn`` with dk = 192, then SDPA flash causal),
then ours; then the optional extras (other chunk sizes, the per-kernel split, small correctness
checks) and the float64 accuracy check on sampled rows at the longest T. Writes
``benchmarks/results/zeros_attention_kernel.json`` (the smoke run writes to a temporary folder,
never over the GPU results) with rows ``{"T", "impl", "mode", "ms", "peak_mib", "extra_mib"}``.
flash-linear-attention is optional: if ``fla.ops.linear_attn.chunk_linear_attn`` does not import, its
rows carry the import error. Expected runtime on an H200: about 2-4 minutes (compile and autotune
included). ``--out DIR`` writes the JSON there instead.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny CPU run under TRITON_INTERPRET=1")
    p.add_argument("--T", type=int, nargs="*", default=None, help="sequence lengths (default 2048 8192 32768 65536)")
    p.add_argument("--chunk", type=int, default=None, help="chunk of the headline 'zeros' rows (default: the kernel's)")
    p.add_argument("--variants", type=int, nargs="*", default=[64, 128], help="other chunk sizes timed after the headline")
    p.add_argument("--budget", type=float, default=None, help="seconds after which the optional extras are skipped")
    p.add_argument("--out", default=None, help="folder for the JSON (default benchmarks/results)")
    args = p.parse_args(argv)

    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton.jit decorates the kernels
    import torch

    from companion.core import save_results
    from companion.zeros_attention.bench import run_kernel_benchmark

    if args.smoke:
        torch.set_num_threads(2)
        payload = run_kernel_benchmark(args.T or [64, 96], B=1, H=2, d=16, dtype=torch.float32, device="cpu",
                                       chunk_size=args.chunk or 16, variant_chunks=[32], accuracy_rows=8)
        out = save_results("zeros_attention_kernel_smoke", {"smoke": True, **payload},
                           out_dir=args.out or tempfile.mkdtemp(prefix="zeros_smoke_"))
        print(f"smoke results: {out}")
        bad = [r for r in payload["rows"] if r["impl"] == "zeros" and "error" in r]
        bad_acc = payload["accuracy"] is None or "error" in payload["accuracy"]
        return 1 if bad or bad_acc else 0
    if not torch.cuda.is_available():
        print("this benchmark needs a CUDA GPU; use --smoke on a CPU", file=sys.stderr)
        return 2
    payload = run_kernel_benchmark(args.T or (2048, 8192, 32768, 65536), B=1, H=16, d=64, dtype=torch.bfloat16,
                                   device="cuda", chunk_size=args.chunk, variant_chunks=args.variants,
                                   budget_s=args.budget)
    out = save_results("zeros_attention_kernel", payload, out_dir=args.out)
    print(f"results: {out}")
    _table(payload)
    return 0


def _table(payload):
    by = {(r["impl"], r["mode"], r["T"]): r.get("ms") for r in payload["rows"]}
    print(f"{'T':>6} {'mode':8} {'fla_dk192':>10} {'sdpa':>10} {'zeros':>10} {'z/fla':>7} {'sdpa/z':>7}")
    for T in payload["config"]["T_list"]:
        for mode in ("fwd", "fwd_bwd"):
            f, s, z = by.get(("fla_dk192", mode, T)), by.get(("sdpa_flash", mode, T)), by.get(("zeros", mode, T))
            fmt = lambda x: f"{x:10.3f}" if x is not None else f"{'-':>10}"  # noqa: E731
            print(f"{T:6d} {mode:8} {fmt(f)} {fmt(s)} {fmt(z)} "
                  f"{(z / f if z and f else float('nan')):7.2f} {(s / z if z and s else float('nan')):7.1f}")
    print("accuracy:", payload.get("accuracy"))
    print("targets:", payload.get("targets"))


if __name__ == "__main__":
    sys.exit(main())

"""SeerAttention (paper 01) on one GPU: distil gates at long context, then time the block-sparse
kernel with the gate's masks against dense attention at 8k / 32k / 128k tokens.

Run from the repository root on the H200 machine (about 2-4 minutes)::

    python benchmarks/seer_attention_gpu.py            # writes benchmarks/results/seer_attention_gpu.json
    python benchmarks/seer_attention_gpu.py --smoke    # tiny CPU version (reference paths), writes to /tmp

What it does (details in ``companion/seer_attention/scale.py``):

1. Builds ``companion.models.tiny_llama`` (2 layers, 8 heads of 64, RoPE theta 1e6, byte vocabulary)
   and plants attention patterns into it (local, A-shape, slash, vertical; see
   ``companion/seer_attention/synthetic.py``: our construction, since no pretrained long-context
   model is available offline). Distils SeerAttention gates (block 64, d_g 64) on 8 windows of 8k
   bytes of stdlib docstrings, with and without block RoPE, and measures held-out recall at 8k and
   at 32k (4x the training length).
2. Runs the decoder on one window at 8k / 32k / 128k and turns layer 0's gate scores into block
   masks: threshold 5e-4 (RULER) and 2e-3 (LongBench) with the last two rows dense and the
   diagonal forced, and top-k at 50% and 90% sparsity.
3. Times, in the paper's efficiency geometry (B=1, H=32, D=128, bf16, causal, block 64; the 8
   gate heads tiled 4x to 32 heads, random Q/K/V): the block-sparse Triton kernel, compiled
   FlexAttention with the identical block mask, and dense SDPA (flash and cuDNN backends).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from companion.core import save_results  # noqa: E402
from companion.seer_attention.scale import distil_long, gate_masks, time_attention  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny CPU run of the whole pipeline (reference paths, wall-clock timing), results to /tmp")
    ap.add_argument("--seq-lens", default="8192,32768,131072", help="comma-separated lengths to time")
    ap.add_argument("--train-len", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--no-flex", action="store_true", help="skip compiled FlexAttention")
    ap.add_argument("--budget-s", type=float, default=150.0, help="skip FlexAttention once this much time has passed")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    log = lambda *a: print(*a, flush=True)  # noqa: E731

    if args.smoke:
        res, model, gates = distil_long(seq_len=512, n_train=2, n_test=1, steps=5, num_heads=2, head_dim=32, num_layers=2,
                          long_factor=2, device="cpu", dtype=torch.float32, impl="reference", log=log)
        seq_lens = [256, 512]
    else:
        if not torch.cuda.is_available():
            log("no CUDA device: run with --smoke on a CPU")
            return 2
        res, model, gates = distil_long(seq_len=args.train_len, steps=args.steps, log=log)
        seq_lens = [int(s) for s in args.seq_lens.split(",")]
    for r in res["recall"]:
        if r["sparsity"] == 0.9 or r["method"].startswith("gate"):
            log(f"  recall {r['length']:>9} {r['method']:<22} sparsity {r['sparsity']:.1f}: mass {r['mass_recall']:.3f}")

    timings, densities = [], []
    out_dir = "/tmp/seer_attention_smoke" if args.smoke else None

    def save(complete: bool):
        """Write what we have (partial results survive a wall-clock limit)."""
        payload = {
            "protocol": "B=1, H=32, D=128, bf16, causal, block 64; gate masks of layer 0 of the planted tiny decoder "
                        "(8 heads tiled 4x to 32), random Q/K/V; median of triton.testing.do_bench",
            "smoke": bool(args.smoke),
            "complete": complete,
            "transformers": __import__("transformers").__version__,
            **res,
            "mask_densities": densities,
            "timings": timings,
            "total_seconds": time.perf_counter() - t_start,
        }
        return save_results("seer_attention_gpu", payload, out_dir=out_dir), payload

    save(False)
    for n in seq_lens:
        masks = gate_masks(model, gates, n)
        for label, m in masks.items():
            from companion_kernels.block_sparse import mask_density

            densities.append(dict(seq_len=n, mask=label, density=mask_density(m, causal=True),
                                  per_head=[mask_density(m[:, h], causal=True) for h in range(m.shape[1])]))
        if args.smoke:
            timings += time_attention(masks, n, heads=4, head_dim=32, flex=False, device="cpu", log=log)
            continue
        flex = not args.no_flex and (time.perf_counter() - t_start) < args.budget_s
        timings += time_attention(masks, n, flex=flex, log=log)
        del masks
        torch.cuda.empty_cache()
        save(False)
    path, payload = save(True)
    log(f"wrote {path} in {payload['total_seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

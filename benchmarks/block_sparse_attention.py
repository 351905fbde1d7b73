"""Benchmark of the block-sparse attention op (SeerAttention paper 01, Delta Attention paper 09) on one GPU.

Protocol (issue 9, anchors file): B=1, H=32, D=128, bf16, causal, N in {8k, 32k, 128k}, densities
{1.0, 0.5, 0.1, 0.02} of the causal 128x128 blocks, masks from ``random_block_mask`` (the same number of
kept blocks in every query-block row, diagonal always kept), the same mask for every contender:
SDPA flash, SDPA cuDNN (dense causal), compiled FlexAttention with the same BlockMask (off-diagonal blocks
passed as "full" blocks, the diagonal as partial blocks with the causal mask_mod: FlexAttention's fastest
form) and ours. Median of ``triton.testing.do_bench``. Effective TFLOP/s counts the kept blocks only:
4 * B * H * D * N^2 / 2 * density. Also times ``pooled_attention_map`` against a naive PyTorch version
with peak memory, and (``--sweep``) the kernel variants of the notes file at N=32k.

    python benchmarks/block_sparse_attention.py --sweep    # GPU: about 80 s on an H200 (compiles included)
    python benchmarks/block_sparse_attention.py            # GPU, the default kernel config only
    python benchmarks/block_sparse_attention.py --smoke    # CPU, tiny, reference/interpreter path
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import torch

SMOKE = "--smoke" in sys.argv
if SMOKE and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from companion.core import save_results, time_ms  # noqa: E402
from companion_kernels.block_sparse import (  # noqa: E402
    block_sparse_attention,
    dense_to_index,
    index_to_dense,
    mask_density,
    pooled_attention_map,
    random_block_mask,
)
from companion_kernels.block_sparse.triton import (  # noqa: E402
    block_sparse_attention_triton,
    default_config,
)

VARIANTS = {  # name -> config of the forward kernel (see benchmarks/block_sparse_NOTES.md)
    "tma2_w8_s3": dict(tma=2, num_warps=8, num_stages=3),
    "tma4_w8_s3": dict(tma=4, num_warps=8, num_stages=3),
    "tma2_w8_s2": dict(tma=2, num_warps=8, num_stages=2),
    "ptr_w8_s3": dict(tma=0, num_warps=8, num_stages=3),
    "tma2_sub64_w8_s3": dict(tma=2, sub_n=64, num_warps=8, num_stages=3),
    "tma2_splitm64_sub64_w4_s3": dict(tma=2, block_m=64, sub_n=64, num_warps=4, num_stages=3),
    "tma2_splitm64_w4_s2": dict(tma=2, block_m=64, num_warps=4, num_stages=2),
}
VARIANTS_B64 = {  # block_size=64 (SeerAttention's default), 32k, density 0.1
    "b64_tma2_w4_s3": dict(tma=2, sub_n=64, num_warps=4, num_stages=3),
    "b64_tma2_w4_s2": dict(tma=2, sub_n=64, num_warps=4, num_stages=2),
}


def checkpoint(name, results):
    """Write what is measured so far to $OUT (a run stopped by a time limit still leaves its numbers)."""
    if os.environ.get("OUT"):
        save_results(name, {**results, "partial": True}, out_dir=os.environ["OUT"])


def log(*a):
    print(*a, flush=True)


def bench(fn, reps_ms: float) -> float:
    """do_bench median over ``reps_ms`` milliseconds (``companion.core.time_ms`` on the GPU)."""
    return time_ms(fn, "cuda", warmup=max(5.0, reps_ms / 4), rep=reps_ms)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def flops(b, h, d, n, density):
    return 4.0 * b * h * d * n * n / 2.0 * density


def make_flex_mask(mask: torch.Tensor, n: int, block: int):
    """FlexAttention BlockMask with the same blocks: off-diagonal kept blocks as full blocks (no mask_mod),
    the diagonal as partial blocks (causal mask_mod)."""
    from torch.nn.attention.flex_attention import BlockMask

    nb = mask.shape[-1]
    eye = torch.eye(nb, dtype=torch.bool, device=mask.device)
    full = mask & ~eye
    part = mask & eye

    def padded(m):
        idx, cnt = dense_to_index(m)
        out = torch.zeros(*idx.shape[:-1], nb, dtype=torch.int32, device=m.device)
        out[..., : idx.shape[-1]] = idx
        return out, cnt

    p_idx, p_cnt = padded(part)
    f_idx, f_cnt = padded(full)

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    return BlockMask.from_kv_blocks(p_cnt, p_idx, f_cnt, f_idx, BLOCK_SIZE=block, mask_mod=causal, seq_lengths=(n, n))


def run_sweep(dev, results, quick_n):
    log(f"== variant sweep at N={quick_n}, block 128, densities 0.1 and 1.0 ==")
    b, h, d, block = 1, 32, 128, 128
    n = quick_n
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(b, h, n, d, generator=g).to(dev, torch.bfloat16) for _ in range(3))
    rows = []
    masks = {dens: dense_to_index(random_block_mask(b, h, n // block, dens, generator=g).to(dev)) for dens in (0.1, 1.0)}
    ref = {dens: block_sparse_attention_triton(q, k, v, *masks[dens], block_size=block, config=dict(tma=0)) for dens in masks}
    for name, cfg in VARIANTS.items():
        row = {"variant": name, "config": cfg}
        try:
            t0 = time.time()
            for dens, (idx, cnt) in masks.items():
                out = block_sparse_attention_triton(q, k, v, idx, cnt, block_size=block, config=cfg)
                torch.cuda.synchronize()
                row[f"err_vs_ptr_{dens}"] = rel_err(out, ref[dens])
                row[f"ms_{dens}"] = bench(lambda: block_sparse_attention_triton(q, k, v, idx, cnt, block_size=block, config=cfg), 200)
            row["wall_s"] = time.time() - t0
        except Exception as e:  # a variant that does not compile is recorded, not fatal
            row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        log(row)
        rows.append(row)
    idx64, cnt64 = dense_to_index(random_block_mask(b, h, n // 64, 0.1, generator=g).to(dev))
    ref64 = block_sparse_attention_triton(q, k, v, idx64, cnt64, block_size=64, config=dict(tma=0))
    for name, c64 in VARIANTS_B64.items():
        row = {"variant": name, "config": c64, "block_size": 64}
        try:
            out = block_sparse_attention_triton(q, k, v, idx64, cnt64, block_size=64, config=c64)
            row["err_vs_ptr_0.1"] = rel_err(out, ref64)
            row["ms_0.1"] = bench(lambda: block_sparse_attention_triton(q, k, v, idx64, cnt64, block_size=64, config=c64), 200)
            row["tflops_0.1"] = flops(b, h, d, n, mask_density(index_to_dense(idx64, cnt64, n // 64))) / row["ms_0.1"] / 1e9
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        log(row)
        rows.append(row)
    results["sweep"] = {"n": n, "rows": rows}
    rows = [r for r in rows if r.get("block_size", 128) == 128]
    ok = [r for r in rows if "error" not in r and max(r["err_vs_ptr_0.1"], r["err_vs_ptr_1.0"]) < 1e-2]
    best = min(ok, key=lambda r: math.sqrt(r["ms_0.1"] * r["ms_1.0"]))
    log("best variant:", best["variant"])
    return dict(best["config"])


def run_main(dev, results, cfg, ns, densities, do_flex=True):
    b, h, d, block = 1, 32, 128, 128
    rows = []
    flex = None
    if do_flex:
        from torch.nn.attention.flex_attention import flex_attention

        flex = torch.compile(flex_attention, dynamic=False)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for n in ns:
        g = torch.Generator().manual_seed(n)
        q, k, v = (torch.randn(b, h, n, d, generator=g).to(dev, torch.bfloat16) for _ in range(3))
        reps = 200 if n <= 32768 else 60
        nb = n // block
        # dense baselines, once per N
        for label, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                with sdpa_kernel(backend):
                    torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                    ms = bench(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
                               reps if n <= 32768 else 1)
                row = dict(n=n, density=1.0, backend=label, ms=ms, tflops=flops(b, h, d, n, 1.0) / ms / 1e9)
            except Exception as e:
                row = dict(n=n, density=1.0, backend=label, error=f"{type(e).__name__}: {str(e)[:200]}")
            log(row)
            rows.append(row)
        dense_ref = None
        for dens in densities:
            mask = random_block_mask(b, h, nb, dens, generator=g).to(dev)
            dens_actual = mask_density(mask)
            idx, cnt = dense_to_index(mask)
            out = block_sparse_attention(q, k, v, idx, cnt, block_size=block, causal=True)
            torch.cuda.synchronize()
            check = {}
            if dens == 1.0:
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    dense_ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                check["err_vs_sdpa"] = rel_err(out, dense_ref)
            fl = flops(b, h, d, n, dens_actual)
            ms = bench(lambda: block_sparse_attention_triton(q, k, v, idx, cnt, block_size=block, config=cfg), reps)
            row = dict(n=n, density=dens, density_actual=dens_actual, backend="ours", ms=ms, tflops=fl / ms / 1e9, **check)
            ms_api = bench(lambda: block_sparse_attention(q, k, v, idx, cnt, block_size=block, check_index=True), reps)
            row["ms_api_checked"] = ms_api
            if flex is not None:
                try:
                    bm = make_flex_mask(mask, n, block)
                    fo = flex(q, k, v, block_mask=bm)
                    torch.cuda.synchronize()
                    row["err_vs_flex"] = rel_err(out, fo)
                    fms = bench(lambda: flex(q, k, v, block_mask=bm), reps)
                    frow = dict(n=n, density=dens, density_actual=dens_actual, backend="flex", ms=fms, tflops=fl / fms / 1e9)
                    row["speedup_vs_flex"] = fms / ms
                    del fo, bm
                except Exception as e:
                    frow = dict(n=n, density=dens, backend="flex", error=f"{type(e).__name__}: {str(e)[:200]}")
                log(frow)
                rows.append(frow)
            fa = [r for r in rows if r.get("n") == n and r.get("backend") == "sdpa_flash" and "ms" in r]
            cu = [r for r in rows if r.get("n") == n and r.get("backend") == "sdpa_cudnn" and "ms" in r]
            if fa:
                row["speedup_vs_sdpa_flash"] = fa[0]["ms"] / ms
            if cu:
                row["speedup_vs_sdpa_cudnn"] = cu[0]["ms"] / ms
            log(row)
            rows.append(row)
            results["main"] = rows
            checkpoint(results["_name"], results)
            del out, idx, cnt, mask
        del q, k, v, dense_ref
        torch.cuda.empty_cache()
    results["main"] = rows


def naive_pooled(q, k, block, sm_scale=None):
    """Plain PyTorch: the whole [B, H, N, N] softmax, then max_pool2d, then row normalisation."""
    n, d = q.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
    s = torch.matmul(q, k.transpose(-1, -2)).float() * scale
    s.masked_fill_(~torch.ones(n, n, dtype=torch.bool, device=q.device).tril(), float("-inf"))
    p = torch.softmax(s, dim=-1)
    del s
    pooled = torch.nn.functional.max_pool2d(p, block, block, ceil_mode=True)
    return pooled / pooled.sum(-1, keepdim=True)


def run_pooled(dev, results, ns_ours, n_naive, block=64):
    rows = []
    b, h, d = 1, 32, 128
    for n in sorted(set(ns_ours) | {n_naive}):
        g = torch.Generator().manual_seed(7)
        q, k = (torch.randn(b, h, n, d, generator=g).to(dev, torch.bfloat16) for _ in range(2))
        nb = math.ceil(n / block)
        row = dict(n=n, block=block, official_R_buffer_mib=b * h * n * nb * 2 / 2**20)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        ours = pooled_attention_map(q, k, block_size=block)
        torch.cuda.synchronize()
        row["ours_peak_extra_mib"] = (torch.cuda.max_memory_allocated() - base) / 2**20
        row["ours_ms"] = bench(lambda: pooled_attention_map(q, k, block_size=block), 100 if n <= 8192 else 30)
        row["rows_sum_to_1_maxdev"] = float((ours.sum(-1) - 1).abs().max())
        if n == n_naive:
            del ours
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            nv = naive_pooled(q, k, block)
            torch.cuda.synchronize()
            row["naive_peak_extra_mib"] = (torch.cuda.max_memory_allocated() - base) / 2**20
            ours = pooled_attention_map(q, k, block_size=block)
            row["max_abs_diff_vs_naive"] = float((ours - nv).abs().max())
            del nv
            torch.cuda.empty_cache()
            row["naive_ms"] = bench(lambda: naive_pooled(q, k, block), 50)
            row["speedup_vs_naive"] = row["naive_ms"] / row["ours_ms"]
        log(row)
        rows.append(row)
        del q, k, ours
        torch.cuda.empty_cache()
    results["pooled"] = rows


def smoke():
    """CPU: tiny shapes through the api (reference) and the interpreter, end to end, no timing."""
    torch.manual_seed(0)
    b, h, n, d, block = 1, 2, 256, 32, 128
    q, k, v = (torch.randn(b, h, n, d) for _ in range(3))
    mask = random_block_mask(b, h, n // block, 0.5)
    idx, cnt = dense_to_index(mask)
    ref = block_sparse_attention(q, k, v, idx, cnt, block_size=block, impl="reference")
    rows = []
    for name, cfg in list(VARIANTS.items())[:3]:
        out = block_sparse_attention_triton(q, k, v, idx, cnt, block_size=block, config=cfg)
        rows.append({"variant": name, "err": rel_err(out, ref)})
        log(rows[-1])
    pm = pooled_attention_map(q, k, block_size=64, impl="triton")
    pr = pooled_attention_map(q, k, block_size=64, impl="reference")
    log({"pooled_max_abs_diff": float((pm - pr).abs().max())})
    assert all(r["err"] < 1e-5 for r in rows)
    log("smoke ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="tiny CPU run (reference + interpreter), writes nothing")
    ap.add_argument("--sweep", action="store_true", help="time the kernel variants at N=32k first and use the best")
    ap.add_argument("--ns", default="8192,32768,131072")
    ap.add_argument("--densities", default="1.0,0.5,0.1,0.02")
    ap.add_argument("--no-flex", action="store_true")
    ap.add_argument("--no-pooled", action="store_true")
    ap.add_argument("--name", default="block_sparse_attention")
    args = ap.parse_args()
    if args.smoke:
        smoke()
        return
    if not torch.cuda.is_available():
        sys.exit("this benchmark needs a CUDA GPU (use --smoke on a CPU)")
    dev = torch.device("cuda")
    t0 = time.time()
    results = {"protocol": __doc__.split("\n\n")[1].replace("\n", " "), "_name": args.name}
    cfg = default_config(128, 128, torch.bfloat16)
    if args.sweep:
        cfg.update(run_sweep(dev, results, 32768))
    results["config"] = cfg
    log("config:", cfg)
    checkpoint(args.name, results)
    ns = [int(x) for x in args.ns.split(",") if x]
    dens = [float(x) for x in args.densities.split(",") if x]
    run_main(dev, results, cfg, ns, dens, do_flex=not args.no_flex)
    if not args.no_pooled:
        run_pooled(dev, results, ns_ours=[8192, 32768], n_naive=8192)
    results["wall_s"] = time.time() - t0
    results.pop("_name")
    path = save_results(args.name, results)
    log("saved", path)
    if os.environ.get("OUT"):
        save_results(args.name, results, out_dir=os.environ["OUT"])
    # summary table
    log(f"{'N':>7} {'dens':>5} {'backend':>11} {'ms':>9} {'TFLOP/s':>8} {'x flex':>7} {'x FA2':>7} {'x cuDNN':>7}")
    for r in results["main"]:
        if "ms" in r:
            log(f"{r['n']:>7} {r['density']:>5} {r['backend']:>11} {r['ms']:>9.3f} {r['tflops']:>8.1f} "
                f"{r.get('speedup_vs_flex', float('nan')):>7.2f} {r.get('speedup_vs_sdpa_flash', float('nan')):>7.2f} "
                f"{r.get('speedup_vs_sdpa_cudnn', float('nan')):>7.2f}")
    log(f"total wall {results['wall_s']:.0f} s")


if __name__ == "__main__":
    main()

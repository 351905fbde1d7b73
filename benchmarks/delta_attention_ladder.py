"""Δ Attention (paper 09) on one GPU: the million-token prefill latency ladder.

Llama-3.1-8B attention geometry (B=1, 32 query heads, 8 KV heads, D=128, bf16, causal), one layer,
N = 32k … 1M. Contenders, all on the same random q, k, v in the same run:

* sparse      the block-sparse sink + window pass alone (`companion_kernels.block_sparse`, 128-token
              blocks: 8 sink blocks = 1024 tokens, 16 window blocks = 2048 tokens, plus the diagonal)
* sparse + Δ  the same pass followed by the fused query-sparse Δ kernel (`companion_kernels.query_sparse`,
              anchors every γ-th row, γ in {64, 128, 256, 512}, dense tail by the official cut_n rule)
* Δ only      the fused Δ kernel alone, applied to a ready sparse output (its overhead, measured directly)
* sparse + Δ (unfused)  γ = 64, the official order of operations: dense rows to a buffer, then
              gather / subtract / reshape-add in PyTorch
* SDPA flash, SDPA cuDNN: dense causal attention, K/V expanded to 32 heads (the anchors' protocol)

Timing: `triton.testing.do_bench` median for calls under 100 ms; slower calls are timed with CUDA
events (one untimed warm-up call, then up to 3 timed calls, median); calls over 2 s (the dense
baselines at 512k and 1M) are timed once with CUDA events, with no warm-up at that size (their kernels
are warm from the smaller sizes). The JSON says which method timed each number. Free GPU memory is
checked before each size; a contender that fails is recorded with its error and the run continues.
A time budget (default 330 s) skips what would not fit and says so.

    python benchmarks/delta_attention_ladder.py            # GPU: 129 s on an H200 (2026-11-30, 32k sweep);
                                                           # about 3 minutes with the 256k sweep
    python benchmarks/delta_attention_ladder.py --smoke    # CPU: tiny sizes, Triton interpreter

Results: benchmarks/results/delta_attention_ladder.json (and a copy in $OUT when it is set); a smoke
run writes /tmp/delta_attention_ladder_smoke.json instead.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback

import torch

SMOKE = "--smoke" in sys.argv
if SMOKE and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from companion.core import repo_path, save_results, time_ms  # noqa: E402
from companion.delta_attention.attention import delta_plan  # noqa: E402
from companion.delta_attention.gpu import (  # noqa: E402
    GiB,
    check_free_memory,
    delta_prefill,
    delta_prefill_unfused,
    sparse_index,
    sparse_prefill,
)
from companion_kernels.query_sparse import query_sparse_attention, query_sparse_delta_  # noqa: E402
from companion_kernels.query_sparse import reference as qs_reference  # noqa: E402

T0 = time.time()
CONFIGS = {  # query-sparse kernel tile configs of the sweep (sm_90a compile: no spills)
    "m128_n64_w8_s3": dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3),
    "m128_n128_w8_s3": dict(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3),
    "m64_n64_w4_s3": dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3),
    "m128_n64_w8_s2": dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=2),
    "m128_n64_w8_s4": dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=4),
    "m64_n64_w4_s4": dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=4),
    "m64_n32_w4_s3": dict(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=3),
}


def log(*a):
    print(f"[{time.time() - T0:7.1f}s]", *a, flush=True)


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def time_call(fn, dev, *, warm: bool = True) -> tuple[float, str]:
    """(milliseconds, how it was timed)."""
    if dev.type != "cuda":
        return time_ms(fn, dev, cpu_warmup=1, cpu_reps=1), "wall clock, CPU (smoke)"
    if warm:
        fn()
        torch.cuda.synchronize()

    def events(reps):
        out = []
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            out.append(s.elapsed_time(e))
        return out

    first = events(1)[0]
    if first >= 2000:
        return first, "CUDA events, single run" + ("" if warm else " (no warm-up at this size)")
    if first >= 100:
        runs = events(3)
        return statistics.median(runs), "CUDA events, median of 3 after a warm-up"
    return time_ms(fn, dev), "do_bench median"


class Recorder:
    def __init__(self, args):
        self.rows, self.errors, self.args = [], [], args

    def run(self, n, name, fn, dev, *, gamma=None, extra=None, warm=True, budget_s=None):
        row = {"N": n, "contender": name, "gamma": gamma, **(extra or {})}
        if budget_s is not None and time.time() - T0 + budget_s > self.args.budget:
            row.update(ms=None, timing=None, skipped=f"time budget: would need ~{budget_s:.0f} s more")
            log(f"N={n:>8} {name:<24} γ={gamma} skipped (time budget)")
            self.rows.append(row)
            return None
        try:
            ms, how = time_call(fn, dev, warm=warm)
            row.update(ms=ms, timing=how)
            log(f"N={n:>8} {name:<24} γ={gamma} {ms:10.2f} ms  ({how})")
        except Exception as exc:  # record and continue
            row.update(ms=None, timing=None, error=f"{type(exc).__name__}: {exc}"[:500])
            self.errors.append({"N": n, "contender": name, "gamma": gamma, "trace": traceback.format_exc()[-2000:]})
            log(f"N={n:>8} {name:<24} γ={gamma} FAILED {type(exc).__name__}: {str(exc)[:200]}")
            if dev.type == "cuda":
                torch.cuda.empty_cache()
        self.rows.append(row)
        return row.get("ms")


def sdpa(backend):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    be = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend]

    def f(q, k, v):
        with sdpa_kernel(be):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    return f


def delta_rows_share(n, gamma, tail):
    plan = delta_plan(n, gamma, tail)
    rows = plan.dense_rows().double()
    return float((rows + 1).sum() / (n * (n + 1) / 2))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny CPU run (Triton interpreter / reference)")
    ap.add_argument("--sizes", type=str, default=None, help="comma-separated N (default 32k…1M)")
    ap.add_argument("--gammas", type=str, default="64,128,256,512")
    ap.add_argument("--budget", type=float, default=330.0, help="seconds; later work that would not fit is skipped")
    ap.add_argument("--no-tune", action="store_true", help="use the default kernel config, skip the config sweep")
    ap.add_argument("--tune-n", type=int, default=262144, help="sequence length of the config sweep")
    args = ap.parse_args()

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not args.smoke and dev.type != "cuda":
        sys.exit("delta_attention_ladder.py needs a CUDA GPU; use --smoke for a CPU check")
    if args.smoke:
        hq, hkv, d, dtype = 4, 2, 32, torch.float32
        sink, window, block, tail = 32, 64, 64, 32
        sizes = [256, 300]
        gammas = [16, 32]
        args.budget = max(args.budget, 1e6)
    else:
        hq, hkv, d, dtype = 32, 8, 128, torch.bfloat16
        sink, window, block, tail = 1024, 2048, 128, 128
        sizes = [32768, 65536, 131072, 262144, 524288, 1048576]
        gammas = [int(g) for g in args.gammas.split(",")]
    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",")]
    impl = "triton"
    rec = Recorder(args)
    payload = {
        "protocol": {
            "geometry": f"B=1, Hq={hq}, Hkv={hkv}, D={d}, {str(dtype).replace('torch.', '')}, causal, one layer",
            "sink": sink, "window": window, "block_size": block, "tail": tail, "gammas": gammas, "sizes": sizes,
            "sparse": "companion_kernels.block_sparse, block-granular sink + window mask",
            "delta": "companion_kernels.query_sparse fused Δ kernel (anchors every γ-th row + dense tail)",
            "dense": "torch SDPA (flash / cuDNN backends), K/V expanded to Hq heads",
            "timing": "do_bench median under 100 ms; CUDA events above (median of 3, or a single run over 2 s)",
            "smoke": bool(args.smoke),
        },
    }
    if dev.type == "cuda":
        free, total = torch.cuda.mem_get_info()
        payload["gpu_memory_gib"] = {"free": round(free / GiB, 1), "total": round(total / GiB, 1)}
        log(f"GPU {torch.cuda.get_device_name(0)}: {free / GiB:.1f} of {total / GiB:.1f} GiB free")

    config = None
    tuning = []
    checks = {}
    if not args.no_tune:
        # Tile-config sweep of the fused Δ kernel (Δ only, γ = the first gamma) at a size where the
        # anchor rows dominate (the 32k run of 2026-11-30 07:42 picked the tile with the least fixed
        # cost, which is not the fastest on long rows).
        tn = min(args.tune_n, max(sizes))
        try:
            g = torch.Generator(device=dev).manual_seed(tn)
            q = torch.randn(1, hq, tn, d, device=dev, dtype=dtype, generator=g)
            k = torch.randn(1, hkv, tn, d, device=dev, dtype=dtype, generator=g)
            v = torch.randn(1, hkv, tn, d, device=dev, dtype=dtype, generator=g)
            index, count, _ = sparse_index(tn, sink=sink, window=window, block_size=block, device=dev)
            buf = sparse_prefill(q, k, v, index, count, block_size=block, impl=impl)
            plan = delta_plan(tn, gammas[0], tail)
            best = None
            sweep = CONFIGS if dev.type == "cuda" else dict(list(CONFIGS.items())[:2])   # smoke: two
            for name, cfg in sweep.items():
                try:
                    def f(cfg=cfg):
                        query_sparse_delta_(buf, q, k, v, gamma=plan.gamma, num_delta_rows=plan.s_p,
                                            impl=impl, config=cfg)
                    ms, how = time_call(f, dev)
                    tuning.append({"config": name, "N": tn, "gamma": plan.gamma, **cfg, "ms": ms, "timing": how})
                    log(f"tune {name}: {ms:.3f} ms (Δ only, N={tn}, γ={plan.gamma})")
                    if best is None or ms < best[1]:
                        best = (name, ms)
                except Exception as exc:
                    tuning.append({"config": name, "N": tn, **cfg, "error": f"{type(exc).__name__}: {exc}"[:400]})
                    log(f"tune {name}: FAILED {type(exc).__name__}: {str(exc)[:200]}")
            if best is not None:
                config = CONFIGS[best[0]]
                payload["kernel_config"] = best[0]
            del q, k, v, buf, index, count
            if dev.type == "cuda":
                torch.cuda.empty_cache()
        except Exception as exc:
            tuning.append({"error": f"{type(exc).__name__}: {exc}"[:400]})
            log(f"tuning FAILED: {type(exc).__name__}: {str(exc)[:200]}")
    for idx, n in enumerate(sizes):
        # ---------------------------------------------------------------- memory check
        if dev.type == "cuda":
            try:
                need, free = check_free_memory(n, hq=hq, hkv=hkv, d=d, dtype=dtype)
            except MemoryError as exc:
                rec.rows.append({"N": n, "contender": "all", "skipped": str(exc)})
                log(f"skipped: {exc}")
                continue
            log(f"N={n}: needs ~{need / GiB:.1f} GiB of GPU memory at its peak; {free / GiB:.1f} GiB free")
        g = torch.Generator(device=dev).manual_seed(n)
        q = torch.randn(1, hq, n, d, device=dev, dtype=dtype, generator=g)
        k = torch.randn(1, hkv, n, d, device=dev, dtype=dtype, generator=g)
        v = torch.randn(1, hkv, n, d, device=dev, dtype=dtype, generator=g)
        index, count, kept = sparse_index(n, sink=sink, window=window, block_size=block, device=dev)
        info = {"kept_share_sparse": kept}

        # ---------------------------------------------------------------- correctness (first size)
        if idx == 0:
            try:
                sel = torch.randperm(n, generator=torch.Generator().manual_seed(0))[:96].sort().values.to(dev)
                got = query_sparse_attention(q, k, v, sel, impl=impl, config=config)
                want = qs_reference.query_sparse_attention(q, k, v, sel)
                checks["rows_vs_reference_max_abs"] = float((got.float() - want.float()).abs().max())
                gm = gammas[0]
                plan = delta_plan(n, gm, tail)
                sparse = sparse_prefill(q, k, v, index, count, block_size=block, impl=impl)
                fused = delta_prefill(q, k, v, index, count, gamma=gm, tail=tail, block_size=block, impl=impl, config=config)
                unfused = delta_prefill_unfused(q, k, v, index, count, gamma=gm, tail=tail, block_size=block,
                                                impl=impl, config=config)
                checks["fused_vs_unfused_max_abs"] = float((fused.float() - unfused.float()).abs().max())
                rows = plan.dense_rows(device=dev)
                want_rows = qs_reference.query_sparse_attention(q, k, v, rows[-300:])
                checks["tail_rows_vs_reference_max_abs"] = float((fused[:, :, rows[-300:]].float() - want_rows.float()).abs().max())
                anc = plan.anchors(device=dev)[-200:]
                want_anc = qs_reference.query_sparse_attention(q, k, v, anc)
                checks["anchor_rows_vs_reference_max_abs"] = float((fused[:, :, anc].float() - want_anc.float()).abs().max())
                i = anc + (gm // 2)                                    # rows inside Δ blocks: Eq. 6/7
                want_mid = sparse[:, :, i].float() + want_anc.float() - sparse[:, :, anc].float()
                checks["delta_rows_eq67_max_abs"] = float((fused[:, :, i].float() - want_mid).abs().max())
                checks["N"] = n
                del sparse, fused, unfused
                log("checks:", {k_: (round(v_, 5) if isinstance(v_, float) else v_) for k_, v_ in checks.items()})
            except Exception as exc:
                checks["error"] = f"{type(exc).__name__}: {exc}"[:500]
                log("checks FAILED:", checks["error"])

        # ---------------------------------------------------------------- sparse and Δ contenders
        rec.run(n, "sparse", lambda: sparse_prefill(q, k, v, index, count, block_size=block, impl=impl), dev,
                extra={**info, "compute_fraction": kept})
        base = sparse_prefill(q, k, v, index, count, block_size=block, impl=impl)
        buf = base.clone()
        for gm in gammas:
            if gm > n:
                continue
            plan = delta_plan(n, gm, tail)
            cf = kept + delta_rows_share(n, gm, tail)
            rec.run(n, "sparse + Δ", lambda gm=gm: delta_prefill(q, k, v, index, count, gamma=gm, tail=tail,
                                                                  block_size=block, impl=impl, config=config),
                    dev, gamma=gm, extra={**info, "compute_fraction": cf})
            rec.run(n, "Δ only", lambda plan=plan: query_sparse_delta_(buf, q, k, v, gamma=plan.gamma,
                                                                        num_delta_rows=plan.s_p, impl=impl,
                                                                        config=config),
                    dev, gamma=gm, extra={"delta_rows_share": delta_rows_share(n, gm, tail)})
        gm = gammas[0]
        rec.run(n, "sparse + Δ (unfused)", lambda: delta_prefill_unfused(q, k, v, index, count, gamma=gm, tail=tail,
                                                                       block_size=block, impl=impl, config=config),
                dev, gamma=gm)
        del base, buf

        # ---------------------------------------------------------------- dense baselines
        try:
            kk = k.repeat_interleave(hq // hkv, dim=1)
            vv = v.repeat_interleave(hq // hkv, dim=1)
        except Exception as exc:
            kk = vv = None
            rec.rows.append({"N": n, "contender": "SDPA", "error": f"{type(exc).__name__}: {exc}"[:300]})
        if kk is not None:
            prev = {r["contender"]: r.get("ms") for r in rec.rows if r["N"] == sizes[idx - 1]} if idx else {}
            for name, be in (("SDPA flash", "flash"), ("SDPA cuDNN", "cudnn")):
                f = sdpa(be)
                est = None
                if prev.get(name):
                    est = prev[name] / 1e3 * (n / sizes[idx - 1]) ** 2   # seconds, quadratic scaling
                big = est is not None and est > 2.0
                calls = 1 if big else 5
                rec.run(n, name, lambda f=f: f(q, kk, vv), dev, warm=not big,
                        budget_s=None if est is None else est * calls,
                        extra={"compute_fraction": 1.0})
            del kk, vv
        del q, k, v, index, count
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        payload.update(rows=rec.rows, tuning=tuning, checks=checks, errors=rec.errors,
                       wall_s=round(time.time() - T0, 1), partial=True)
        if os.environ.get("OUT") and not args.smoke:
            save_results("delta_attention_ladder", payload, out_dir=os.environ["OUT"])

    # -------------------------------------------------------------------- summary and targets
    summary = []
    for n in sizes:
        at = {(r["contender"], r.get("gamma")): r.get("ms") for r in rec.rows if r["N"] == n}
        flash, cudnn, sp = at.get(("SDPA flash", None)), at.get(("SDPA cuDNN", None)), at.get(("sparse", None))
        for gm in gammas:
            t = at.get(("sparse + Δ", gm))
            if t is None:
                continue
            s = {"N": n, "gamma": gm, "sparse_delta_ms": t, "sparse_ms": sp,
                 "speedup_vs_flash": flash / t if flash else None,
                 "speedup_vs_cudnn": cudnn / t if cudnn else None}
            if sp is not None and flash:
                s["delta_overhead_ms"] = t - sp
                s["dense_share_ms"] = flash / gm                 # 1/γ of the dense (FA2) work
                s["overhead_within_share_plus_20pct"] = (t - sp) <= 1.2 * flash / gm
            summary.append(s)
    payload["summary"] = summary
    top = [s for s in summary if s["N"] == max(sizes) and s["gamma"] == 64]
    payload["targets"] = {
        "speedup_vs_flash_at_max_N_gamma64": top[0]["speedup_vs_flash"] if top else None,
        "speedup_target": 32.0,
        "overhead_rule": "Δ overhead (sparse+Δ − sparse) <= 1.2 × (SDPA flash ms / γ)",
        "overhead_rule_met_everywhere": all(s.get("overhead_within_share_plus_20pct", False) for s in summary)
        if summary else None,
    }
    payload.update(rows=rec.rows, tuning=tuning, checks=checks, errors=rec.errors,
                   wall_s=round(time.time() - T0, 1), partial=False)
    if args.smoke:
        path = save_results("delta_attention_ladder_smoke", payload, out_dir="/tmp")
    else:
        old = repo_path("benchmarks", "results", "delta_attention_ladder.json")
        if old.exists():                         # never overwrite an earlier run: keep it under its date
            try:
                stamp = json.loads(old.read_text())["date"].replace(" ", "_").replace(":", "")
            except Exception:
                stamp = time.strftime("%Y%m%d_%H%M%S")
            old.rename(old.with_name(f"delta_attention_ladder_{stamp}.json"))
        path = save_results("delta_attention_ladder", payload)
        if os.environ.get("OUT"):
            save_results("delta_attention_ladder", payload, out_dir=os.environ["OUT"])
    log(f"wrote {path}")
    for s in summary:
        log(f"N={s['N']:>8} γ={s['gamma']:>3}: sparse+Δ {s['sparse_delta_ms']:.2f} ms, "
            f"× flash {s['speedup_vs_flash'] or float('nan'):.1f}, × cuDNN {s['speedup_vs_cudnn'] or float('nan'):.1f}")


if __name__ == "__main__":
    main()

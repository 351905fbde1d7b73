"""The ZeroS kernel benchmark, shared by ``benchmarks/zeros_attention_kernel.py`` and the notebook's
GPU profile (paper 04, ZeroS, NeurIPS 2025).

Contenders on the same inputs (B, T, H, d; bf16 on a GPU):

* ``ours``            -- ``companion_kernels.zeros_linear`` (Triton, chunked, running max), forward
                         and forward+backward;
* ``reference``       -- the explicit O(T^2) oracle (small T only);
* ``scan``            -- the official associative path (global max, ``[B, T, H, d, d]`` cumsums;
                         small T only, it is the memory story of the repository);
* ``sdpa_flash``      -- ``scaled_dot_product_attention(is_causal=True)`` with the flash backend;
* ``fla_chunk_dk64`` / ``fla_chunk_dk192`` -- flash-linear-attention's ``chunk_linear_attn(q, k, v,
                         scale=1.0, normalize=False)`` at key width d and 3d (ZeroS as one linear
                         attention has a 3d-wide key), if ``fla`` imports; otherwise recorded absent.

Every contender runs inside ``try``: a failure is recorded with its error and the run goes on.
Timing: ``triton.testing.do_bench`` (median) on a GPU, ``time.perf_counter`` medians in the CPU
smoke run. Peak memory: the allocator's peak during one call (``peak_mib``, inputs included) and
that peak minus what was allocated before the call (``extra_mib``).

No plotly here: this module must import on the bare GPU machine.
"""

from __future__ import annotations

import math
import statistics
import time
import traceback

import torch
import torch.nn.functional as F

from companion.zeros_attention import functional as Fz

__all__ = ["run_kernel_benchmark", "summarize_targets", "ANCHOR_FLA", "ANCHOR_SDPA"]

# The anchors (shared/anchors/README.md, "Linear attention"): H200, torch 2.11, triton 3.6,
# fla-core 0.6.0, B=1, H=16, value width 64, bf16. {T: (fwd ms, fwd+bwd ms, peak MiB)}.
ANCHOR_FLA = {
    64: {2048: (0.182, 0.896, 320), 8192: (0.227, 1.255, 512), 32768: (0.257, 1.705, 1280), 65536: (0.507, 2.086, 2304)},
    192: {2048: (0.172, 1.228, 476), 8192: (0.177, 1.362, 832), 32768: (0.398, 2.067, 2560), 65536: (0.779, 4.104, 4864)},
}
ANCHOR_SDPA = {2048: (0.066, 0.250, 416), 8192: (0.562, 2.059, 514), 32768: (7.253, 27.062, 1286), 65536: (28.218, 105.992, 2316)}


def _inputs(B, T, H, d, dtype, device, seed=0, requires_grad=False):
    g = torch.Generator(device="cpu").manual_seed(seed)
    q = F.normalize(torch.randn(B, T, H, d, generator=g), dim=-1).to(device=device, dtype=dtype)
    k = F.normalize(torch.randn(B, T, H, d, generator=g), dim=-1).to(device=device, dtype=dtype)
    v = torch.randn(B, T, H, d, generator=g).to(device=device, dtype=dtype)
    s = torch.randn(B, T, H, generator=g).to(device)
    s1 = torch.sigmoid(torch.randn(B, T, H, generator=g)).to(device)
    sh = torch.sigmoid(torch.randn(B, T, H, generator=g)).to(device)
    out = [q, k, v, s, s1, sh]
    if requires_grad:
        out = [x.detach().requires_grad_() for x in out]
    return out


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def _time_ms(fn, device, grad_to_none=None, smoke_reps=3):
    if device.type == "cuda":
        import triton.testing

        return float(triton.testing.do_bench(fn, grad_to_none=grad_to_none, return_mode="median"))
    fn()
    times = []
    for _ in range(smoke_reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return float(statistics.median(times))


def _peak_mib(fn, device):
    if device.type != "cuda":
        return None, None
    _sync(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    fn()
    _sync(device)
    peak = torch.cuda.max_memory_allocated(device)
    return peak / 2**20, (peak - before) / 2**20


def _measure(name, T, make_fwd, make_fwdbwd, device, log):
    """One contender at one T: forward and forward+backward time and memory; errors recorded."""
    row = {"T": T, "op": name}
    for tag, make in (("fwd", make_fwd), ("fwdbwd", make_fwdbwd)):
        if make is None:
            continue
        try:
            fn, leaves = make()
            row[f"{tag}_ms"] = _time_ms(fn, device, grad_to_none=leaves)
            row[f"{tag}_peak_mib"], row[f"{tag}_extra_mib"] = _peak_mib(fn, device)
            del fn, leaves
        except Exception as exc:  # noqa: BLE001 -- record any failure of a contender and go on
            row[f"{tag}_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            log(f"  {name} T={T} {tag} failed: {row[f'{tag}_error']}")
        finally:
            if device.type == "cuda":
                torch.cuda.empty_cache()
    log(f"  {name:18s} T={T:6d} fwd {row.get('fwd_ms', float('nan')):9.3f} ms  "
        f"fwd+bwd {row.get('fwdbwd_ms', float('nan')):9.3f} ms  peak {row.get('fwdbwd_peak_mib')} MiB")
    return row


def _rel(a, b):
    return (a.float() - b.float()).norm().item() / max(b.float().norm().item(), 1e-12)


def _checks(zeros_linear, zeros_linear_reference, fla_fn, device, dtype, H, d, log, check_T=1024):
    """Correctness on this device: ours vs the oracle (fp32 and the bench dtype), ours vs fla."""
    out = {}
    try:
        args = _inputs(2, 333, 3, 32, torch.float32, device, seed=1)
        o = zeros_linear(*args, impl="triton")
        r = zeros_linear_reference(*args)
        out["fp32_T333_max_abs_err"] = (o - r).abs().max().item()
    except Exception as exc:  # noqa: BLE001
        out["fp32_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    try:
        T = check_T
        leaves = _inputs(1, T, H, d, dtype, device, seed=2, requires_grad=True)
        ref_leaves = [x.detach().float().requires_grad_() for x in leaves]
        do = torch.randn(1, T, H, d, device=device)
        o = zeros_linear(*leaves, impl="triton")
        o.float().backward(do)
        r = zeros_linear_reference(*ref_leaves)
        r.backward(do)
        out[f"{str(dtype).split('.')[-1]}_T{T}_rel_err_out"] = _rel(o, r)
        for name, a, b in zip(("q", "k", "v", "s", "sigma1", "sigmah"), leaves, ref_leaves):
            out[f"{str(dtype).split('.')[-1]}_T{T}_rel_err_grad_{name}"] = _rel(a.grad, b.grad)
    except Exception as exc:  # noqa: BLE001
        out["grad_check_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    if fla_fn is not None:
        try:
            T = 2048
            q, k, v, s, s1, sh = _inputs(1, T, H, d, torch.float32, device, seed=3)
            Qp, Kp = Fz.three_key_features(q, k, s, s1, sh)
            o_fla = fla_fn(Qp.to(dtype).contiguous(), Kp.to(dtype).contiguous(), v.to(dtype), scale=1.0, normalize=False)[0]
            o = zeros_linear(q.to(dtype), k.to(dtype), v.to(dtype), s, s1, sh, impl="triton")
            r = zeros_linear_reference(q, k, v, s, s1, sh)
            out["fla_3dkey_vs_reference_rel_err"] = _rel(o_fla, r)
            out["ours_vs_reference_rel_err_T2048"] = _rel(o, r)
        except Exception as exc:  # noqa: BLE001
            out["fla_check_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    log(f"  checks: {out}")
    return out


def summarize_targets(rows, fla_available):
    """The issue's targets, evaluated on the recorded rows (None where a number is missing)."""
    by = {(r["op"], r["T"]): r for r in rows}
    Ts = sorted({r["T"] for r in rows if r["op"] == "ours"})
    out = {}
    if Ts:
        Tmax = Ts[-1]
        ours = by.get(("ours", Tmax), {})
        fla = by.get(("fla_chunk_dk192", Tmax), {})
        if fla_available and "fwd_ms" in fla and "fwd_ms" in ours:
            out["fwd_ratio_vs_fla_dk192_at_Tmax"] = ours["fwd_ms"] / fla["fwd_ms"]
            out["fwd_ratio_source"] = "fla measured in this run"
        elif "fwd_ms" in ours and Tmax in ANCHOR_FLA[192]:
            out["fwd_ratio_vs_fla_dk192_at_Tmax"] = ours["fwd_ms"] / ANCHOR_FLA[192][Tmax][0]
            out["fwd_ratio_source"] = "fla anchor (shared/anchors), not this run"
        out["Tmax"] = Tmax
        faster = [T for T in Ts if "fwd_ms" in by.get(("ours", T), {}) and "fwd_ms" in by.get(("sdpa_flash", T), {})
                  and by[("ours", T)]["fwd_ms"] < by[("sdpa_flash", T)]["fwd_ms"]]
        crossover = None
        for T in Ts:
            if all(t in faster for t in Ts if t >= T):
                crossover = T
                break
        out["faster_than_sdpa_fwd_from_T"] = crossover
        mem = [(T, by[("ours", T)].get("fwdbwd_extra_mib")) for T in Ts if by.get(("ours", T), {}).get("fwdbwd_extra_mib")]
        if len(mem) >= 2:
            (t0, m0), (t1, m1) = mem[-2], mem[-1]
            out["extra_mem_ratio_last_two_T"] = m1 / m0 if m0 else None
            out["T_ratio_last_two"] = t1 / t0
    return out


def run_kernel_benchmark(
    T_list=(2048, 4096, 8192, 16384, 32768, 65536),
    *,
    B: int = 1,
    H: int = 16,
    d: int = 64,
    dtype: torch.dtype = torch.bfloat16,
    device: str = "cuda",
    ref_max_T: int = 4096,
    scan_max_T: int = 8192,
    budget_s: float = 200.0,
    big_chunk: int | None = 128,
    big_chunk_from_T: int = 32768,
    log=print,
) -> dict:
    """Run every contender at every T (ascending) within ``budget_s``; returns the results payload.

    ``big_chunk``: also time our kernel with this chunk size from ``big_chunk_from_T`` on (fewer
    sequential steps in the state scan, bigger intra-chunk tiles); None to skip.
    """
    from companion_kernels.zeros_linear import zeros_linear, zeros_linear_reference

    dev = torch.device(device)
    t_start = time.perf_counter()
    fla_info = {"available": False, "version": None, "error": None}
    fla_fn = None
    try:
        from fla.ops.linear_attn import chunk_linear_attn as fla_fn  # type: ignore

        import fla  # type: ignore

        fla_info.update(available=True, version=getattr(fla, "__version__", "unknown"))
    except Exception as exc:  # noqa: BLE001
        fla_fn = None
        fla_info["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    if dev.type != "cuda":
        fla_fn = None
        fla_info["available"] = False
    log(f"ZeroS kernel benchmark on {dev}, B={B} H={H} d={d} {dtype}; fla: {fla_info}")
    checks = _checks(zeros_linear, zeros_linear_reference, fla_fn, dev, dtype, H, d, log,
                     check_T=1024 if dev.type == "cuda" else 128)

    rows, skipped = [], []
    for T in T_list:
        def over():
            return time.perf_counter() - t_start > budget_s

        # ---- ours
        def ours_fwd(T=T):
            args = _inputs(B, T, H, d, dtype, dev)
            return (lambda: zeros_linear(*args, impl="triton")), None

        def ours_fb(T=T):
            leaves = _inputs(B, T, H, d, dtype, dev, requires_grad=True)
            do = torch.randn(B, T, H, d, device=dev, dtype=dtype)
            return (lambda: zeros_linear(*leaves, impl="triton").backward(do)), leaves

        contenders = [("ours", ours_fwd, ours_fb, True)]
        if big_chunk and T >= big_chunk_from_T:
            def ours128_fwd(T=T):
                args = _inputs(B, T, H, d, dtype, dev)
                return (lambda: zeros_linear(*args, impl="triton", chunk_size=big_chunk)), None

            def ours128_fb(T=T):
                leaves = _inputs(B, T, H, d, dtype, dev, requires_grad=True)
                do = torch.randn(B, T, H, d, device=dev, dtype=dtype)
                return (lambda: zeros_linear(*leaves, impl="triton", chunk_size=big_chunk).backward(do)), leaves

            contenders.append((f"ours_chunk{big_chunk}", ours128_fwd, ours128_fb, False))

        # ---- SDPA flash (causal softmax), layout [B, H, T, d]
        def sdpa_make(backward, T=T):
            from torch.nn.attention import SDPBackend, sdpa_kernel

            q, k, v = (torch.randn(B, H, T, d, device=dev, dtype=dtype) for _ in range(3))
            if backward:
                q, k, v = (x.requires_grad_() for x in (q, k, v))
                do = torch.randn(B, H, T, d, device=dev, dtype=dtype)
            backends = [SDPBackend.FLASH_ATTENTION] if dev.type == "cuda" else [SDPBackend.MATH]

            def fn():
                with sdpa_kernel(backends):
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                if backward:
                    o.backward(do)
            return fn, ([q, k, v] if backward else None)

        contenders.append(("sdpa_flash", lambda: sdpa_make(False), lambda: sdpa_make(True), True))

        # ---- flash-linear-attention chunk_linear_attn at dk = d and 3d
        if fla_fn is not None:
            for dk in (3 * d, d):
                def fla_make(backward, dk=dk, T=T):
                    q = (torch.randn(B, T, H, dk, device=dev) / math.sqrt(dk)).to(dtype)
                    k = (torch.randn(B, T, H, dk, device=dev) / math.sqrt(dk)).to(dtype)
                    v = torch.randn(B, T, H, d, device=dev, dtype=dtype)
                    if backward:
                        q, k, v = (x.requires_grad_() for x in (q, k, v))
                        do = torch.randn(B, T, H, d, device=dev, dtype=dtype)

                    def fn():
                        o = fla_fn(q, k, v, scale=1.0, normalize=False)[0]
                        if backward:
                            o.backward(do)
                    return fn, ([q, k, v] if backward else None)

                contenders.append((f"fla_chunk_dk{dk}", lambda m=fla_make: m(False), lambda m=fla_make: m(True), True))

        # ---- explicit oracle and the official scan (small T only)
        if T <= ref_max_T:
            def ref_make(backward, T=T):
                leaves = _inputs(B, T, H, d, dtype, dev, requires_grad=backward)
                do = torch.randn(B, T, H, d, device=dev, dtype=dtype)
                if backward:
                    return (lambda: zeros_linear_reference(*leaves).backward(do)), leaves
                return (lambda: zeros_linear_reference(*leaves)), None

            contenders.append(("reference", lambda: ref_make(False), lambda: ref_make(True), False))
        if T <= scan_max_T:
            def scan_make(backward, T=T):
                leaves = _inputs(B, T, H, d, dtype, dev, requires_grad=backward)
                do = torch.randn(B, T, H, d, device=dev, dtype=dtype)
                if backward:
                    return (lambda: Fz.zeros_scan(*leaves).backward(do)), leaves
                return (lambda: Fz.zeros_scan(*leaves)), None

            contenders.append(("scan_official", lambda: scan_make(False), lambda: scan_make(True), False))

        for name, mf, mb, essential in contenders:
            if over() and not (essential and name == "ours"):
                skipped.append({"T": T, "op": name, "reason": "time budget"})
                continue
            try:
                rows.append(_measure(name, T, mf, mb, dev, log))
            except Exception as exc:  # noqa: BLE001
                rows.append({"T": T, "op": name, "error": f"{type(exc).__name__}: {exc}"[:300],
                             "trace": traceback.format_exc()[-500:]})
    payload = {
        "config": {"B": B, "H": H, "d": d, "dv": d, "dtype": str(dtype).split(".")[-1], "T_list": list(T_list),
                   "chunk_size": 64, "big_chunk": big_chunk, "ref_max_T": ref_max_T, "scan_max_T": scan_max_T, "budget_s": budget_s,
                   "timing": "triton.testing.do_bench median" if dev.type == "cuda" else "perf_counter median of 3"},
        "fla": fla_info,
        "checks": checks,
        "rows": rows,
        "skipped": skipped,
        "targets": summarize_targets(rows, fla_info["available"]),
        "anchors": {"fla": {str(k): {str(t): v for t, v in d_.items()} for k, d_ in ANCHOR_FLA.items()},
                    "sdpa_flash": {str(t): v for t, v in ANCHOR_SDPA.items()},
                    "note": "shared/anchors/README.md: H200, torch 2.11, triton 3.6, fla-core 0.6.0; (fwd ms, fwd+bwd ms, peak MiB)"},
        "elapsed_s": time.perf_counter() - t_start,
    }
    log(f"targets: {payload['targets']}; elapsed {payload['elapsed_s']:.1f} s")
    return payload

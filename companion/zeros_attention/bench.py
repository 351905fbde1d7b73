"""The ZeroS kernel study (paper 04, ZeroS, NeurIPS 2025): the stage bodies of :mod:`companion.zeros_attention.scale`.

At every headline size the peers are measured FIRST, then ours, all in one run:

* ``fla_dk192``  -- flash-linear-attention's ``chunk_linear_attn(q, k, v, scale=1.0, normalize=False)``
                    with key width 3d = 192: the same computation as ZeroS's three-part key;
* ``sdpa_flash`` -- ``scaled_dot_product_attention(is_causal=True)`` with the flash backend;
* ``zeros``      -- ``companion_kernels.zeros_linear`` (Triton, chunked, scalars in-kernel).

Rows: ``{"T", "impl", "mode": "fwd" | "fwd_bwd", "ms", "peak_mib", "extra_mib"}`` (``ms``: median of
``companion.core.time_ms``, i.e. ``triton.testing.do_bench``; ``peak_mib``: the allocator's peak
during one call, inputs included; ``extra_mib``: that peak minus what was allocated before). A
failing contender gets a row with ``"error"`` instead and the run goes on. flash-linear-attention is
required on the GPU profile (``require_fla``): there a missing package fails the stage that needs it;
the smoke profile records the peer as absent, with the reason.

The stages, in order: :func:`fla_stage` (the peer's version), :func:`rows_stage` (the headline rows),
:func:`checks_stage` (ours against the oracle on this device), :func:`accuracy_stage` (ours and fla dk192 at
the longest T against a float64 evaluation of the exact ZeroS weights on sampled rows),
:func:`variants_stage` (other chunk sizes of ours), :func:`segments_stage` (the state passes split into
other numbers of segments), :func:`pieces_stage` (the per-kernel split of our time), :func:`launch_stage` (at short
T, the host's share of a forward against the GPU's) and :func:`targets_stage` (the project's kernel targets,
evaluated on the rows).

No plotly here: this module must import on the bare GPU machine.
"""

from __future__ import annotations

import math
import time
import traceback

import torch
import torch.nn.functional as F

from companion.core import check_choice, cuda_graph, time_ms
from companion.zeros_attention import functional as Fz

__all__ = ["accuracy_stage", "checks_stage", "fla_peer", "fla_stage", "host_and_graph", "launch_stage", "pieces_stage", "rows_stage",
           "sampled_rows_reference",
           "segments_stage", "summarize_targets", "targets_stage", "variants_stage", "ANCHOR_FLA", "ANCHOR_SDPA", "TARGET_FWD_VS_FLA",
           "TARGET_FWD_BWD_VS_FLA", "TARGET_SDPA_SPEEDUP_TMAX", "TARGET_SDPA_FROM_T"]

# The anchors (the project's baselines, "Linear attention"): H200, torch 2.11, triton 3.6,
# fla-core 0.6.0, B=1, H=16, value width 64, bf16. {T: (fwd ms, fwd+bwd ms, peak MiB)}.
ANCHOR_FLA = {
    64: {2048: (0.182, 0.896, 320), 8192: (0.227, 1.255, 512), 32768: (0.257, 1.705, 1280), 65536: (0.507, 2.086, 2304)},
    192: {2048: (0.172, 1.228, 476), 8192: (0.177, 1.362, 832), 32768: (0.398, 2.067, 2560), 65536: (0.779, 4.104, 4864)},
}
ANCHOR_SDPA = {2048: (0.066, 0.250, 416), 8192: (0.562, 2.059, 514), 32768: (7.253, 27.062, 1286), 65536: (28.218, 105.992, 2316)}

# The project's kernel targets (at the longest T unless stated): ours / fla dk192 in the forward and in
# forward+backward, SDPA flash / ours in the forward, and the T from which ours beats SDPA forward.
TARGET_FWD_VS_FLA = 1.0
TARGET_FWD_BWD_VS_FLA = 1.5
TARGET_SDPA_SPEEDUP_TMAX = 30.0
TARGET_SDPA_FROM_T = 8192
DTYPES = ("bfloat16", "float16", "float32")


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


def _measure(impl, T, mode, make, device, log, timing, **extra):
    """One contender, one T, one mode -> a row (an ``error`` row if it fails: the other contenders still run).
    ``timing``: :func:`companion.core.time_ms`'s settings."""
    row = {"T": T, "impl": impl, "mode": mode, **extra}
    try:
        fn, leaves = make()
        row["ms"] = time_ms(fn, device, grad_to_none=leaves, **timing)
        row["peak_mib"], row["extra_mib"] = _peak_mib(fn, device)
        del fn, leaves
        log(f"  {impl:12s} {mode:8s} T={T:6d} {row['ms']:9.3f} ms  peak {row['peak_mib']} MiB")
    except Exception as exc:  # noqa: BLE001 -- record any failure of a contender and go on
        row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        row["trace"] = traceback.format_exc()[-600:]
        log(f"  {impl} T={T} {mode} failed: {row['error']}")
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return row


def _rel(a, b):
    return (a.float() - b.float()).norm().item() / max(b.float().norm().item(), 1e-12)


def sampled_rows_reference(q, k, v, s, sigma1, sigmah, rows, sigma0=None):
    """Causal ZeroS outputs ``[len(rows), B, H, dv]`` at the given rows, in float64, from the
    definition (Sec. 3): O(T d) per row, so usable at T = 65,536 where the O(T^2) oracle is not."""
    out = []
    qd, kd, vd, sd = q.double(), k.double(), v.double(), s.double()
    for t in rows:
        n = t + 1
        st = sd[:, :n]  # [B, n, H]
        p = torch.softmax(st, dim=1)
        delta = st - st.mean(dim=1, keepdim=True)
        r = (sigma1[:, t].double()[:, None] * delta / n
             + sigmah[:, t].double()[:, None] * (p - 1.0 / n - delta / n))
        if sigma0 is not None:
            r = r + sigma0[:, t].double()[:, None] / n
        cos = torch.einsum("bhd,bihd->bih", qd[:, t], kd[:, :n])
        out.append(torch.einsum("bih,bihe->bhe", r * cos, vd[:, :n]))
    return torch.stack(out)


def _row_errors(got_rows, want_rows, rows):
    """Relative error of each sampled (row, batch, head) output vector: max and mean over rows t >= 1
    (at t = 0 every ZeroS weight is 0, the reference row is exactly 0 and a relative error is
    undefined; its absolute error is reported instead)."""
    keep = torch.tensor([t > 0 for t in rows], device=want_rows.device)
    diff = (got_rows.double() - want_rows).norm(dim=-1)
    err = diff[keep] / want_rows[keep].norm(dim=-1).clamp_min(1e-30)
    out = {"max_rel_err": err.max().item(), "mean_rel_err": err.mean().item()}
    if not keep.all():
        out["row0_max_abs_err"] = diff[~keep].max().item()
    return out


def summarize_targets(rows, fla_available):
    """The issue's targets, evaluated on the recorded rows (None where a number is missing)."""
    by = {(r["impl"], r["mode"], r["T"]): r for r in rows if "error" not in r}
    Ts = sorted({r["T"] for r in rows if r["impl"] == "zeros" and "ms" in r})
    out = {}
    if not Ts:
        return out
    Tmax = Ts[-1]
    out["Tmax"] = Tmax

    def ms(impl, mode, T):
        return by.get((impl, mode, T), {}).get("ms")

    for mode, key in (("fwd", "fwd_ratio_vs_fla_dk192_at_Tmax"), ("fwd_bwd", "fwd_bwd_ratio_vs_fla_dk192_at_Tmax")):
        ours, fla = ms("zeros", mode, Tmax), ms("fla_dk192", mode, Tmax)
        if ours is None:
            continue
        if fla_available and fla is not None:
            out[key] = ours / fla
            out[f"{mode}_ratio_source"] = "fla measured in this run"
        elif Tmax in ANCHOR_FLA[192]:
            out[key] = ours / ANCHOR_FLA[192][Tmax][0 if mode == "fwd" else 1]
            out[f"{mode}_ratio_source"] = "fla anchor (the project's baseline), not this run"
    sd, ours = ms("sdpa_flash", "fwd", Tmax), ms("zeros", "fwd", Tmax)
    if sd is not None and ours:
        out["sdpa_over_zeros_fwd_at_Tmax"] = sd / ours
    faster = [T for T in Ts if ms("sdpa_flash", "fwd", T) is not None and ms("zeros", "fwd", T) < ms("sdpa_flash", "fwd", T)]
    crossover = None
    for T in Ts:
        if all(t in faster for t in Ts if t >= T):
            crossover = T
            break
    out["faster_than_sdpa_fwd_from_T"] = crossover
    mem = [(T, by[("zeros", "fwd_bwd", T)].get("extra_mib")) for T in Ts
           if by.get(("zeros", "fwd_bwd", T), {}).get("extra_mib")]
    if len(mem) >= 2:
        (t0, m0), (t1, m1) = mem[-2], mem[-1]
        out["extra_mem_ratio_last_two_T"] = m1 / m0 if m0 else None
        out["T_ratio_last_two"] = t1 / t0
    met = {}
    if "fwd_ratio_vs_fla_dk192_at_Tmax" in out:
        met["fwd_le_fla"] = out["fwd_ratio_vs_fla_dk192_at_Tmax"] <= TARGET_FWD_VS_FLA
    if "fwd_bwd_ratio_vs_fla_dk192_at_Tmax" in out:
        met["fwd_bwd_le_1.5x_fla"] = out["fwd_bwd_ratio_vs_fla_dk192_at_Tmax"] <= TARGET_FWD_BWD_VS_FLA
    if "sdpa_over_zeros_fwd_at_Tmax" in out:
        met["ge_30x_sdpa_fwd"] = out["sdpa_over_zeros_fwd_at_Tmax"] >= TARGET_SDPA_SPEEDUP_TMAX
    if crossover is not None or faster:
        met["faster_than_sdpa_from_8k"] = crossover is not None and crossover <= TARGET_SDPA_FROM_T
    out["met"] = met
    return out


def _time_pieces(T, B, H, d, dtype, dev, chunk, timing, seed, segments=None):
    """Milliseconds of each kernel of ours at one T (the forward and backward pieces, launched alone; a
    segmented state pass counts both of its launches; ``fused_forward`` is the whole fused forward: the scalar
    passes, the totals launch and the walk, or the walk alone in one segment)."""
    from companion_kernels.zeros_linear import triton as zt

    q, k, v, s, s1, sh = _inputs(B, T, H, d, dtype, dev, seed=seed)
    do = torch.randn(B, T, H, d, device=dev, dtype=dtype)
    g = zt._geometry(q, v, chunk)
    BH, NT = B * H, g["NT"]
    rows4, lb, pb = zt._scalars(s, s1, sh, None, chunk)
    h = zt._fwd_states(k, v, s, lb, chunk, segments)
    par = dict(K=g["K"], V=g["V"], BT=chunk, BK=g["BK"], BV=g["BV"], PREC=g["prec"])
    f32 = torch.float32
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    ds, ds1, dsh = (torch.zeros(B, T, H, device=dev, dtype=f32) for _ in range(3))
    xc, yc = (torch.empty(BH, NT, device=dev, dtype=f32) for _ in range(2))
    dq_bwd = lambda: zt._dq_bwd[(NT, BH)](q, k, v, do, s, rows4, h, lb, pb, dq, ds, ds1, dsh, dsh, xc, yc,  # noqa: E731
                                          T, H, NT, HAS_S0=False, **par)
    dq_bwd()
    dh, cc, ys = zt._bwd_states(q, do, rows4, lb, xc, yc, chunk, segments)
    pieces = {
        "scalars": lambda: zt._scalars(s, s1, sh, None, chunk),
        "state_fwd": lambda: zt._fwd_states(k, v, s, lb, chunk, segments),
        "out_fwd": lambda: zt._fwd_out(q, k, v, s, rows4, h, lb, chunk),
        "fused_forward": lambda: zt._fwd_out_fused(q, k, v, s, s1, sh, None, chunk, segments),
        "dq_bwd": dq_bwd,
        "state_bwd": lambda: zt._bwd_states(q, do, rows4, lb, xc, yc, chunk, segments),
        "dkv_bwd": lambda: zt._dkv_bwd[(NT, BH)](q, k, v, do, s, rows4, dh, lb, cc, ys, dk, dv, ds, T, H, NT, **par),
    }
    out = {name: time_ms(fn, dev, **timing) for name, fn in pieces.items()}
    out["segments"] = zt._segments(g, dev, segments)[1]
    out["fused_segments"] = zt._segments(g, dev, segments, fused=True)[1]
    cfg = {}
    for name in ("_state_fwd", "_out_fwd", "_state_out_fwd", "_dq_bwd", "_state_bwd", "_dkv_bwd"):
        best = getattr(getattr(zt, name), "best_config", None)
        cfg[name] = str(best) if best is not None else None
    out["configs"] = cfg
    return out


# ---------------------------------------------------------------- the stages of companion.zeros_attention.scale
class _Setup:
    """The profile's sizes as the stages use them (``B, T_list, H, d, dtype, chunk``, ``timing``) and the device."""

    def __init__(self, ctx):
        p = ctx.profile
        self.p, self.dev, self.log, self.seed = p, torch.device(ctx.device), ctx.log, ctx.seed
        self.B, self.H, self.d, self.T_list = p["B"], p["H"], p["d"], list(p["T_list"])
        self.dtype = getattr(torch, check_choice("dtype", p["dtype"], DTYPES))
        self.chunk, self.timing = p["chunk_size"], p["timing"]

    def inputs(self, T, *, seed_offset=0, requires_grad=False):
        return _inputs(self.B, T, self.H, self.d, self.dtype, self.dev, seed=self.seed + seed_offset,
                       requires_grad=requires_grad)


def fla_peer(device, required: bool):
    """flash-linear-attention's ``chunk_linear_attn`` and ``{"available", "version", "error"}``. It runs on CUDA
    only; where it cannot run, ``required`` (the GPU profile's ``require_fla``) raises, otherwise the function is
    None and ``error`` says why (the smoke profile records the peer as absent)."""
    if torch.device(device).type != "cuda":
        why = f"its Triton kernels run on CUDA only, not on {device}"
    else:
        try:
            import fla  # type: ignore
            from fla.ops.linear_attn import chunk_linear_attn  # type: ignore
        except Exception as exc:  # noqa: BLE001 - any import failure means the peer is absent
            why = f"{type(exc).__name__}: {str(exc)[:200]}"
        else:
            return chunk_linear_attn, {"available": True, "version": getattr(fla, "__version__", "unknown"), "error": None}
    if required:
        raise ImportError(f"flash-linear-attention, the strongest linear-attention peer, cannot run here ({why}); "
                          "install fla-core on the GPU machine (the smoke profile, require_fla=False, records it absent)")
    return None, {"available": False, "version": None, "error": why}


def fla_stage(ctx) -> dict:
    """The linear-attention peer: ``{"available", "version", "error"}`` (:func:`fla_peer`)."""
    info = fla_peer(ctx.device, ctx.profile["require_fla"])[1]
    ctx.log(f"  flash-linear-attention: {info}")
    return info


def _ours(S, T, chunk, backward, segments=None, fused=None):
    """Our kernel through the public op, or, for a given ``segments`` or ``fused``, through the Triton entry point
    that takes the split of the state passes and the fused forward."""
    from companion_kernels.zeros_linear import zeros_linear
    from companion_kernels.zeros_linear.triton import zeros_linear_triton

    def op(*leaves):
        if segments is None and fused is None:
            return zeros_linear(*leaves, impl="triton", chunk_size=chunk)
        return zeros_linear_triton(*leaves, chunk_size=chunk, segments=segments, fused=fused)

    def make():
        leaves = S.inputs(T, requires_grad=backward)
        if not backward:
            return (lambda: op(*leaves)), None
        do = torch.randn(S.B, T, S.H, S.d, device=S.dev, dtype=S.dtype)
        return (lambda: op(*leaves).backward(do)), leaves
    return make


def _auto_segments(S, T, chunk, fused):
    """How many segments the state passes (``fused``: the fused forward walk) use by default at this size
    (``triton._segments``)."""
    from companion_kernels.zeros_linear import triton as zt

    g = zt._geometry(torch.empty(S.B, T, S.H, S.d, device="meta"), torch.empty(S.B, T, S.H, S.d, device="meta"), chunk)
    return zt._segments(g, S.dev, None, fused)[1]


def _sdpa(S, T, backward):
    def make():
        from torch.nn.attention import SDPBackend, sdpa_kernel

        q, k, v = (torch.randn(S.B, S.H, T, S.d, device=S.dev, dtype=S.dtype) for _ in range(3))
        if backward:
            q, k, v = (x.requires_grad_() for x in (q, k, v))
            do = torch.randn(S.B, S.H, T, S.d, device=S.dev, dtype=S.dtype)
        backends = [SDPBackend.FLASH_ATTENTION] if S.dev.type == "cuda" else [SDPBackend.MATH]

        def fn():
            with sdpa_kernel(backends):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            if backward:
                o.backward(do)
        return fn, ([q, k, v] if backward else None)
    return make


def _fla(S, fla_fn, T, backward):
    dk = 3 * S.d

    def make():
        q = (torch.randn(S.B, T, S.H, dk, device=S.dev) / math.sqrt(dk)).to(S.dtype)
        k = (torch.randn(S.B, T, S.H, dk, device=S.dev) / math.sqrt(dk)).to(S.dtype)
        v = torch.randn(S.B, T, S.H, S.d, device=S.dev, dtype=S.dtype)
        if backward:
            q, k, v = (x.requires_grad_() for x in (q, k, v))
            do = torch.randn(S.B, T, S.H, S.d, device=S.dev, dtype=S.dtype)

        def fn():
            o = fla_fn(q, k, v, scale=1.0, normalize=False)[0]
            if backward:
                o.backward(do)
        return fn, ([q, k, v] if backward else None)
    return make


def rows_stage(ctx) -> list[dict]:
    """The headline rows: at every T (ascending), fla dk192 and SDPA flash first, then ours; forward, then
    forward+backward."""
    from companion_kernels.zeros_linear.triton import fused_by_default

    S = _Setup(ctx)
    fla_fn, info = fla_peer(ctx.device, S.p["require_fla"])
    fused = fused_by_default(S.d, S.d)  # the kernel's default forward
    S.log(f"ZeroS kernel benchmark on {S.dev}, B={S.B} H={S.H} d={S.d} {S.dtype}, chunk {S.chunk}; fla: {info}")
    rows = []
    for T in S.T_list:
        for mode, bw in (("fwd", False), ("fwd_bwd", True)):
            if fla_fn is not None:
                rows.append(_measure("fla_dk192", T, mode, _fla(S, fla_fn, T, bw), S.dev, S.log, S.timing))
            else:
                rows.append({"T": T, "impl": "fla_dk192", "mode": mode, "error": f"fla absent: {info['error']}"})
            rows.append(_measure("sdpa_flash", T, mode, _sdpa(S, T, bw), S.dev, S.log, S.timing))
            rows.append(_measure("zeros", T, mode, _ours(S, T, S.chunk, bw), S.dev, S.log, S.timing, chunk=S.chunk,
                                 segments=_auto_segments(S, T, S.chunk, fused), fused=fused))
    return rows


def checks_stage(ctx) -> dict:
    """Ours against the oracle on this device: an fp32 forward (B=2, H=3, d=32, T = ``checks.fp32_T``, the
    kernel's default chunk) and, in the profile's dtype at T = ``checks.grad_T``, the output and every gradient
    (relative errors against the fp32 oracle)."""
    from companion_kernels.zeros_linear import zeros_linear, zeros_linear_reference

    S, c = _Setup(ctx), ctx.profile["checks"]
    T = c["fp32_T"]
    args = _inputs(2, T, 3, 32, torch.float32, S.dev, seed=S.seed + 1)
    out = {f"fp32_T{T}_max_abs_err": (zeros_linear(*args, impl="triton") - zeros_linear_reference(*args)).abs().max().item()}
    T = c["grad_T"]
    leaves = _inputs(1, T, S.H, S.d, S.dtype, S.dev, seed=S.seed + 2, requires_grad=True)
    ref_leaves = [x.detach().float().requires_grad_() for x in leaves]
    do = torch.randn(1, T, S.H, S.d, device=S.dev)
    o = zeros_linear(*leaves, impl="triton")
    o.float().backward(do)
    r = zeros_linear_reference(*ref_leaves)
    r.backward(do)
    tag = f"{S.p['dtype']}_T{T}"
    out[f"{tag}_rel_err_out"] = _rel(o, r)
    for name, a, b in zip(("q", "k", "v", "s", "sigma1", "sigmah"), leaves, ref_leaves):
        out[f"{tag}_rel_err_grad_{name}"] = _rel(a.grad, b.grad)
    S.log(f"  checks: {out}")
    return out


def accuracy_stage(ctx) -> dict:
    """Ours (and fla dk192) at the longest T against float64 on ``accuracy_rows`` sampled rows (rows 0, 63, T/2
    and T-1 always among them), and ours on fp32 inputs (what bf16 storage costs)."""
    from companion_kernels.zeros_linear import zeros_linear

    S = _Setup(ctx)
    fla_fn = fla_peer(ctx.device, S.p["require_fla"])[0]
    T, n_rows = max(S.T_list), S.p["accuracy_rows"]
    out = {"T": T, "rows": n_rows, "dtype": S.p["dtype"], "chunk": S.chunk}
    q, k, v, s, s1, sh = S.inputs(T, seed_offset=4)
    g = torch.Generator().manual_seed(S.seed + 5)
    rows = sorted(set(torch.randint(0, T, (n_rows - 4,), generator=g).tolist()) | {0, 63, T // 2, T - 1})
    want = sampled_rows_reference(q, k, v, s, s1, sh, rows)
    o = zeros_linear(q, k, v, s, s1, sh, impl="triton", chunk_size=S.chunk)
    out["zeros"] = _row_errors(o[:, rows].permute(1, 0, 2, 3), want, rows)
    del o
    if fla_fn is not None:
        Qp, Kp = Fz.three_key_features(q.float(), k.float(), s, s1, sh)
        o_fla = fla_fn(Qp.to(S.dtype).contiguous(), Kp.to(S.dtype).contiguous(), v, scale=1.0, normalize=False)[0]
        out["fla_dk192"] = _row_errors(o_fla[:, rows].permute(1, 0, 2, 3), want, rows)
        del o_fla, Qp, Kp
    o32 = zeros_linear(q.float(), k.float(), v.float(), s, s1, sh, impl="triton", chunk_size=S.chunk)
    out["zeros_fp32_inputs"] = _row_errors(o32[:, rows].permute(1, 0, 2, 3), want, rows)
    S.log(f"  accuracy: {out}")
    return out


def variants_stage(ctx) -> list[dict]:
    """Ours at the other chunk sizes of ``variant_chunks``, every T and mode; a chunk size is started only while
    the stage has time left (the rows say which ran)."""
    S = _Setup(ctx)
    rows = []
    for c in S.p["variant_chunks"]:
        if c == S.chunk:
            continue
        if ctx.left() <= 0:
            S.log(f"  variants: no time left, chunk {c} and later not timed")
            break
        for T in S.T_list:
            for mode, bw in (("fwd", False), ("fwd_bwd", True)):
                rows.append(_measure("zeros", T, mode, _ours(S, T, c, bw), S.dev, S.log, S.timing, chunk=c))
    return rows


def segments_stage(ctx) -> list[dict]:
    """Ours at the headline chunk for each ``[segments, fused]`` of ``variant_state_passes``: the sequential
    state passes walked in that many segments (1: one walk over all chunks; None: the automatic split), the
    forward through stored states or fused (states in registers, the output written from the walk), every T
    and mode; a pair is started only while the stage has time left. Rows as in :func:`rows_stage`, with
    ``segments`` (the count used) and ``fused``."""
    from companion_kernels.zeros_linear.triton import FUSED_MAX_DIM

    S = _Setup(ctx)
    rows = []
    for n, fused in S.p["variant_state_passes"]:
        if ctx.left() <= 0:
            S.log(f"  segments: no time left, ({n}, fused={fused}) and later not timed")
            break
        if fused and S.d > FUSED_MAX_DIM:
            continue
        for T in S.T_list:
            used = n if n is not None else _auto_segments(S, T, S.chunk, fused)
            for mode, bw in (("fwd", False), ("fwd_bwd", True)):
                rows.append(_measure("zeros", T, mode, _ours(S, T, S.chunk, bw, segments=used, fused=fused), S.dev,
                                     S.log, S.timing, chunk=S.chunk, segments=used, fused=fused))
    return rows


def pieces_stage(ctx) -> dict:
    """``{name: {kernel: ms, "segments", "configs": the autotuner's choices}}``: each kernel of ours launched alone
    at the longest T, for the headline chunk and every variant (name: the chunk; the default split of the state
    passes) and for the headline chunk with one segment (name ``"<chunk>_one_segment"``), while the stage has
    time left."""
    S = _Setup(ctx)
    out = {}
    runs = [(str(c), c, None) for c in sorted({S.chunk, *S.p["variant_chunks"]})] + [(f"{S.chunk}_one_segment", S.chunk, 1)]
    for name, c, segments in runs:
        if out and ctx.left() <= 0:
            S.log(f"  pieces: no time left, {name} and later not timed")
            break
        out[name] = _time_pieces(max(S.T_list), S.B, S.H, S.d, S.dtype, S.dev, c, S.timing, S.seed, segments)
        S.log(f"  pieces {name} T={max(S.T_list)}: {out[name]}")
    return out


def host_and_graph(fn, device, timing, calls: int = 200) -> dict:
    """Where one call's time goes: ``host_us``, the host's microseconds a call (``calls`` calls issued back to back,
    timed before the device is waited for: the Python and launch path alone, as long as the device keeps up), and
    ``graph_ms``, the device's milliseconds a call (the call captured once in a CUDA graph, its replay timed by
    :func:`companion.core.time_ms`: the kernels with no host in between; None off CUDA, or ``graph_error`` where the
    capture fails)."""
    fn()
    _sync(device)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    out = {"host_us": (time.perf_counter() - start) / calls * 1e6}
    _sync(device)
    if device.type != "cuda":
        return {**out, "graph_ms": None, "graph_error": "CUDA graphs need a CUDA device"}
    try:
        out["graph_ms"] = time_ms(cuda_graph(fn), device, **timing)
    except Exception as exc:  # noqa: BLE001 - a contender that cannot be captured is recorded so
        out.update(graph_ms=None, graph_error=f"{type(exc).__name__}: {str(exc)[:300]}")
    return out


def launch_stage(ctx) -> list[dict]:
    """At each T of ``launch_T`` (the short sequences, where a forward is a few microseconds of kernels), fla dk192
    first, then ours by default and ours with one segment (a launch fewer): the forward's median ms as the rows
    time it, and :func:`host_and_graph`'s host microseconds and CUDA-graph milliseconds a call. Where ``ms`` is
    near ``host_us`` and far above ``graph_ms``, the host's launch path, not the kernels, sets the time."""
    S = _Setup(ctx)
    fla_fn = fla_peer(ctx.device, S.p["require_fla"])[0]
    rows = []
    for T in S.p["launch_T"]:
        contenders = [("fla_dk192", _fla(S, fla_fn, T, False))] if fla_fn is not None else []
        contenders += [("zeros", _ours(S, T, S.chunk, False)),
                       ("zeros_one_segment", _ours(S, T, S.chunk, False, segments=1))]
        for impl, make in contenders:
            row = {"T": T, "impl": impl, "mode": "fwd"}
            try:
                fn, _ = make()
                row["ms"] = time_ms(fn, S.dev, **S.timing)
                row.update(host_and_graph(fn, S.dev, S.timing, calls=S.p["launch_calls"]))
            except Exception as exc:  # noqa: BLE001 - record any failure of a contender and go on
                row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            S.log(f"  launch: {row}")
            rows.append(row)
    return rows


def targets_stage(ctx) -> dict:
    """The project's kernel targets on the ``rows`` stage's rows (:func:`summarize_targets`), with the anchors they fall
    back on where fla was not measured in this run."""
    if ctx.results.get("stages", {}).get("rows", {}).get("state") != "done":
        raise RuntimeError("the targets need the rows stage's results: run it first (--stages rows,targets)")
    fla_ok = ctx.results.get("fla", {}).get("available", False)
    out = summarize_targets(ctx.results["rows"], fla_ok)
    out["anchors"] = {"fla": {str(k): {str(t): v for t, v in d_.items()} for k, d_ in ANCHOR_FLA.items()},
                      "sdpa_flash": {str(t): v for t, v in ANCHOR_SDPA.items()},
                      "note": "the project's baselines: H200, torch 2.11, triton 3.6, fla-core 0.6.0; "
                              "(fwd ms, fwd+bwd ms, peak MiB)"}
    ctx.log(f"  targets: { {k: v for k, v in out.items() if k != 'anchors'} }")
    return out

"""The one-GPU (H200) run of paper 08 and the reader of its committed results. No plotly import.

:func:`run_scale_up` (used by ``benchmarks/dartquant_gpu.py``), in one run:

1. **QR-Orth vs Cayley per step** at n = 4096 and 8192 (fp32, 2048 tokens a batch, Whip loss, SGD):
   wall time (``companion.core.time_ms``, Cayley — the peer — measured first) and peak memory of one
   step (rotation, loss, backward, update). Paper: (4/3)n³ vs ≈6n³, ≈1.4× per iteration.
2. For **two model sizes** (byte-level LLaMA layout with GQA, trained from scratch for each model's ``train_seconds`` on
   the Python standard library's source files, bf16 autocast, AdamW):

   * FP perplexity on held-out source files and on English docstrings (the cross set);
   * W4A4KV4 (RTN weights group 128 with MSE clip, per-token asymmetric activations with clip 0.9, K/V
     per head) perplexity for: **none** (norms fused only), **QuaRot** (random Hadamard R1, R2, online R3/R4),
     **DartQuant** (Whip + QR-Orth R1 on the pooled q/up inputs and per-layer R2 on the o_proj inputs, R3/R4
     Hadamard), **end-to-end** (SpinQuant-style: R1 under torch's Cayley parametrisation trained by Adam
     through the W16A4KV4 model with straight-through rounding on next-token loss, R2/R3/R4 Hadamard);
   * the **calibration cost** of DartQuant (activation collection + R1 + R2) against the end-to-end
     training on the same calibration samples: wall time and peak GPU memory.

3. **The fused kernel** (``companion_kernels.rotate_quant_whip``): ``Y = X R``, the per-token asymmetric INT4
   fake quantization of Y (clip 0.9) and the per-token Whip sums (Eq. 4) in one Triton kernel, at
   ``kernel_tokens`` × n = ``kernel_n`` in bf16, timed against eager PyTorch (the same reference
   function; measured first), for each of the kernel's two GPU tile shapes (the faster is reported; the
   agreement reported is the worst of the two), and, when time is left at the end of the run, ``torch.compile`` of it. Bytes counted for
   TB/s: X read + R read once + quantized Y written + the fp32 Whip sums written (the compulsory traffic;
   the kernel's own read-back of Y and R's re-reads from L2 are not counted). At n = 4096 the op is
   compute-bound (2n FLOP per 4 bytes), so TFLOP/s is reported too. The kernel's output is compared with
   eager PyTorch's on the GPU: the fraction of elements off the reference's grid point, the largest
   difference in units of the token's quantization step, and the Whip sums' relative error.

Deviations, for one lease: models of 25–150M parameters trained for seconds (the paper's are 7–70B
pretrained LLMs), RTN instead of GPTQ weights (the GPTQ column loop in Python would cost more than the
lease), short calibration schedules, one seed. Small models trained briefly have few massive activations,
so the gaps are expected to be smaller than the paper's.
"""

from __future__ import annotations

import copy
import math
import sysconfig
import time
from pathlib import Path

import numpy as np
import torch

from companion.core import recorded_results, time_ms

RESULTS_NAME = "dartquant_gpu"
GPU_PROFILE = {
    "models": [
        {"name": "d512-L8", "hidden": 512, "layers": 8, "heads": 8, "kv_heads": 4, "ffn": 1536, "train_seconds": 12},
        {"name": "d1024-L12", "hidden": 1024, "layers": 12, "heads": 16, "kv_heads": 8, "ffn": 3072, "train_seconds": 16},
    ],
    "train_seconds": 12,  # default for a model without its own
    "seq_len": 512,
    "batch": 32,
    "lr": 1e-3,
    "calib_samples": 128,
    "calib_tokens_per_sample": 64,
    "r1_steps": 300, "r2_steps": 100, "rot_lr": 1e-2, "rot_batch": 1024,
    "e2e_steps": 60, "e2e_lr": 2e-3, "e2e_batch": 8,
    "eval_samples": 32,
    "bits": {"w": 4, "a": 4, "kv": 4},
    "step_cost_n": [4096, 8192], "step_cost_tokens": 2048,
    "kernel_tokens": 32768, "kernel_n": 4096, "kernel_bits": 4, "kernel_dtype": "bfloat16",
    "compile_min_left_s": 35,  # torch.compile of the reference runs only with this many seconds left
}

#: the kernel's output counts as matching PyTorch when at most this fraction of elements sits on another
#: grid point than eager PyTorch's (GEMM accumulation order moves a few y values across a rounding
#: boundary), none by more than :func:`kernel_steps_bound` quantization steps, and the Whip sums agree to
#: this relative error
KERNEL_MAX_OFF_FRAC = 0.02
KERNEL_WHIP_RTOL = 1e-3


def kernel_steps_bound(bits: int, dtype: torch.dtype) -> float:
    """The largest kernel-vs-PyTorch difference, in quantization steps s, of two correct implementations:
    one grid point (a y near a rounding boundary), plus the rounding of each side's dequantized output
    s·(q − z) to ``dtype``: |q − z| ≤ 2^b − 1 steps, each rounded with relative error at most u = eps/2,
    so 1 + 2(2^b − 1)u (bf16, 4 bits: 1.117; fp32: 1 + 1.8e-6)."""
    return 1.0 + 2 * (2 ** bits - 1) * torch.finfo(dtype).eps / 2


def kernel_matches(agreement: dict, bits: int, dtype: torch.dtype) -> bool:
    """Whether a :func:`kernel_agreement` record is within the three tolerances above."""
    return bool(agreement["off_frac"] <= KERNEL_MAX_OFF_FRAC and agreement["max_steps"] <= kernel_steps_bound(bits, dtype)
                and agreement["whip_rel"] <= KERNEL_WHIP_RTOL)


def recorded() -> dict | None:
    """The committed results of ``benchmarks/dartquant_gpu.py`` (None when not recorded yet)."""
    return recorded_results(RESULTS_NAME)


def source_bytes(max_bytes: int = 16_000_000, val_fraction: float = 0.05):
    """Bytes of the standard library's ``.py`` files (sorted), split by file into train and validation."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts)
    chunks, total = [], 0
    for p in files:
        try:
            chunks.append(p.read_bytes())
        except OSError:
            continue
        total += len(chunks[-1])
        if total >= max_bytes:
            break
    idx = np.random.default_rng(0).permutation(len(chunks))
    n_val = max(1, int(len(chunks) * val_fraction))
    to_t = lambda bs: torch.frombuffer(bytearray(b"\n".join(bs)), dtype=torch.uint8).long()  # noqa: E731
    return to_t([chunks[i] for i in idx[n_val:]]), to_t([chunks[i] for i in idx[:n_val]])


def docstring_bytes() -> torch.Tensor:
    from companion.models import stdlib_texts

    return torch.frombuffer(bytearray("\n\n".join(stdlib_texts()).encode()), dtype=torch.uint8).long()


def windows(data: torch.Tensor, n: int, seq_len: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(data) - seq_len - 1, (n,), generator=g)
    return data[starts[:, None] + torch.arange(seq_len)[None]]


def _peak_reset(device):
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    return time.perf_counter()


def _peak_mib(device, base: int = 0) -> float:
    if device.type != "cuda":
        return float("nan")
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2 ** 20


def train(model, data, *, seconds, batch, seq_len, lr, device, log, max_steps=10 ** 9):
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    g = torch.Generator().manual_seed(1)
    amp = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")
    model.train()
    t0, step, losses = time.perf_counter(), 0, []
    while step < max_steps and time.perf_counter() - t0 < seconds:
        ids = windows(data, batch, seq_len + 1, int(torch.randint(0, 2 ** 31, (1,), generator=g))).to(device)
        for group in opt.param_groups:
            group["lr"] = lr * min(1.0, (step + 1) / 50)
        with amp:
            out = model(input_ids=ids[:, :-1], labels=ids[:, :-1])
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(out.loss.detach()) if step % 50 == 0 else None)
        step += 1
        if step % 200 == 0:
            log(f"  step {step} loss {out.loss.item():.3f}")
    model.eval()
    return {"steps": step, "seconds": round(time.perf_counter() - t0, 1), "loss": [x for x in losses if x is not None]}


def _ppl_sets(model, sets, *, w_bits=None, a_bits=None, kv_bits=None, r3=False, calib=None):
    from companion.dartquant.rotation import perplexity, quantize_weights, quantized_activations

    m = model
    if w_bits is not None:
        m = quantize_weights(copy.deepcopy(model), w_bits, "rtn")
    with quantized_activations(m, a_bits, kv_bits, r3=r3):
        return {k: round(perplexity(m, v, batch=8), 4) for k, v in sets.items()}


def rotated_params(model, r1: torch.Tensor) -> dict:
    """The model's parameters with R1 applied, as differentiable tensors (for :func:`torch.func.functional_call`)."""
    from companion.dartquant.rotation import llama_parts

    p = llama_parts(model)
    out = {}
    names = {id(mod): n for n, mod in model.named_modules()}
    out[names[id(p.embed)] + ".weight"] = p.embed.weight @ r1
    out[names[id(p.lm_head)] + ".weight"] = p.lm_head.weight @ r1
    for layer in p.layers:
        for lin in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj, layer.mlp.gate_proj, layer.mlp.up_proj):
            out[names[id(lin)] + ".weight"] = lin.weight @ r1
        for lin in (layer.self_attn.o_proj, layer.mlp.down_proj):
            out[names[id(lin)] + ".weight"] = r1.T @ lin.weight
    return out


def end_to_end_r1(model, calib_ids, *, steps, lr, batch, a_bits, kv_bits, device, seed=0):
    """SpinQuant-style: R1 = B·Cayley(A) (torch's orthogonal parametrisation, B the random Hadamard start),
    Adam on A, next-token loss of the W16A{a}KV{kv} model (straight-through rounding). The model is frozen."""
    from companion.dartquant.hadamard import random_hadamard
    from companion.dartquant.rotation import quantized_activations

    d = model.config.hidden_size
    holder = torch.nn.Module()
    holder.weight = torch.nn.Parameter(random_hadamard(d, seed).to(device))
    torch.nn.utils.parametrizations.orthogonal(holder, "weight", orthogonal_map="cayley")
    with torch.no_grad():
        holder.weight = random_hadamard(d, seed).to(device)
    for p in model.parameters():
        p.requires_grad_(False)
    opt = torch.optim.Adam(holder.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    losses = []
    amp = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")
    with quantized_activations(model, a_bits, kv_bits, r3=True, ste=True):
        for step in range(steps):
            ids = calib_ids[torch.randint(0, calib_ids.shape[0], (batch,), generator=g)].to(device)
            with amp:
                out = torch.func.functional_call(model, rotated_params(model, holder.weight), (),
                                                 {"input_ids": ids, "labels": ids})
            out.loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(float(out.loss.detach()))
    for p in model.parameters():
        p.requires_grad_(True)
    return holder.weight.detach().float(), losses


def dartquant_calibrate(model, calib_ids, P, device, seed=0):
    """Collect the R1/R2 sites in memory and learn R1 (pooled) and each layer's R2 with Whip + QR-Orth."""
    from companion.dartquant.activations import collect_calibration
    from companion.dartquant.qr_orth import calibrate

    data = collect_calibration(model, calib_ids.to(device), tokens_per_sample=P["calib_tokens_per_sample"], seed=seed)
    x1 = data["r1"].reshape(-1, data["r1"].shape[-1])
    c1 = calibrate(x1, steps=P["r1_steps"], lr=P["rot_lr"], batch=P["rot_batch"], seed=seed)
    cfg = model.config
    r2, r2_loss = [], []
    for xl in data["r2"]:
        c2 = calibrate(xl.reshape(-1, xl.shape[-1]), steps=P["r2_steps"], lr=P["rot_lr"], batch=P["rot_batch"],
                       heads=cfg.num_attention_heads, kv_heads=cfg.num_key_value_heads, seed=seed)
        r2.append(c2.rotation)
        r2_loss.append((c2.losses[0], float(np.mean(c2.losses[-10:]))))
    return c1.rotation, r2, {"r1_loss": (c1.losses[0], float(np.mean(c1.losses[-10:]))), "r2_loss": r2_loss,
                             "r1_tokens": int(x1.shape[0])}


def step_cost(n: int, tokens: int, device, log) -> dict:
    """Time and peak memory of one Whip step with QR-Orth and with the Cayley parametrisation at width n."""
    from companion.dartquant.hadamard import random_hadamard
    from companion.dartquant.qr_orth import _Rotator
    from companion.dartquant.whip import whip_loss

    x = torch.randn(tokens, n, device=device)
    row = {"n": n, "tokens": tokens}
    for method in ("cayley", "qr_orth"):  # the peer first
        rot = _Rotator(method, random_hadamard(n, 0).to(device)).to(device)
        opt = torch.optim.SGD(rot.parameters(), lr=1e-3, momentum=0.9)

        def step():
            whip_loss(x @ rot()).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        step()
        base = torch.cuda.memory_allocated() if device.type == "cuda" else 0
        _peak_reset(device)
        step()
        row[f"{'qr' if method == 'qr_orth' else 'cayley'}_mib"] = round(_peak_mib(device, base), 1)
        row[f"{'qr' if method == 'qr_orth' else 'cayley'}_ms"] = round(time_ms(step, device, warmup=50, rep=300), 3)
        del rot, opt
    log(f"[step cost] {row}")
    return row


def kernel_inputs(tokens: int, n: int, dtype: torch.dtype, device, seed: int = 0):
    """Post-RMSNorm-like activations (Gaussian, 4 massive channels ×20) and QuaRot's random Hadamard R."""
    from companion.dartquant.hadamard import random_hadamard

    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(tokens, n, device=device, generator=g)
    x[:, :4] *= 20.0
    return x.to(dtype), random_hadamard(n, seed).to(device=device, dtype=dtype)


def kernel_agreement(yk: torch.Tensor, wk: torch.Tensor, yr: torch.Tensor, wr: torch.Tensor, y: torch.Tensor,
                     bits: int, clip: float = 0.9) -> dict:
    """How far the kernel's ``(Q(XR), whip)`` is from the reference's, given the rounded ``y = X R``.

    ``off_frac``: fraction of elements on another grid point (difference above 1e-3 of the token's step s);
    ``max_steps``: the largest difference in units of s; ``whip_rel``: the largest relative Whip-sum error;
    ``matches``: :func:`kernel_matches` at the kernel output's dtype.
    """
    yf = y.float()
    hi = yf.amax(-1, keepdim=True).clamp(min=0) * clip
    lo = yf.amin(-1, keepdim=True).clamp(max=0) * clip
    step = ((hi - lo) / (2 ** bits - 1)).clamp_min(1e-30)
    d = (yk.float() - yr.float()).abs() / step
    out = {"off_frac": float((d > 1e-3).float().mean()), "max_steps": float(d.max()),
           "whip_rel": float(((wk.double() - wr.double()).abs() / wr.double().abs().clamp_min(1e-12)).max()),
           "elements": int(y.numel())}
    out["matches"] = kernel_matches(out, bits, yk.dtype)
    return out


def kernel_bytes(tokens: int, n: int, itemsize: int) -> int:
    """Compulsory bytes of the fused op: X read, R read once, quantized Y written, fp32 Whip sums written."""
    return 2 * tokens * n * itemsize + n * n * itemsize + 4 * tokens


def kernel_study(tokens: int, n: int, bits: int, dtype: torch.dtype, device, log, seed: int = 0) -> dict:
    """The fused Triton kernel against eager PyTorch at ``tokens`` × ``n``: agreement, ms, TB/s, TFLOP/s."""
    from companion_kernels.dispatch import interpreting
    from companion_kernels.rotate_quant_whip.reference import rotate_quant_whip_reference

    row = {"tokens": tokens, "n": n, "bits": bits, "dtype": str(dtype).replace("torch.", ""), "clip": 0.9,
           "bytes": kernel_bytes(tokens, n, torch.empty((), dtype=dtype).element_size()), "flop": 2 * tokens * n * n,
           "bytes_counted": "X read + R read once + quantized Y written + fp32 Whip sums written"}
    if device.type != "cuda" and not interpreting():
        row["skipped"] = "no CUDA device and TRITON_INTERPRET is off"
        return row
    from companion_kernels.rotate_quant_whip.triton import GPU_TILES, rotate_quant_whip_triton

    x, r = kernel_inputs(tokens, n, dtype, device, seed)
    interp = device.type != "cuda"
    eager = lambda: rotate_quant_whip_reference(x, r, bits, 0.9)  # noqa: E731
    yr, wr = eager()
    y = x @ r
    row["eager_ms"] = round(time_ms(eager, device), 4)  # the peer first
    tiles = [None] if interp or dtype == torch.float32 else list(GPU_TILES)
    row["tiles"] = []
    for tile in tiles:  # each tile: agreement with eager PyTorch, then time; the best time is reported
        fused = lambda tile=tile: rotate_quant_whip_triton(x, r, bits, 0.9, interpret=interp, tiles=tile)  # noqa: E731
        yk, wk = fused()
        entry = {"tile": list(tile) if tile else "default", "agreement": kernel_agreement(yk, wk, yr, wr, y, bits)}
        del yk, wk
        entry["ms"] = round(time_ms(fused, device, cpu_reps=1 if interp else 5), 4)
        row["tiles"].append(entry)
    best = min(row["tiles"], key=lambda e: e["ms"])
    row["triton_ms"], row["best_tile"] = best["ms"], best["tile"]
    worst = max(row["tiles"], key=lambda e: (not e["agreement"]["matches"], e["agreement"]["off_frac"]))
    row["agreement"] = worst["agreement"]  # every tile tried must match for the row to match
    del yr, wr, y
    _rates(row)
    log(f"[kernel] {row}")
    return row


def _rates(row: dict) -> None:
    for k in ("eager", "triton", "compiled"):
        ms = row.get(f"{k}_ms")
        if ms:
            row[f"{k}_tbps"] = round(row["bytes"] / ms / 1e9, 4)
            row[f"{k}_tflops"] = round(row["flop"] / ms / 1e9, 2)
    if row.get("triton_ms"):
        row["speedup_vs_eager"] = round(row["eager_ms"] / row["triton_ms"], 3)
        if row.get("compiled_ms"):
            row["speedup_vs_compiled"] = round(row["compiled_ms"] / row["triton_ms"], 3)


def kernel_compile_study(row: dict, device, log, seed: int = 0) -> dict:
    """Adds ``torch.compile`` of the reference (default mode) to a :func:`kernel_study` row: compile time,
    agreement with eager, ms and rates. Errors are recorded, not raised."""
    from companion_kernels.rotate_quant_whip.reference import rotate_quant_whip_reference

    dtype = getattr(torch, row["dtype"])
    x, r = kernel_inputs(row["tokens"], row["n"], dtype, device, seed)
    bits = row["bits"]
    try:
        compiled = torch.compile(rotate_quant_whip_reference)
        t0 = time.perf_counter()
        yc, wc = compiled(x, r, bits, 0.9)
        if device.type == "cuda":
            torch.cuda.synchronize()
        row["compile_seconds"] = round(time.perf_counter() - t0, 1)
        yr, wr = rotate_quant_whip_reference(x, r, bits, 0.9)
        row["compiled_agreement"] = kernel_agreement(yc, wc, yr, wr, x @ r, bits)
        del yc, wc, yr, wr
        row["compiled_ms"] = round(time_ms(lambda: compiled(x, r, bits, 0.9), device), 4)
        _rates(row)
    except Exception as exc:  # pragma: no cover - depends on the compiler stack of the machine
        row["compile_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    log(f"[kernel, torch.compile] {row}")
    return row


def kernel_summary(gpu: dict | None) -> str:
    """One line on the fused kernel for the notebook: its TB/s and speed-up when recorded, else 'not recorded yet'."""
    k = (gpu or {}).get("kernel")
    if not k or gpu.get("smoke"):
        return "Fused rotate + INT4 fake-quant + Whip kernel: not recorded yet."
    if k.get("skipped") or not k.get("triton_ms"):
        return f"Fused rotate + INT4 fake-quant + Whip kernel: not recorded yet ({k.get('skipped', 'no timing')})."
    a = k.get("agreement", {})
    ok = a and kernel_matches(a, k["bits"], getattr(torch, k["dtype"]))
    txt = (f"Fused rotate + INT{k['bits']} fake-quant + Whip kernel, {k['tokens']} tokens × d={k['n']} {k['dtype']}: "
           f"{k['triton_ms']:.3f} ms ({k['triton_tbps']:.2f} TB/s, {k['triton_tflops']:.0f} TFLOP/s) vs eager PyTorch "
           f"{k['eager_ms']:.3f} ms ({k['eager_tbps']:.2f} TB/s): speed-up {k['speedup_vs_eager']:.2f}×"
           + (f" (best tile {k['best_tile']})" if isinstance(k.get("best_tile"), list) else ""))
    if k.get("compiled_ms"):
        txt += (f"; torch.compile of the same function {k['compiled_ms']:.3f} ms (the kernel runs at "
                f"{k['speedup_vs_compiled']:.2f}× its speed)")
    elif k.get("compile_error"):
        txt += f"; torch.compile failed ({k['compile_error'][:80]})"
    else:
        txt += "; torch.compile not timed (no time left in the run)"
    if a:
        txt += (f". Matches PyTorch: {'yes' if ok else 'NO'} ({100 * a['off_frac']:.3f} % of elements on "
                f"another grid point, at most {a['max_steps']:.3f} steps (bound "
                f"{kernel_steps_bound(k['bits'], getattr(torch, k['dtype'])):.3f}); Whip sums within {a['whip_rel']:.1e})")
    return txt + f". Bytes counted: {k.get('bytes_counted', '?')}."


def run_scale_up(*, smoke: bool = False, seed: int = 0, device=None, deadline_s: float | None = None, log=print,
                 save=None) -> dict:
    """The study above; ``smoke`` is a tiny CPU version (seconds). ``save(payload)`` runs after each stage."""
    from companion.dartquant.rotation import fuse_norms, rotate_model
    from companion.dartquant.hadamard import random_hadamard
    from companion.models import tiny_llama

    t_start = time.perf_counter()
    device = torch.device(device or ("cuda" if torch.cuda.is_available() and not smoke else "cpu"))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 rotations stay fp32
    P = copy.deepcopy(GPU_PROFILE)
    if smoke:
        P.update(models=[{"name": "smoke-d64", "hidden": 64, "layers": 2, "heads": 4, "kv_heads": 2, "ffn": 128}],
                 kernel_tokens=67, kernel_n=32, kernel_dtype="float32",
                 train_seconds=2, seq_len=64, batch=4, calib_samples=8, calib_tokens_per_sample=16, r1_steps=5,
                 r2_steps=3, rot_batch=64, e2e_steps=3, e2e_batch=2, eval_samples=4, step_cost_n=[64],
                 step_cost_tokens=128)
    left = (lambda: deadline_s - (time.perf_counter() - t_start)) if deadline_s else (lambda: math.inf)
    save = save or (lambda p: None)
    payload = {"smoke": smoke, "profile": P, "models": []}
    b = P["bits"]

    rows = []
    for n in P["step_cost_n"]:
        if left() < 20:
            break
        try:
            rows.append(step_cost(n, P["step_cost_tokens"], device, log))
        except torch.cuda.OutOfMemoryError as exc:  # pragma: no cover - GPU only
            rows.append({"n": n, "error": str(exc)[:200]})
    payload["step_cost"] = {"rows": [r for r in rows if "error" not in r], "tokens": P["step_cost_tokens"]}
    save(payload)

    if left() > 15:
        try:
            payload["kernel"] = kernel_study(P["kernel_tokens"], P["kernel_n"], P["kernel_bits"],
                                             getattr(torch, P["kernel_dtype"]), device, log, seed)
        except torch.cuda.OutOfMemoryError as exc:  # pragma: no cover - GPU only
            payload["kernel"] = {"skipped": f"out of memory: {str(exc)[:200]}"}
        if device.type == "cuda":
            torch.cuda.empty_cache()
        save(payload)

    train_data, val_data = source_bytes(max_bytes=400_000 if smoke else 16_000_000)
    docs = docstring_bytes()
    L = P["seq_len"]
    sets = {"source": windows(val_data, P["eval_samples"], L, 11), "docstrings": windows(docs, P["eval_samples"], L, 12)}
    calib_ids = windows(train_data, P["calib_samples"], L, 13)
    for spec in P["models"]:
        train_s = spec.get("train_seconds", P["train_seconds"])
        if left() < train_s + 30:
            log(f"[skip] {spec['name']}: time budget")
            break
        log(f"[model] {spec['name']}")
        model = tiny_llama(vocab_size=256, hidden_size=spec["hidden"], num_layers=spec["layers"], num_heads=spec["heads"],
                           num_kv_heads=spec["kv_heads"], intermediate_size=spec["ffn"], max_position=L + 1, seed=seed)
        model.to(device)
        tr = train(model, train_data, seconds=train_s, batch=P["batch"], seq_len=L, lr=P["lr"], device=device, log=log)
        model.float()
        fuse_norms(model)
        entry = {"name": spec["name"], **spec, "parameters": sum(p.numel() for p in model.parameters()),
                 "train_seconds": tr["seconds"], "train_steps": tr["steps"], "train_loss": tr["loss"]}
        ppl = {"fp32": _ppl_sets(model, sets)}
        q = dict(w_bits=b["w"], a_bits=b["a"], kv_bits=b["kv"])
        ppl["none"] = _ppl_sets(model, sets, **q)
        log(f"  fp32 {ppl['fp32']}, none {ppl['none']}")

        cfg = model.config
        hd = cfg.hidden_size // cfg.num_attention_heads
        quarot = copy.deepcopy(model)
        rotate_model(quarot, random_hadamard(cfg.hidden_size, seed),
                     [random_hadamard(hd, seed + 1 + i).unsqueeze(0).repeat(cfg.num_key_value_heads, 1, 1)
                      for i in range(cfg.num_hidden_layers)], r4=True)
        ppl["quarot"] = _ppl_sets(quarot, sets, r3=True, **q)
        del quarot

        t0 = _peak_reset(device)
        base = torch.cuda.memory_allocated() if device.type == "cuda" else 0
        r1, r2, info = dartquant_calibrate(model, calib_ids, P, device, seed)
        dq_s, dq_mib = time.perf_counter() - t0, _peak_mib(device, base)
        dq = copy.deepcopy(model)
        rotate_model(dq, r1, r2, r4=True)
        ppl["dartquant"] = _ppl_sets(dq, sets, r3=True, **q)
        del dq
        entry["dartquant"] = {"seconds": round(dq_s, 2), "peak_mib": round(dq_mib, 1), **info}
        log(f"  quarot {ppl['quarot']}, dartquant {ppl['dartquant']} ({dq_s:.1f} s)")

        if left() > 25:
            e2e_model = copy.deepcopy(model)
            rotate_model(e2e_model, None, [random_hadamard(hd, seed + 1 + i).unsqueeze(0).repeat(cfg.num_key_value_heads, 1, 1)
                                           for i in range(cfg.num_hidden_layers)], r4=True)
            t0 = _peak_reset(device)
            base = torch.cuda.memory_allocated() if device.type == "cuda" else 0
            r1_e2e, losses = end_to_end_r1(e2e_model, calib_ids, steps=P["e2e_steps"], lr=P["e2e_lr"], batch=P["e2e_batch"],
                                           a_bits=b["a"], kv_bits=b["kv"], device=device, seed=seed)
            e2e_s, e2e_mib = time.perf_counter() - t0, _peak_mib(device, base)
            rotate_model(e2e_model, r1_e2e)
            ppl["end-to-end"] = _ppl_sets(e2e_model, sets, r3=True, **q)
            del e2e_model
            entry["end_to_end"] = {"seconds": round(e2e_s, 2), "peak_mib": round(e2e_mib, 1),
                                   "loss_first": losses[0], "loss_last": float(np.mean(losses[-10:]))}
            entry["cost"] = {"dartquant_s": round(dq_s, 2), "dartquant_mib": round(dq_mib, 1),
                             "e2e_s": round(e2e_s, 2), "e2e_mib": round(e2e_mib, 1)}
            log(f"  end-to-end {ppl['end-to-end']} ({e2e_s:.1f} s)")
        entry["ppl"] = ppl
        payload["models"].append(entry)
        save(payload)
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    k = payload.get("kernel")
    if k and k.get("triton_ms") and device.type == "cuda":  # torch.compile last: its compile time is hard to bound
        if left() > P["compile_min_left_s"]:
            kernel_compile_study(k, device, log, seed)
        else:
            k["compile_skipped"] = f"less than {P['compile_min_left_s']} s left"
    payload["total_seconds"] = round(time.perf_counter() - t_start, 1)
    save(payload)
    return payload

"""The GPU section of SeerAttention (paper 01): long-context distillation and kernel timing.

Used by ``benchmarks/seer_attention_gpu.py`` and by the notebook's GPU profile. No plotly here.

1. ``distil_long``: distil gates (block 64, d_g = 64, block RoPE) from the planted tiny RoPE decoder
   (``synthetic.planted_decoder``) on byte-level stdlib text at a long length, evaluate recall at
   matched sparsity on held-out windows at the training length and at 4x that length, with and
   without block RoPE (the paper's Fig. 4 claim: without block RoPE a gate does not length-generalise).
2. ``gate_masks``: run the decoder at 8k/32k/128k and turn the gate's scores of one layer into block
   masks (threshold with the last two rows dense and the diagonal forced; top-k at 50% / 90%).
3. ``time_attention``: the paper's efficiency protocol (B = 1, H = 32, D = 128, bf16, causal,
   block 64) with those masks: the tiny model's heads are tiled to 32 heads (so the density pattern is
   the gate's) and Q/K/V are random. Compared: the block-sparse Triton kernel
   (``companion_kernels.block_sparse``), compiled FlexAttention with the same block mask, and dense
   SDPA (flash and cuDNN backends). Median of ``triton.testing.do_bench``.
"""

from __future__ import annotations

import copy
import time

import torch

from companion.core import recorded_results, time_ms

from companion.models.attention import attention_layout, attention_session, dense_attention
from companion.seer_attention.data import byte_windows
from companion.seer_attention.distill import collect_teacher, distill, heldout_kl
from companion.seer_attention.evaluate import evaluate_blocks, threshold_select, topk_select
from companion.seer_attention.gate import GateSet, count_parameters
from companion.seer_attention.synthetic import planted_decoder, with_bos

#: What the GPU profile runs (``benchmarks/seer_attention_gpu.py`` with its defaults): distillation at
#: ``train_len`` tokens, held-out evaluation at 4x that length, masks and kernel timing at ``lengths``.
GPU_PROFILE = {
    "script": "benchmarks/seer_attention_gpu.py",
    "train_len": 8192,
    "long_factor": 4,
    "steps": 300,
    "block_size": 64,
    "gate_dim": 64,
    "sparsities": (0.5, 0.7, 0.9),
    "timing": {"heads": 32, "head_dim": 128, "dtype": "bfloat16", "lengths": (8192, 32768, 131072)},
}
RESULTS_NAME = "seer_attention_gpu"


def recorded() -> dict | None:
    """The committed GPU results (``benchmarks/results/seer_attention_gpu.json``), or None."""
    return recorded_results(RESULTS_NAME)


def _windows(n: int, seq_len: int, seed: int) -> torch.Tensor:
    return with_bos(byte_windows(n, seq_len, seed=seed))


def distil_long(*, seq_len: int = 8192, n_train: int = 8, n_test: int = 2, steps: int = 300, lr: float = 3e-3,
                block_size: int = 64, gate_dim: int = 64, num_heads: int = 8, head_dim: int = 64, num_layers: int = 2,
                long_factor: int = 4, sparsities=(0.5, 0.7, 0.9), device="cuda", dtype=torch.bfloat16, seed: int = 0,
                impl: str = "auto", log=print) -> tuple[dict, torch.nn.Module, GateSet]:
    """Distil gates with and without block RoPE from the planted decoder.

    Returns ``(metrics, model, gates)``: a JSON-ready metrics dict, the decoder and the block-RoPE gates
    (for :func:`gate_masks`)."""
    torch.manual_seed(seed)
    model, names = planted_decoder(num_layers=num_layers, num_heads=num_heads, head_dim=head_dim, seed=seed,
                                   max_position=max(seq_len * long_factor, 131072) + 64)
    model = model.to(device=device, dtype=dtype).eval()
    lay = attention_layout(model)
    kw = dict(num_heads=lay.num_heads, head_dim=lay.head_dim, block_size=block_size, gate_dim=gate_dim,
              num_kv_heads=lay.num_kv_heads, causal=lay.causal)
    gates = GateSet(lay.num_layers, rope_theta=lay.rope_theta, **kw).to(device)
    untrained = copy.deepcopy(gates)
    gates_norope = GateSet(lay.num_layers, rope_theta=None, **kw).to(device)
    gates_norope.load_state_dict(untrained.state_dict())
    train = _windows(n_train + n_test, seq_len, seed)
    train, test = train[:n_train], train[n_train:]
    test_long = _windows(n_test, seq_len * long_factor, seed + 1)
    t0 = time.perf_counter()
    d_train = collect_teacher(model, gates, train, batch_size=1, impl=impl)
    d_test = collect_teacher(model, gates, test, batch_size=1, with_mass=True, impl=impl)
    d_long = collect_teacher(model, gates, test_long, batch_size=1, with_mass=True, impl=impl)
    t_teacher = time.perf_counter() - t0
    log(f"teacher pass: {t_teacher:.1f} s")
    out = {"config": dict(seq_len=seq_len, n_train=n_train, n_test=n_test, steps=steps, lr=lr, block_size=block_size,
                          gate_dim=gate_dim, num_heads=num_heads, head_dim=head_dim, num_layers=num_layers,
                          long_len=seq_len * long_factor, gate_params=count_parameters(gates), dtype=str(dtype)),
           "head_types": names, "teacher_seconds": t_teacher}
    t0 = time.perf_counter()
    hist = distill(gates, d_train, steps=steps, lr=lr, eval_data=d_test, eval_every=max(1, steps // 10), seed=seed)
    hist_nr = distill(gates_norope, d_train, steps=steps, lr=lr, seed=seed)
    out["train_seconds"] = time.perf_counter() - t0
    log(f"distillation ({steps} steps, two gate sets): {out['train_seconds']:.1f} s")
    out["loss"] = {"block_rope": hist["loss"][::max(1, steps // 50)], "no_rope": hist_nr["loss"][::max(1, steps // 50)]}
    out["heldout_kl"] = {
        "untrained": heldout_kl(untrained, d_test), "block_rope": heldout_kl(gates, d_test), "no_rope": heldout_kl(gates_norope, d_test),
        "block_rope_long": heldout_kl(gates, d_long), "no_rope_long": heldout_kl(gates_norope, d_long),
    }
    recalls = []
    for tag, data in (("train_len", d_test), ("long", d_long)):
        for gname, gs in (("block_rope", gates), ("no_rope", gates_norope)):
            for r in evaluate_blocks(gs, untrained, data, sparsities, seed=seed):
                if gname == "no_rope" and r.method != "gate":
                    continue
                method = r.method if r.method != "gate" else ("gate" if gname == "block_rope" else "gate (no block RoPE)")
                recalls.append(dict(length=tag, seq_len=data.gt[0].shape[-1] * block_size, method=method, sparsity=r.sparsity,
                                    density=r.density, mass_recall=r.mass_recall, gt_recall=r.gt_recall))
    out["recall"] = recalls
    return out, model, gates


def gate_masks(model, gates: GateSet, seq_len: int, *, layer: int = 0, thresholds=(5e-4, 2e-3), sparsities=(0.5, 0.9), seed: int = 0) -> dict:
    """Block masks ``{label: [1, H, n, n] bool}`` from the gate's scores of ``layer`` for one window of ``seq_len``."""
    ids = _windows(1, seq_len, seed + 7)
    captured = {}

    def handler(*, layer: int, q_pre, k_pre, q, k, v, causal, scaling, position_offset):
        if layer == captured.get("want"):
            captured["scores"] = gates[layer].scores(q_pre, k_pre, position_offset)
        return dense_attention(q, k, v, causal, scaling)

    captured["want"] = layer
    device = next(model.parameters()).device
    with torch.no_grad(), attention_session(model, handler):
        model.model(input_ids=ids.to(device))  # the decoder body; no LM head over 128k positions
    sc = captured["scores"]
    masks = {}
    for t in thresholds:
        masks[f"gate threshold {t:g}"] = threshold_select(sc, t, causal=True)
    for s in sparsities:
        masks[f"gate top-k {int(round(s * 100))}% sparse"] = topk_select(sc, s, causal=True)
    return masks


def _flex_block_mask(mask: torch.Tensor, block_size: int, seq_len: int):
    from torch.nn.attention.flex_attention import BlockMask

    n = mask.shape[-1]
    diag = torch.eye(n, dtype=torch.bool, device=mask.device)
    partial = mask & diag
    full = mask & ~diag & torch.ones(n, n, dtype=torch.bool, device=mask.device).tril()

    def lists(m):
        cnt = m.sum(-1).to(torch.int32)
        idx = torch.argsort((~m).to(torch.int8), dim=-1, stable=True).to(torch.int32)
        return cnt.contiguous(), idx.contiguous()

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    kn, ki = lists(partial)
    fn, fi = lists(full)
    return BlockMask.from_kv_blocks(kn, ki, fn, fi, BLOCK_SIZE=block_size, mask_mod=causal, seq_lengths=(seq_len, seq_len))


def time_attention(masks: dict, seq_len: int, *, heads: int = 32, head_dim: int = 128, block_size: int = 64,
                   flex: bool = True, dense: bool = True, check: bool = True, device: str = "cuda", log=print) -> list[dict]:
    """Time the block-sparse kernel on every mask (heads tiled to ``heads``) against dense SDPA and
    compiled FlexAttention; ``check`` compares the kernel with masked dense attention on two heads
    (up to 8k tokens). ``device="cpu"`` is the smoke test: the op's CPU path, wall-clock medians of
    three runs, no SDPA backend selection and no FlexAttention."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from companion_kernels.block_sparse import block_sparse_attention, dense_to_index, mask_density

    on_gpu = device != "cpu"
    dtype = torch.bfloat16 if on_gpu else torch.float32
    g = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(1, heads, seq_len, head_dim, device=device, dtype=dtype, generator=g) for _ in range(3))
    causal_flops = 4 * heads * head_dim * seq_len * seq_len / 2
    rows = []

    def bench(fn):  # do_bench median on CUDA, median of three wall-clock runs on the CPU smoke path
        return time_ms(fn, device, cpu_warmup=0, cpu_reps=3)

    dense_ms = {}
    if dense:
        backends = (("SDPA flash", SDPBackend.FLASH_ATTENTION), ("SDPA cuDNN", SDPBackend.CUDNN_ATTENTION)) if on_gpu else (("SDPA", None),)
        for name, backend in backends:
            try:
                def run(backend=backend):
                    if backend is None:
                        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                    with sdpa_kernel([backend]):
                        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                ms = bench(run)
                dense_ms[name] = ms
                rows.append(dict(seq_len=seq_len, mask="dense", backend=name, density=1.0, ms=ms,
                                 tflops=causal_flops / ms / 1e9, speedup_vs_dense=None))
                log(f"  N={seq_len:>6} dense {name:<10} {ms:9.3f} ms")
            except Exception as err:  # a backend missing on this build
                log(f"  N={seq_len:>6} dense {name}: unavailable ({type(err).__name__}: {err})"[:200])
    best_dense = min(dense_ms.values()) if dense_ms else float("nan")
    fa = None
    if flex and on_gpu:
        from torch.nn.attention.flex_attention import flex_attention

        fa = torch.compile(flex_attention, dynamic=False)
    for label, m in masks.items():
        m = m.to(device)
        reps = heads // m.shape[1]
        mk = m.repeat_interleave(reps, dim=1) if reps > 1 else m
        index, count = dense_to_index(mk)
        dens = mask_density(mk, causal=True)
        ms = bench(lambda: block_sparse_attention(q, k, v, index, count, block_size=block_size, causal=True, check_index=False))
        row = dict(seq_len=seq_len, mask=label, backend="block-sparse Triton" if on_gpu else "block-sparse (CPU path)",
                   density=dens, ms=ms, tflops=causal_flops * dens / ms / 1e9, speedup_vs_dense=best_dense / ms)
        if check and seq_len <= 8192:
            hs = slice(0, 2)
            out = block_sparse_attention(q[:, hs], k[:, hs], v[:, hs], index[:, hs], count[:, hs], block_size=block_size, causal=True)
            tok = mk[0, hs].repeat_interleave(block_size, -2).repeat_interleave(block_size, -1)[:, :seq_len, :seq_len]
            tok = tok & torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()
            ref = torch.nn.functional.scaled_dot_product_attention(q[:, hs], k[:, hs], v[:, hs], attn_mask=tok[None])
            row["max_abs_err_vs_masked_sdpa"] = float((out.float() - ref.float()).abs().max())
            del tok, ref
        rows.append(row)
        log(f"  N={seq_len:>6} {label:<28} density {dens:.3f}  {ms:9.3f} ms  x{row['speedup_vs_dense']:.2f} vs dense")
        if fa is not None:
            try:
                bm = _flex_block_mask(mk, block_size, seq_len)
                opts = {"BLOCK_M": block_size, "BLOCK_N": block_size}
                fms = bench(lambda: fa(q, k, v, block_mask=bm, kernel_options=opts))
                rows.append(dict(seq_len=seq_len, mask=label, backend="FlexAttention (compiled)", density=dens, ms=fms,
                                 tflops=causal_flops * dens / fms / 1e9, speedup_vs_dense=best_dense / fms))
                log(f"  N={seq_len:>6} {label:<28} flex                {fms:9.3f} ms")
            except Exception as err:
                log(f"  FlexAttention failed: {type(err).__name__}: {str(err)[:200]}")
                fa = None
    return rows

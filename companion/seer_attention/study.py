"""The stages of SeerAttention's one-GPU study (``companion.seer_attention.scale``) and the readers of its results.

1. :func:`distil`: gates (block ``block_size``, d_g ``gate_dim``, with and without block RoPE) distilled from the
   planted tiny RoPE decoder (``synthetic.planted_decoder``) on byte-level stdlib text at ``seq_len`` tokens;
   held-out KL(gt || gate) (the distillation loss, Sec. 3.2, Eq. 3-4) and the attention mass kept at matched
   sparsity at ``seq_len`` and at ``long_factor`` × ``seq_len`` (the paper's Fig. 4 claim: without block RoPE a
   gate does not length-generalise).
2. :func:`mask_densities`: the decoder run on one window at each of ``lengths``; the gate's scores of layer
   ``mask_layer`` turned into block masks (threshold, and top-k, each with the last two rows dense; the threshold
   rule also forces the diagonal).
3. :func:`timings`: the paper's efficiency protocol (B = 1, ``heads`` heads of ``timing_head_dim``, causal) with
   those masks, the gate's heads tiled to ``heads`` (the density pattern is the gate's) and random Q/K/V: the
   dense SDPA backends first, then per mask compiled FlexAttention with the identical block mask, then the
   block-sparse Triton kernel (``companion_kernels.block_sparse``). Times from :func:`timing.time_call`.

No plotly here.
"""

from __future__ import annotations

import copy
import time

import torch

from companion.core.stages import StageContext, not_finished
from companion.models.attention import attention_layout, attention_session, dense_attention
from companion.seer_attention.data import byte_windows
from companion.seer_attention.distill import collect_teacher, distill, heldout_kl
from companion.seer_attention.evaluate import evaluate_blocks, threshold_select, topk_select
from companion.seer_attention.gate import GateSet, count_parameters
from companion.seer_attention.synthetic import planted_decoder, with_bos
from companion.seer_attention.timing import (
    SDPA_LABELS,
    attention_flops,
    check_backends,
    check_dtype,
    flex_block_mask,
    random_qkv,
    sdpa_causal,
    sync,
    time_call,
)

KERNEL = "block-sparse Triton"
FLEX = "FlexAttention (compiled)"


def _windows(n: int, seq_len: int, seed: int) -> torch.Tensor:
    return with_bos(byte_windows(n, seq_len, seed=seed))


def distil(ctx: StageContext) -> dict:
    """Distil gates with and without block RoPE from the planted decoder; held-out KL and recall at matched
    sparsity at the training length and at ``long_factor`` times it. Hands the decoder and the block-RoPE gates
    to :func:`mask_densities`."""
    p, log = ctx.profile, ctx.log
    dtype = check_dtype("dtype", p["dtype"])
    seq_len, factor = p["seq_len"], p["long_factor"]
    torch.manual_seed(ctx.seed)
    model, names = planted_decoder(num_layers=p["num_layers"], num_heads=p["num_heads"], head_dim=p["head_dim"], seed=ctx.seed,
                                   max_position=max(seq_len * factor, *p["lengths"]) + 64)
    model = model.to(device=ctx.device, dtype=dtype).eval()
    lay = attention_layout(model)
    kw = dict(num_heads=lay.num_heads, head_dim=lay.head_dim, block_size=p["block_size"], gate_dim=p["gate_dim"],
              num_kv_heads=lay.num_kv_heads, causal=lay.causal)
    gates = GateSet(lay.num_layers, rope_theta=lay.rope_theta, **kw).to(ctx.device)
    untrained = copy.deepcopy(gates)
    gates_norope = GateSet(lay.num_layers, rope_theta=None, **kw).to(ctx.device)
    gates_norope.load_state_dict(untrained.state_dict())
    train = _windows(p["n_train"] + p["n_test"], seq_len, ctx.seed)
    train, test = train[:p["n_train"]], train[p["n_train"]:]
    test_long = _windows(p["n_test"], seq_len * factor, ctx.seed + 1)
    t0 = time.perf_counter()
    d_train = collect_teacher(model, gates, train, batch_size=1, impl=p["impl"])
    d_test = collect_teacher(model, gates, test, batch_size=1, with_mass=True, impl=p["impl"])
    d_long = collect_teacher(model, gates, test_long, batch_size=1, with_mass=True, impl=p["impl"])
    out = {"head_types": names, "gate_params": count_parameters(gates), "long_len": seq_len * factor,
           "teacher_seconds": time.perf_counter() - t0}
    log(f"teacher pass: {out['teacher_seconds']:.1f} s")
    steps = p["steps"]
    t0 = time.perf_counter()
    hist = distill(gates, d_train, steps=steps, lr=p["lr"], eval_data=d_test, eval_every=max(1, steps // 10), seed=ctx.seed)
    hist_nr = distill(gates_norope, d_train, steps=steps, lr=p["lr"], seed=ctx.seed)
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
            for r in evaluate_blocks(gs, untrained, data, p["sparsities"], seed=ctx.seed):
                if gname == "no_rope" and r.method != "gate":
                    continue
                method = r.method if r.method != "gate" else ("gate" if gname == "block_rope" else "gate (no block RoPE)")
                recalls.append(dict(length=tag, seq_len=data.gt[0].shape[-1] * p["block_size"], method=method, sparsity=r.sparsity,
                                    density=r.density, mass_recall=r.mass_recall, gt_recall=r.gt_recall))
    out["recall"] = recalls
    ctx.shared.update(model=model, gates=gates)
    return out


def gate_masks(model, gates: GateSet, seq_len: int, *, layer: int = 0, thresholds=(5e-4, 2e-3), sparsities=(0.5, 0.9),
               seed: int = 0) -> dict:
    """Block masks ``{label: [1, H, n, n] bool}`` from the gate's scores of ``layer`` for one window of ``seq_len``."""
    ids, want, captured = _windows(1, seq_len, seed + 7), layer, {}

    def handler(*, layer: int, q_pre, k_pre, q, k, v, causal, scaling, position_offset):
        if layer == want:
            captured["scores"] = gates[layer].scores(q_pre, k_pre, position_offset)
        return dense_attention(q, k, v, causal, scaling)

    device = next(model.parameters()).device
    with torch.no_grad(), attention_session(model, handler):
        model.model(input_ids=ids.to(device))  # the decoder body; no LM head over 128k positions
    sc = captured["scores"]
    masks = {f"gate threshold {t:g}": threshold_select(sc, t, causal=True) for t in thresholds}
    masks.update({f"gate top-k {int(round(s * 100))}% sparse": topk_select(sc, s, causal=True) for s in sparsities})
    return masks


def mask_densities(ctx: StageContext) -> list[dict]:
    """The gate's block masks at every length of ``lengths`` (for :func:`timings`) and their densities, overall
    and per head."""
    from companion_kernels.block_sparse import mask_density

    if "gates" not in ctx.shared:
        raise RuntimeError("mask_densities needs the decoder and gates of the distil stage of this call: "
                           "run the stages distil,mask_densities,timings together")
    p, rows, masks = ctx.profile, [], {}
    for n in p["lengths"]:
        if ctx.left() <= 0:
            ctx.log(f"deadline: no masks at {n} tokens and beyond")
            break
        masks[n] = gate_masks(ctx.shared["model"], ctx.shared["gates"], n, layer=p["mask_layer"], thresholds=p["thresholds"],
                              sparsities=p["topk_sparsities"], seed=ctx.seed)
        rows += [dict(seq_len=n, mask=label, density=mask_density(m, causal=True),
                      per_head=[mask_density(m[:, h], causal=True) for h in range(m.shape[1])]) for label, m in masks[n].items()]
    ctx.shared["masks"] = masks
    return rows


def time_attention(masks: dict, seq_len: int, *, heads: int, head_dim: int, block_size: int, dense=("flash", "cudnn"),
                   flex: bool = True, check_max_len: int = 8192, impl: str = "triton", device="cuda",
                   dtype=torch.bfloat16, seed: int = 0, log=print) -> list[dict]:
    """Time the dense SDPA backends, then per mask (heads tiled to ``heads``) compiled FlexAttention with the same
    block mask and the block-sparse kernel, on random Q/K/V. Up to ``check_max_len`` tokens the kernel's output is
    compared with masked dense attention on two heads (``max_abs_err_vs_masked_sdpa``)."""
    from companion_kernels.block_sparse import block_sparse_attention, dense_to_index, mask_density

    q, k, v = random_qkv(seq_len, q_heads=heads, head_dim=head_dim, device=device, dtype=dtype, seed=seed)
    dense_ms, rows = {}, []
    for b in dense:
        f = sdpa_causal(b)
        ms, how = time_call(lambda: f(q, k, v), device)
        dense_ms[b] = ms
        rows.append(dict(seq_len=seq_len, mask="dense", backend=SDPA_LABELS[b], density=1.0, ms=ms, timing=how,
                         tflops=attention_flops(heads, head_dim, seq_len) / ms / 1e9, speedup_vs_dense=None))
        log(f"  N={seq_len:>6} dense {SDPA_LABELS[b]:<10} {ms:9.3f} ms")
    best_dense = min(dense_ms.values())
    fa = None
    if flex:
        from torch.nn.attention.flex_attention import flex_attention

        fa = torch.compile(flex_attention, dynamic=False)
    for label, m in masks.items():
        m = m.to(device)
        reps = heads // m.shape[1]
        mk = m.repeat_interleave(reps, dim=1) if reps > 1 else m
        index, count = dense_to_index(mk)
        dens = mask_density(mk, causal=True)
        fl = attention_flops(heads, head_dim, seq_len, dens)
        if fa is not None:
            bm = flex_block_mask(mk, block_size, seq_len)
            opts = {"BLOCK_M": block_size, "BLOCK_N": block_size}
            fms, how = time_call(lambda: fa(q, k, v, block_mask=bm, kernel_options=opts), device)
            rows.append(dict(seq_len=seq_len, mask=label, backend=FLEX, density=dens, ms=fms, timing=how, tflops=fl / fms / 1e9,
                             speedup_vs_dense=best_dense / fms))
            log(f"  N={seq_len:>6} {label:<28} flex                {fms:9.3f} ms")
        ms, how = time_call(lambda: block_sparse_attention(q, k, v, index, count, block_size=block_size, causal=True, impl=impl,
                                                           check_index=False), device)
        row = dict(seq_len=seq_len, mask=label, backend=KERNEL, density=dens, ms=ms, timing=how, tflops=fl / ms / 1e9,
                   speedup_vs_dense=best_dense / ms)
        if seq_len <= check_max_len:
            hs = slice(0, 2)
            out = block_sparse_attention(q[:, hs], k[:, hs], v[:, hs], index[:, hs], count[:, hs], block_size=block_size,
                                         causal=True, impl=impl)
            tok = mk[0, hs].repeat_interleave(block_size, -2).repeat_interleave(block_size, -1)[:, :seq_len, :seq_len]
            tok = tok & torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()
            ref = torch.nn.functional.scaled_dot_product_attention(q[:, hs], k[:, hs], v[:, hs], attn_mask=tok[None])
            row["max_abs_err_vs_masked_sdpa"] = float((out.float() - ref.float()).abs().max())
            del tok, ref
        rows.append(row)
        log(f"  N={seq_len:>6} {label:<28} density {dens:.3f}  {ms:9.3f} ms  x{row['speedup_vs_dense']:.2f} vs dense")
    return rows


def timings(ctx: StageContext) -> list[dict]:
    """:func:`time_attention` at every length :func:`mask_densities` made masks for, in the paper's geometry."""
    if "masks" not in ctx.shared:
        raise RuntimeError("timings needs the gate masks of the mask_densities stage of this call: "
                           "run the stages distil,mask_densities,timings together")
    p, rows = ctx.profile, []
    dense = check_backends("dense", p["dense"])
    dtype = check_dtype("dtype", p["dtype"])
    for i, (n, masks) in enumerate(ctx.shared["masks"].items()):
        if ctx.left() <= 0:
            ctx.log(f"deadline: no timing at {n} tokens and beyond")
            break
        rows += time_attention(masks, n, heads=p["heads"], head_dim=p["timing_head_dim"], block_size=p["block_size"],
                               dense=dense, flex=p["flex"], check_max_len=p["check_max_len"], impl=p["impl"],
                               device=ctx.device, dtype=dtype, seed=ctx.seed + i, log=ctx.log)
        if torch.device(ctx.device).type == "cuda":
            sync(ctx.device)
            torch.cuda.empty_cache()
    return rows


def rope_summary(rec: dict) -> str | None:
    """One sentence on the recorded block-RoPE study (recall at 90% sparsity, held-out KL), or None without it."""
    if any(s.startswith("distil ") for s in not_finished(rec)) or "distil" not in rec:
        return None
    d = rec["distil"]
    r = {(x["length"], x["method"]): x["mass_recall"] for x in d["recall"] if x["sparsity"] == 0.9}
    if ("long", "oracle") not in r:
        return None
    kl = {k: sum(v) / len(v) for k, v in d["heldout_kl"].items()}
    return (f"At 90% sparsity the gate trained at {rec['profile']['seq_len']} tokens keeps {r['long', 'gate']:.3f} of the "
            f"attention mass at {d['long_len']} tokens, against the oracle's {r['long', 'oracle']:.3f} "
            f"({r['train_len', 'gate']:.3f} vs {r['train_len', 'oracle']:.3f} at the trained length); its held-out KL goes "
            f"from {kl['block_rope']:.2f} to {kl['block_rope_long']:.2f} nats/row. Without block RoPE it keeps "
            f"{r['train_len', 'gate (no block RoPE)']:.3f} at the trained length and {r['long', 'gate (no block RoPE)']:.3f} "
            "at the long one.")

"""The stage bodies of paper 15's GPU study (:mod:`companion.nemotron_flash.scale`), each ``fn(ctx) -> dict``, and
the models they time. No plotly import.

Every latency comes from the one harness of :mod:`~companion.nemotron_flash.latency` (CUDA graphs where capture
works, else eager -- recorded per result), random weights in the profile's ``dtype``. The models are built from
the profile's shapes (:func:`shape_config`): ``{"blocks": B, "pattern": [[layer types of block 0], ...], **the
other HybridConfig fields}``, block i taking the pattern's entry i mod its length.
"""

from __future__ import annotations

import time

import torch

from companion.core import time_ms
from companion.nemotron_flash.depth_width import head_dim_for
from companion.nemotron_flash.frontier import (EXPLORER_BUDGETS, EXPLORER_DEPTHS, explorer_width, layer_step_ms,
                                               measure_layer_table)
from companion.nemotron_flash.latency import decode_seconds, decode_step_ms, device_name, max_batch_throughput
from companion.nemotron_flash.model import HybridConfig, HybridLM, n_parameters
from companion.nemotron_flash.operators import delta_rule

OPERATOR_LEFT_S = 10.0  # the operator sweep stops adding points when the stage has fewer seconds left


def shape_config(shape: dict) -> HybridConfig:
    """The :class:`HybridConfig` of a profile's shape (``blocks`` blocks cycling through ``pattern``)."""
    pattern = shape["pattern"]
    layer_types = tuple(t for i in range(shape["blocks"]) for t in pattern[i % len(pattern)])
    return HybridConfig(layer_types=layer_types, **{k: v for k, v in shape.items() if k not in ("blocks", "pattern")})


def hf_qwen3(cfg: HybridConfig):
    """``transformers.Qwen3ForCausalLM`` with ``cfg``'s shape ([attention, FFN] blocks; random weights)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    hc = Qwen3Config(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.ffn_hidden_size,
                     num_hidden_layers=len(cfg.layer_types) // 2, num_attention_heads=cfg.num_heads,
                     num_key_value_heads=cfg.num_kv_heads, head_dim=cfg.kq_head_dim, tie_word_embeddings=True,
                     max_position_embeddings=cfg.max_position)
    return Qwen3ForCausalLM(hc)


@torch.no_grad()
def hf_generate_ms(model, *, prompt: int, new_tokens: int, device, batch: int = 1) -> float:
    """ms per generated token of HF ``generate`` (greedy, exactly ``new_tokens``), prefill included then
    subtracted by timing a 1-token generate."""
    ids = torch.randint(0, model.config.vocab_size, (batch, prompt), device=device)
    kw = dict(do_sample=False, pad_token_id=0, eos_token_id=None)

    def gen(n):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        model.generate(ids, max_new_tokens=n, min_new_tokens=n, **kw)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t

    gen(2)
    one = min(gen(1) for _ in range(2))
    full = gen(new_tokens)
    return (full - one) / (new_tokens - 1) * 1e3


def _model(cfg: HybridConfig, ctx) -> HybridLM:
    torch.manual_seed(ctx.seed)
    with torch.device(ctx.device):  # initialise on the device: a 1B model's CPU init would cost seconds
        model = HybridLM(cfg)
    return model.to(dtype=getattr(torch, ctx.profile["dtype"])).eval()


def _reps(profile: dict) -> dict:
    return {"cpu_reps": profile["cpu_reps"], "rep_ms": profile["rep_ms"]}


def _decode_and_throughput(ctx, key: str) -> dict:
    """Batch-1 time to decode ``n_tokens`` (the step time at ``decode_points`` contexts over the decode, integrated
    with the trapezoid rule: stated, not ``n_tokens`` real steps) and max-batch throughput (the batch doubles from
    ``throughput_start`` until the cache no longer fits, ``max_batch`` or the stage's time) of the profile's
    ``key`` model."""
    P = ctx.profile
    device = torch.device(ctx.device)
    cfg = shape_config(P[key])
    m = _model(cfg, ctx)
    d = decode_seconds(m, n_tokens=P["n_tokens"], points=P["decode_points"], device=device, **_reps(P))
    thr = max_batch_throughput(m, n_tokens=P["n_tokens"], device=device, start=P["throughput_start"],
                               max_batch=P["max_batch"], points=2, deadline=time.perf_counter() + ctx.left(), **_reps(P))
    out = {"params": n_parameters(m), "layer_types": "".join(t[0] for t in cfg.layer_types),
           "decode_seconds": d["seconds"], "ms_per_token": d["ms_per_token"], "step_ms": d["step_ms"],
           "contexts": d["contexts"], "mode": d["mode"], "max_throughput": thr["tokens_per_s"],
           "max_throughput_batch": thr["batch"], "throughput_tried": thr["tried"]}
    ctx.log(f"  {key}: {d['seconds']:.2f} s for {P['n_tokens']} tokens ({d['mode']}), "
            f"{thr['tokens_per_s']:,.0f} tok/s at batch {thr['batch']}")
    del m
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


def transformer(ctx) -> dict:
    """The peer, measured first: a Qwen3-0.6B-shaped decoder (28 × [attention, SwiGLU], d 1024, 16 query / 8 KV
    heads of 128, q/k RMSNorm, FFN 3072, vocab 151,936, tied embeddings) built from our layers; see
    :func:`_decode_and_throughput`."""
    return _decode_and_throughput(ctx, "transformer")


def hf_generate(ctx) -> dict:
    """The transformer's shape as ``transformers.Qwen3ForCausalLM``, timed with HF ``generate`` (its own
    DynamicCache, no CUDA graph): what the harness contributes."""
    P = ctx.profile
    torch.manual_seed(ctx.seed)
    with torch.device(ctx.device):
        model = hf_qwen3(shape_config(P["transformer"]))
    model = model.to(dtype=getattr(torch, P["dtype"])).eval()
    prompt, new = P["hf_generate"]["prompt"], P["hf_generate"]["new_tokens"]
    ms = hf_generate_ms(model, prompt=prompt, new_tokens=new, device=torch.device(ctx.device))
    return {"ms_per_token": ms, "setting": f"prompt {prompt}, {new} new tokens, batch 1, greedy, DynamicCache"}


def hybrid(ctx) -> dict:
    """An NF-1B-shaped hybrid [inferred shape: d 2048, 12 blocks alternating [DeltaNet-FFN-Mamba2-FFN] and
    [Attention-FFN-Mamba2-FFN], SwiGLU 2560, vocab 131,072; the paper's exact sizes are not public], Mamba2 in our
    PyTorch (mamba-ssm is not installed on the GPU machine), DeltaNet decode in our PyTorch step (fla's Triton
    ``chunk_delta_rule`` serves prefill); see :func:`_decode_and_throughput`."""
    return _decode_and_throughput(ctx, "hybrid")


def depth_width(ctx) -> dict:
    """LLaMA-shaped [attention, FFN] models of the ``grid``'s (depth, width) at about equal non-embedding
    parameters: batch-1 ms per decode step and tokens per second at ``batch``, at context ``context``."""
    P, S = ctx.profile, ctx.profile["depth_width"]
    device = torch.device(ctx.device)
    rows = []
    for depth, width in S["grid"]:
        hd = head_dim_for(width, max_dim=128)
        m = _model(HybridConfig(vocab_size=S["vocab_size"], hidden_size=width, layer_types=("a", "f") * depth,
                                kq_head_dim=hd, v_head_dim=hd, max_position=8192), ctx)
        b1 = decode_step_ms(m, batch=1, context=S["context"], device=device, **_reps(P))
        bb = decode_step_ms(m, batch=S["batch"], context=S["context"], device=device, **_reps(P))
        rows.append({"depth": depth, "width": width, "params": n_parameters(m, non_embedding=True),
                     "ms_batch1": b1["ms"], "tokens_per_s": S["batch"] * 1e3 / bb["ms"], "mode": b1["mode"]})
        del m
    return {"rows": rows, "context": S["context"], "batch": S["batch"], "device": device_name(device)}


def explorer_layer_ms(ctx) -> dict:
    """The explorer's per-operator decode times on this device
    (:func:`~companion.nemotron_flash.frontier.measure_layer_table` at the explorer's widths)."""
    widths = sorted({explorer_width(d, b) for d in EXPLORER_DEPTHS for b in EXPLORER_BUDGETS})
    return measure_layer_table(widths, device=torch.device(ctx.device), cpu_reps=ctx.profile["cpu_reps"])


def operators(ctx) -> dict:
    """One layer's decode step of each of ``ops`` at width ``width`` against ``contexts`` and ``batches`` (NaN where
    the cache does not fit); when the stage's time runs low the remaining points are counted as ``not_measured``."""
    P, S = ctx.profile, ctx.profile["operators"]
    device = torch.device(ctx.device)
    rows, not_measured = [], 0
    for op in S["ops"]:
        for b in S["batches"]:
            for c in S["contexts"]:
                if ctx.left() < OPERATOR_LEFT_S:
                    not_measured += 1
                    continue
                try:
                    ms = layer_step_ms(op, S["width"], context=c, batch=b, device=device, cpu_reps=P["cpu_reps"],
                                       rep_ms=10)
                except torch.OutOfMemoryError:
                    torch.cuda.empty_cache()
                    ms = float("nan")
                rows.append({"op": op, "width": S["width"], "batch": b, "context": c, "ms": ms})
    return {"rows": rows, "not_measured": not_measured, "width": S["width"], "dtype": P["dtype"]}


def fla_vs_ours(ctx) -> dict:
    """fla's Triton ``chunk_delta_rule`` / ``chunk_gated_delta_rule`` against our chunked PyTorch (float32) on
    inputs of ``fla["shape"]`` = [B, T, H, K]: bf16 agreement and prefill time. CUDA only (a CPU run records that it
    was not measured); last, because its first call compiles Triton kernels."""
    if torch.device(ctx.device).type != "cuda":
        return {"skipped": "fla's Triton kernels need CUDA"}
    B, T, H, K = ctx.profile["fla"]["shape"]
    g_ = torch.Generator(device="cuda").manual_seed(ctx.seed)
    q = torch.randn(B, T, H, K, device="cuda", generator=g_, dtype=torch.bfloat16)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, device="cuda", generator=g_), dim=-1).to(torch.bfloat16)
    v = torch.randn(B, T, H, K, device="cuda", generator=g_, dtype=torch.bfloat16)
    beta = torch.rand(B, T, H, device="cuda", generator=g_, dtype=torch.bfloat16)
    g = -0.1 * torch.rand(B, T, H, device="cuda", generator=g_)
    res = {"shape": [B, T, H, K]}
    for name, gg in (("deltanet", None), ("gated_deltanet", g)):
        o_fla, _ = delta_rule(q, k, v, beta, gg, impl="fla")
        o_ours, _ = delta_rule(q.float(), k.float(), v.float(), beta.float(), gg, impl="chunked")
        err = (o_fla.float() - o_ours).abs().max().item()
        t_fla = time_ms(lambda: delta_rule(q, k, v, beta, gg, impl="fla"), "cuda")
        t_ours = time_ms(lambda: delta_rule(q.float(), k.float(), v.float(), beta.float(), gg, impl="chunked"), "cuda")
        res[name] = {"max_abs_err": err, "rel_err": err / o_ours.abs().max().item(), "fla_ms": t_fla, "ours_ms": t_ours}
    return res

"""The one-GPU (H200) study of paper 15 and the reader of its committed results. No plotly import.

:func:`run_scale_up` (``benchmarks/nemotron_flash_latency.py``), every stage timed by the one harness of
:mod:`~companion.nemotron_flash.latency` (CUDA graphs where capture works, else eager — recorded per result),
bf16, random weights, results saved after every stage:

1. **Transformer first** (the peer measured first): a Qwen3-0.6B-shaped decoder (28 × [attention, SwiGLU],
   d 1024, 16 query / 8 KV heads of 128, q/k RMSNorm, FFN 3072, vocab 151,936, tied embeddings) built from our
   layers; then the same shape as ``transformers.Qwen3ForCausalLM`` timed with HF ``generate`` (its own cache, no
   CUDA graph) to show what the harness contributes.
2. **Hybrid**: an NF-1B-shaped model [inferred shape: d 2048, 12 blocks alternating [DeltaNet-FFN-Mamba2-FFN]
   and [Attention-FFN-Mamba2-FFN], SwiGLU 2560, vocab 131,072; the paper's exact sizes are not public], Mamba2
   in our PyTorch (mamba-ssm is not installed on the GPU machine), DeltaNet decode in our PyTorch step
   (fla's Triton ``chunk_delta_rule`` serves prefill).
   For both: time to decode ``n_tokens`` (8,192 by default) at batch 1, from the step time measured at 3
   contexts over the decode and integrated (not 8,192 real steps: stated), and max-batch throughput (the batch
   doubles until the cache no longer fits or ``max_batch``).
3. **Depth-width grid** at ~400M non-embedding parameters: batch-1 ms/token and throughput at batch 64.
4. **Explorer timings**: :func:`~companion.nemotron_flash.frontier.measure_layer_table` on the GPU at the
   explorer's widths (the explorer's "H200" device).
5. **Operator microbenchmarks**: one layer's decode step (bf16) against context and batch at width 2048.
6. **fla vs ours**: fla's Triton ``chunk_delta_rule`` / ``chunk_gated_delta_rule`` against our chunked PyTorch
   (bf16 agreement, prefill time); last, because its first call compiles Triton kernels.

Not run (do not fit the 150 s budget): the 50-100M hybrids trained as search proxies, Spearman of short vs
long training, weight-normalisation and meta-token ablations.

**Stages that produced nothing.** ``stages_skipped`` lists every stage without a result and ``skip_reasons`` says
why: skipped for the deadline, or started and never finished. A stage is written into both as "started, did not
finish" (and the results saved) before it runs, and taken out when it completes, so a run killed inside a stage
leaves an honest record in the saved JSON.
"""

from __future__ import annotations

import time

import torch

from companion.core import recorded_results

RESULTS_NAME = "nemotron_flash_latency"

GPU_PROFILE = {
    "n_tokens": 8192,
    "decode_points": 3,
    "max_batch": 1024,
    "dtype": "bfloat16",
    "transformer": "Qwen3-0.6B shape, random weights",
    "hybrid": "NF-1B shape [inferred], random weights",
    "depth_width_grid": [(8, 2048), (16, 1440), (32, 1024), (64, 720)],
    "operator_width": 2048,
    "operator_contexts": [1024, 4096, 16384, 32768],
    "operator_batches": [1, 16, 64],
    "deadline_s": 140,
}


def recorded() -> dict | None:
    """The committed results of ``benchmarks/nemotron_flash_latency.py`` (None when not recorded yet)."""
    return recorded_results(RESULTS_NAME)


def qwen3_like(smoke=False):
    from companion.nemotron_flash.model import HybridConfig

    if smoke:
        return HybridConfig(vocab_size=512, hidden_size=64, layer_types=("a", "f") * 4, attn_hidden_size=64,
                            kq_head_dim=16, v_head_dim=16, num_kv_heads=2, kq_norm=True, ffn_hidden_size=192,
                            tie_embeddings=True, max_position=4096)
    return HybridConfig(vocab_size=151936, hidden_size=1024, layer_types=("a", "f") * 28, attn_hidden_size=2048,
                        kq_head_dim=128, v_head_dim=128, num_kv_heads=8, kq_norm=True, ffn_hidden_size=3072,
                        tie_embeddings=True, rope_base=1e6, max_position=40960)


def nf1b_like(smoke=False):
    from companion.nemotron_flash.model import HybridConfig

    blocks = [("deltanet", "f", "m2", "f"), ("a", "f", "m2", "f")]
    n = 2 if smoke else 12
    layer_types = tuple(t for i in range(n) for t in blocks[i % 2])
    if smoke:
        return HybridConfig(vocab_size=512, hidden_size=64, layer_types=layer_types, kq_head_dim=16, v_head_dim=16,
                            num_kv_heads=2, ffn_hidden_size=128, mamba_headdim=16, mamba_d_state=16, max_position=4096)
    return HybridConfig(vocab_size=131072, hidden_size=2048, layer_types=layer_types, kq_head_dim=128,
                        v_head_dim=128, num_kv_heads=4, ffn_hidden_size=2560, mamba_headdim=64, mamba_d_state=128,
                        max_position=40960)


def hf_qwen3(cfg):
    """``transformers.Qwen3ForCausalLM`` with ``cfg``'s shape (random weights)."""
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


def _model(cfg, device, dtype):
    from companion.nemotron_flash.model import HybridLM

    torch.manual_seed(0)
    with torch.device(device):  # initialise on the device: a 1B model's CPU init would cost seconds
        model = HybridLM(cfg)
    return model.to(dtype=dtype).eval()


def run_scale_up(*, smoke=False, deadline_s=None, log=print, save=None, n_tokens=None, max_batch=None) -> dict:
    from companion.nemotron_flash.depth_width import head_dim_for
    from companion.nemotron_flash.frontier import EXPLORER_BUDGETS, EXPLORER_DEPTHS, explorer_width, measure_layer_table
    from companion.nemotron_flash.latency import decode_seconds, device_name, max_batch_throughput
    from companion.nemotron_flash.model import HybridConfig, n_parameters

    t0 = time.perf_counter()
    cfg = dict(GPU_PROFILE)
    deadline_s = deadline_s if deadline_s is not None else cfg["deadline_s"]
    device = torch.device("cpu" if smoke else "cuda")
    dtype = torch.float32 if smoke else torch.bfloat16
    n_tokens = n_tokens or (64 if smoke else cfg["n_tokens"])
    max_batch = max_batch or (4 if smoke else cfg["max_batch"])
    reps = dict(cpu_reps=1, rep_ms=20)
    out = {"config": {**cfg, "n_tokens": n_tokens, "max_batch": max_batch, "smoke": smoke,
                      "dtype": "float32" if smoke else "bfloat16"},
           "device_name": device_name(device), "stages_skipped": [], "skip_reasons": {}, "notes": [
               "random weights; bf16 on CUDA",
               "Mamba2 is this project's PyTorch SSM (mamba-ssm is not installed on the GPU machine)",
               f"decode time of {n_tokens} tokens = mean step time over the decode (measured at "
               f"{cfg['decode_points']} contexts, trapezoid) x {n_tokens}; the step is replayed at a fixed position",
           ]}

    def left():
        return deadline_s - (time.perf_counter() - t0)

    def checkpoint():
        out["elapsed_s"] = time.perf_counter() - t0
        if save is not None:
            save(out)

    def skip(name, reason):
        if name not in out["stages_skipped"]:
            out["stages_skipped"].append(name)
        out["skip_reasons"][name] = reason

    def stage(name, need_s):
        """Start a stage when the deadline leaves ``need_s``; until :func:`done` it is recorded (and saved) as
        started but unfinished, so a run killed inside it says so."""
        now = time.perf_counter() - t0
        if left() < need_s:
            skip(name, f"deadline: {left():.0f} s of {deadline_s:g} s left at {now:.0f} s, needs ~{need_s} s")
            log(f"[skip] {name}: {left():.0f} s left, needs ~{need_s} s")
            return False
        skip(name, f"started at {now:.0f} s of the {deadline_s:g} s deadline and never finished (the process was "
                   "killed or the stage failed): no result")
        checkpoint()
        log(f"[{now:5.1f} s] {name}")
        return True

    def done(name):
        out["stages_skipped"].remove(name)
        out["skip_reasons"].pop(name)

    # 1-2: transformer first, then the hybrid
    hv = {"n_tokens": n_tokens}
    for key, make in (("transformer", qwen3_like), ("hybrid", nf1b_like)):
        if not stage(key, 10):
            continue
        c = make(smoke)
        m = _model(c, device, dtype)
        d = decode_seconds(m, n_tokens=n_tokens, points=cfg["decode_points"], device=device, **reps)
        hv[key] = {"params": n_parameters(m), "layer_types": "".join(t[0] for t in c.layer_types),
                   "decode_seconds": d["seconds"], "ms_per_token": d["ms_per_token"], "step_ms": d["step_ms"],
                   "contexts": d["contexts"], "mode": d["mode"]}
        try:
            thr = max_batch_throughput(m, n_tokens=n_tokens, device=device, start=1 if smoke else 8,
                                       max_batch=max_batch, points=2, deadline=t0 + deadline_s - 30, **reps)
            hv[key].update(max_throughput=thr["tokens_per_s"], max_throughput_batch=thr["batch"],
                           throughput_tried=thr["tried"])
        except RuntimeError as err:
            hv[key].update(max_throughput=float("nan"), throughput_error=str(err))
        log(f"  {key}: {d['seconds']:.2f} s for {n_tokens} tokens ({d['mode']}), "
            f"{hv[key]['max_throughput']:,.0f} tok/s at batch {hv[key].get('max_throughput_batch')}")
        done(key)
        del m
        if device.type == "cuda":
            torch.cuda.empty_cache()
        if key == "transformer" and stage("hf_generate", 15):
            try:
                with torch.device(device):
                    hm = hf_qwen3(c)
                hm = hm.to(dtype=dtype).eval()
                prompt, new = (16, 8) if smoke else (1024, 128)
                hv["hf_generate_ms_per_token"] = hf_generate_ms(hm, prompt=prompt, new_tokens=new, device=device)
                hv["hf_generate_setting"] = f"prompt {prompt}, {new} new tokens, batch 1, greedy, DynamicCache"
                del hm
            except Exception as err:  # noqa: BLE001 - record, do not fail the run
                hv["hf_generate_error"] = f"{type(err).__name__}: {err}"
            done("hf_generate")
        out["hybrid_vs_transformer"] = hv
        checkpoint()

    # 3: depth-width grid
    if stage("depth_width", 15):
        grid = [(2, 64), (4, 44), (8, 32)] if smoke else cfg["depth_width_grid"]
        rows = []
        for depth, width in grid:
            hd = head_dim_for(width, max_dim=128)
            c = HybridConfig(vocab_size=32000 if not smoke else 256, hidden_size=width, layer_types=("a", "f") * depth,
                             kq_head_dim=hd, v_head_dim=hd, max_position=8192)
            m = _model(c, device, dtype)
            from companion.nemotron_flash.latency import decode_step_ms

            b1 = decode_step_ms(m, batch=1, context=1024 if not smoke else 16, device=device, **reps)
            b64 = decode_step_ms(m, batch=64 if not smoke else 4, context=1024 if not smoke else 16, device=device, **reps)
            rows.append({"depth": depth, "width": width, "params": n_parameters(m, non_embedding=True), "ms_batch1": b1["ms"],
                         "tokens_per_s": (64 if not smoke else 4) * 1e3 / b64["ms"], "mode": b1["mode"]})
            del m
        out["depth_width"] = {"rows": rows, "context": 1024 if not smoke else 16, "batch": 64 if not smoke else 4,
                              "device": out["device_name"]}
        done("depth_width")
        checkpoint()

    # 4: explorer timings on this device
    if stage("explorer_table", 15):
        widths = sorted({explorer_width(d, b) for d in EXPLORER_DEPTHS for b in EXPLORER_BUDGETS})
        out["explorer_layer_ms"] = measure_layer_table(widths, device=device, cpu_reps=1)
        done("explorer_table")
        checkpoint()
    # 5: operators
    if stage("operators", 20):
        from companion.nemotron_flash.frontier import layer_step_ms

        w = 64 if smoke else cfg["operator_width"]
        ctxs = [16, 64] if smoke else cfg["operator_contexts"]
        bats = [1, 2] if smoke else cfg["operator_batches"]
        rows = []
        for op in ("a", "deltanet", "gdn", "m2", "f"):
            for b in bats:
                for c_ in ctxs:
                    if left() < 10:
                        break
                    try:
                        ms = layer_step_ms(op, w, context=c_, batch=b, device=device, cpu_reps=1, rep_ms=10)
                    except torch.OutOfMemoryError:
                        torch.cuda.empty_cache()
                        ms = float("nan")
                    rows.append({"op": op, "width": w, "batch": b, "context": c_, "ms": ms})
        out["operators"] = {"rows": rows, "width": w, "dtype": "fp32 (CPU smoke)" if smoke else "bf16"}
        done("operators")
        checkpoint()

    # 6: fla's Triton kernels (first call compiles) against our chunked PyTorch
    if stage("fla_vs_ours", 30):
        out["fla_vs_ours"] = _fla_vs_ours(device, smoke)
        done("fla_vs_ours")
        checkpoint()
    out["elapsed_s"] = time.perf_counter() - t0
    return out


def _fla_vs_ours(device, smoke) -> dict:
    """fla's Triton chunk kernels vs our chunked PyTorch: bf16 agreement and prefill time (CUDA only)."""
    if device.type != "cuda":
        return {"skipped": "fla's Triton kernels need CUDA"}
    from companion.core import time_ms
    from companion.nemotron_flash.operators import delta_rule

    try:
        import fla  # noqa: F401
    except ImportError:
        return {"skipped": "fla not installed"}
    B, T, H, K = 1, 4096, 16, 128
    g_ = torch.Generator(device="cuda").manual_seed(0)
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
        rel = err / o_ours.abs().max().item()
        t_fla = time_ms(lambda: delta_rule(q, k, v, beta, gg, impl="fla"), device)
        t_ours = time_ms(lambda: delta_rule(q.float(), k.float(), v.float(), beta.float(), gg, impl="chunked"), device)
        res[name] = {"max_abs_err": err, "rel_err": rel, "fla_ms": t_fla, "ours_ms": t_ours}
    return res

"""The claims table of the Δ Attention notebook (paper 09), built from the run's result objects.

Every verdict threshold is a named constant below, tested just inside and just outside in
``tests/unit/test_delta_attention_claims.py``. Experiment A runs one deterministic model on the
windows given (no seed involved) and compares methods config by config; experiment B trains one toy
(one seed), so its comparison requires a stated margin and the scale column says "one seed".
"""

from __future__ import annotations

from companion.core import Claim

__all__ = ["LEARNED_FACTOR", "MIN_GAP", "RECOVERED_SHARE", "OVERHEAD_SLACK", "claim_rows", "ladder_rows"]

#: the recall toy counts as trained when dense recall exceeds this multiple of chance.
LEARNED_FACTOR = 3.0
#: the smallest dense - sparse recall gap (absolute) that counts as a sparse-prefill loss.
MIN_GAP = 0.05
#: Δ "recovers most of it" when it wins back more than this share of the gap.
RECOVERED_SHARE = 0.5
#: the ladder's overhead criterion (recorded by the benchmark): within the 1/γ share plus this fraction.
OVERHEAD_SLACK = 0.2


def _pick(final, mode, sink, window, gamma=None):
    sel = final[(final["mode"] == mode) & (final.sink == sink) & (final.window == window)]
    if gamma is not None:
        sel = sel[sel.gamma == gamma]
    return sel.iloc[0]


def claim_rows(depth, final, metrics, *, sinks, windows, gamma, n_tokens, batch, chance, recall_scale,
               ladder: dict | None = None) -> list[Claim]:
    """Rows of the Reproduce table.

    ``depth``/``final``: experiment A's tables (``shift_through_depth`` and its per-method summary with
    ``final_cos``, ``last_layer_spearman``); ``metrics``: experiment B, ``{method: {"accuracy", "nll"}}``
    for ``dense``, ``sparse``, ``recompute``, ``sparse + Δ``; ``chance``: 1 / number of values;
    ``recall_scale``: the toy's scale text; ``ladder``: the recorded GPU ladder or None.
    """
    rows = []
    ref = f"sink {sinks[0]}, window {windows[0]}"
    scale_a = f"MiniLM-L6, N={n_tokens}, {batch} window(s), CPU"
    sp = depth[(depth["mode"] == "sparse") & (depth.sink == sinks[0]) & (depth.window == windows[0])]
    cos_first, cos_last = float(sp.cos_attn.iloc[0]), float(sp.cos_attn.iloc[-1])
    rows.append(Claim(
        claim="sparse prefill shifts attention outputs, and the shift compounds through depth",
        paper="cosine vs dense falls with depth; Spearman of the last 128 rows drops (Fig. 3, Llama-3.1-8B, 131K)",
        measured=f"sparse ({ref}): cosine {cos_first:.3f} at layer 1 → {cos_last:.3f} at layer {int(sp.layer.max())}",
        scale=scale_a, verdict="reproduced" if cos_last < cos_first else "not reproduced"))

    pairs = [(_pick(final, "sparse", s, w), _pick(final, "delta", s, w, gamma), _pick(final, "recompute", s, w, gamma))
             for s in sinks for w in windows]
    wins = sum(d.final_cos > s_.final_cos for s_, d, _ in pairs)
    gain = sum(d.final_cos - s_.final_cos for s_, d, _ in pairs) / len(pairs)
    rows.append(Claim(
        claim="Δ brings sparse outputs back toward dense ones",
        paper="RULER 131K: 27.45 → 64.40 (+36.95 pt), 88 % of quadratic attention",
        measured=(f"final-embedding cosine higher with Δ (γ={gamma}) in {wins}/{len(pairs)} configs, mean {gain:+.3f}; "
                  f"last-layer Spearman {pairs[0][0].last_layer_spearman:.3f} → {pairs[0][1].last_layer_spearman:.3f} ({ref})"),
        scale=f"MiniLM-L6, N={n_tokens}, CPU; RULER not run (needs Llama-3.1-8B)",
        verdict="partly reproduced" if wins == len(pairs) else "not reproduced"))
    rec_wins = sum(d.final_cos > r.final_cos for _, d, r in pairs)
    rows.append(Claim(
        claim="propagating Δ beats recomputing the anchor rows only (Eq. 5 ablation)",
        paper="RULER 131K: Δ 64.40 vs recompute 52.67",
        measured=f"final cosine Δ > recompute in {rec_wins}/{len(pairs)} configs at the same γ={gamma}",
        scale=scale_a,
        verdict="reproduced" if rec_wins == len(pairs) else ("partly reproduced" if rec_wins else "not reproduced")))

    acc = {k: v["accuracy"] for k, v in metrics.items()}
    gap = acc["dense"] - acc["sparse"]
    recovered = acc["sparse + Δ"] - acc["sparse"]
    if acc["dense"] < LEARNED_FACTOR * chance:
        verdict, note = "not reproduced", f"the toy did not learn the task in this budget (dense < {LEARNED_FACTOR:g}× chance)"
    elif gap < MIN_GAP:
        verdict, note = "not reproduced", f"no sparse-prefill gap at this depth and scale (gap {gap:.1%} < {MIN_GAP:.0%})"
    else:
        share = recovered / gap
        verdict = "reproduced" if share > RECOVERED_SHARE else "partly reproduced"
        note = f"Δ wins back {share:.0%} of the gap (more than {RECOVERED_SHARE:.0%} needed)"
    rows.append(Claim(
        claim="sparse prefill + dense decode loses retrieval; Δ recovers most of it",
        paper="RULER MK-3 131K: SLLM 0 % vs dense 62 %; with Δ 44 %",
        measured=(f"recall dense {acc['dense']:.1%}, sparse {acc['sparse']:.1%}, recompute {acc['recompute']:.1%}, "
                  f"sparse+Δ {acc['sparse + Δ']:.1%} (chance {chance:.1%}); NLL of the right value "
                  f"{metrics['dense']['nll']:.4f} / {metrics['sparse']['nll']:.4f} / {metrics['sparse + Δ']['nll']:.4f} "
                  f"(dense / sparse / Δ); {note}"),
        scale=recall_scale + ", one seed", verdict=verdict))
    rows.extend(ladder_rows(ladder))
    return rows


def ladder_rows(ladder: dict | None) -> list[Claim]:
    """The two GPU rows from the recorded ladder (``benchmarks/results/delta_attention_ladder.json``)."""
    summary = (ladder or {}).get("summary", [])
    fast = [s for s in summary if s.get("gamma") == 64 and s.get("speedup_vs_flash")]
    top = max(fast, key=lambda s: s["N"]) if fast else None
    rows = [Claim(
        claim="sink + window + Δ (γ=64) is ~32× faster than FlashAttention-2 at 1M tokens",
        paper="32.16× at 1M tokens, one layer, RTX 4090",
        measured=(f"{top['speedup_vs_flash']:.1f}× vs SDPA flash, {top['speedup_vs_cudnn']:.1f}× vs cuDNN at N={top['N']:,} "
                  f"({ladder['device']}, {ladder['date']})") if top else "no GPU ladder recorded yet",
        scale="Llama-8B attention geometry (32 q / 8 kv heads, D 128, bf16), one layer" if top else "GPU only",
        verdict="recorded on GPU" if top else "not run here")]
    ov = [s for s in summary if s.get("delta_overhead_ms") is not None]
    big = max((s for s in ov if s["gamma"] == 64), key=lambda s: s["N"], default=None)
    measured = "no GPU ladder recorded yet"
    if big:
        met = sum(bool(s["overhead_within_share_plus_20pct"]) for s in ov)
        flash_ms = big["dense_share_ms"] * big["gamma"]
        missed = sorted({s["N"] for s in ov if not s["overhead_within_share_plus_20pct"]})
        measured = (f"at N={big['N']:,}, γ=64 Δ adds {big['delta_overhead_ms']:.0f} ms = {big['delta_overhead_ms'] / flash_ms:.2%} "
                    f"of SDPA flash (1/γ = {1 / 64:.2%}); within the 1/γ share + {OVERHEAD_SLACK:.0%} at {met}/{len(ov)} (N, γ) points"
                    + ("; missed at " + "; ".join(
                        f"N={n // 1024}K γ={','.join(str(s['gamma']) for s in ov if s['N'] == n and not s['overhead_within_share_plus_20pct'])}"
                        for n in missed) + " (likely fixed per-call costs and the max(128, γ)-row dense tail)" if missed else ""))
    rows.append(Claim(
        claim="Δ costs about 1/γ of dense attention (98.5 % sparsity at γ = 64)",
        paper="every γ-th causal row: 1/γ of the work, 1.56 % at γ = 64",
        measured=measured, scale="Llama-8B attention geometry, one layer, 32K–1M tokens" if big else "GPU only",
        verdict="recorded on GPU" if big else "not run here"))
    return rows

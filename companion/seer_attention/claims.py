"""The claims table of the SeerAttention notebook (paper 01), built from the run's result objects.

Every verdict threshold is a named constant below, tested just inside and just outside in
``tests/unit/test_seer_attention_claims.py``. The CPU run is one trained gate set (one seed), so a
comparison of the gate with a baseline requires a stated margin and the scale column says "one seed".
"""

from __future__ import annotations

from companion.core import Claim

__all__ = ["COSINE_LOSSLESS", "COSINE_PARTLY", "KL_REDUCTION", "RECALL_MARGIN", "claim_rows"]

#: the trained gate must keep at least this much more attention mass (absolute) than the best fixed
#: or untrained baseline at every sparsity (one seed: the margin stands in for a spread).
RECALL_MARGIN = 0.02
#: self-distillation must cut the held-out KL(gt || gate) to at most this fraction of the untrained gate's.
KL_REDUCTION = 0.5
#: "near-lossless" (proxy): sentence-embedding cosine to dense at the highest sparsity ...
COSINE_LOSSLESS = 0.98
#: ... or, for "partly", at the lowest sparsity.
COSINE_PARTLY = 0.95

_BASELINES = ("untrained", "random", "a-shape")


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs)


def _join(values, fmt: str) -> str:
    return "/".join(format(v, fmt) for v in values)


def claim_rows(block_rows, output_rows, *, kl_untrained, kl_trained, train_seconds: float, gate_params: int,
               sparsities, scale: str, steps: int, output_seqs: int, recorded: dict | None = None) -> list[Claim]:
    """The rows of the Reproduce table.

    ``block_rows``: ``evaluate_blocks`` results (``.method``, ``.sparsity``, ``.mass_recall``);
    ``output_rows``: ``evaluate_outputs`` dicts (``method``, ``sparsity``, ``embedding_cosine``);
    ``kl_untrained`` / ``kl_trained``: per-layer held-out KL lists; ``scale``: the run's scale text;
    ``recorded``: the committed GPU results (``scale.recorded()``) or None.
    """
    sparsities = sorted(sparsities)
    R = {(r.method, r.sparsity): r.mass_recall for r in block_rows}
    O = {(r["method"], r["sparsity"]): r["embedding_cosine"] for r in output_rows}
    sp = _join(sparsities, ".0%")
    one_seed = scale + ", one seed"
    rows = []

    gaps = [R["gate", s] - max(R[b, s] for b in _BASELINES) for s in sparsities]
    mass = lambda m: _join((R[m, s] for s in sparsities), ".2f")  # noqa: E731
    rows.append(Claim(
        claim="a learned gate predicts which attention blocks matter",
        paper="gate recovers block sparsity of Llama-3.1-8B; beats fixed patterns (MInference, DuoAttention) on RULER/LongBench",
        measured=(f"attention mass kept at {sp} sparsity: gate {mass('gate')}, oracle {mass('oracle')}, "
                  f"A-shape {mass('a-shape')}, random {mass('random')}, untrained {mass('untrained')}; "
                  f"gate minus best baseline {_join(gaps, '+.3f')} (margin required: {RECALL_MARGIN})"),
        scale=one_seed + " (held out)",
        verdict="reproduced" if min(gaps) >= RECALL_MARGIN else ("partly reproduced" if min(gaps) > 0 else "not reproduced"),
    ))

    kl0, kl1 = _mean(kl_untrained), _mean(kl_trained)
    rows.append(Claim(
        claim="self-distillation trains only the gates, quickly",
        paper="frozen LLM, gates only, 500 steps (~0.5B tokens), KL loss, no LM loss",
        measured=(f"held-out KL(gt||gate) {kl0:.3f} -> {kl1:.3f} nats/row ({kl1 / kl0:.0%} of the untrained gate's; "
                  f"required <= {KL_REDUCTION:.0%}) in {steps} steps, {train_seconds:.0f} s; {gate_params:,} gate parameters"),
        scale=scale,
        verdict="reproduced" if kl1 <= KL_REDUCTION * kl0 else "partly reproduced",
    ))

    c_lo, c_hi = O["gate", sparsities[0]], O["gate", sparsities[-1]]
    cos = lambda m: _join((O[m, s] for s in sparsities), ".3f")  # noqa: E731
    rows.append(Claim(
        claim="near-lossless output at high sparsity (judged by a proxy: sentence-embedding cosine, not a task score)",
        paper="RULER 87.60 vs 88.01 dense (sparsity up to ~85% at 128k); LongBench 54.20 vs 54.07 at 50%",
        measured=(f"cosine of MiniLM's mean-pooled embedding to dense, every layer block-sparse, at {sp}: gate {cos('gate')}, "
                  f"oracle {cos('oracle')}, A-shape {cos('a-shape')}, random {cos('random')} (proxy thresholds: "
                  f"{COSINE_LOSSLESS} at {sparsities[-1]:.0%} for reproduced, {COSINE_PARTLY} at {sparsities[0]:.0%} for partly); "
                  "no task accuracy is measured here"),
        scale=scale + f", {output_seqs} held-out windows",
        verdict="reproduced" if c_hi >= COSINE_LOSSLESS else ("partly reproduced" if c_lo >= COSINE_PARTLY else "not reproduced"),
    ))
    rows.extend(recorded_rows(recorded))
    return rows


def recorded_rows(rec: dict | None) -> list[Claim]:
    """Rows from the committed GPU run: kernel speed-up and what block RoPE does for the gate."""
    speed_paper = "4.15x (8k), 7.37x (32k), 7.34x (128k) over FlashAttention-2, A100"
    if rec is None or not rec.get("timings"):
        return [Claim(claim="block-sparse kernel speed-up at 90% sparsity", paper=speed_paper,
                      measured="no GPU results recorded yet", scale="needs a GPU (benchmarks/seer_attention_gpu.py)",
                      verdict="not run here")]
    rows = []
    sp90 = {r["seq_len"]: r for r in rec["timings"] if r["backend"] == "block-sparse Triton" and "90%" in r["mask"]}
    rows.append(Claim(
        claim="block-sparse kernel speed-up at 90% sparsity", paper=speed_paper,
        measured=", ".join(f"{n // 1024}k: {r['speedup_vs_dense']:.2f}x" for n, r in sorted(sp90.items()))
        + " over the fastest dense SDPA, gate masks (top-k 90%)",
        scale=f"{rec['device']}, B=1, H=32, D=128, bf16, causal, block 64 ({rec['date']})", verdict="recorded on GPU"))
    recall = {(r["length"], r["method"], r["sparsity"]): r["mass_recall"] for r in rec.get("recall", [])}
    kl = rec.get("heldout_kl", {})
    need = [("train_len", "gate", 0.9), ("train_len", "gate (no block RoPE)", 0.9), ("long", "gate", 0.9)]
    if all(k in recall for k in need) and {"block_rope", "no_rope", "block_rope_long"} <= set(kl):
        cfg = rec["config"]
        rows.append(Claim(
            claim="the gate needs block positions (block RoPE) on a RoPE model; it does not length-generalise here",
            paper="block RoPE lets a gate trained at 8k work beyond 8k; without it the gate fails beyond 8k (Fig. 4)",
            measured=(f"recall at 90% sparsity, trained length: with block RoPE {recall[need[0]]:.3f}, without "
                      f"{recall[need[1]]:.3f}; at 4x length with block RoPE {recall[need[2]]:.3f}. Held-out KL(gt||gate) "
                      f"with block RoPE {_mean(kl['block_rope']):.2f} at the trained length -> {_mean(kl['block_rope_long']):.2f} "
                      f"at 4x; without block RoPE {_mean(kl['no_rope']):.2f} already at the trained length"),
            scale=(f"planted tiny RoPE decoder, trained at {cfg['seq_len']}, tested at {cfg['long_len']}, one seed "
                   f"({rec['device']}, {rec['date']})"),
            verdict="recorded on GPU"))
    return rows

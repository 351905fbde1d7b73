"""The GPU profile of paper 04 (ZeroS) and the reader of its recorded kernel benchmark.

``GPU_PROFILE`` is what the notebook's GPU profile runs: the two training experiments longer and with
larger batches, and ``companion.zeros_attention.bench.run_kernel_benchmark`` at the notebook's
``GPU_BENCH_T``. ``benchmarks/zeros_attention_kernel.py`` runs the same benchmark and commits
``benchmarks/results/zeros_attention_kernel.json``, which :func:`recorded` returns.

:func:`kernel_rows` reads both row formats that file has had: the current one,
``{"T", "impl": "zeros" | "fla_dk192" | "sdpa_flash" | ..., "mode": "fwd" | "fwd_bwd", "ms", "peak_mib"}``
(a failed contender has ``"error"`` instead of ``"ms"``), and the earlier
``{"T", "op": "ours" | "fla_chunk_dk192" | ..., "fwd_ms", "fwd_peak_mib", "fwdbwd_ms", ...}``.
:func:`kernel_table` turns them into ``{T: {mode: {impl: ms}}}`` with only what was measured, so a
size a peer was not measured at stays absent (the claims say "not measured" there).
"""

from __future__ import annotations

from companion.core import recorded_results

__all__ = ["GPU_PROFILE", "RESULTS_NAME", "recorded", "kernel_rows", "kernel_table", "ratio_table", "training_sizes"]

RESULTS_NAME = "zeros_attention_kernel"

GPU_PROFILE = {
    "min_toy_steps": 1000,  # the v_a - v_b toy: at least this many Adam steps
    "min_mqar_steps": 1500,  # MQAR: at least this many AdamW steps,
    "mqar_batch": 128,  # of this batch (the CPU profile uses MQAR_BATCH)
    "kernel_benchmark_budget_s": 150.0,  # time budget of run_kernel_benchmark at GPU_BENCH_T
}

_OLD_IMPLS = {"ours": "zeros", "fla_chunk_dk192": "fla_dk192", "fla_chunk_dk64": "fla_dk64", "sdpa_flash": "sdpa_flash"}


def training_sizes(profile: str, toy_steps: int, mqar_steps: int, mqar_batch: int) -> tuple[int, int, int]:
    """``(toy_steps, mqar_steps, mqar_batch)`` the notebook runs under ``profile`` ("cpu": as given)."""
    if profile != "gpu":
        return toy_steps, mqar_steps, mqar_batch
    return (max(toy_steps, GPU_PROFILE["min_toy_steps"]), max(mqar_steps, GPU_PROFILE["min_mqar_steps"]),
            max(mqar_batch, GPU_PROFILE["mqar_batch"]))


def kernel_rows(payload: dict | None) -> list[dict]:
    """The benchmark's rows in the current format ``{"T", "impl", "mode", "ms"?, "peak_mib"?, "error"?}``."""
    out = []
    for r in (payload or {}).get("rows", []):
        if "impl" in r and "mode" in r:
            out.append(dict(r))
            continue
        if "op" not in r or "T" not in r:
            continue
        impl = _OLD_IMPLS.get(r["op"], r["op"])
        for old, mode in (("fwd", "fwd"), ("fwdbwd", "fwd_bwd")):
            row = {"T": r["T"], "impl": impl, "mode": mode}
            if f"{old}_ms" in r:
                row["ms"] = r[f"{old}_ms"]
            if f"{old}_peak_mib" in r:
                row["peak_mib"] = r[f"{old}_peak_mib"]
            if f"{old}_error" in r or "error" in r:
                row["error"] = r.get(f"{old}_error") or r.get("error")
            if len(row) > 3:
                out.append(row)
    return out


def kernel_table(payload: dict | None, key: str = "ms") -> dict:
    """``{T: {mode: {impl: value}}}`` of the measured rows (no "error", ``key`` present)."""
    table: dict = {}
    for r in kernel_rows(payload):
        if "error" in r or r.get(key) is None:
            continue
        table.setdefault(int(r["T"]), {}).setdefault(r["mode"], {})[r["impl"]] = float(r[key])
    return dict(sorted(table.items()))


def recorded() -> dict | None:
    """The committed kernel benchmark (``benchmarks/results/zeros_attention_kernel.json``), or None."""
    return recorded_results(RESULTS_NAME)


def ratio_table(payload: dict | None, peers=("fla_dk192", "sdpa_flash")) -> list[dict]:
    """One dict per T where our kernel ran: its ms per mode and ``ours / peer`` per mode and peer, or
    ``"not measured"`` where the peer was not measured at that T in the same run."""
    out = []
    for T, modes in kernel_table(payload).items():
        row = {"T": T}
        for mode in ("fwd", "fwd_bwd"):
            ms = modes.get(mode, {})
            if "zeros" not in ms:
                continue
            row[f"ours {mode} ms"] = round(ms["zeros"], 3)
            for peer in peers:
                row[f"{mode}: ours / {peer}"] = round(ms["zeros"] / ms[peer], 2) if peer in ms else "not measured"
        if len(row) > 1:
            out.append(row)
    return out

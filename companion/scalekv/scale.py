"""The GPU profile of paper 03 (ScaleKV) and the reader of its recorded GPU results.

``GPU_PROFILE`` is what the notebook's GPU profile runs: the same tiny model trained longer and scored
on more images, then (:func:`run_gpu`) the Scale-up section of :mod:`companion.scalekv.bench` — the
larger model's Table 1 protocol, attention latency per scale and the fused selection kernel at
Infinity-8B geometry. ``benchmarks/scalekv_gpu.py`` runs the same functions and commits
``benchmarks/results/scalekv_gpu.json``, which :func:`recorded` returns on a CPU.
"""

from __future__ import annotations

from companion.core import recorded_results

__all__ = ["GPU_PROFILE", "RESULTS_NAME", "recorded", "notebook_sizes", "run_gpu"]

RESULTS_NAME = "scalekv_gpu"

GPU_PROFILE = {
    "min_train_steps": 3000,  # the notebook's tiny model: at least this many steps,
    "min_batch_size": 64,  # of at least this batch,
    "min_eval_images": 200,  # scored on at least this many images
    "larger_model": {"layers": 8, "dim": 256, "heads": 8, "sides": (1, 2, 3, 4, 5, 6, 8, 10, 12, 16),
                     "fractions": (0.04, 0.1, 0.2), "window_size": 16},
    "latency": {"schedule": "Infinity 1024^2 (13 scales)", "geometry": "Infinity-8B, 28 heads x 128, bf16", "budget": 650},
    "selection": {"key_lengths": (2954, 6425, 10521), "capacity": 650},
}


def notebook_sizes(profile: str, train_steps: int, batch_size: int, eval_images: int) -> tuple[int, int, int]:
    """``(train_steps, batch_size, eval_images)`` the notebook runs under ``profile`` ("cpu": as given)."""
    if profile != "gpu":
        return train_steps, batch_size, eval_images
    return (max(train_steps, GPU_PROFILE["min_train_steps"]), max(batch_size, GPU_PROFILE["min_batch_size"]),
            max(eval_images, GPU_PROFILE["min_eval_images"]))


def run_gpu(device, *, train_seconds: float = 45.0) -> dict:
    """The Scale-up section on a GPU, in the shape of the recorded results."""
    import torch

    from companion.scalekv.bench import attention_latency, larger_model_protocol, selection_timing

    lm = GPU_PROFILE["larger_model"]
    larger = larger_model_protocol(device, train_seconds=train_seconds, sides=lm["sides"], layers=lm["layers"], dim=lm["dim"],
                                   heads=lm["heads"], fractions=lm["fractions"], window_size=lm["window_size"])
    return {"larger_model": larger, "latency": attention_latency(device),
            "selection": selection_timing(device, compile_reference=False), "device": torch.cuda.get_device_name(0),
            "date": "this run"}


def recorded() -> dict | None:
    """The committed GPU results (``benchmarks/results/scalekv_gpu.json``), or None."""
    return recorded_results(RESULTS_NAME)

"""One entry for every GPU study and benchmark, and the registry that lists them.

    python -m companion.bench NAME                       # on a CUDA machine: writes benchmarks/results/<results>.json
    python -m companion.bench NAME --smoke               # a tiny CPU run (Triton kernels in the interpreter), to /tmp
    python -m companion.bench NAME --stages a,b --resume benchmarks/results/<results>.json
                                                         # run stages a and b again, keep the file's other stages
    python -m companion.bench NAME --set train.lr=2e-3 --set train_seconds=90 --out-dir build/pilot
                                                         # a pilot: the profile with some knobs changed
    python -m companion.bench --list gpu                 # NAME:SECONDS of every GPU study (what `make bench-gpu` runs)
    python -m companion.bench --markdown benchmarks      # the table of benchmarks/README.md (and `papers`: README.md's)

``NAME`` is a paper's slug (its study, ``companion/<slug>/scale.py``) or the name of one of the other studies in
:data:`BENCHMARKS`. Every study module has the same shape: ``RESULTS_NAME``, ``GPU_PROFILE``, ``SMOKE_PROFILE``,
``DEADLINE_S``, ``STAGES`` (:class:`companion.core.stages.Stage`), ``run_scale_up(profile, *, device,
deadline_s, log, save)`` and ``recorded()``. The JSON, written after every stage by
:func:`companion.core.stages.run_stages`, records the command line, the commit, the device, torch and triton,
each stage's state, and the exit status: 0 when no stage failed, 1 when one did, 2 for a refused call.
"""

from __future__ import annotations

import argparse
import ast
import copy
import importlib
import json
import os
import shlex
import sys
import tempfile
from dataclasses import dataclass

from companion.core.paths import repo_commit

GRACE_S = 90  # a study's wall-clock limit in `make bench-gpu` is its DEADLINE_S plus this (start-up, last stage)


@dataclass(frozen=True)
class Benchmark:
    """A study: ``name`` (a paper's slug for its ``scale.py``), the ``module`` with the study's shape, the
    ``paper`` it belongs to, ``where`` it runs (``gpu`` or ``cpu``) and what it ``measures`` (one line)."""

    name: str
    module: str
    paper: str
    where: str
    measures: str


def _paper(slug: str, measures: str, *, module: str = "scale", name: str | None = None, where: str = "gpu") -> Benchmark:
    return Benchmark(name or slug, f"companion.{slug}.{module}", slug, where, measures)


BENCHMARKS: tuple[Benchmark, ...] = (
    _paper("seer_attention", "gate distillation on long sequences (with and without block RoPE, recall at 4x the length); "
           "the block-sparse kernel with the gate's masks vs SDPA flash / cuDNN and compiled FlexAttention"),
    _paper("seer_attention", "the forward kernel's launch variants; block-sparse FlashAttention vs SDPA flash / cuDNN / "
           "compiled FlexAttention; "
           "`pooled_attention_map` vs naive; the backward's launch variants; forward + backward vs compiled "
           "FlexAttention (notes: `block_sparse_NOTES.md`)",
           module="scale_kernel", name="block_sparse_attention"),
    _paper("hyperet", "eager PyTorch and the closed form (peers first) vs the fused HRA kernel on a CLIP ViT-L q/v "
           "stack; the shapes-hierarchy alignment with a ViT-Tiny encoder under bf16"),
    _paper("scalekv", "larger VAR model; per-scale attention latency with compression; fused token selection"),
    _paper("zeros_attention", "the chunked ZeroS kernel, forward and backward, vs SDPA flash and flash-linear-attention; "
           "its state passes in 1-32 segments, and the fused forward; host against kernel time of short forwards "
           "(notes: `zeros_attention_NOTES.md`)"),
    _paper("gaussian_video", "progressive decode + render per level of detail (H.264 via PyAV, and zlib); the Triton "
           "projection, binning and rasteriser vs gsplat (forward, and forward + backward) and the PyTorch splatter; "
           "the rasteriser's launch variants"),
    _paper("gaussian_video", "a dynamic 3D scene trained per frame group: PSNR against size per level",
           module="scale_train3d", name="gaussian_video_train3d"),
    _paper("gaussian_video", "the RD ablations on the trained 3-D model, 3 seeds: no rate term vs the full keyframe, "
           "the progressive curve per layer, motion-aware vs fixed groups of 1 and 5 (BD-rate)",
           module="scale_rd3d", name="gaussian_video_rd3d"),
    _paper("sudoku_dfs", "9×9 GPT-2 trained on DFS transcripts; board accuracy; propagation throughput; L1 vs L2 "
           "one-level guessing; the checkpoint"),
    _paper("graph_multiview", "GCN × every method, GIN and GraphGPS × {vanilla, ensemble, G-MIMO, GMV} on noisy "
           "planted-motif graphs, 10 folds, one early-stopping recipe for all; heads 2–10, label noise and label "
           "ratios on 5 folds; inference latency"),
    _paper("dartquant", "massive channels put in by hand (norm gains × s; the stream's top directions in channels), "
           "3 seeds: W4A4KV4 perplexity with no rotation, QuaRot, DartQuant and end-to-end rotation training; "
           "calibration time and memory at two widths; QR-Orth vs Cayley step time at n = 4096 / 8192"),
    _paper("dartquant", "the X@R + INT4 fake-quant + Whip-sum kernel: `torch.compile` and eager PyTorch first, then "
           "the fused and split variants × tiles (pointer and TMA loads) and torch.mm + a Triton row pass, at "
           "32768 × 4096 bf16; where the split variant's time goes",
           module="scale_kernel", name="dartquant_kernel"),
    _paper("delta_attention", "sink + window prefill, with and without the Δ correction, vs SDPA, N = 32k … 1M"),
    _paper("ortho_residual", "linear vs Orthogonal-F on a small byte-level decoder to equal steps (a pilot until the "
           "linear validation loss flattens) and a ViT on upsampled digits, 3 seeds each; the bf16 vs fp32 projection "
           "coefficient on a bf16 stream, 3 seeds; training-step overhead on a 106M decoder, eager and compiled"),
    _paper("low_rank_clone", "a teacher trained longer than its students; LRC vs random init + KD vs hard pruning + "
           "KD on the same tokens, 3 seeds (tokens to a loss, final loss); training throughput, materialised vs "
           "factored projections"),
    _paper("lorasuite", "an ≈100M → ≈230M word-level Llama upgrade grown from the old model (wider, deeper, more "
           "heads, a larger vocabulary) and trained on: LoRASuite transfer ± LFT vs LoRA(n) vs LoRA(full), 3 seeds, "
           "time and memory; full vs randomized SVD"),
    _paper("hollowflow", "LJ13 and LJ55 flows trained on equilibrated MALA data: ESS with bootstrap intervals, EffSU "
           "where both pass the floor; one RK4 likelihood step, the fully connected baseline (n·d VJPs) first, then "
           "HollowFlow at k = 7 and ⌈√n⌉, n = 13 … 200 (n = 64 for the 10× check); the segment-sum kernel vs index_add_"),
    _paper("cpmla", "CPMLA, Langevin and CP-Flow alone from the same start on upsampled digits, 3 seeds: energy "
           "distance and KID against the data's noise floor, the inverse's convergence; sampling time and ablations"),
    _paper("nemotron_flash", "NF-1B-shaped hybrid vs Qwen3-0.6B-shaped transformer: batch-1 decode latency and max-batch "
           "throughput (and HF generate); depth × width grid; per-operator decode times; fla's Triton kernels vs ours"),
    _paper("kernelshap", "Shapley estimators at d = 784 and 3072 with device sampling and solve; the same LeverageSHAP "
           "with NumPy on the CPU at d = 784, m = 50000"),
    _paper("kernelshap", "our regression estimator vs shap's KernelExplainer (time and error at equal m)",
           module="scale_cpu", name="kernelshap_cpu", where="cpu"),
    _paper("gain_rl", "the angle metric (explicit T×T vs segment sums), layer-wise angle/gradient correlation, "
           "GRPO with uniform / GAIN / filtered sampling over 3 seeds, μ and the drawn prompts' angle rank per epoch"),
    _paper("rtcfr", "the batched solver checked against numpy (eager, CUDA graph); ms per batched iteration at "
           "B = 1/16/128 vs the numpy solver; RTCFR+ over (μ, T_u) grids with the baselines on the larger games"),
    _paper("rtcfr", "our CFR+/RTCFR+ vs OpenSpiel's C++ CFR+ (iterations per second)", module="scale_cpu",
           name="rtcfr_cpu", where="cpu"),
    _paper("diverse_sampling", "steered vs IID sampling over N and k on a wider word LM: coverage, SE bias and RMSE "
           "with IS and the control variate, AUROC"),
)
BY_NAME = {b.name: b for b in BENCHMARKS}

# The Triton kernels (folders of companion_kernels/) each paper's package uses; a test checks it against the imports.
KERNELS: dict[str, tuple[str, ...]] = {
    "seer_attention": ("block_sparse",),
    "hyperet": ("hra",),
    "scalekv": ("scalekv_select",),
    "zeros_attention": ("zeros_linear",),
    "gaussian_video": ("gaussian_splat",),
    "dartquant": ("rotate_quant_whip",),
    "delta_attention": ("block_sparse", "query_sparse"),
    "hollowflow": ("segment_sum",),
}


def study(name: str):
    """The study module of the benchmark ``name``."""
    return importlib.import_module(BY_NAME[name].module)


def wall_limit_s(name: str) -> int:
    """The wall-clock limit `make bench-gpu` gives a study: its ``DEADLINE_S`` plus :data:`GRACE_S`."""
    return int(study(name).DEADLINE_S) + GRACE_S


def papers_table() -> str:
    """README.md's table of the papers, its status column derived from :data:`BENCHMARKS` and :data:`KERNELS`."""
    from companion.runner import discover

    rows = ["| # | Paper | Notebook | Status |", "|---|---|---|---|"]
    for slug, nb in discover().items():
        if nb.stem.startswith("00_"):
            continue
        info = importlib.import_module(f"companion.{slug}").PAPER
        status = "notebook + tests + GPU study"
        if slug in KERNELS:
            status += " + Triton kernels (" + ", ".join(f"`{k}`" for k in KERNELS[slug]) + ")"
        rows.append(f"| {info.number} | {info.title} | `notebooks/{nb.name}` | {status} |")
    return "\n".join(rows)


def benchmarks_table() -> str:
    """benchmarks/README.md's table, from :data:`BENCHMARKS`."""
    rows = ["| name | paper | where | results | what it measures |", "|---|---|---|---|---|"]
    for b in BENCHMARKS:
        rows.append(f"| `{b.name}` | {b.paper} | {b.where.upper()} | `results/{study(b.name).RESULTS_NAME}.json` | {b.measures} |")
    return "\n".join(rows)


def set_knobs(profile: dict, assignments: list[str]) -> dict:
    """A copy of ``profile`` with each ``KEY=VALUE`` of ``assignments`` applied (``KEY`` dotted into nested dicts,
    ``VALUE`` a Python literal, else a string). Only a knob the profile has can be set, and to a value of its type
    (:func:`companion.core.validation.fits_type`, as a sweep's values); the recorded profile then says what ran, and
    ``--resume`` compares it."""
    from companion.core import ParameterError
    from companion.core.validation import fits_type

    out = copy.deepcopy(profile)
    for text in assignments:
        key, sep, raw = text.partition("=")
        if not sep or not key:
            raise ParameterError("--set", text, "KEY=VALUE, e.g. train.lr=2e-3")
        parts, node = key.split("."), out
        for i, part in enumerate(parts):
            if not isinstance(node, dict) or part not in node:
                where = ".".join(parts[:i]) or "the profile"
                keys = ", ".join(node) if isinstance(node, dict) else "none (not a dict)"
                raise ParameterError("--set", key, f"a knob of {where}: {keys}")
            if i < len(parts) - 1:
                node = node[part]
        last = parts[-1]
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        old = node[last]
        if not fits_type(value, old):
            raise ParameterError("--set", text, f"a {type(old).__name__} for {key} (now {old!r})")
        node[last] = float(value) if type(old) is float else value
    return out


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m companion.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", nargs="?", help=f"one of: {', '.join(BY_NAME)}")
    ap.add_argument("--smoke", action="store_true", help="tiny CPU run (SMOKE_PROFILE); writes to a temp folder")
    ap.add_argument("--deadline", type=float, default=None, help="seconds after which stages are skipped (default DEADLINE_S)")
    ap.add_argument("--out-dir", default=None, help="results folder (default benchmarks/results; a temp folder for --smoke)")
    ap.add_argument("--stages", default=None, help="comma-separated stages to run (default: all, in order)")
    ap.add_argument("--resume", default=None, help="an earlier JSON of this study and profile whose other stages are kept")
    ap.add_argument("--seed", type=int, default=None, help="the seed (default: the profile's)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="change one knob of the profile (dotted for a nested one: train.lr=2e-3); repeatable")
    ap.add_argument("--list", choices=("gpu", "cpu"), default=None, help="print NAME:SECONDS of every study that runs there")
    ap.add_argument("--markdown", choices=("benchmarks", "papers"), default=None, help="print a README table")
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = _parser()
    args = ap.parse_args(argv)
    if args.list:
        print(" ".join(f"{b.name}:{wall_limit_s(b.name)}" for b in BENCHMARKS if b.where == args.list))
        return 0
    if args.markdown:
        print(benchmarks_table() if args.markdown == "benchmarks" else papers_table())
        return 0
    if args.name not in BY_NAME:
        print(f"unknown study {args.name!r}: one of {', '.join(BY_NAME)}", file=sys.stderr)
        return 2
    if args.smoke:  # before any kernel module is imported: triton.jit reads it when a kernel is defined
        os.environ.setdefault("TRITON_INTERPRET", "1")

    import torch

    from companion.core import ParameterError, save_results
    from companion.core.results import device_name
    from companion.core.stages import not_finished, run_stages

    bench = BY_NAME[args.name]
    module = study(args.name)
    if args.smoke:
        device, profile = "cpu", dict(module.SMOKE_PROFILE)
        torch.set_num_threads(1)
    elif bench.where == "gpu":
        if not torch.cuda.is_available():
            print("no CUDA device: use --smoke for a CPU run", file=sys.stderr)
            return 2
        device, profile = "cuda", dict(module.GPU_PROFILE)
    else:
        device, profile = "cpu", dict(module.GPU_PROFILE)
    if args.seed is not None:
        profile["seed"] = args.seed
    try:
        profile = set_knobs(profile, args.set)
    except ParameterError as err:
        print(f"refused: {err}", file=sys.stderr)
        return 2
    previous = None
    if args.resume:
        try:
            with open(args.resume, encoding="utf-8") as fh:
                previous = json.load(fh)
        except (OSError, ValueError) as err:
            print(f"--resume {args.resume}: not a readable JSON file ({err})", file=sys.stderr)
            return 2
        here = device_name()
        if not args.smoke and previous.get("device") != here:  # one file, one device: its stamp covers every stage
            print(f"--resume {args.resume}: its stages ran on {previous.get('device')!r}, this machine is {here!r}; "
                  "resume on the same device, or run every stage here without --resume", file=sys.stderr)
            return 2
    out_dir = args.out_dir or (tempfile.mkdtemp(prefix=f"{bench.name}-smoke-") if args.smoke else None)
    meta = {"smoke": args.smoke, "command": shlex.join(["python", "-m", "companion.bench", *argv]), "commit": repo_commit()}

    def save(payload):
        return save_results(module.RESULTS_NAME, {**payload, **meta}, out_dir)

    only = [s for s in args.stages.split(",") if s] if args.stages else None
    deadline = module.DEADLINE_S if args.deadline is None else args.deadline
    try:
        payload = run_stages(module.STAGES, profile, device=device, deadline_s=deadline, save=save, only=only,
                             previous=previous, log=lambda *a: print(*a, flush=True))
    except ParameterError as err:
        print(f"refused: {err}", file=sys.stderr)
        return 2
    failed = [n for n, s in payload["stages"].items() if s["state"] == "failed"]
    meta["exit"] = 1 if failed else 0
    path = save(payload)
    left = not_finished(payload)
    print(f"wrote {path} in {payload['seconds']} s; " + (f"not done: {'; '.join(left)}" if left else "every stage done"))
    return meta["exit"]


if __name__ == "__main__":
    raise SystemExit(main())

"""The stages of paper 06's GPU study (:mod:`companion.sudoku_dfs.scale`): a 9x9 GPT-2 trained on DFS transcripts,
its held-out evaluation, batched propagation throughput, L1 vs L2 one-level guessing, and the checkpoint.

Paper: Giannoulis, Pantis, Tzamos, NeurIPS 2025 (arXiv 2509.22023). The paper trains a 42M-parameter GPT-2 for
3M steps (about 168 GPU-hours on an A10G) and reaches 98.9 % board accuracy on its "Random" puzzles; this is
the few-minutes version for one GPU. Deviations from the paper's model (8 layers, 8 heads, d = 576, lr 1e-4,
batch 32, 3M steps) are the profile's: narrower (the bf16 checkpoint stays under 15 MB and a step is fast),
dropout 0, a larger learning rate and smaller heads, which trained faster in this project's 4x4 runs.

Each stage takes the :class:`~companion.core.stages.StageContext` of one call and hands what a later stage
needs through ``ctx.shared``: the started stream, its pool and this process's rank and device (``data``), the
trained model and the streamed puzzles kept for the guess policy (``training``); the held-out puzzles and their backdoors are rebuilt where absent (they are deterministic).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import torch

from companion.core import limit_threads, repo_path, time_ms
from companion.core.stages import StageContext
from companion.sudoku_dfs import policy as pol
from companion.sudoku_dfs.backdoors import backdoors_reference, find_backdoors
from companion.sudoku_dfs.board import format_board
from companion.sudoku_dfs.checkpoints import save_checkpoint
from companion.sudoku_dfs.data import StreamPool, TranscriptStream, stack_arrays, transcript_arrays
from companion.sudoku_dfs.decoding import evaluate_model, label_accuracy
from companion.sudoku_dfs.generator import generate_puzzle, load_puzzles
from companion.sudoku_dfs.model import GPTConfig, build_model, n_parameters
from companion.sudoku_dfs.rules import propagate
from companion.sudoku_dfs.solver import State, dfs_transcript
from companion.sudoku_dfs.training import TrainConfig, distributed, train_model

MAX_LEN = 250  # the paper keeps transcripts of at most 250 tokens
HELD_OUT = "data/sudoku/puzzles_9x9.txt"
NUMPY_MAX_BOARDS = 10_000  # numpy propagation on the CPU is timed up to this many boards (one run each)


def _held_out(ctx: StageContext) -> list:
    """The first ``eval_puzzles`` committed 9x9 puzzles (never trained on)."""
    if "held_out" not in ctx.shared:
        ctx.shared["held_out"] = load_puzzles(repo_path(HELD_OUT), n=9)[:ctx.profile["eval_puzzles"]]
    return ctx.shared["held_out"]


def _infos(ctx: StageContext) -> list:
    """The backdoor analysis of every held-out puzzle (:func:`~companion.sudoku_dfs.backdoors.find_backdoors`)."""
    if "infos" not in ctx.shared:
        ctx.shared["infos"] = find_backdoors(_held_out(ctx), device=_device(ctx))
    return ctx.shared["infos"]


def _needs(ctx: StageContext, key: str, stage: str):
    if key not in ctx.shared:
        raise RuntimeError(f"this stage needs the {key} of this call's {stage} stage (it is not saved): run the "
                           f"stages from {stage} on together")
    return ctx.shared[key]


def _device(ctx: StageContext) -> torch.device:
    """This process's device (``cuda:LOCAL_RANK`` under ``torchrun``)."""
    return ctx.shared.get("device", torch.device(ctx.device))


def _rank0(ctx: StageContext) -> bool:
    """Whether this process evaluates and writes (rank 0 under ``torchrun``; always on one device)."""
    return ctx.shared.get("rank", 0) == 0


def data_stage(ctx: StageContext) -> dict:
    """The puzzle stream started: ``workers`` CPU processes per rank (:class:`~companion.sudoku_dfs.data.
    TranscriptStream`, this rank's shard) making locally minimal 9x9 puzzles and ``transcripts_per_puzzle`` DFS
    transcripts each, kept as the paper keeps them; the pool (held-out puzzles removed) takes them while the
    model trains. Waits until ``start_transcripts`` are in and reports how long that took."""
    P = ctx.profile
    rank, world, dev = distributed(ctx.device)
    ctx.shared.update(rank=rank, world=world, device=dev)
    stream = TranscriptStream(ctx.seed, P["workers"], shard=rank, per_puzzle=P["transcripts_per_puzzle"],
                              max_len=MAX_LEN).start()
    pool = StreamPool(stream, exclude=_held_out(ctx), keep_puzzles=P["policy_puzzles"], pad_to=P.get("pad_to"))
    ctx.shared["stream"], ctx.shared["pool"] = stream, pool
    t0 = time.perf_counter()
    pool.fill(P["start_transcripts"])
    start_s = time.perf_counter() - t0
    ctx.log(f"[data] rank {rank}: {pool.n_transcripts} transcripts of {pool.n_puzzles} puzzles in {start_s:.1f} s")
    return {"workers_per_rank": P["workers"], "ranks": world, "start_seconds": round(start_s, 2),
            "start_transcripts": pool.n_transcripts, "start_puzzles": pool.n_puzzles,
            "filter": "contains a guess, ends with 0, <= 250 tokens (as the paper)"}


def training_stage(ctx: StageContext) -> dict:
    """GPT-2 of the profile's ``model`` trained for ``train_seconds`` (at most what the deadline leaves) on batches
    sampled from the growing pool of streamed transcripts (multi-target loss, AdamW, warm-up, constant, then the
    ``schedule``'s decay over the last ``decay_frac`` of the time, random Sudoku symmetries per sequence, bf16
    autocast and ``torch.compile`` as the profile's ``train`` says, DDP over the ranks). The stream stops after
    training. The teacher-forced accuracy per token type on transcripts of held-out puzzles is logged during
    training on rank 0 (the paper's Fig. 3 axis)."""
    P = ctx.profile
    pool, stream = _needs(ctx, "pool", "data"), _needs(ctx, "stream", "data")
    dev = ctx.shared["device"]
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    gcfg = GPTConfig(**P["model"])
    seconds = min(P["train_seconds"], max(ctx.left(), 1.0))
    tcfg = TrainConfig(seconds=seconds, seed=ctx.seed, **P["train"])
    model = build_model(gcfg, seed=ctx.seed)
    monitor_items = []
    for k, p in enumerate(_held_out(ctx)[-64:]):
        t = dfs_transcript(p, seed=k, check_unique=False, max_tokens=MAX_LEN)
        if t is not None and t.has_guess:
            monitor_items.append((*transcript_arrays(t), t.n_clues))
    monitor = stack_arrays(monitor_items, 9, MAX_LEN) if monitor_items and _rank0(ctx) else None
    curve = []

    t0 = time.perf_counter()

    def progress(step, loss):
        seconds = time.perf_counter() - t0
        ctx.log(f"[training] step {step} at {seconds:.0f} s loss {loss:.3f} pool {len(pool.items)}")
        if monitor is not None:
            acc = label_accuracy(model, monitor)
            model.train()
            curve.append({"step": step, "seconds": round(seconds, 1),
                          "sequences": step * tcfg.batch_size * ctx.shared["world"],
                          "loss": round(loss, 4), **{k: round(v, 4) for k, v in acc.items() if v == v}})

    # the stream's workers hold most cores: more intra-op threads here would only contend with them
    trainer_threads = max(1, (os.cpu_count() or 1) - P["workers"] - 1)
    try:
        with limit_threads(trainer_threads):
            hist = train_model(model, pool, tcfg, device=dev, progress=progress)
    finally:
        pool.fill()
        stream.close()
    ctx.shared["model"] = model
    ctx.shared["puzzles"] = pool.puzzles
    gen_s = hist["seconds"] + ctx.results.get("data", {}).get("start_seconds", 0.0)
    return {"model": {"config": gcfg.__dict__, "parameters": n_parameters(model)},
            "seconds": round(hist["seconds"], 1), "steps": hist["steps"], "batch_size": tcfg.batch_size,
            "ms_per_step": round(1e3 * hist["seconds"] / hist["steps"], 2),  # the first step's compile included
            "sample_ms_per_step": round(hist["sample_ms_per_step"], 2),  # of it, the host drawing the batch
            "ranks": ctx.shared["world"], "trainer_threads": trainer_threads, "padded_to": P.get("pad_to"),
            "sequences": hist["sequences"], "tokens": hist["tokens"], "lr": tcfg.lr,
            "bf16": tcfg.amp and dev.type == "cuda", "compiled": hist["compiled"],
            "compile_error": hist["compile_error"],
            "loss_curve": {"step": hist["step"], "loss": [round(x, 4) for x in hist["loss"]]},
            "final_loss": round(hist["loss"][-1], 4), "augmentation": "random Sudoku symmetry per sequence",
            "schedule": f"AdamW lr {tcfg.lr}, {tcfg.warmup} warm-up steps, constant, {tcfg.schedule} decay over the "
                        f"last {tcfg.decay_frac:.0%} of {seconds:.0f} s",
            "data": {"puzzles": pool.n_puzzles, "transcripts": pool.n_transcripts,
                     "puzzles_per_second": round(pool.n_puzzles / gen_s, 1),
                     "transcripts_per_second": round(pool.n_transcripts / gen_s, 1),
                     "sequences_per_transcript": round(hist["sequences"] / max(1, pool.n_transcripts), 2),
                     "note": "this rank's stream shard; batches sample the pool uniformly, each under a random symmetry"},
            "rule_accuracy_curve": curve}


def evaluation_stage(ctx: StageContext) -> dict:
    """Greedy decoding of the held-out puzzles (cap ``decode_cap`` tokens), plain and grammar-constrained: board
    accuracy, split by whether the puzzle needs a guess; guesses per puzzle (model vs the DFS teacher);
    teacher-forced accuracy per token type."""
    if not _rank0(ctx):
        return {"rank": ctx.shared["rank"], "note": "rank 0 runs this stage"}
    P, dev = ctx.profile, _device(ctx)
    model = _needs(ctx, "model", "training")
    held_out, infos = _held_out(ctx), _infos(ctx)
    needs_guess = np.array([i.needs_guess for i in infos])
    teacher = [dfs_transcript(p, seed=k) for k, p in enumerate(held_out)]
    sols, cap = [t.solution for t in teacher], P["decode_cap"]
    ev = evaluate_model(model, held_out, sols, max_total=cap, batch_size=500, device=dev)
    ev_p = evaluate_model(model, held_out, sols, max_total=cap, batch_size=500, device=dev, protocol=True)
    teach_guesses = np.array([t.n_guesses for t in teacher])
    kept = [t for t in teacher if t.has_guess and len(t) <= MAX_LEN]
    tf_acc = label_accuracy(model, stack_arrays([(*transcript_arrays(t), t.n_clues) for t in kept], 9, MAX_LEN)) if kept else {}
    acc = ev["correct"]
    ctx.log(f"[evaluation] board accuracy {acc.mean():.3f} on {len(held_out)} held-out puzzles")
    return {
        "held_out_puzzles": len(held_out),
        "source": f"{HELD_OUT} (never used for training)",
        "board_accuracy": round(float(acc.mean()), 4),
        "board_accuracy_needs_guess": round(float(acc[needs_guess].mean()), 4) if needs_guess.any() else None,
        "board_accuracy_rules_only": round(float(acc[~needs_guess].mean()), 4) if (~needs_guess).any() else None,
        "share_needing_a_guess": round(float(needs_guess.mean()), 4),
        "ended_with_0": round(ev["ended"], 4),
        "board_accuracy_protocol": round(float(ev_p["board_accuracy"]), 4),
        "board_accuracy_protocol_needs_guess": round(float(ev_p["correct"][needs_guess].mean()), 4) if needs_guess.any() else None,
        "protocol_note": "greedy among tokens the transcript grammar allows (bookkeeping only, no Sudoku rule checks)",
        "model_guesses_mean": round(float(ev["guesses"].mean()), 3),
        "model_guesses_median": float(np.median(ev["guesses"])),
        "model_guesses_mean_solved": round(float(ev["guesses"][acc].mean()), 3) if acc.any() else None,
        "teacher_guesses_mean": round(float(teach_guesses.mean()), 3),
        "teacher_guesses_median": float(np.median(teach_guesses)),
        "teacher_forced_accuracy": {k: round(v, 4) for k, v in tf_acc.items() if v == v},
        "decode_cap_tokens": cap,
    }


def propagation_stage(ctx: StageContext) -> dict:
    """Singles (naked + hidden) to a fixpoint on batches of ``propagation_boards`` boards (the held-out puzzles'
    candidate guesses, repeated): on the GPU timed by ``triton.testing.do_bench`` (median), against the same
    code in numpy on the CPU (one run, up to :data:`NUMPY_MAX_BOARDS` boards) and the sequential Python engine;
    backdoor enumeration time, batched and by the reference search."""
    if not _rank0(ctx):
        return {"rank": ctx.shared["rank"], "note": "rank 0 runs this stage"}
    dev = _device(ctx)
    held_out, infos = _held_out(ctx), _infos(ctx)
    trial = []
    for info in infos:
        for c, v in info.moves:
            b = np.array(info.fixpoint)
            b[c] = v
            trial.append(b)
    base = np.stack(trial) if trial else np.array([list(p) for p in held_out])
    rows = []
    for size in ctx.profile["propagation_boards"]:
        boards = base[np.arange(size) % len(base)]
        row = {"boards": size}
        if dev.type == "cuda":
            gb = torch.as_tensor(boards, device=dev, dtype=torch.int32)
            ms = time_ms(lambda: propagate(gb), dev, rep=200)
            row["gpu_ms"] = round(ms, 3)
            row["gpu_boards_per_s"] = round(size / ms * 1e3)
        if size <= NUMPY_MAX_BOARDS:
            ms = time_ms(lambda: propagate(boards), "cpu", cpu_warmup=0, cpu_reps=1)
            row["numpy_cpu_ms"] = round(ms, 2)
            row["numpy_cpu_boards_per_s"] = round(size / ms * 1e3)
        rows.append(row)
    k = min(300, len(base))
    t0 = time.perf_counter()
    for b in base[:k]:
        State.from_board(tuple(int(x) for x in b)).propagate()
    seq_rate = k / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    find_backdoors(held_out, device=dev)
    bd_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for p in held_out[:20]:
        backdoors_reference(p)
    ref_per_puzzle = (time.perf_counter() - t0) / min(20, len(held_out))
    ctx.log(f"[propagation] {rows}")
    return {"what": "singles (naked + hidden) to a fixpoint; boards = the held-out puzzles' candidate guesses",
            "timing": "companion.core.time_ms: triton.testing.do_bench median on the GPU; one wall-clock run for "
                      "numpy (CPU, one thread)",
            "rows": rows, "sequential_python_boards_per_s": round(seq_rate, 1),
            "backdoor_enumeration_seconds": round(bd_s, 3), "backdoor_puzzles": len(held_out),
            "backdoor_reference_seconds_per_puzzle": round(ref_per_puzzle, 4)}


def one_level_guessing_stage(ctx: StageContext) -> dict:
    """One-level guessing, L1 vs L2: the linear-softmax guess policy of :mod:`companion.sudoku_dfs.policy` fitted
    with both losses on the backdoors of up to ``policy_puzzles`` generated puzzles, evaluated on the held-out
    stuck puzzles against the two oracles (expected guesses = 1 / success probability)."""
    if not _rank0(ctx):
        return {"rank": ctx.shared["rank"], "note": "rank 0 runs this stage"}
    puzzles = _needs(ctx, "puzzles", "training")
    test_infos = _infos(ctx)
    train_infos = find_backdoors([p for p, _ in puzzles[:ctx.profile["policy_puzzles"]]], device=_device(ctx))
    dtrain, dtest = pol.policy_data(train_infos), pol.policy_data(test_infos)

    def expected(p) -> dict:
        e = 1.0 / p
        return {"mean_expected_guesses": round(float(e.mean()), 3), "median_expected_guesses": round(float(np.median(e)), 3)}

    out = {kind: expected(pol.success_probability(pol.fit_policy(dtrain, kind), dtest)) for kind in ("l1", "l2")}
    for which in ("upper", "lower"):
        out[f"{which}_oracle"] = expected(pol.oracle_probability(dtest, which, pol.n_empty_of(test_infos)))
    solvable = np.mean([(not i.needs_guess) or i.n_backdoors > 0 for i in test_infos])
    out.update(train_puzzles=len(dtrain), test_puzzles=len(dtest), share_rules_plus_one_guess=round(float(solvable), 4))
    ctx.log(f"[one_level_guessing] {out}")
    return out


def checkpoint_stage(ctx: StageContext) -> dict:
    """The trained model as bf16 safetensors at the profile's ``checkpoint`` path (relative to the repository
    root; the notebook's ``CHECKPOINT`` takes it), with what trained it and its held-out board accuracy (when
    the evaluation stage is done) in the metadata; its file name, size and the metadata."""
    if not _rank0(ctx):
        return {"rank": ctx.shared["rank"], "note": "rank 0 runs this stage"}
    model = _needs(ctx, "model", "training")
    dev = _device(ctx)
    training, evaluation = ctx.results.get("training", {}), ctx.results.get("evaluation", {})
    meta = {"trained_by": "python -m companion.bench sudoku_dfs (companion.sudoku_dfs.study)",
            "steps": training.get("steps"), "batch_size": training.get("batch_size"),
            "train_seconds": training.get("seconds"), "board_accuracy_held_out": evaluation.get("board_accuracy"),
            "held_out": f"{HELD_OUT} (never used for training)",
            "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
            "first_held_out_puzzle": format_board(_held_out(ctx)[0])}
    path = save_checkpoint(model, Path(repo_path(), ctx.profile["checkpoint"]), meta)
    ctx.log(f"[checkpoint] {path} ({path.stat().st_size / 1e6:.1f} MB)")
    return {"file": ctx.profile["checkpoint"], "bytes": path.stat().st_size, "dtype": "bfloat16", "meta": meta}

"""The streamed 9x9 data of the GPU study and distributed training (CPU: spawn workers, gloo)."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as tmp

from companion.core import ParameterError
from companion.sudoku_dfs.board import PAD, final_board
from companion.sudoku_dfs.data import BUCKET, StreamPool, TranscriptBatch, TranscriptStream, stream_example
from companion.sudoku_dfs.model import GPTConfig, build_model
from companion.sudoku_dfs.solver import State, Status
from companion.sudoku_dfs.training import SCHEDULES, TrainConfig, lr_factor, train_model

TINY = GPTConfig(n_layer=1, n_head=2, n_embd=16, n_positions=256)


def _take(seed, k, shard=0):
    with TranscriptStream(seed, 2, shard=shard, per_puzzle=2, queue_size=4) as stream:
        it = iter(stream)
        return [next(it) for _ in range(k)]


def test_stream_is_reproducible_distinct_and_replays_to_solved_boards():
    first = _take(3, 6)
    assert [(i, p) for i, p, _, _ in first] == [(i, p) for i, p, _, _ in _take(3, 6)]
    assert [i for i, *_ in first] == [0, 0, 1, 1, 2, 2]  # round-robin over the two workers
    assert len({p for _, p, _, _ in first}) == 6
    assert not {p for _, p, _, _ in first} & {p for _, p, _, _ in _take(3, 2, shard=1)}  # shards differ
    n_items = 0
    for _, puzzle, solution, items in first:
        for tokens, labels, n_clues in items:
            board = final_board(tokens.tolist(), 9)
            assert board == tuple(solution)
            assert State.from_board(board).analyze()[0] == Status.SOLVED  # the package's own checker
            assert tokens[-1] == 0 and len(tokens) <= 250 and labels.shape[0] == len(tokens)
            assert n_clues == sum(v > 0 for v in puzzle)
            n_items += 1
    assert n_items > 0


def test_stream_example_is_deterministic_in_seed_worker_index():
    a = stream_example(0, 1, 2, 1, 250)
    assert a[0] == stream_example(0, 1, 2, 1, 250)[0]
    assert a[0] != stream_example(0, 2, 2, 1, 250)[0] != stream_example(1, 1, 2, 1, 250)[0]


def test_pool_samples_without_held_out_puzzles():
    with TranscriptStream(5, 1, per_puzzle=2, queue_size=2) as stream:
        held = next(iter(stream))[1]
        pool = StreamPool(stream, exclude=[held], keep_puzzles=1)
        pool.fill(3)
        batch = pool.sample(5, torch.Generator().manual_seed(0))
        pool.pad_to = 256
        fixed = pool.sample(5, torch.Generator().manual_seed(0))
        with pytest.raises(ParameterError, match="pad_to"):
            StreamPool(stream, pad_to=stream.max_len - 1)  # a transcript may be max_len tokens long
    assert held not in [p for p, _ in pool.puzzles] and len(pool.puzzles) == 1
    assert isinstance(batch, TranscriptBatch) and len(batch) == 5 and batch.tokens.shape[1] % BUCKET == 0
    assert fixed.tokens.shape[1] == fixed.labels.shape[1] == 256
    beyond = torch.arange(256)[None] >= fixed.lengths[:, None]
    assert bool((fixed.tokens[beyond] == PAD).all()) and not bool((fixed.tokens[~beyond] == PAD).any())
    assert pool.n_transcripts >= 3 and len(pool.items) == pool.n_transcripts


def test_stream_refuses_bad_sizes():
    with pytest.raises(ParameterError, match="workers"):
        TranscriptStream(0, 0)
    with pytest.raises(RuntimeError, match="not started"):
        next(iter(TranscriptStream(0, 1)))


def test_schedule_warms_up_holds_and_decays():
    cfg = TrainConfig(steps=100, warmup=10, schedule="cosine", decay_frac=0.5)
    assert lr_factor(cfg, 0, 0.0) == pytest.approx(0.1)
    assert lr_factor(cfg, 20, 0.3) == 1.0
    assert lr_factor(cfg, 75, 0.75) == pytest.approx(0.5)  # cosine midpoint of the decay
    assert lr_factor(cfg, 99, 1.0) == 0.0
    assert lr_factor(TrainConfig(warmup=1, schedule="linear", decay_frac=0.5), 75, 0.75) == pytest.approx(0.5)
    assert lr_factor(TrainConfig(warmup=1, decay_frac=0.5, schedule="cosine"), 70, 0.9) < 0.2  # cosine below linear
    with pytest.raises(ParameterError, match="schedule"):
        train_model(build_model(TINY), None, TrainConfig(schedule="step"))
    assert SCHEDULES == ("linear", "cosine")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ddp_rank(rank, world, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    from companion.sudoku_dfs.training import distributed

    r, w, dev = distributed("cpu")
    try:
        model = build_model(TINY, seed=0)
        with TranscriptStream(0, 1, shard=r, per_puzzle=1, queue_size=2) as stream:
            pool = StreamPool(stream)
            pool.fill(2)
            hist = train_model(model, pool, TrainConfig(steps=3, batch_size=2, lr=1e-2, warmup=1, log_every=1), device=dev)
        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        gathered = [torch.zeros_like(flat) for _ in range(w)]
        dist.all_gather(gathered, flat)
        if r == 0:
            start = torch.cat([p.detach().flatten() for p in build_model(TINY, seed=0).parameters()])
            out.put((hist["steps"], float((gathered[0] - gathered[1]).abs().max()), float((flat - start).abs().max())))
    finally:
        dist.destroy_process_group()


def test_ddp_two_ranks_gloo_keep_parameters_equal():
    ctx = tmp.get_context("spawn")
    out = ctx.Queue()
    tmp.start_processes(_ddp_rank, args=(2, _free_port(), out), nprocs=2, join=True, start_method="spawn")
    steps, gap, moved = out.get(timeout=10)
    assert steps == 3
    assert gap == 0.0  # every rank holds the same parameters after training
    assert moved > 0.0  # and training changed them

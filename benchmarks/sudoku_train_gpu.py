"""Paper 06 on one GPU: train a 9x9 GPT-2 on DFS transcripts, evaluate it, measure batched propagation.

Run from the repository root (about 5 minutes on one H200, under 6; nothing is downloaded)::

    python benchmarks/sudoku_train_gpu.py                  # checkpoint in build/sudoku/
    python benchmarks/sudoku_train_gpu.py --smoke --out-dir /tmp/sudoku_smoke   # tiny CPU version

The stages (data on all CPU cores, training, held-out evaluation, propagation throughput with
``triton.testing.do_bench``, L1 vs L2 one-level guessing) live in
:func:`companion.sudoku_dfs.scale.run_scale_up`, which the notebook's GPU profile calls too.

Outputs: ``<out-dir>/sudoku_9x9_gpt2.safetensors`` (bf16 safetensors, about 14 MB) and
``benchmarks/results/sudoku_train_gpu.json`` via ``companion.core.save_results``. The checkpoint is
not committed; to use it in the notebook on a CPU, pass its path:
``papermill notebooks/06_sudoku_dfs.ipynb out.ipynb -p CHECKPOINT /abs/path/sudoku_9x9_gpt2.safetensors``.
``--smoke`` writes ``sudoku_train_gpu_smoke.json`` into ``--out-dir`` instead, so a smoke run never
replaces a real run's results.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from companion.core import save_results  # noqa: E402
from companion.sudoku_dfs.checkpoints import save_checkpoint  # noqa: E402
from companion.sudoku_dfs.scale import run_scale_up  # noqa: E402


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description="Paper 06: 9x9 GPT-2 on DFS transcripts, on one GPU.")
    ap.add_argument("--out-dir", default="build/sudoku",
                    help="folder for the checkpoint (and the smoke JSON); default build/sudoku")
    ap.add_argument("--smoke", action="store_true", help="a tiny CPU run that checks the script end to end")
    ap.add_argument("--gen-seconds", type=float, default=None, help="puzzle/transcript generation budget (default: scale.GPU_PROFILE)")
    ap.add_argument("--train-seconds", type=float, default=None, help="training budget (default: scale.GPU_PROFILE)")
    ap.add_argument("--eval-puzzles", type=int, default=None, help="held-out puzzles to decode (default: scale.GPU_PROFILE)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if not args.smoke and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --smoke for the CPU check")
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    payload, model = run_scale_up(
        smoke=args.smoke,
        gen_seconds=args.gen_seconds,
        train_seconds=args.train_seconds,
        eval_puzzles=args.eval_puzzles,
        seed=args.seed,
        log=lambda msg: print(msg, flush=True),
    )
    payload["command"] = "python benchmarks/sudoku_train_gpu.py " + " ".join(sys.argv[1:] if argv is None else argv)
    ckpt = save_checkpoint(model, out_dir / "sudoku_9x9_gpt2.safetensors", payload["checkpoint_meta"])
    payload["checkpoint"] = {"file": ckpt.name, "bytes": ckpt.stat().st_size, "dtype": "bfloat16"}
    name = "sudoku_train_gpu_smoke" if args.smoke else "sudoku_train_gpu"
    path = save_results(name, payload, out_dir=out_dir if args.smoke else None)
    print(f"[done] {payload['total_seconds']} s; results {path}; checkpoint {ckpt} ({ckpt.stat().st_size / 1e6:.1f} MB)", flush=True)
    return payload


if __name__ == "__main__":
    main()

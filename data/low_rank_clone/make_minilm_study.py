"""Run paper 11's MiniLM studies and save them here (the notebook's cached encoder runs), one per student
width d_S and clone weight α, in ``minilm_grid/``.

    python data/low_rank_clone/make_minilm_study.py --device cuda --widths 96 192 288 --alphas 0.2 1.0
    .venv/bin/python data/low_rank_clone/make_minilm_study.py --widths 192 --alphas 0.2 --steps 30   # CPU

Teacher: the pretrained all-MiniLM-L6-v2 (bundled, offline; ``--model`` takes a local copy, e.g. one saved
in float16 to travel to a GPU machine, which is loaded back in float32). Students of each study: LRC, LRC
without the FFN clone, LRC without the attention clone, and the TinyBERT-style baseline, from the same
seed and batches (:func:`companion.low_rank_clone.experiments.run_encoder_study`). On two busy CPU cores
one LRC step of the full 6-layer model takes seconds (the projected weights W_T P are recomputed every
step), too slow for the notebook's 60-second budget; the notebook therefore loads these runs, says so,
and reruns one study itself when ``MINILM_LIVE = True``. Each study is ``d<W>_a<α>.json`` (settings,
curves, scores, clone terms, singular values) and ``.npz`` (float16 sentence embeddings of the held-out
sentences at every snapshot).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

import torch  # noqa: E402

from companion.low_rank_clone.experiments import docstring_data, run_encoder_study  # noqa: E402
from companion.low_rank_clone.study_io import grid_stem, save_study  # noqa: E402
from companion.models import load_minilm, load_model  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--widths", type=int, nargs="+", default=[192])
    ap.add_argument("--alphas", type=float, nargs="+", default=[0.2])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--snapshots", type=int, default=2)
    ap.add_argument("--n-eval", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default=None, help="local folder of an all-MiniLM-L6-v2 copy (default: the bundled one)")
    ap.add_argument("--out-dir", default=str(HERE / "minilm_grid"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    tok, teacher = load_model(args.model, causal=False) if args.model else load_minilm()
    device = torch.device(args.device)
    teacher = teacher.float().to(device)
    data = docstring_data(tok, n_eval=args.n_eval, seq_len=args.seq_len, seed=args.seed)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    command = "python data/low_rank_clone/make_minilm_study.py " + " ".join(argv if argv is not None else sys.argv[1:])
    for width in args.widths:
        for alpha in args.alphas:
            t0 = time.time()
            study = run_encoder_study(teacher, data, d_student=width, steps=args.steps, batch=args.batch, lr=args.lr,
                                      alpha=alpha, snapshots=args.snapshots, seed=args.seed)
            study["settings"] = {**{k: v for k, v in vars(args).items() if k not in ("widths", "alphas", "out_dir")},
                                 "d_student": width, "alpha": alpha, "device": device_name,
                                 "seconds": round(time.time() - t0, 1), "command": command}
            save_study(study, grid_stem(args.out_dir, width, alpha))
            for name, run in study["runs"].items():
                print(f"d_S {width}, alpha {alpha}: {name} {run['final']} {run['seconds']:.0f} s", flush=True)


if __name__ == "__main__":
    main()

"""Run paper 11's MiniLM study on the CPU and save it here (the notebook's cached encoder runs).

    .venv/bin/python data/low_rank_clone/make_minilm_study.py [--steps 40 --batch 16 --d-student 192]

Teacher: the pretrained all-MiniLM-L6-v2 (bundled, offline). Students: LRC, LRC without the FFN clone,
LRC without the attention clone, and the TinyBERT-style baseline, from the same seed and batches
(:func:`companion.low_rank_clone.experiments.run_encoder_study`). On two busy CPU cores one LRC step
of the full 6-layer model takes seconds (the projected weights W_T P are recomputed every step), too slow
for the notebook's 60-second budget; the notebook therefore loads these runs, says so, and reruns the
study itself when ``MINILM_LIVE = True`` or on a GPU. Writes ``minilm_study.json`` (settings, curves,
scores, clone terms, singular values) and ``minilm_study.npz`` (float16 sentence embeddings of the
held-out sentences at every snapshot).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

import torch  # noqa: E402

from companion.low_rank_clone.study_io import save_study  # noqa: E402
from companion.low_rank_clone.experiments import docstring_data, run_encoder_study  # noqa: E402
from companion.models import load_minilm  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--d-student", type=int, default=192)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--alpha", type=float, default=0.2)
    ap.add_argument("--snapshots", type=int, default=2)
    ap.add_argument("--n-eval", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(HERE / "minilm_study"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    tok, teacher = load_minilm()
    data = docstring_data(tok, n_eval=args.n_eval, seq_len=args.seq_len, seed=args.seed)
    t0 = time.time()
    study = run_encoder_study(teacher, data, d_student=args.d_student, steps=args.steps, batch=args.batch, lr=args.lr,
                              alpha=args.alpha, snapshots=args.snapshots, seed=args.seed)
    study["settings"] = {**vars(args), "seconds": round(time.time() - t0, 1),
                         "command": "python data/low_rank_clone/make_minilm_study.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    save_study(study, args.out)
    for name, run in study["runs"].items():
        print(name, run["final"], f"{run['seconds']:.0f} s")


if __name__ == "__main__":
    main()

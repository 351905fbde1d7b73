"""Paper 12 (LoRASuite) on one GPU: an ≈100M → ≈200M word-level Llama upgrade (wider, deeper, more heads, GQA
target) trained from scratch on local text, LoRA adapters on two tasks, LoRASuite's transfer, LFT swept over
sample counts and learning rates beside LoRA(n) from scratch, wall time and peak memory against LoRA(full)
retraining, and the SVD step at d = 2048 / 4096 (see companion/lorasuite/scale.py for what is measured).

    PYTHONPATH=. python benchmarks/lorasuite_gpu.py --deadline 140   # H200: <= 150 s; writes benchmarks/results/lorasuite_gpu.json
    PYTHONPATH=. python benchmarks/lorasuite_gpu.py --smoke   # CPU: tiny models, a minute; writes to a temp folder

The two models use word-level vocabularies built from standard-library text (companion/lorasuite/vocab.py):
~7,400 shared tokens, so W_h = E_old[shared]⁺ E_new[shared] is full rank at d_old = 768 (the char-level
pair of the first H200 run shared 91 tokens and stopped there). The shared-token count is checked before
any training. Training stages stop at their time limits (recorded); the JSON is always written.

Needs torch, transformers, peft, scipy (triton for the CUDA timer); not plotly.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny CPU run; results go to a temp folder")
    parser.add_argument("--out-dir", default=None, help="folder for lorasuite_gpu.json (default benchmarks/results)")
    parser.add_argument("--deadline", "--budget", dest="budget", type=float, default=None,
                        help="seconds after which later stages are skipped and training stages stop (default 140)")
    args = parser.parse_args(argv)

    import torch

    if not args.smoke and not torch.cuda.is_available():
        print("no CUDA device: run with --smoke on a CPU", file=sys.stderr)
        return 2
    from companion.core import save_results
    from companion.lorasuite.scale import RESULTS_NAME, run_scale_up

    out_dir = args.out_dir or (tempfile.mkdtemp(prefix="lorasuite_") if args.smoke else None)
    command = " ".join(["PYTHONPATH=. python benchmarks/lorasuite_gpu.py", *(sys.argv[1:] if argv is None else argv)])

    def save(payload):
        return save_results(RESULTS_NAME, {"command": command, **payload}, out_dir=out_dir)

    t0 = time.perf_counter()
    try:
        payload = run_scale_up(smoke=args.smoke, budget_s=args.budget, log=lambda *a: print(*a, flush=True), save=save)
    except Exception as err:  # noqa: BLE001 - a JSON is always written
        payload = {"smoke": args.smoke, "errors": [f"{type(err).__name__}: {err}"]}
        print(f"failed: {payload['errors'][0]}", file=sys.stderr)
    path = save(payload)
    print(f"wrote {path} after {time.perf_counter() - t0:.0f} s")
    if payload.get("errors"):
        print("errors: " + "; ".join(payload["errors"]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

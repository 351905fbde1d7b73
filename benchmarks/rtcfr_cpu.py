"""Paper 18 (RTCFR+) on the CPU: iterations per second against OpenSpiel's C++ CFR+ in the same run.

Run from the repository root (needs open_spiel; about a minute on two cores):

    .venv/bin/python benchmarks/rtcfr_cpu.py            # writes benchmarks/results/rtcfr_cpu.json
    .venv/bin/python benchmarks/rtcfr_cpu.py --smoke    # a few iterations, results to a temp folder

For Leduc and Liar's Dice(5): our numpy CFR+ (with its linear average accumulated, as OpenSpiel
does) and RTCFR+ (last iterate; the average is not needed) against ``pyspiel.CFRPlusSolver``
(C++, alternating updates, linear averaging). Time per iteration is the median over blocks of
iterations, both as wall time and as process CPU time (the latter is steadier on a shared
machine). NashConv after the same number of iterations is recorded too, so speed is not bought
with accuracy: our CFR+ average and OpenSpiel's should agree closely.
Target (issue 6): at least 20x OpenSpiel's C++ CFR+ iterations per second on Leduc.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from companion.core import save_results  # noqa: E402
from companion.rtcfr.games import GAMES, compile_game, openspiel_game  # noqa: E402
from companion.rtcfr.solvers import TUNED, Solver  # noqa: E402


def timed_blocks(step, blocks: int, per_block: int):
    """Median (wall, cpu) seconds per call of ``step`` over ``blocks`` blocks of ``per_block`` calls."""
    wall, cpu = [], []
    for _ in range(blocks):
        w, c = time.perf_counter(), time.process_time()
        for _ in range(per_block):
            step()
        wall.append((time.perf_counter() - w) / per_block)
        cpu.append((time.process_time() - c) / per_block)
    return float(np.median(wall)), float(np.median(cpu))


def bench_game(name: str, os_iters: int, blocks: int):
    import pyspiel

    game = compile_game(name)
    os_game = openspiel_game(name)
    row = {"game": name, "openspiel_string": GAMES[name], "n_infosets": game.n_infosets}
    # OpenSpiel C++ CFR+
    cpp = pyspiel.CFRPlusSolver(os_game)
    cpp.evaluate_and_update_policy()
    per = max(1, os_iters // blocks)
    wall, cpu = timed_blocks(cpp.evaluate_and_update_policy, blocks, per)
    done = 1 + blocks * per
    row["openspiel_cpp_cfr_plus"] = {"ms_per_iter_wall": 1e3 * wall, "ms_per_iter_cpu": 1e3 * cpu,
                                     "iterations": done, "nash_conv_average": pyspiel.nash_conv(os_game, cpp.average_policy())}
    # ours
    mu, T_u = TUNED.get(name, (1e-3, 100))
    for label, alg, kw in (("ours_cfr_plus", "cfr+", {}), ("ours_rtcfr_plus", "rtcfr+", {"mu": mu, "T_u": T_u,
                                                                                         "track_average": False})):
        solver = Solver(game, alg, **kw)
        for _ in range(done):  # same number of iterations as OpenSpiel, for the NashConv comparison
            solver.step()
        nc = {"nash_conv_last": solver.nash_conv("last")}
        if alg == "cfr+":
            nc["nash_conv_average"] = solver.nash_conv("average")
        per_ours = max(50, 20 * per)
        wall, cpu = timed_blocks(solver.step, blocks, per_ours)
        row[label] = {"ms_per_iter_wall": 1e3 * wall, "ms_per_iter_cpu": 1e3 * cpu, "iterations": done, **nc,
                      **({"mu": mu, "T_u": T_u} if alg == "rtcfr+" else {})}
    os_row = row["openspiel_cpp_cfr_plus"]
    for label in ("ours_cfr_plus", "ours_rtcfr_plus"):
        row[label]["speedup_wall"] = os_row["ms_per_iter_wall"] / row[label]["ms_per_iter_wall"]
        row[label]["speedup_cpu"] = os_row["ms_per_iter_cpu"] / row[label]["ms_per_iter_cpu"]
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    start = time.perf_counter()
    plan = [("leduc_poker", 10, 2), ("liars_dice_5", 4, 2)] if args.smoke else [("leduc_poker", 200, 5), ("liars_dice_5", 60, 5)]
    rows = []
    for name, os_iters, blocks in plan:
        row = bench_game(name, os_iters, blocks)
        rows.append(row)
        o, c, r = row["openspiel_cpp_cfr_plus"], row["ours_cfr_plus"], row["ours_rtcfr_plus"]
        print(f"{name}: OpenSpiel C++ CFR+ {o['ms_per_iter_wall']:.2f} ms/it (NashConv avg {o['nash_conv_average']:.2e}); "
              f"ours CFR+ {c['ms_per_iter_wall']:.3f} ms/it ({c['speedup_wall']:.0f}x wall, {c['speedup_cpu']:.0f}x cpu; "
              f"NashConv avg {c['nash_conv_average']:.2e}); RTCFR+ {r['ms_per_iter_wall']:.3f} ms/it "
              f"({r['speedup_wall']:.0f}x wall, {r['speedup_cpu']:.0f}x cpu)", flush=True)
    leduc = rows[0]
    payload = {
        "smoke": args.smoke,
        "games": rows,
        "target": "ours >= 20x OpenSpiel C++ CFR+ iterations/s on Leduc",
        "leduc_speedup_rtcfr_plus_wall": leduc["ours_rtcfr_plus"]["speedup_wall"],
        "leduc_speedup_cfr_plus_wall": leduc["ours_cfr_plus"]["speedup_wall"],
        "leduc_speedup_rtcfr_plus_cpu": leduc["ours_rtcfr_plus"]["speedup_cpu"],
        "leduc_speedup_cfr_plus_cpu": leduc["ours_cfr_plus"]["speedup_cpu"],
        "wall_s": time.perf_counter() - start,
    }
    payload["target_met"] = min(payload["leduc_speedup_cfr_plus_wall"], payload["leduc_speedup_rtcfr_plus_wall"]) >= 20
    if args.smoke:
        import tempfile

        path = save_results("rtcfr_cpu_smoke", payload, out_dir=tempfile.mkdtemp(prefix="rtcfr_smoke_"))
    else:
        path = save_results("rtcfr_cpu", payload)
    print(f"wrote {path} ({payload['wall_s']:.0f} s); target met: {payload['target_met']}")


if __name__ == "__main__":
    main()

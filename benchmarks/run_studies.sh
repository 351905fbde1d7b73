#!/usr/bin/env bash
# Run studies one after another, each under its own wall-clock limit, so that one slow or failing study never
# costs the others their turn: `python -m companion.bench NAME` for each. Results land in benchmarks/results/
# (written after every stage, so a study cut off by its limit leaves its unfinished stage marked); logs in
# build/bench-logs/. `make bench-gpu` and `make bench` pass the registry's list (companion/bench.py).
#
#   benchmarks/run_studies.sh hollowflow:420 block_sparse_attention ...   (NAME[:SECONDS], default 300)
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
mkdir -p build/bench-logs
status=0
for spec in "$@"; do
  name=${spec%%:*}
  limit=${spec#*:}
  [ "$limit" = "$spec" ] && limit=300
  echo "==> $name (limit ${limit} s)"
  start=$(date +%s)
  timeout --signal=TERM --kill-after=10 "$limit" "$PY" -m companion.bench "$name" > "build/bench-logs/$name.log" 2>&1
  rc=$?
  echo "    exit $rc after $(( $(date +%s) - start )) s"
  tail -n 4 "build/bench-logs/$name.log" | sed 's/^/    /'
  [ $rc -ne 0 ] && status=1
done
exit $status

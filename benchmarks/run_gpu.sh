#!/usr/bin/env bash
# Run GPU benchmark scripts on one CUDA machine, each under its own wall-clock limit, so that one slow
# or failing script never costs the others their turn. Results land in benchmarks/results/ (each
# script calls companion.core.save_results); logs in build/gpu-logs/.
#
#   benchmarks/run_gpu.sh block_sparse_attention:120 rtcfr_gpu:180 ...   (NAME[:SECONDS], default 300)
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
mkdir -p build/gpu-logs
status=0
for spec in "$@"; do
  name=${spec%%:*}
  limit=${spec#*:}
  [ "$limit" = "$spec" ] && limit=300
  echo "==> $name (limit ${limit} s)"
  start=$(date +%s)
  timeout --signal=TERM --kill-after=10 "$limit" "$PY" "benchmarks/$name.py" > "build/gpu-logs/$name.log" 2>&1
  rc=$?
  echo "    exit $rc after $(( $(date +%s) - start )) s"
  tail -n 4 "build/gpu-logs/$name.log" | sed 's/^/    /'
  [ $rc -ne 0 ] && status=1
done
exit $status

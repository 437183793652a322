#!/usr/bin/env bash
# A local multi-process Dask cluster, then a pipeline run against it.
#   bash cluster/local_dask.sh pipelines/quickstart.toml
set -euo pipefail
PIPELINE=${1:-pipelines/quickstart.toml}
PORT=${PORT:-8786}
LOGS=${TMPDIR:-/tmp}
WORKERS=""
dask scheduler --port "$PORT" --dashboard-address :0 > "$LOGS/dask-scheduler.log" 2>&1 &
SCHEDULER=$!
trap 'kill $WORKERS $SCHEDULER 2>/dev/null || true' EXIT
sleep 3
dask worker "tcp://127.0.0.1:$PORT" --nworkers 2 --nthreads 1 --dashboard-address :0 \
    > "$LOGS/dask-workers.log" 2>&1 &
WORKERS=$!
sleep 5
elmscale run "$PIPELINE" --scheduler "tcp://127.0.0.1:$PORT"

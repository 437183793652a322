#!/usr/bin/env bash
# A local Ray head; one run connected with --ray-address, one submitted as a Ray job.
#   bash cluster/local_ray.sh pipelines/satimage_ovo.toml
set -euo pipefail
PIPELINE=${1:-pipelines/satimage_ovo.toml}
# Ray >= 2.59 authenticates every client of a `ray start` cluster: one token for the head,
# elmscale and `ray job submit` alike
export RAY_AUTH_MODE=token
export RAY_AUTH_TOKEN=${RAY_AUTH_TOKEN:-$(python3 -c "import secrets; print(secrets.token_hex(16))")}
ray start --head --num-cpus 2 --dashboard-host 127.0.0.1
trap 'ray stop' EXIT
elmscale run "$PIPELINE" --ray-address auto
# the job's driver runs on this machine: start it in this folder, so that the pipeline's
# relative paths (../shared/data, data/generated) mean what they mean here
ray job submit --address http://127.0.0.1:8265 -- bash -c "cd '$PWD' && elmscale run '$PIPELINE'"

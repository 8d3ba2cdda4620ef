#!/usr/bin/env bash
# Every method at T = 0 and T = 1 on tiny models on CUDA, plus AR with the dynamic vs the offloaded KV cache
# (scripts/gpu_smoke.py). Exit status: 0 all passed, 1 a job failed, 2 no CUDA GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
[ -x "$PY" ] || PY=python
HF_HUB_OFFLINE=1 WANDB_MODE=disabled exec "$PY" scripts/gpu_smoke.py "$@"

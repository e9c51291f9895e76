#!/usr/bin/env bash
# One call on the GPU machine: install what is missing, run the GPU tests, then the benchmarks.
#   bash benchmarks/run_device.sh [tests|bench|all] [extra args for bench_ops.py]
# Logs and results go to $OUT (the device tool brings them back) and benchmarks/results/h200/.
set -uo pipefail
what=${1:-all}; shift || true
OUT=${OUT:-/tmp/kforge-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KFORGE_CACHE_DIR=/tmp/kforge-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "editable install failed"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, cuda.bindings; print('torch', torch.__version__, 'cuda-bindings', cuda.bindings.__version__)"
} 2>&1 | tee "$OUT/env.txt"
if [ "$what" = tests ] || [ "$what" = all ]; then
  python3 -m pytest -q -m gpu tests -p no:cacheprovider -x --timeout=900 2>&1 | tee "$OUT/gpu_tests.log" | tail -40
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  python3 benchmarks/bench_ops.py "$@" 2>&1 | tee "$OUT/bench.log" | tail -60
  cp benchmarks/results/h200/*.json benchmarks/results/h200/*.md "$OUT"/ 2>/dev/null
fi

#!/usr/bin/env bash
# The ops rows that move >= 64 MiB (issue 4's 80% target), in one run, timed by events and by kernel time (Note
# [kernel time beside event time] in forge_backend/measure.py); first what a launch costs (benchmarks/launch_cost.py)
# and the timer's GPU test. Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/ops_64mib.sh   -> $OUT/launch_cost.json/.log, $OUT/ops/ops.json/.md/.log
# (in the twenty-ninth session the second part's files did not come back: too many files under $OUT; its printout
# matched, and exp2_fold.sh ran that part again, packed: ops run AB)
set -uo pipefail
OUT=${OUT:-/tmp/kforge-out}; mkdir -p "$OUT"
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 120 python3 benchmarks/launch_cost.py --out "$OUT" > "$OUT/launch_cost.log" 2>&1; tail -5 "$OUT/launch_cost.log"
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_measure_kernel_time.py > "$OUT/gpu_tests_kernel_time.log" 2>&1
tail -2 "$OUT/gpu_tests_kernel_time.log"
# the rows under 80% by events in ops.md first (their own run), then the rest
OUT=$OUT/ops T=${T_LOW:-200} bash benchmarks/run_device.sh ops --quick-iterations 25 \
  --rows 'softmax [64, 262144] bfloat16' --rows 'group_norm [2, 1536, 64, 64] float32' \
  --rows 'group_norm [1, 512, 128, 128] float32' --rows causal_conv1d
OUT=$OUT/ops_rest T=${T_REST:-330} bash benchmarks/run_device.sh ops --quick-iterations 25 \
  --rows 'softmax [64, 262144] float32' --rows 'softmax [1, 8, 2048, 2048]' \
  --rows 'softmax [8192, 1024] float32' --rows 'softmax [64, 248320] float32' \
  --rows 'adaptive_avg_pool2d [256, 2048, 7, 7] float32' --rows 'group_norm [1, 512, 256, 256]' \
  --rows 'group_norm [1, 256, 512, 512]' --rows 'group_norm [1, 128, 1024, 1024]' --rows 'layer_norm [16384, 4096]' \
  --rows 'rms_norm [16384, 4096]' --rows 'silu_mul [16384, 4096]' --rows 'softmax [1, 16, 4096, 4096]'

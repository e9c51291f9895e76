#!/usr/bin/env bash
# The fifty-first session's conv strategy ``lines`` (Note [whole lines, 8 x 8 blocks turned in registers] in
# templates/conv_lines.py) was made the root of Qwen's conv from benchmarks/probe_transpose.py's kernel (19.8-20.1 us
# against the bands' 21.8 in the same runs) after the device was no longer lent: the template's own kernel has not
# run on a GPU. The next device call runs, in this order: its GPU verifier cases (every conv case, ~1 min), the ops
# row (a 25-iteration search from the new root beside eager, Inductor and a copy of the bytes), the probe again (the
# conv layouts beside the kforge root, now ``lines``), and the claims and team GPU tests (the markers became exclusive
# in the same session). The fifty-second session (no device) added four outputs a work item (``vo`` 4: 10 lines
# where 8 outputs hold 18, 80 registers, three blocks an SM, every thread of a 256-thread block with a work item), so
# the call also times the template's own variants, ``vo`` 8 beside ``vo`` 4, in one run (probe_variants.py).
# Run on the device (one call, about 8 minutes after the setup):
#   bash benchmarks/plans/conv_lines_first.sh   -> $OUT/t1, $OUT/ops, $OUT/lines, $OUT/probe_transpose.*, $OUT/t2
set -u
OUT=${OUT:-/tmp/kforge-out}
(OUT=$OUT/t1 T=200 bash benchmarks/run_device.sh tests tests/test_templates_gpu.py -k conv | tail -5)
(OUT=$OUT/ops T=240 bash benchmarks/run_device.sh ops --quick-iterations 25 --rows causal_conv1d | tail -5)
(export PYTHONPATH=/tmp/site:$PWD; timeout 150 python3 benchmarks/probe_variants.py --out "$OUT/lines" \
  --only "=causal_conv1d [1,8192,2048] bf16" --strategy lines > "$OUT/lines.log" 2>&1; tail -32 "$OUT/lines.log")
(export PYTHONPATH=/tmp/site:$PWD; timeout 200 python3 benchmarks/probe_transpose.py --out "$OUT" --rounds 3 \
  --conv-only > "$OUT/probe_transpose.log" 2>&1; tail -12 "$OUT/probe_transpose.log")
(OUT=$OUT/t2 T=200 bash benchmarks/run_device.sh tests tests/test_claims_gpu.py tests/test_team_store_gpu.py | tail -4)

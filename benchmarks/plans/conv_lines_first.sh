#!/usr/bin/env bash
# The fifty-first session's conv strategy ``lines`` (Note [whole lines, 8 x 8 blocks turned in registers] in
# templates/conv_lines.py) was made the root of Qwen's conv from benchmarks/probe_transpose.py's kernel (19.8-20.1 us
# against the bands' 21.8 in the same runs) after the device was no longer lent: the template's own kernel has not
# run on a GPU. The next device call runs, in this order: its GPU verifier cases (every conv case, ~1 min), the ops
# row (a 25-iteration search from the new root beside eager, Inductor and a copy of the bytes), the probe again (the
# conv layouts beside the kforge root, now ``lines``), and the claims and team GPU tests (the markers became exclusive
# in the same session).
# Run on the device (one call, about 7 minutes after the setup):
#   bash benchmarks/plans/conv_lines_first.sh   -> $OUT/t1, $OUT/ops, $OUT/probe_transpose.*, $OUT/t2
set -u
OUT=${OUT:-/tmp/kforge-out}
(OUT=$OUT/t1 T=200 bash benchmarks/run_device.sh tests tests/test_templates_gpu.py -k conv | tail -5)
(OUT=$OUT/ops T=300 bash benchmarks/run_device.sh ops --quick-iterations 25 --rows causal_conv1d | tail -5)
(export PYTHONPATH=/tmp/site:$PWD; timeout 200 python3 benchmarks/probe_transpose.py --out "$OUT" --rounds 3 \
  --conv-only > "$OUT/probe_transpose.log" 2>&1; tail -12 "$OUT/probe_transpose.log")
(OUT=$OUT/t2 T=200 bash benchmarks/run_device.sh tests tests/test_claims_gpu.py tests/test_team_store_gpu.py | tail -4)

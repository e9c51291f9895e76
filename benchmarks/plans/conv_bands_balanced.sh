#!/usr/bin/env bash
# The fifty-fourth session ran the conv's ``lines`` on an H100 only (results/h100/README.md: the root at 93-95% of
# that GPU's copy bandwidth, every ``vo`` 4 layout slower than its ``vo`` 8 twin) and added bands balanced over the
# grid (Note [whole lines, 8 x 8 blocks turned in registers], its last paragraph: Qwen's 208 outputs a band, five
# tiles at most a block where TP 128 gives nine to 64 blocks). One H200 call, about 4 minutes after the setup:
# the template's variants beside the root (TP 128-256, the balanced 208 among them), the ops row (a 25-iteration
# search that reaches the balanced band in one action), the conv GPU verifier cases, the transposes beside the root.
#   bash benchmarks/plans/conv_bands_balanced.sh   -> $OUT/r.tgz (lines.log, lines/, ops/, t1/, probe_transpose.*)
set -u
OUT=${OUT:-/tmp/kforge-out}
export PYTHONPATH=/tmp/site:$PWD
bash benchmarks/run_device.sh setup
pack() { (cd "$OUT" && tar czf /tmp/r.tgz --exclude=r.tgz . && mv /tmp/r.tgz "$OUT/r.tgz"); }
(timeout 160 python3 benchmarks/probe_variants.py --out "$OUT/lines" --only "=causal_conv1d [1,8192,2048] bf16" \
  --strategy lines > "$OUT/lines.log" 2>&1; tail -40 "$OUT/lines.log"); pack
(OUT=$OUT/ops T=200 bash benchmarks/run_device.sh ops --quick-iterations 25 --rows causal_conv1d | tail -3); pack
(OUT=$OUT/t1 T=80 bash benchmarks/run_device.sh tests tests/test_templates_gpu.py -k conv_lines | tail -3); pack
(timeout 110 python3 benchmarks/probe_transpose.py --out "$OUT" --rounds 3 --conv-only > "$OUT/probe_transpose.log" \
  2>&1; tail -8 "$OUT/probe_transpose.log"); pack
nvidia-smi --query-gpu=name,driver_version --format=csv
cd "$OUT" && ls | grep -v '^r.tgz$' | xargs rm -rf

#!/usr/bin/env bash
# The fifty-fourth session ran the conv's ``lines`` on an H100 only (results/h100/README.md: the root at 93-95% of
# that GPU's copy bandwidth, every ``vo`` 4 layout slower than its ``vo`` 8 twin) and added bands balanced over the
# grid (Note [whole lines, 8 x 8 blocks turned in registers], its last paragraph: Qwen's 208 outputs a band, five
# tiles at most a block where TP 128 gives nine to 64 blocks). One H200 call, about 4 minutes after the setup:
# the template's variants beside the root (TP 128-256, the balanced 208 among them), the conv GPU verifier cases,
# the ops row (a 25-iteration search that reaches the balanced band in one action), the transposes beside the root,
# then kforge nodes in Inductor's code, the op's call against the direct one (benchmarks/bench_inductor_call.py).
# SHORT=1 (about 3 minutes, for a call on little device time): only the root, five layouts of wider bands and the root
# again, then the verifier cases and the ops row.
#   bash benchmarks/plans/conv_bands_balanced.sh   -> $OUT/r.tgz (lines.log, lines/, t1/, ops/, probe_transpose.*)
set -u
OUT=${OUT:-/tmp/kforge-out}
export PYTHONPATH=/tmp/site:$PWD
bash benchmarks/run_device.sh setup
pack() { (cd "$OUT" && tar czf /tmp/r.tgz --exclude=r.tgz . && mv /tmp/r.tgz "$OUT/r.tgz"); }
lines=strategy=lines,tc=64,block=256,vo=8
if [ -n "${SHORT:-}" ]; then  # SHORT=1, about 3 minutes: the root, the balanced bands and the root again, no transposes
  (timeout 100 python3 benchmarks/probe_variants.py --out "$OUT/lines" --only "=causal_conv1d [1,8192,2048] bf16" \
    --params $lines,tp=208,stages=3 --params $lines,tp=176,stages=3 --params $lines,tp=152,stages=3 \
    --params $lines,tp=136,stages=3 --params $lines,tp=208,stages=4 --params $lines,tp=128,stages=3 --copy 64 \
    > "$OUT/lines.log" 2>&1; tail -12 "$OUT/lines.log"); pack
else
  (timeout 160 python3 benchmarks/probe_variants.py --out "$OUT/lines" --only "=causal_conv1d [1,8192,2048] bf16" \
    --strategy lines > "$OUT/lines.log" 2>&1; tail -40 "$OUT/lines.log"); pack
fi
(OUT=$OUT/t1 T=80 bash benchmarks/run_device.sh tests tests/test_templates_gpu.py -k conv_lines | tail -3); pack
(OUT=$OUT/ops T=200 bash benchmarks/run_device.sh ops --quick-iterations 25 --rows causal_conv1d | tail -3); pack
[ -n "${SHORT:-}" ] || { (timeout 110 python3 benchmarks/probe_transpose.py --out "$OUT" --rounds 3 --conv-only \
  > "$OUT/probe_transpose.log" 2>&1; tail -8 "$OUT/probe_transpose.log"); pack; }
(timeout 150 python3 benchmarks/bench_inductor_call.py --out "$OUT/inductor_call" > "$OUT/inductor_call.log" 2>&1
  tail -4 "$OUT/inductor_call.log"); pack
nvidia-smi --query-gpu=name,driver_version --format=csv
cd "$OUT" && ls | grep -v '^r.tgz$' | xargs rm -rf

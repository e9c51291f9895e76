#!/usr/bin/env bash
# The knob `eager` was measured, not kept: it exists only on trial commit 866a1af, where this plan runs.
# The joint relay's consumers writing each piece as soon as its row resolves (thirty-seventh session; Note [writes as
# soon as their rows resolve: measured, not kept] in templates/relay.py; results/h200/probe_session37_eager*). In one
# run, each softmax relay root (knob `eager` on, as the code has it) beside the same layout without the knob and with a
# lag of K - 2 (which eager writes no longer wait for), twice over; then the bf16 softmax root's timeline. Run on the
# device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/eager_writes.sh  -> $OUT/probe_eager_writes.json/.log, $OUT/tr/trace.log
. benchmarks/plans/common.sh
for c in "softmax [64,262144] bf16" "softcap softmax [64,262144] bf16" "softmax [64,262144] fp32" \
         "softmax [64,248320] bf16"; do
  root=$(root_of "$c")
  plain=$(echo "$root" | sed 's/,eager=true//; s/eager=true,//')
  lag=$(echo "$root" | sed 's/.*lag=\([0-9]*\).*/\1/'); k=$(echo "$root" | sed 's/.*k=\([0-9]*\).*/\1/')
  longer=$(echo "$root" | sed "s/lag=$lag/lag=$((k - 2))/")
  probe "$(echo "$c" | tr -c 'a-z0-9' '_')" "${T:-80}" --only "=$c" --params "$plain" --params "$longer" \
    --params "$root" --params "$plain" --params "$longer"
done
collect eager_writes
OUT=$OUT/tr T=60 bash benchmarks/run_device.sh trace --case "=softmax [64,262144] bf16" --launches 1 | head -30

#!/usr/bin/env bash
# Copies in flight bounded after the first K (knob ``depth``: Note [copies in flight after the first: measured,
# not kept] in templates/relay.py): the relay roots of the rows of >= 64 MB under 80% of the copy bandwidth beside the
# same layouts with at most one or two of a block's copies in flight, a ramp of 1, two resolvers; the root, the
# variants, the root, the variants in one run (`twice`); then the bf16 softmax's timeline with one copy in flight. Run
# on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/copies_in_flight.sh   -> $OUT/probe_copies_in_flight.json, .log, $OUT/tr
. benchmarks/plans/common.sh
C="softmax [64,262144] bf16"
R=$(root_of "$C")
T=${T1:-170} twice "$C" "$R,depth=1" "$R,depth=2" "${R/ramp=2/ramp=1},depth=1" "${R/nc=1/nc=2}" \
  "${R/nc=1/nc=2},depth=1"
S="softcap softmax [64,262144] bf16"
Q=$(root_of "$S")
T=${T2:-150} twice "$S" "$Q,depth=1" "$Q,depth=2" "${Q/ramp=2/ramp=1},depth=1"
G="group_norm [1,512,128,128] fp32"
N=$(root_of "$G")
T=${T3:-120} twice "$G" "$N,depth=1" "$N,depth=2"
collect copies_in_flight
timeline "$C" "$R,depth=${TRACE_DEPTH:-1}"

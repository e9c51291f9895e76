#!/usr/bin/env bash
# After the range tests left the softmax relay (Note [a pack's range test only where a row's last piece is short] in
# templates/relay.py), the bf16 softmax's search took writers of their own (ops run AL); the soft cap's 25 iterations
# took nine slots and never reached writers. Its root (eight slots), nine slots, and writers of their own (eight reducer
# and eight writer warps) in eight, nine and ten slots, twice in one run (`twice`; the verifier checks each).
# Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/softcap_writers.sh   -> $OUT/probe_softcap_writers.json, .log
. benchmarks/plans/common.sh
C="softcap softmax [64,262144] bf16"
B="strategy=relay,vec=8,pe=8192,nc=1,ramp=2,once=true,halves=true"
T=${T:-200} twice "$C" "$B,nw=16,k=9,lag=3" "$B,nw=8,k=8,writers=true" "$B,nw=8,k=9,writers=true" \
  "$B,nw=8,k=10,writers=true"
collect softcap_writers

#!/usr/bin/env bash
# After the range tests left the softmax relay (Note [a pack's range test only where a row's last piece is short] in
# templates/relay.py), the bf16 softmax's search took writers of their own at its last iteration (ops run AL: 21.2 us
# against the root's 21.4 in the same search). Around it: eight reducer and eight writer warps in five, six and seven
# slots, six with a ramp of 1, four and four warps in six; each twice beside the root in one run (`twice`).
# Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/bf16_writers.sh   -> $OUT/probe_bf16_writers.json, .log
. benchmarks/plans/common.sh
B="strategy=relay,vec=8,pe=16384,nc=1,writers=true"
T=${T:-200} twice "softmax [64,262144] bf16" "$B,nw=8,k=6,ramp=2" "$B,nw=8,k=5,ramp=2" "$B,nw=8,k=7,ramp=2" \
  "$B,nw=8,k=6,ramp=1" "$B,nw=4,k=6,ramp=2"
collect bf16_writers

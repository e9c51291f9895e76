#!/usr/bin/env bash
# bf16_writers.sh had writers of their own in seven slots ahead (20.9, 20.7 us against the root's 21.9, 21.6). Around
# that: a ramp of 3, two resolvers, 16 KB pieces in 12 and 14 slots; and the fp32 softmax's root beside writers of
# their own in six and seven slots. Each twice beside its root in one run (`twice`).
# Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/bf16_writers_more.sh   -> $OUT/probe_bf16_writers_more.json, .log
. benchmarks/plans/common.sh
B="strategy=relay,vec=8,nw=8,writers=true"
T=${T:-200} twice "softmax [64,262144] bf16" "$B,pe=16384,nc=1,k=7,ramp=2" "$B,pe=16384,nc=1,k=7,ramp=3" \
  "$B,pe=16384,nc=2,k=7,ramp=2" "$B,pe=8192,nc=1,k=12,ramp=2" "$B,pe=8192,nc=1,k=14,ramp=2"
F="strategy=relay,vec=4,nw=8,writers=true,pe=8192,nc=1,ramp=2"
T=${T:-200} twice "softmax [64,262144] fp32" "$F,k=6" "$F,k=7"
collect bf16_writers_more

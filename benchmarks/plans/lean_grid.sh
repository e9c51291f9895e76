#!/usr/bin/env bash
# Layouts around the bf16 softmax's relay root with the lean reduce (Note [a lean reduce] in
# templates/softmax_relay.py): slots and lag one step either way, half the consumer warps, writers of their own, a ramp
# of 3, 8 KB pieces; the root, the variants, the root, the variants in one run (`twice`). Then the root's timeline. Run
# on the device after `benchmarks/run_device.sh setup`:   OUT=$OUT bash benchmarks/plans/lean_grid.sh   ->
# $OUT/probe_lean_grid.*, $OUT/tr
. benchmarks/plans/common.sh
C="softmax [64,262144] bf16"
R="strategy=relay,vec=8,pe=16384,nc=1,ramp=2"
T=${T:-150} twice "$C" "$R,nw=16,k=7,lag=3" "$R,nw=16,k=7,lag=4" "$R,nw=16,k=6,lag=2" "$R,nw=16,k=5,lag=2" \
  "$R,nw=8,k=6,lag=3" "$R,nw=8,k=6,writers=true" "strategy=relay,vec=8,pe=16384,nc=1,ramp=3,nw=16,k=6,lag=3" \
  "strategy=relay,vec=8,pe=8192,nc=1,ramp=2,nw=16,k=12,lag=6"
collect lean_grid
timeline "$C"

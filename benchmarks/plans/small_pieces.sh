#!/usr/bin/env bash
# It ran on af627e9, where the group norm's root had seven slots; from d09966d the root has six and the group norm's
# substitutions below find nothing to replace (gn_slots.sh times six slots against seven on that code).
# Smaller relay pieces in the same slot bytes, and one slot fewer (thirty-seventh session;
# results/h200/probe_session37_pieces.*). The [1,512,128,128] fp32 group norm's search in ops run
# ops_session37_evict found its best with six slots instead of seven; 16 KB pieces in twice the slots would land a
# block's first piece sooner and leave a shorter tail (the group norm's timeline: 0.77 us from a block's start to
# its first copy, 4.9 us of writes after the last arrival). In one run, each root beside its variants, twice over.
# Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/small_pieces.sh  -> $OUT/probe_small_pieces.json/.log
. benchmarks/plans/common.sh
c="group_norm [1,512,128,128] fp32"
root=$(root_of "$c")
v=("${root/k=7/k=6}" "${root/pe=8192,nw=8,nc=1,k=7/pe=4096,nw=8,nc=1,k=13}"
   "$(echo "${root/pe=8192,nw=8,nc=1,k=7/pe=4096,nw=8,nc=1,k=13}" | sed 's/ramp=2/ramp=4/')")
T=${T:-150} twice "$c" "${v[@]}"
c="softmax [64,262144] bf16"
root=$(root_of "$c")
v=("${root/pe=16384,nw=16,nc=1,k=6,lag=3/pe=8192,nw=16,nc=1,k=12,lag=4}"
   "${root/pe=16384,nw=16,nc=1,k=6,lag=3/pe=8192,nw=16,nc=1,k=12,lag=8}")
T=${T:-120} twice "$c" "${v[@]}"
collect small_pieces

#!/usr/bin/env bash
# Note [the epoch read before the first copies] (templates/relay.py): every relay root with its publisher and
# resolvers reading the epoch before the block's first bulk copy (the code) and, in the same run, reading it as they
# start, after the copies are issued, as before ([swap 0]); each root twice, so every case times new, old, new, old.
# (Run first with the thirty-fifth session's trial of counting each warp in at its end, swapped back the same way.)
# Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/epoch_early.sh    -> $OUT/probe_epoch.json, $OUT/probe_epoch.log
. benchmarks/plans/common.sh
OLD="warp < NW + NC)) ? relay_epoch(ctl) : 0u;=>warp < NW + NC)) ? 0u : 0u; && "
OLD+="relay_mark(epoch, ctl,=>relay_mark(lane == 0 ? relay_epoch(ctl) : 0u, ctl,"
swap_roots epoch "$OLD" "softmax [64,262144] bf16" \
  "softcap softmax [64,262144] bf16" \
  "group_norm [1,512,128,128] fp32" \
  "group_norm [2,1536,64,64] fp32" \
  "softmax [64,262144] fp32" \
  "group_norm [1,512,256,256] bf16"

#!/usr/bin/env bash
# The group norms' slots with writers of their own (thirty-seventh session; Note [six slots where a block holds one
# piece of a group] in templates/group_norm.py; results/h200/probe_session37_slots.*). probe_session37_pieces had the
# [1,512,128,128] fp32 root 0.35 us faster with six slots than seven, twice. In one run, twice over: that row's root
# (six slots, as the code has it) beside 7, 5 and 4 slots and ramps of 1 and 3; the other 4-byte groups of which a
# block holds one piece beside seven slots; two 2-byte rows (seven slots) beside six. Run on the device after
# `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/gn_slots.sh  -> $OUT/probe_gn_slots.json/.log
. benchmarks/plans/common.sh
c="group_norm [1,512,128,128] fp32"; r=$(root_of "$c")
twice "$c" "${r/k=6/k=7}" "${r/k=6/k=5}" "${r/k=6/k=4}" "${r/ramp=2/ramp=1}" "${r/ramp=2/ramp=3}"
for c in "group_norm [2,1536,64,64] fp32" "group_norm [1,512,256,256] fp32"; do
  r=$(root_of "$c"); twice "$c" "${r/k=6/k=7}"
done
for c in "group_norm [1,512,256,256] bf16" "group_norm [1,512,128,128] bf16"; do
  r=$(root_of "$c"); twice "$c" "${r/k=7/k=6}"
done
collect gn_slots

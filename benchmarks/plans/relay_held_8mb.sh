#!/usr/bin/env bash
# Knob regs at the fp32 group norm of two pieces of a group a block (8 MB groups), the root first and last: where
# group_norm.held_root's threshold of three pieces stands. Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/relay_held_8mb.sh   -> $OUT/probe_relay_held_8mb.json, .log
. benchmarks/plans/common.sh
R="strategy=relay,vec=4,pe=8192,nc=1,nw=8,k=7,writers=true,ramp=2"
H="${R/nw=8/nw=4}"
probe f32_8mb 90 --only "=group_norm [1,256,512,512] fp32" --params "$R" --params "$H,regs=2" --params "$R,regs=1" \
  --params "$H" --params "$R"
collect relay_held_8mb

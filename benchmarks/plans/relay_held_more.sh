#!/usr/bin/env bash
# Knob regs at the fp32 group norms of two pieces and one piece of a group a block (8 MB and 4 MB groups; the 8 MB
# case was missing from probe_variants.py then and printed nothing: relay_held_8mb.sh), the root
# first and last. Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/relay_held_more.sh   -> $OUT/probe_relay_held_more.json, .log
. benchmarks/plans/common.sh
R="strategy=relay,vec=4,pe=8192,nc=1,nw=8,k=7,writers=true,ramp=2"
H="${R/nw=8/nw=4}"
for shape in "1,256,512,512" "1,512,256,256"; do
  probe "f32_${shape//,/_}" 90 --only "=group_norm [$shape] fp32" --params "$R" --params "$H,regs=2" \
    --params "$R,regs=1" --params "$H" --params "$R"
done
collect relay_held_more

#!/usr/bin/env bash
# The relay's writers holding pieces in registers (knob regs, Note [pieces held in the writers' registers] in
# relay_held.py) against the roots in the same probe run, each root timed first and last. Run on the device after
# `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/relay_held.sh   -> $OUT/probe_relay_held.json, $OUT/probe_relay_held.log
. benchmarks/plans/common.sh
R="strategy=relay,vec=4,pe=8192,nc=1,nw=8,k=7,writers=true,ramp=2"
H="${R/nw=8/nw=4}"
for shape in "1,128,1024,1024" "1,512,128,128" "2,1536,64,64"; do
  probe "f32_${shape//,/_}" 110 --only "=group_norm [$shape] fp32" --params "$R" --params "$R,regs=1" \
    --params "$H,regs=2" --params "$H,regs=1" --params "$H" --params "$R"
done
B="strategy=relay,vec=8,pe=16384,nc=1,nw=8,k=7,writers=true,ramp=2"
probe b16_big 80 --only "=group_norm [1,128,1024,1024] bf16" --params "$B" --params "${B/nw=8/nw=4},regs=1" \
  --params "${B/nw=8/nw=4}" --params "$B"
probe b16 40 --only "=group_norm [1,512,256,256] bf16" --params "$B" --params "${B/nw=8/nw=4},regs=1" --params "$B"
S="strategy=relay,vec=8,pe=16384,nc=1,nw=16,k=6,lag=3,ramp=1"
W="strategy=relay,vec=8,pe=16384,nc=1,nw=4,k=6,writers=true,ramp=1"
probe sm16 40 --only "=softmax [64,262144] bf16" --params "$S" --params "$W,regs=1" --params "$W" --params "$S"
collect relay_held

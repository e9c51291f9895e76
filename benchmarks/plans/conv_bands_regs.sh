#!/usr/bin/env bash
# The bands root (Note [channel rows over a band of positions]) with more blocks an SM (the register bound of
# __launch_bounds__ raised from 4 to 5 and 6 blocks: 52 -> 46 and 39 registers, no spills in the SASS here), and
# longer or narrower bands, same run. Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/conv_bands_regs.sh    -> $OUT/probe_conv_bands_regs.json/.log
. benchmarks/plans/common.sh
C="=causal_conv1d [1,8192,2048] bf16"
probe regs "${TR:-80}" --only "$C" --params "strategy=bands,g=32,lt=256,block=256,ld=8,vec=8,bfirst=true" \
  --params "strategy=bands,g=32,lt=256,block=256,ld=4,vec=8,bfirst=true" \
  --swap "constexpr int MINB = 4;=>constexpr int MINB = 5;" --swap "constexpr int MINB = 4;=>constexpr int MINB = 6;"
probe shapes "${TS:-80}" --only "$C" --params "strategy=bands,g=16,lt=512,block=256,ld=8,vec=8,bfirst=true" \
  --params "strategy=bands,g=32,lt=512,block=256,ld=8,vec=8,bfirst=true" \
  --params "strategy=bands,g=16,lt=256,block=128,ld=8,vec=8,bfirst=true" \
  --params "strategy=bands,g=32,lt=128,block=128,ld=8,vec=8,bfirst=true" \
  --params "strategy=bands,g=32,lt=256,block=256,ld=8,vec=8,bfirst=true"
collect conv_bands_regs

#!/usr/bin/env bash
# Knobs persist and ahead were reverted after this run (trial commit b6a9b86): their params are no longer valid on
# later code. Knobs persist and ahead of the conv's bands (Note [bands walked by resident blocks: measured, not kept]
# in conv_bands.py): the grid as P blocks an SM walking the tiles, with and without the next tile's loads issued
# ahead, against the root (first and last). Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/conv_persist.sh    -> $OUT/probe_conv_persist.json/.log
. benchmarks/plans/common.sh
C="=causal_conv1d [1,8192,2048] bf16"
R="strategy=bands,g=32,lt=256,block=256,ld=8,vec=8,bfirst=true"
probe persist "${TP:-200}" --only "$C" --params "$R" --params "$R,persist=4" --params "$R,persist=4,ahead=true" \
  --params "$R,persist=3" --params "$R,persist=3,ahead=true" --params "$R,persist=2,ahead=true" \
  --params "strategy=bands,g=32,lt=256,block=256,ld=8,vec=8,persist=4,ahead=true" \
  --params "strategy=bands,g=64,lt=128,block=256,ld=8,vec=8,bfirst=true,persist=4,ahead=true" \
  --params "$R,persist=4,ahead=true" --params "$R,persist=4" --params "$R"
collect conv_persist

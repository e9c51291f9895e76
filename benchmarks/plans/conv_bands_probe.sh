#!/usr/bin/env bash
# The causal conv1d's channel rows over bands of positions (Note [channel rows over a band of positions] in
# templates/conv_bands.py) against the root (flat runs), same run: the root first (probe_variants.py times it first),
# every bands layout, the chunks along a row with their stores now whole (Note [a warp's stores along one row]), then
# the root and the bands default again; the ceilings beside them: a plain copy of 64 MiB and Inductor's transpose of
# the same bytes. Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/conv_bands_probe.sh    -> $OUT/probe_conv_bands.json, $OUT/probe_conv_bands.log
. benchmarks/plans/common.sh
CASE="=causal_conv1d [1,8192,2048] bf16"
probe grid "${TS:-200}" --only "$CASE" --strategy bands --copy 64 --transpose 2048x8192:bfloat16
probe chunks "${TC:-60}" --only "$CASE" --params "strategy=chunks,tl=128,tc=64,block=128,vec=8,rowfast=true" --params "strategy=chunks,tl=256,tc=64,block=128,vec=8,rowfast=true" --params "strategy=chunks,tl=256,tc=64,block=256,vec=8,rowfast=true"
probe again "${TA:-60}" --only "$CASE" --params "strategy=bands,g=64,lt=128,block=256,ld=8,vec=8" --params "strategy=bands,g=32,lt=256,block=256,ld=8,vec=8"
collect conv_bands

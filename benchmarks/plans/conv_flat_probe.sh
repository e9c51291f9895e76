#!/usr/bin/env bash
# The causal conv1d's flat runs (Note [a block's channel rows as one flat run] in templates/conv_flat.py) against the
# root (rows with two positions per lane), same run: the root first (probe_variants.py times it first), every flat
# layout, then the root and the flat default again; the ceilings beside them: a plain copy of 64 MiB and Inductor's
# transpose of the same bytes. Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/conv_flat_probe.sh    -> $OUT/probe_conv_flat.json, $OUT/probe_conv_flat.log
. benchmarks/plans/common.sh
CASE="=causal_conv1d [1,8192,2048] bf16"
probe grid "${TS:-150}" --only "$CASE" --strategy flat --copy 64 --transpose 2048x8192:bfloat16
probe again "${TA:-60}" --only "$CASE" --params "strategy=flat,g=16,block=512,ld=4,vec=8" --params "strategy=flat,g=8,block=512,pipe=true,vec=8"
collect conv_flat

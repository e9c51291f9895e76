#!/usr/bin/env bash
# What bounds the causal conv1d's root (Note [channel rows over a band of positions] in templates/conv_bands.py):
# the root twice, each beside its source with the K-tap sums left out (each output its input: a transposing copy),
# timed without the verifier (probe_variants.py --unverified: a ceiling, never a candidate), and eager's and
# Inductor's transposes of the same [2048, 8192] bf16. Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/conv_ceiling.sh   -> $OUT/probe_conv_ceiling.*
. benchmarks/plans/common.sh
CASE="causal_conv1d [1,8192,2048] bf16"
NOFMA='for (int q = 0; q < K; ++q) a = fmaf(wk[q], v[u + q], a);=>a = v[u];'
probe conv ${T:-120} --only "=$CASE" --params "$(root_of "$CASE")" --unverified --swap "$NOFMA" \
  --transpose 2048x8192:bfloat16
collect conv_ceiling

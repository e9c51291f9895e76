#!/usr/bin/env bash
# Rows joined (Note [a row's first vector whole] in templates/conv_bands.py) against the bands root, alternately in one
# run, after the conv's GPU tests. Run on the device from the repository root after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/conv_bands_join.sh    -> $OUT/probe_conv_bands_join.json/.log, $OUT/gpu_tests_conv.log
OUT=$OUT/t T=120 bash benchmarks/run_device.sh tests tests/test_templates_gpu.py -k "conv_bands" | tail -3
cp "$OUT"/t/gpu_tests.log "$OUT"/gpu_tests_conv.log; rm -rf "$OUT"/t
. benchmarks/plans/common.sh
C="=causal_conv1d [1,8192,2048] bf16"
R="strategy=bands,g=32,lt=256,block=256,ld=8,vec=8,bfirst=true"
probe join "${TJ:-90}" --only "$C" --params "$R,join=true" --params "$R" --params "$R,join=true" --params "$R" \
  --params "strategy=bands,g=64,lt=128,block=256,ld=8,vec=8,bfirst=true,join=true" --params "$R,join=true"
collect conv_bands_join

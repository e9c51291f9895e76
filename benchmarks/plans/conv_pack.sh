#!/usr/bin/env bash
# Knob pack was reverted after these runs (trial commit 3b6ee43): its params are no longer valid on later code.
# Knob pack of the conv's bands (Note [a fill of packed runs: measured, not kept] in templates/conv_bands.py): the
# GPU verifier on every bands case, then Qwen's conv with the root and its packed fills, the root first and last.
# Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/conv_pack.sh   -> $OUT/gpu_tests_conv_pack.log, $OUT/probe_conv_pack.json, .log
. benchmarks/plans/common.sh
T=150 OUT=$OUT/t bash benchmarks/run_device.sh tests tests/test_templates_gpu.py -k conv_bands > /dev/null 2>&1
cp "$OUT/t/gpu_tests.log" "$OUT/gpu_tests_conv_pack.log"; rm -rf "$OUT/t"; tail -3 "$OUT/gpu_tests_conv_pack.log"
B="strategy=bands,g=32,lt=256,block=256,ld=8,vec=8,bfirst=true"
probe conv 150 --only "=causal_conv1d [1,8192,2048] bf16" --params "$B,pack=true" --params "$B" \
  --params "$B,pack=true" --params "strategy=bands,g=64,lt=128,block=256,ld=8,vec=8,bfirst=true,pack=true" \
  --params "strategy=bands,g=64,lt=128,block=256,ld=8,vec=8,bfirst=true" \
  --params "strategy=bands,g=32,lt=256,block=128,ld=8,vec=8,bfirst=true,pack=true" --params "$B"
collect conv_pack

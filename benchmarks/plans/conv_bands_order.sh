#!/usr/bin/env bash
# Bands first against channel tiles first (Note [bands first] in templates/conv_bands.py), after the conv's GPU tests,
# as run in the twenty-fourth session's call 3 (probe_session24_conv_bands_order.json). Run on the device from the
# repository root: bash benchmarks/plans/conv_bands_order.sh
# Its Nsight Compute step names the case with profile_variant.py's substring, so no leading `=` (call 3 passed one and
# no profile came back; conv_bands_final.sh profiled the root).
bash benchmarks/run_device.sh setup
OUT=$OUT/t T=100 bash benchmarks/run_device.sh tests tests/test_templates_gpu.py -k "conv_bands or conv_chunks or conv_flat" | tail -3; cp $OUT/t/gpu_tests.log $OUT/gpu_tests_conv.log; rm -rf $OUT/t
. benchmarks/plans/common.sh
C="=causal_conv1d [1,8192,2048] bf16"
probe order 120 --only "$C" --params "strategy=bands,g=64,lt=128,block=256,ld=8,vec=8" --params "strategy=bands,g=64,lt=128,block=256,ld=8,vec=8,bfirst=true" --params "strategy=bands,g=32,lt=128,block=128,ld=8,vec=8" --params "strategy=bands,g=32,lt=128,block=128,ld=8,vec=8,bfirst=true" --params "strategy=bands,g=32,lt=256,block=256,ld=8,vec=8,bfirst=true" --params "strategy=bands,g=64,lt=256,block=256,ld=16,vec=8,bfirst=true" --params "strategy=bands,g=64,lt=128,block=128,ld=16,vec=8,bfirst=true" --params "strategy=bands,g=64,lt=128,block=256,ld=8,vec=8"
collect conv_bands_order
for P in "strategy=bands,g=64,lt=128,block=256,ld=8,vec=8" "strategy=bands,g=64,lt=128,block=256,ld=8,vec=8,bfirst=true"; do
  OUT=$OUT/n T=100 bash benchmarks/run_device.sh ncu "${C#=}" "$P" | grep -aE "Duration|DRAM Through|L2 Hit|Achieved Occ|Memory Through" | head -8
done
mv $OUT/n/*.txt $OUT/n/*.sass.csv $OUT/ 2>/dev/null; rm -rf $OUT/n; ls $OUT

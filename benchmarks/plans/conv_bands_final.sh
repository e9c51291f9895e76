#!/usr/bin/env bash
# The causal conv1d on the final code (Note [channel rows over a band of positions], templates/conv_bands.py): the
# root (bands first) against the flat runs and two other band layouts in one run, Nsight Compute on the root, then the
# ops row with a 25-iteration search. Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/conv_bands_final.sh
#     -> $OUT/probe_conv_bands_final.json/.log, $OUT/ncu_<case>_root.txt/.sass.csv, $OUT/o/ops.json/.md
. benchmarks/plans/common.sh
C="=causal_conv1d [1,8192,2048] bf16"
probe final "${TA:-70}" --only "$C" --params "strategy=flat,g=16,block=512,ld=8,vec=8" \
  --params "strategy=bands,g=64,lt=128,block=256,ld=8,vec=8,bfirst=true" \
  --params "strategy=bands,g=32,lt=256,block=256,ld=8,vec=8" --params "strategy=flat,g=16,block=512,ld=8,vec=8"
collect conv_bands_final
OUT=$OUT/n T=${TN:-100} bash benchmarks/run_device.sh ncu "causal_conv1d [1,8192,2048] bf16" | head -12
mv "$OUT"/n/*.txt "$OUT"/n/*.sass.csv "$OUT"/ 2>/dev/null; rm -rf "$OUT"/n
timeout "${TO:-200}" python3 benchmarks/bench_ops.py --out "$OUT/o" --quick-iterations 25 --rows causal_conv1d \
  > "$OUT/ops_conv.log" 2>&1; tail -5 "$OUT/ops_conv.log"

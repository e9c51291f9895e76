#!/usr/bin/env bash
# The relay softmaxes' exps as one FFMA and one ex2 (probe_variants.py --swap, the same run): swap 0 the reduce's
# sexp (exp(v - m) as ex2(v * log2e - m * log2e): FFMA, MUFU instead of FADD, FMUL, MUFU), swap 1 the write (the
# division by the sum folded into the exponent: ex2(x * log2e - (m * log2e + log2 sum)), FFMA and MUFU instead of
# FADD, FMUL, MUFU, FMUL), swap 2 both; each root twice. Then the ops rows of >= 64 MiB that ops_64mib.sh's first
# part left out, packed. Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/exp2_fold.sh   -> $OUT/probe_exp2_fold.json, .log, $OUT/ops_rest.tgz
. benchmarks/plans/common.sh
L=1.4426950408889634f
R="return m == -CUDART_INF_F ? 0.f : __expf(v - m);=>return m == -CUDART_INF_F ? 0.f : exp2f(fmaf(v, $L, -m * $L));"
WX="__expf(xv(p.v[j]) - m) * inv=>exp2f(fmaf(xv(p.v[j]), $L, -(m * $L + __log2f(st.y))))"
WT="__expf(to_f(p.v[j]) - m) * inv=>exp2f(fmaf(to_f(p.v[j]), $L, -(m * $L + __log2f(st.y))))"
probe bf16 150 --only "=softmax [64,262144] bf16" --params "strategy=relay,vec=8,pe=16384,nw=16,nc=1,k=6,lag=3,ramp=1" \
  --swap "$R" --swap "$WX" --swap "$R && $WX"
probe softcap 150 --only "=softcap softmax [64,262144] bf16" \
  --params "strategy=relay,vec=8,pe=8192,nw=16,nc=1,k=10,lag=4,ramp=2,once=true,halves=true" \
  --swap "$R" --swap "$WT" --swap "$R && $WT"
probe sampling 150 --only "=sampling softmax [64,262144] bf16 -> fp32" \
  --params "strategy=relay,vec=8,pe=8192,nw=16,nc=1,k=10,lag=4,ramp=2,once=true,halves=true" \
  --swap "$R" --swap "$WT" --swap "$R && $WT"
probe fp32 150 --only "=softmax [64,262144] fp32" --params "strategy=relay,vec=4,pe=8192,nw=16,nc=1,k=6,lag=3,ramp=1" \
  --swap "$R" --swap "$WX" --swap "$R && $WX"
collect exp2_fold
if [ "${OPS_REST:-1}" = 1 ]; then
  OUT=$OUT/ops_rest T=${T_REST:-200} bash benchmarks/run_device.sh ops --quick-iterations 25 \
    --rows 'softmax [64, 262144] float32' --rows 'softmax [1, 8, 2048, 2048]' \
    --rows 'softmax [8192, 1024] float32' --rows 'softmax [64, 248320] float32' \
    --rows 'adaptive_avg_pool2d [256, 2048, 7, 7] float32' --rows 'group_norm [1, 512, 256, 256]' \
    --rows 'group_norm [1, 256, 512, 512]' --rows 'group_norm [1, 128, 1024, 1024]' \
    --rows 'layer_norm [16384, 4096]' --rows 'rms_norm [16384, 4096]' --rows 'silu_mul [16384, 4096]' \
    --rows 'softmax [1, 16, 4096, 4096]' > /dev/null
  tar czf "$OUT/ops_rest.tgz" -C "$OUT" ops_rest && rm -rf "$OUT/ops_rest"
fi

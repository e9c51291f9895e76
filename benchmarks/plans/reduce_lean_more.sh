#!/usr/bin/env bash
# On top of Note [a lean reduce] (softmax_relay.py), the bf16 softmax root (probe_variants.py --swap, the same run):
# swap 0 a running max of packed pairs over the lane's packs, widened once (two fewer widenings and FMNMX a pack); swap
# 1 the sum in two accumulators (a dependent chain half as long); swap 2 both. The root twice beside them. Run on the
# device after `benchmarks/run_device.sh setup`:   OUT=$OUT bash benchmarks/plans/reduce_lean_more.sh
. benchmarks/plans/common.sh
ACC='float m = -CUDART_INF_F;=>float m = -CUDART_INF_F; __nv_bfloat162 acc = __float2bfloat162_rn(-CUDART_INF_F);
 && m = fmaxf(m, fmaxf(__low2float(a), __high2float(a)));=>acc = __hmax2(acc, a);
 && m = group_all<32, 32>(m, Max(), (float*)nullptr);=>m = fmaxf(__low2float(acc), __high2float(acc)); m = group_all<32, 32>(m, Max(), (float*)nullptr);'
TWO='float sum = 0.f;=>float sum = 0.f, sum1 = 0.f;
 && for (int j = 0; j < VEC; ++j) sum += __expf(xv(pk[i].v[j]) - m);=>for (int j = 0; j < VEC; j += 2) { sum += __expf(xv(pk[i].v[j]) - m); sum1 += __expf(xv(pk[i].v[j + 1]) - m); }
 && sum = group_all<32, 32>(sum, Sum(), (float*)nullptr);=>sum += sum1; sum = group_all<32, 32>(sum, Sum(), (float*)nullptr);'
C="softmax [64,262144] bf16"
probe bf16 ${T:-120} --only "=$C" --params "$(root_of "$C")" --params "$(root_of "$C")" --swap "$ACC" --swap "$TWO" \
  --swap "$ACC && $TWO"
collect reduce_lean_more

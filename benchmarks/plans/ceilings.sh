#!/usr/bin/env bash
# What bounds the relays under 80%: each root beside its source with one part of the work taken out, timed without
# the verifier (probe_variants.py --unverified: the results are wrong on purpose, so these are ceilings, never
# candidates). Each root twice, every swap after each. Swaps on the bf16 softmax and on the soft cap: 0 the reduce's
# exps out (the sum adds x - m), 1 the write's exps out, 2 both, 3 the writes not waiting for their row's statistic
# (the exchange's latency out), 4 no wait and no exps; the soft cap also 5 its tanh out, 6 its whole prologue out.
# The group norm [1,512,128,128] fp32: 0 no wait. Then plain copies of 64 and 96 MiB. Run on the device after
# `benchmarks/run_device.sh setup`:   OUT=$OUT bash benchmarks/plans/ceilings.sh   -> $OUT/probe_ceilings.*
. benchmarks/plans/common.sh
NOWAIT='bar_wait(ready + sl, (unsigned)(u / K) & 1u);=>'
RX='sum += __expf(xv(pk[i].v[j]) - m);=>sum += xv(pk[i].v[j]) - m;'
WX='from_f<TO>(__expf(xv(p.v[j]) - m) * inv)=>from_f<TO>((xv(p.v[j]) - m) * inv)'
S="strategy=relay,vec=8,pe=16384,nw=16,nc=1,k=6,lag=3,ramp=2"
probe bf16 ${T:-150} --only "=softmax [64,262144] bf16" --params "$S" --unverified \
  --swap "$RX" --swap "$WX" --swap "$RX && $WX" --swap "$NOWAIT" --swap "$NOWAIT && $RX && $WX"
CRX='sum += __expf(to_f(pk[i].v[j]) - m);=>sum += to_f(pk[i].v[j]) - m;'
CWX='from_f<TO>(__expf(to_f(p.v[j]) - m) * inv)=>from_f<TO>((to_f(p.v[j]) - m) * inv)'
TANH='{ return tanhf(v); }=>{ return v; }'
PRO='for (int j = 0; j < VEC; ++j) pk[i].v[j] = narrow(xv(pk[i].v[j]));=>'
C="strategy=relay,vec=8,pe=8192,nw=16,nc=1,k=10,lag=4,ramp=2,once=true,halves=true"
probe softcap ${T:-150} --only "=softcap softmax [64,262144] bf16" --params "$C" --unverified \
  --swap "$CRX" --swap "$CWX" --swap "$CRX && $CWX" --swap "$NOWAIT" --swap "$NOWAIT && $CRX && $CWX" \
  --swap "$TANH" --swap "$PRO"
G="strategy=relay,vec=4,pe=8192,nw=8,nc=1,k=6,writers=true,ramp=2"
probe gn ${T:-100} --only "=group_norm [1,512,128,128] fp32" --params "$G" --unverified --swap "$NOWAIT" \
  --copy 64 --copy 96
collect ceilings

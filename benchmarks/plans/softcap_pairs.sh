#!/usr/bin/env bash
# The soft cap's prologue two elements an instruction (probe_session39_ceilings: the soft cap's root ran 28.1 us with
# its prologue left out against 32.2, 31.5 with its tanh left out). Every bf16 input through the scalar chain and the
# paired ones (benchmarks/softcap_pairs_exhaustive.py), then the root twice, each beside two --swaps of its source,
# verified and timed: 0 the pairs with tanh.approx.bf16x2 (cvt.rn.bf16x2.f32 of the two scaled inputs, the tanh of
# the pair, mul.rn.bf16x2 by 30); 1 the same with tanh.approx.f32 of each half (the same bits as the scalar chain).
# Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/softcap_pairs.sh   -> $OUT/softcap_pairs_exhaustive.json, $OUT/probe_softcap_pairs.*
. benchmarks/plans/common.sh
python3 benchmarks/softcap_pairs_exhaustive.py --out "$OUT" 2>&1 | tail -20
HEAD='__device__ __forceinline__ unsigned cap_pair(float hi, float lo) { unsigned r; asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r; }
__device__ __forceinline__ unsigned cap_mul30(unsigned a) { unsigned r; asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(0x41f041f0u)); return r; }'
TP='__device__ __forceinline__ unsigned cap_tanh(unsigned t) { unsigned r; asm("tanh.approx.bf16x2 %0, %1;" : "=r"(r) : "r"(t)); return r; }'
TS='__device__ __forceinline__ unsigned cap_tanh(unsigned t) { float a, b; asm("tanh.approx.f32 %0, %1;" : "=f"(a) : "f"(__uint_as_float(t << 16))); asm("tanh.approx.f32 %0, %1;" : "=f"(b) : "f"(__uint_as_float(t & 0xffff0000u))); return cap_pair(b, a); }'
CAP='__device__ __forceinline__ unsigned cap2(unsigned w) { return cap_mul30(cap_tanh(cap_pair(__uint_as_float(w & 0xffff0000u) * ((float)0x1.1111111111111p-5), __uint_as_float(w << 16) * ((float)0x1.1111111111111p-5)))); }'
XV='__device__ __forceinline__ float xv(T v) {'
LOOP='for (int j = 0; j < VEC; ++j) pk[i].v[j] = narrow(xv(pk[i].v[j]));=>for (int j = 0; j < VEC / 2; ++j) reinterpret_cast<unsigned*>(pk[i].v)[j] = cap2(reinterpret_cast<const unsigned*>(pk[i].v)[j]);'
C="strategy=relay,vec=8,pe=8192,nw=16,nc=1,k=10,lag=4,ramp=2,once=true,halves=true"
probe softcap ${T:-150} --only "=softcap softmax [64,262144] bf16" --params "$C" \
  --swap "$XV=>$HEAD
$TP
$CAP
$XV && $LOOP" --swap "$XV=>$HEAD
$TS
$CAP
$XV && $LOOP"
collect softcap_pairs

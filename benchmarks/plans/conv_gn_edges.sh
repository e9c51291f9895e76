#!/usr/bin/env bash
# Two probes in one call (probe_variants.py, the same timer as a search):
# - the causal conv1d's row ends (Note [channel rows over a band of positions] in templates/conv_bands.py): the vector
#   that holds a row's start or end stored as aligned 8-, 4- and 2-byte pieces instead of one 2-byte store an element
#   (--swap; Nsight Compute had 29.5 of 32 bytes used a stored sector), the root twice beside it;
# - the group norm [1,512,128,128] fp32 in pieces of 28 KB (1,184 pieces: at most 252 KB a block, 256 KB in 32 KB
#   pieces), six or seven slots, beside the root, twice.
# Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/conv_gn_edges.sh   -> $OUT/probe_conv_gn_edges.json, .log
. benchmarks/plans/common.sh
# (swap texts hold no " && ": probe_variants.py splits a swap there) the new stores go before the old loop, which
# is left to run no times
OLD='      for (int u = 0; u < VEC; ++u)
        if (l + u >= 0'
NEW='      for (int q = 0; q < VEC; q += 4)
        if ((q >= -l)&&(q + 4 <= LOUT - l)) { const __nv_bfloat162 h0 = __floats2bfloat162_rn(o[q], o[q + 1]), h1 = __floats2bfloat162_rn(o[q + 2], o[q + 3]); *reinterpret_cast<uint2*>(yp + q) = make_uint2(*reinterpret_cast<const unsigned*>(&h0), *reinterpret_cast<const unsigned*>(&h1)); }
#pragma unroll
      for (int q = 0; q < VEC; q += 2)
        if ((q >= -l)&&(q + 2 <= LOUT - l)&&!(((q & ~3) >= -l)&&((q & ~3) + 4 <= LOUT - l))) { const __nv_bfloat162 h = __floats2bfloat162_rn(o[q], o[q + 1]); *reinterpret_cast<unsigned*>(yp + q) = *reinterpret_cast<const unsigned*>(&h); }
#pragma unroll
      for (int q = 0; q < VEC; ++q)
        if ((q >= -l)&&(q < LOUT - l)&&!(((q & ~1) >= -l)&&((q & ~1) + 2 <= LOUT - l))) yp[q] = from_f<TO>(o[q]);
      for (int u = 0; u < 0; ++u)
        if (l + u >= 0'
C="causal_conv1d [1,8192,2048] bf16"
probe conv ${T:-120} --only "=$C" --params "$(root_of "$C")" --params "$(root_of "$C")" --swap "$OLD=>$NEW"
G="strategy=relay,vec=4,nc=1,nw=8,ramp=2,writers=true"
twice "group_norm [1,512,128,128] fp32" "$G,pe=7168,k=7" "$G,pe=7168,k=6"
collect conv_gn_edges

"""The softmax's ``relay`` and ``resident`` sources (``relay_source``, ``resident_source``): the reduce, resolve and
write that softmax.py's relay layouts hand relay_pipeline.py's kernel, and the write of resident.py's, around a fused
prologue where the card has one; with the Notes on that device code and what was measured around it."""
from __future__ import annotations

from typing import Any

from ...cards import OperatorCard
from .common import PREAMBLE, consts, output_spec, typedefs
from .fused import pair_prologue
from .relay import pack_test, relay_consts
from .relay_pipeline import RELAY_HELPERS, relay_kernel
from .resident import resident_consts, resident_kernel
from .softmax_card import in_dtype, is_fused, relay_dtype, relay_isz, relay_pair
from .softmax_rows import fused_loader, header

# Note [a prologue run from the relay's slots]
# The relay (relay.py) moves its input's bytes into shared memory with bulk copies, so a fused prologue cannot run
# as the pieces load. It runs as the consumers read a slot instead, twice: once to reduce the piece, once to
# normalise it LAG pieces later (``xv``: to_f(from_f<TF>(fx(to_f(raw)))), the rounding of fused.py's ldx). The slots
# hold the raw input (bf16 logits: half the bytes of the fp32 values the cluster kernels keep), and the prologue's
# arithmetic is the consumers' (the soft cap: a division, a tanh and a product per element, both times).
# Measured (twelfth session, probe_session12_softcap_relay.json, same run): the soft-capped softmax [64, 262144]
# bf16 -> fp32 ran 69.7-77.4 us over six relay layouts against the cluster's 53.2 us. So where the prologue's values
# do not fit the slots (below), the relay is neither the root nor a seed of a fused card; the search reaches it as the
# action "strategy -> relay".

# Note [a prologue evaluated once, into its slot]
# The relay above evaluates a fused prologue three times an element: for the piece's max, for its sum of exp, and to
# normalise it. Where every value the prologue gives is a value of the input's own type T (``_once_ok``: the soft cap
# widens a bf16 product to fp32 only at its root), the knob ``once`` has each consumer lane evaluate it once, as it
# reduces: the rounded values replace the raw packs in registers and in the lane's own share of the slot, and the
# max, the sum and the write LAG pieces later only widen them. No other warp reads that share, and the same lane
# writes and later reads each pack, so no barrier is added; before the slot is freed each lane fences its stores
# against the copy engine's next fill (``wrote_slot`` in relay.py). Into 16-bit packs the prologue goes two elements
# at a time (``fx2``: Note [a prologue two elements at a time] in fused.py).
# Measured on the soft-capped softmax [64, 262144] bf16 -> fp32 (sixteenth session, same runs; results/h200/
# probe_session16_softcap_lut_once.json, probe_session16_relay_once.json, probe_session16_paired_rounding.json):
# - with the roundings as F2F (before Note [roundings off the MIO pipe]): the relay's 32 KB pieces 70.3 us three
#   times, 48.8-49.0 once, against the cluster root's 53.3-53.4; once in 16 KB pieces over 12 slots with a lag of 4,
#   45.5; in 48 KB pieces over 24 consumer warps, 52.5;
# - with the paired roundings, once: 38.4 us in 32 KB pieces, 35.8 in 16 KB pieces over 10 slots with a lag of 4 (the
#   defaults here until Note [eight slots for a paired prologue]), 36.0 over 12, 37.2-39.1 in 8 KB pieces; the
#   cluster 49.0;
# - the plain sampling softmax ``to_float32(x0)``: 33.9 us in 16 KB pieces once, 35.9 three times, 40.3 in 32 KB
#   pieces once, against the cluster's 47.0. Without a prologue (softmax [64, 262144] bf16) 16 KB pieces lose (27.9
#   against 24.3 us), so only the fused defaults take them.
# So a fused card whose prologue fits its slots takes this relay as its root (root_params). A tanh read from a table
# of its 896 bf16 results in shared memory (exact: the same bits as tanhf for all 65536 inputs, GPU-tested) was slower
# everywhere it was timed: the cluster 62.4 against 53.4 us, the relay once 59.2 against 48.8 (its loads queue on
# the MIO pipe with the F2F roundings), so it was not kept.
# Nor was an arithmetic tanh (twenty-sixth session, commit 7756f54, reverted): the kernels compile with
# --use_fast_math, so tanhf is already tanh.approx.f32, one MUFU op. Over every bf16 input (benchmarks/
# tanh_bf16_exhaustive.py, results/h200/tanh_bf16_exhaustive_session26.json) tanh.approx rounds to precise tanhf's
# bf16 on all 65,026 normal finite inputs (it differs on the 254 subnormals, which that precise build flushed); an
# exp form with a series near 0 also rounds as tanhf does (within 5 fp32 ulps of it) but ran the soft cap's root in
# 42.0 us three times against 34.7-35.0 with tanhf (probe_session26_softcap_tanh.json).

# Note [eight slots for a paired prologue]
# Once the soft cap's prologue went two elements at a time (Note [a prologue two elements at a time] in fused.py), its
# relay ran faster in 16 KB pieces over 8 slots with a lag of 3 than in the 10 slots with a lag of 4 it had taken
# since the sixteenth session (Note [a prologue evaluated once, into its slot]). Measured on the H200 (thirty-ninth
# session, two runs, each layout twice a run; results/h200/probe_session39_softcap_lag.json, _lag2.json): the
# soft-capped softmax [64, 262144] bf16 -> fp32 29.9, 30.0 and 29.8, 30.2 us against 30.6, 30.7 and 31.0, 31.2; 10
# slots with a lag of 3 30.4, 30.5; 9 slots with a lag of 3 30.9 twice; 8 slots with a lag of 2 31.7, 32.2. The
# sampling softmax (to_float32 of bf16 logits) tied: 27.9, 28.0 against 27.8, 27.7 (10 slots, a lag of 3: 28.0,
# 28.5). So every relay that evaluates a prologue once into 16-bit packs takes 8 slots and a lag of 3; 4-byte packs,
# which no run compared, keep 10 and 4.

# Note [stores of whole sectors]
# Where the output is wider than the input (fp32 after bf16 or fp16 logits: the soft cap, the sampling softmax), an
# output pack of VEC elements is 32 bytes: a lane stores it as two 16-byte stores, and each store instruction of a
# warp covers half of each of 32 sectors. Nsight Compute on the soft cap's relay counted 16 of every 32 bytes used per
# stored sector (sixteenth session, results/h200/ncu/softcap_relay_once_f2f.txt: 49% excessive sectors). With knob
# ``halves`` a lane's write takes half packs instead (VEC / 2 elements, an 8-byte shared load), so each store
# is 16 bytes and a warp's store covers 512 contiguous bytes (ncu/softcap_relay_halves.txt: 32 of 32 bytes a sector).
# With ``once`` a lane then reads values other lanes of its warp put back into the slot, so the write starts with a
# __syncwarp. It is the relay's default wherever its output packs are 32 bytes (``_wide_out``).
# Measured on the H200 (twenty-seventh session, each table one run, the root first and last; results/h200/
# probe_session27_halves.json, _halves_more, _pairs_hint, _warps):
# - the soft cap [64, 262144] bf16 -> fp32, the root (16 KB pieces, 10 slots, a lag of 4): 32.7 and 33.0 us with
#   halves against 34.2-34.9 without; in 32 KB pieces 33.3 against 38.9; with writers of their own 32.9; the sampling
#   softmax ``to_float32(x0)`` 30.6 and 30.8 against 31.9-32.9;
# - the relay is then bound by its consumer warps, not by its stores or slots: its timeline (trace_session27_softcap.md)
#   has a block's consumers take 1.1 us a 16 KB piece while they only reduce and 1.6-1.8 us once they also write,
#   Nsight Compute 60% of the issue slots busy at 37 instructions an element (11 of them the soft cap and its three
#   roundings). Measured there and not kept: the soft cap's intermediates rounded two at a time (one paired
#   conversion for two elements, and the values kept for the max and the sum: 32.4-32.9 us against 32.7-33.1, and no
#   gain at the plain bf16 softmax); a suspend-time hint on the mbarrier waits (2 us or 1 ms: 32.6-33.1 against
#   32.7-33.0; the group norms and softmaxes within their noise); 24 consumer warps (33.8-39.2), or 12 reducers and
#   12 writers (32.7, 35.8), against 32.8-32.9; the same at the bf16 softmax (24.8-26.7 against 23.2-23.5) and the
#   fp32 group norms ([1,512,128,128] 22.8-26.4 against 20.2-20.6).


# Note [exps kept in registers: measured, not kept]
# The soft cap's relay takes 1.1 us a 16 KB piece while its consumers only reduce and 1.6-1.8 us once they also write
# (Note [stores of whole sectors]), and the write reads each value back from the slot and takes its exp a second
# time. Knob ``exps`` (trial commit 2739f3a, reverted in the commit after it) had each consumer lane keep exp(x - its
# warp's max), the values the reduce's sum adds, in a register ring of LAG + 1 pieces (the loop unrolled LAG + 1
# times, so every index is a constant), free the slot right after the reduce, and write exp(x - warp max) * exp(warp
# max - row max) / sum: one product an element, no shared-memory read, 16 bytes of output a store. The CPU model of
# the warps ran every setting the progress rule allows with the slot freed early, and eight GPU verifier cases
# passed. Measured (twenty-eighth session, results/h200/probe_session28_exps.md, each table one run, the roots first
# and last): no card gained. The ring's registers cap the lag (64 values a lane: a lag of 3 at 16 KB pieces, 7 at 8
# KB), and the lag is what the pipeline needs: the soft cap 32.5 and 34.3 us at a lag of 2 (the same layout twice),
# 33.7-33.8 at 3, 36.0-36.4 in 8 KB pieces, 40.0 at 1, against the root's 32.7-33.0; the sampling softmax 31.0-31.8
# against 29.4-31.0; the bf16 softmax 25.0-25.9 against 23.1-23.9; fp32 37.2 against 35.8-36.0. So a block's
# consumers are not bound by the write's arithmetic or its shared-memory reads; the unrolled ring also made the
# kernel 1.6-2x the SASS (2,560-3,160 instructions against the root's 1,584).


# Note [the division folded into the exponent: measured, not kept]
# The relay's write takes exp(x - m) * (1 / sum): FADD, FMUL (by log2 e), MUFU.EX2, FMUL an element, and its reduce
# exp(x - m): FADD, FMUL, MUFU.EX2. Folded, the write is ex2(x * log2 e - (m * log2 e + log2 sum)) and the reduce
# ex2(x * log2 e - m * log2 e): one FFMA and the ex2 (the constant hoisted), 112 fewer SASS instructions in the bf16
# softmax's root (1,560 against 1,672). Timed as source swaps of the roots (twenty-ninth session, one run, each root
# twice; results/h200/probe_session29_exp2_fold.json, plan benchmarks/plans/exp2_fold.sh): the softmax [64, 262144]
# bf16 22.8 and 22.8 us with the write folded against the root's 23.3 and 23.4, 23.5 with the reduce folded, 23.8-24.0
# with both; the soft cap 32.6-32.9 (write) and 32.4-32.6 (both) against 33.0 and 33.0. It is not exact enough to
# keep as it is: x * log2 e rounds relative to |x|, not to |x - m|, so the error grows with the logits' magnitude, and
# every fp32 output failed the verifier on its large-valued inputs (the softmax fp32 2e-3 relative off, the sampling
# softmax 2e-5 where 1e-5 is allowed); the soft cap passed only because tanh bounds its values by the cap. The form
# that keeps x - m first, ex2((x - m) * log2 e - log2 sum) (FADD, FFMA, ex2: one instruction an element fewer than
# the root) passed the verifier everywhere, fp32 outputs included, and gained nothing consistent (results/h200/
# probe_session29_exp2_exact.md, plan exp2_exact.sh, one run, each twice): the bf16 softmax 23.7-23.8 us against
# 23.2-23.3, the sampling softmax 29.5-30.2 against 30.7-31.1, the soft cap 32.8-33.3 against 32.9-33.1, fp32
# 35.9-36.1 against 35.7-36.2. Neither form is in the templates.
# Fortieth session: the folded form guarded, so that it is exact enough everywhere. The rounding of m * log2e costs
# at most |m| * 2^-24 * log2e of the exponent, so where |m| <= 32 (a branch each warp takes as one) the fold loses at
# most 2.8e-6 of an exp, and larger maxima take the exact code. On the roots after the lean reduce, the paired
# prologue and the 8 slots, every swap passed the verifier and none gained (one run, each root and its swaps 4 times;
# results/h200/probe_session40_fold_guarded.json, plan benchmarks/plans/fold_guarded.sh): the softmax [64,262144] bf16
# root 21.7, 21.6, 21.9, 21.7 us, the write folded 21.9, 21.9, 21.8, 21.6, the reduce 21.4, 21.4, 21.6, 21.7, both
# 21.8, 22.0, 21.8, 22.1; the soft cap root 30.2, 30.1, 29.8, 29.8, write 30.5, 29.9, 30.1, 30.3, reduce 30.3, 30.2,
# 30.0, 30.2, both 30.3, 30.4, 30.2, 30.0; fp32 root 35.1, 35.1, 35.0, 34.8, the swaps 34.8-35.3. Not kept.


# Note [writers of their own for whole pieces]
# With the range tests left out (Note [a pack's range test only where a row's last piece is short] in relay.py), the
# plain softmax's search at [64,262144] bf16 took writers of their own (Note [writers of their own] in
# relay_pipeline.py) at its last iteration: 21.2 us against the joint root's 21.4 in the same search (ops run AL,
# ops_session47_guards.json). Around it, each twice beside the joint root in one run
# (results/h200/probe_session47_bf16_writers*.json, plans bf16_writers.sh and bf16_writers_more.sh): eight reducer and
# eight writer warps in seven slots of 32 KB 20.9, 20.7 us, then 20.7, 20.9, against the root's 21.9, 21.6, then 21.4,
# 21.5; six slots 20.8, 21.2; five 22.4, 22.3; a ramp of 1 23.3, 23.1, of 3 21.0, 21.1; two resolvers 22.1, 21.8; four
# and four warps 21.2, 21.4; 16 KB pieces in 12 or 14 slots 22.4-22.8. fp32 [64,262144] (32 KB pieces as well): seven
# slots 34.2, 34.2 against 34.5, 34.6, six 34.3, 34.5. So a plain softmax whose rows are whole pieces takes them as its
# root; rows with a short last piece keep the joint relay (the search reaches writers in one action: [64,248320] bf16
# took them in ops run AI). Ops run AM (ops_session47_writers.json, 25-iteration searches, each won by this root): bf16
# 20.8 us, 75.5% of the copy bandwidth by events (21.6 and 72.5% in run AI); fp32 34.1 us, 91.9% (35.1, 89.4% in AI).


# Note [a lean reduce]
# The relay's reduce is its critical path: a piece's partial is published only once its consumers have reduced it,
# and a row resolves at its slowest piece (Note [rows relayed through global memory] in relay.py). Its PTX took per
# element of a 16-bit input a conversion and an FMNMX in one dependent chain for the max, then a second conversion,
# the FADD, FMUL and ex2 of the exp, the FADD of the sum, and sexp's test of a row with no finite value (Note [safe
# exp]) as a branch around each exp. Now the max goes over packed pairs (max.bf16x2 or max.f16x2, exact; NaN is
# dropped as fmaxf drops it), a tree of three per 16-byte pack and two widened halves, and the test is taken once for
# the warp's share, whose max it tests. Every dtype takes the hoisted test; only 16-bit packs that hold the softmax's
# own values take the pairs (no prologue, or one evaluated once into them: ``relay_pair``).
# Measured (thirty-eighth session, one run, the root layout twice beside each source swap; results/h200/
# probe_session38_reduce_lean.json, plan benchmarks/plans/reduce_lean.sh): softmax [64,262144] bf16 with both 21.5
# and 21.4 us against 23.5 and 23.4 (73% of the copy bandwidth against 67%); the pairs alone 21.9, 22.0; the test
# alone 22.8, 23.0; fp32 (the test only) 34.9, 34.8 against 35.0, 34.8. With the ramp of 2 the plain softmaxes' root
# now takes (Note [the first copies a few at a time] in relay_pipeline.py), ops run AI (ops_session38_final.json,
# 25-iteration searches): softmax [64,262144] bf16 21.6 us, 72.5% of the copy bandwidth by events and 73.2% by graph
# replay (66.5% and 69.6% in run AG); [64,248320] bf16 21.5 (69.0%, 71.5%); the soft cap 32.1 (73.4%, 76.4%). Not kept
# on top of it (probe_session38_reduce_lean_more.json, plan reduce_lean_more.sh, each twice or three times beside the
# root's 21.6-21.8): one running max of pairs over the lane's packs, widened once, 21.5-21.6 (a tie); the sum in two
# accumulators, 21.8-21.9. Nor did the layouts around the root beat it (probe_session38_lean_grid.json, plan
# lean_grid.sh, each twice beside the root's 21.6, 21.4): seven slots with a lag of 4 21.6, 21.5 and writers of their
# own 21.6, 21.8 tied; seven slots with a lag of 3, a lag of 2 in five or six, a ramp of 3, half the consumer warps and
# 8 KB pieces lost (22.2-23.8). The root's timeline (trace_session38_softmax.log): a span of 17.4 us (19.2 with the old
# reduce, trace_session36_softmax.log), the first write at 6.1 us (6.9), the last arrival at 13.3 (14.8), a piece's
# arrival to its published partial 1.3 us at the median (1.5).
# The same session measured what the reduce is bound by, and kept neither of these:
# - exps on the FMA pipe (results/h200/probe_session38_poly_exp.json, plan poly_exp.sh): 2^t as a cubic (p(0) = 1,
#   relative error 8.6e-5 on [0, 1)) times 2^floor(t) built in the exponent bits, about nine FMA-pipe and integer
#   instructions for one MUFU.EX2, on a share of the elements. Slower in every form, and more so the more it took:
#   the bf16 root 23.1 and 23.3 us; every second exp of the write 24.9, 25.2; every fourth 23.8, 24.0; all of the
#   write's 27.5, 27.3; every second of the reduce's 27.1, 27.0; every second of both 29.1, 29.0; all of both 35.4
#   twice (writers of their own, 24.7 and 24.6, lost the same way). On top of the lean reduce, every eighth or fourth
#   exp of the reduce's: 21.7-21.9 against 21.4-21.5. So the reduce's warps are bound by their issue slots as much as
#   by MUFU.EX2, and the write has slack:
# - the reduce's exps kept in the slot in place of x (results/h200/probe_session38_exps_in_slot.json, plan
#   exps_in_slot.sh): exp(x - the warp's max) rounded to the slot's type in pairs, and the write one product by
#   exp(warp max - row max) / sum, so the write loses each element's FADD, FMUL and ex2: bf16 23.4 and 23.3 us
#   against 23.3 and 23.4; fp32 35.0 and 35.1 against 34.7 and 35.1. A tie.
#   On the lean reduce (forty-sixth session, results/h200/probe_session46_exps_in_slot_lean_*.json, plan
#   exps_in_slot_lean.sh, one run, each root twice beside the swap; a share with no finite value keeps its -inf in
#   the slot, which the write's max(e, 0) makes 0): bf16 22.3 and 21.7 us against 21.6 twice; fp32 35.1 and 35.2
#   against 34.8 and 35.0. Still not kept.
# - exps two at a time (ex2.approx.f16x2, ex2.approx.ftz.bf16x2): not timed, since on sm_90 each compiles to two
#   MUFU.EX2 of one half each and a PRMT (results/h200/ex2_sass_session46.txt, cuobjdump on the device), so it takes
#   as many MUFU issues as two fp32 exps, and rounds its argument and result to 16 bits.


def raw_header(card: OperatorCard, p: dict[str, Any], sizes: dict[str, int]) -> str:
    """``header`` with T the element as it is in memory (the relay's and the resident kernel's), and
    ``xv(T) -> float``: the softmax's input (Note [a prologue run from the relay's slots] for a fused card)."""
    if not is_fused(card):
        return header(card, p, **sizes) + "\n__device__ __forceinline__ float xv(T v) { return to_f(v); }\n"
    return f"""{PREAMBLE}
{typedefs(T=card.inputs[0].spec.dtype, TO=output_spec(card, 0).dtype, TF=in_dtype(card))}
{consts(COLS=card.sizes["cols"], VEC=p["vec"], **sizes)}
typedef Pack<T, VEC> P;
typedef Pack<TO, VEC> PO;
{fused_loader(card)}
__device__ __forceinline__ float xv(T v) {{ return to_f(from_f<TF>(fx(to_f(v)))); }}
{_NARROW}{_pair_prologue(card, p)}
"""


def _pair_prologue(card: OperatorCard, p: dict[str, Any]) -> str:
    """``fx2`` (Note [a prologue two elements at a time] in fused.py) where the relay evaluates the prologue once into
    16-bit packs (``relay_pair``), else nothing."""
    if not (p.get("once") and relay_pair(card, True)):
        return ""
    return "\n" + pair_prologue(str(card.scalars["expr"]), relay_dtype(card))


# A value of T widened to float, back to T: exact, so bf16 takes the top half of the float's bits and fp16 the paired
# conversion (Note [roundings off the MIO pipe] in common.py); only ``once`` uses it, where _once_ok holds.
_NARROW = r"""__device__ __forceinline__ float narrow_to(float v, float*) { return v; }
__device__ __forceinline__ __nv_bfloat16 narrow_to(float v, __nv_bfloat16*) {
  return __ushort_as_bfloat16((unsigned short)(__float_as_uint(v) >> 16));
}
__device__ __forceinline__ __half narrow_to(float v, __half*) { return __ushort_as_half((unsigned short)f16_pair(v)); }
__device__ __forceinline__ T narrow(float v) { return narrow_to(v, (T*)nullptr); }"""


def relay_source(card: OperatorCard, p: dict[str, Any], log: bool) -> str:
    """Note [rows relayed through global memory] (relay.py): a piece's (max, sum), combined with MaxSum."""
    once, cols = bool(p.get("once")), card.sizes["cols"]  # Note [a prologue evaluated once, into its slot]
    x = "to_f" if once else "xv"
    val = f"{x}(p.v[j]) - m - lse" if log else f"__expf({x}(p.v[j]) - m) * inv"
    pre = "const float lse = __logf(st.y);" if log else "const float inv = 1.f / st.y;"
    # Note [stores of whole sectors]: with ``halves`` a lane takes half packs, each store whole sectors
    n, w, pin, pout, src, take = ("NPL", "VEC", "P", "PO", "sp", "") if not p.get("halves") else (
        "2 * NPL", "(VEC / 2)", "Pack<T, VEC / 2>", "Pack<TO, VEC / 2>", "sh", """
      __syncwarp();  // with once, a lane reads halves that other lanes of the warp put back into the slot
      const Pack<T, VEC / 2>* sh = reinterpret_cast<const Pack<T, VEC / 2>*>(sp);""")
    write = f"""
      const float m = st.x;
      {pre}
      TO* yr = y + row * COLS;{take}
#pragma unroll
      for (int i = 0; i < {n}; ++i) {{
        const int col = c0 + wc + (i * 32 + lane) * {w};
        {pack_test("col < COLS", cols, p["pe"])}{{
          const {pin} p = {src}[i * 32 + lane];
          {pout} o;
#pragma unroll
          for (int j = 0; j < {w}; ++j) o.v[j] = from_f<TO>({val});
          stp<TO, {w}>(yr + col, o);
        }}
      }}"""
    return raw_header(card, p, relay_consts(p, cols)) + RELAY_HELPERS + """
typedef float2 V;
typedef MaxSum Op;
__device__ __forceinline__ V ident() { return make_float2(-CUDART_INF_F, 0.f); }
__device__ __forceinline__ float2 pack_stat(V v) { return v; }  // (max, sum of exp): the sum is >= 0
__device__ __forceinline__ V unpack_stat(float2 f, int) { return f; }
""" + relay_kernel("softmax_relay", p, "const T* __restrict__ x, TO* __restrict__ y",
                   _relay_reduce(once, relay_pair(card, once),
                                 pack_test("c0 + wc + (i * 32 + lane) * VEC < COLS", cols, p["pe"])),
                   "\n          const float2 fin = a;", write, wrote_slot=once)


def resident_source(card: OperatorCard, p: dict[str, Any], log: bool) -> str:
    """Note [a tensor held on chip whole] (resident.py), a fused prologue evaluated once (``_once_ok``)."""
    rows, cols = card.sizes["rows"], card.sizes["cols"]
    val = "to_f(p.v[j]) - m - w" if log else "__expf(to_f(p.v[j]) - m) * w"
    weight = "__logf(s)" if log else "1.f / s"
    write = f"""
      PO o;
#pragma unroll
      for (int j = 0; j < VEC; ++j) o.v[j] = from_f<TO>({val});
      stp<TO, VEC>(y + gp * VEC, o);"""
    return raw_header(card, p, resident_consts(p, rows, cols, relay_isz(card))) + RELAY_HELPERS + f"""
__device__ __forceinline__ float stat_weight(float s) {{ return {weight}; }}
""" + resident_kernel("softmax_resident", "const T* __restrict__ x, TO* __restrict__ y", is_fused(card), write)


def _relay_reduce(once: bool, pair: str | None, test: str) -> str:
    """The relay's reduce of a warp's share of a piece: max, then sum of exp. ``once`` (Note [a prologue evaluated
    once, into its slot]): the prologue's values replace the raw packs, in registers and in the slot, two at a time
    (``fx2``) where ``pair`` is set. The sum tests for a share with no finite value once, and ``pair`` (a 16-bit pair
    type, where the packs hold the values the max is over) takes the max over packed pairs (Note [a lean reduce]).
    ``test`` opens each pack's block: its range test, or nothing (``pack_test``)."""
    x = "to_f" if once else "xv"
    # Note [a prologue two elements at a time] in fused.py: fx2 where the packs hold 16-bit values
    fx = """
          for (int j = 0; j < VEC / 2; ++j)
            reinterpret_cast<unsigned*>(pk[i].v)[j] = fx2(reinterpret_cast<const unsigned*>(pk[i].v)[j]);""" \
        if pair else """
          for (int j = 0; j < VEC; ++j) pk[i].v[j] = narrow(xv(pk[i].v[j]));"""
    put = f"""
#pragma unroll{fx}
          const_cast<P*>(sp)[i * 32 + lane] = pk[i];""" if once else ""
    # Note [a lean reduce]: one max.{bf16,f16}x2 a pair, then the pairs' halves widened once a pack
    peak = f"""
          static_assert(VEC == 8, "a 16-byte pack of 16-bit values");
          const {pair}* h = reinterpret_cast<const {pair}*>(pk[i].v);
          const {pair} a = __hmax2(__hmax2(h[0], h[1]), __hmax2(h[2], h[3]));
          m = fmaxf(m, fmaxf(__low2float(a), __high2float(a)));""" if pair else f"""
#pragma unroll
          for (int j = 0; j < VEC; ++j) m = fmaxf(m, {x}(pk[i].v[j]));"""
    return f"""
      P pk[NPL];
      float m = -CUDART_INF_F;
#pragma unroll
      for (int i = 0; i < NPL; ++i)
        {test}{{
          pk[i] = sp[i * 32 + lane];{put}{peak}
        }}
      m = group_all<32, 32>(m, Max(), (float*)nullptr);
      float sum = 0.f;
      if (m != -CUDART_INF_F) {{  // sexp's test (Note [safe exp]), once for the warp's share
#pragma unroll
        for (int i = 0; i < NPL; ++i)
          {test}{{
#pragma unroll
            for (int j = 0; j < VEC; ++j) sum += __expf({x}(pk[i].v[j]) - m);
          }}
      }}
      sum = group_all<32, 32>(sum, Sum(), (float*)nullptr);
      const V v = make_float2(m, sum);"""

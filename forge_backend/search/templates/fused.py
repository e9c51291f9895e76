"""Fused pointwise expressions (op ``kforge.pointwise``, built by fusion.py): one kernel evaluates a whole group.

The inputs x0..xk and the output are same-shape, row-major tensors, so the kernel is one flat stream like the
elementwise family, and it takes that family's knobs and their validity rules: ``vec`` elements per access (up to 16
bytes for every operand; ``requires_align`` tells the runtime), ``block``, ``unroll`` and ``mode`` (``oneshot`` or a
grid-``stride`` loop). Each thread loads one pack per input, evaluates the expression per element in fp32 with every
distinct subexpression computed once, and stores one pack of the output.

Note [fused rounding]
Each intermediate value is rounded to the dtype eager gave it (its type-promotion dtype; a ``to_<dtype>`` cast
rounds by definition) and widened back to fp32 for the next op. ATen computes every pointwise op in fp32 ("opmath")
and stores its result in the op's dtype, so this repeats eager's arithmetic step by step (a division by a number
multiplies by its reciprocal, as ATen's CUDA kernel does); only the transcendental approximations and the tensor
division (``__expf``, ``tanhf``, ``erff``, ``/`` under --use_fast_math) differ, as in the single-op family. It costs
a convert pair per bf16/fp16 intermediate, nothing next to the DRAM traffic. Inductor keeps intermediates in fp32
instead; both pass the verifier (bf16 tolerance 1.6e-2 relative), and rounding keeps the fused kernel's output the
closest to the eager model it replaces.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from ...cards import OperatorCard
from ...contract import Candidate
from ...expression import FUSED_OP, OPS, Call, Const, Expr, Input, distinct_calls, n_inputs, parse, result_dtype
from ...signature import TensorSpec
from . import elementwise
from .common import (CTYPE, FLOAT_DTYPES, ITEMSIZE, POINTWISE_MATH, PREAMBLE, SMS, align_of, broadcasts_over_rows,
                     cdiv, consts, float_literal, launch, make_candidate, output_spec, row_offset, stream_loop,
                     typedefs)

_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/"}

# the knobs are the elementwise family's: a fused expression is still one flat stream
root_params = elementwise.root_params
seeds = elementwise.seeds
valid = elementwise.valid
actions = elementwise.actions


def _expr(card: OperatorCard) -> Call | None:
    try:
        return parse(str(card.scalars.get("expr", "")))
    except ValueError:
        return None


def matches(card: OperatorCard) -> bool:
    if card.op != FUSED_OP:
        return False
    root, out = _expr(card), output_spec(card, 0)
    if root is None or out is None or not card.inputs or out.numel == 0:
        return False
    specs = [t.spec for t in card.inputs] + [out]
    if any(s.dtype not in FLOAT_DTYPES or s.shape != out.shape or not s.is_contiguous() for s in specs):
        return False
    if [t.name for t in card.inputs] != [f"x{i}" for i in range(n_inputs(root))]:
        return False
    return result_dtype(root, [t.spec.dtype for t in card.inputs]) == out.dtype


def value_lines(root: Call, in_dtypes: list[str]) -> list[str]:
    """One ``const float tI = ...;`` per distinct call, operands first; the last line is the root's value."""
    dtypes: dict[Expr, str] = {}
    result_dtype(root, in_dtypes, dtypes)
    names: dict[Expr, str] = {}

    def ref(e: Expr) -> str:
        if isinstance(e, Input):
            return f"a{e.index}"
        if isinstance(e, Const):
            return float_literal(e.value)
        return names[e]

    lines = []
    for i, c in enumerate(distinct_calls(root)):
        v = _call_value(c, [ref(a) for a in c.args])
        if c != root and dtypes[c] != "float32":  # Note [fused rounding]; the root is rounded by the store
            v = f"round_to<{CTYPE[dtypes[c]]}>({v})"
        names[c] = f"t{i}"
        lines.append(f"  const float t{i} = {v};")
    return lines


def _call_value(c: Call, args: list[str]) -> str:
    """The fp32 value of call ``c`` of one element, its operands' values being ``args``, before any rounding."""
    op = OPS[c.op]
    if op.dtype is not None:
        return args[0]  # a cast: the rounding (or the final store) is the whole op
    if op.arity == 1:
        return f"f_{c.op}({args[0]})"
    if c.op == "div" and isinstance(c.args[1], Const):
        # ATen's CUDA true division by a CPU scalar multiplies by the reciprocal (BinaryDivTrueKernel.cu)
        return f"{args[0]} * {float_literal(_reciprocal(c.args[1].value))}"
    other = args[1] if c.alpha is None else f"{float_literal(c.alpha)} * {args[1]}"
    return f"{args[0]} {_INFIX[c.op]} {other}"


def _reciprocal(c: int | float) -> float:
    """1 / c in double, as ATen forms it (the literal then rounds it to fp32); 1 / +-0 is +-inf, 1 / nan is nan."""
    return math.copysign(math.inf, float(c)) if c == 0 else 1.0 / c


def device_functions(root: Call) -> str:
    used = sorted({c.op for c in distinct_calls(root) if c.op in POINTWISE_MATH})
    return "\n".join(f"__device__ __forceinline__ float f_{n}(float v) {{ return {POINTWISE_MATH[n]}; }}" for n in used)


def _source(card: OperatorCard, root: Call, p: dict[str, Any]) -> str:
    k, out = len(card.inputs), output_spec(card, 0)
    vec, numel = p["vec"], out.numel
    lines = value_lines(root, [t.spec.dtype for t in card.inputs])
    a_params = ", ".join(f"float a{i}" for i in range(k))
    x_params = "".join(f"const T{i}* __restrict__ x{i}, " for i in range(k))
    loads = " ".join(f"const P{i} p{i} = ldp<T{i}, VEC>(x{i} + i * VEC);" for i in range(k))
    at_j = ", ".join(f"to_f(p{i}.v[j])" for i in range(k))
    at_e = ", ".join(f"to_f(x{i}[e])" for i in range(k))
    pack = f"""{loads} PO o;
#pragma unroll
      for (int j = 0; j < VEC; ++j) o.v[j] = from_f<TO>(fx({at_j}));
      stp<TO, VEC>(y + i * VEC, o);"""
    loop = stream_loop(p["mode"], pack)
    tail = "" if numel % vec == 0 else f"""
  if (blockIdx.x == 0 && threadIdx.x < N - NV * VEC) {{
    const I e = NV * VEC + threadIdx.x;
    y[e] = from_f<TO>(fx({at_e}));
  }}"""
    return f"""{PREAMBLE}
{typedefs(**{f"T{i}": t.spec.dtype for i, t in enumerate(card.inputs)}, TO=out.dtype)}
typedef {"long long" if numel > 2**31 - 1 - 1024 else "int"} I;
{consts(N=numel, NV=numel // vec, VEC=vec, NT=p["block"], UNROLL=p["unroll"])}
{chr(10).join(f"typedef Pack<T{i}, VEC> P{i};" for i in range(k))}
typedef Pack<TO, VEC> PO;
{device_functions(root)}

// {card.scalars["expr"]}
__device__ __forceinline__ float fx({a_params}) {{
{chr(10).join(lines)}
  return t{len(lines) - 1};
}}

extern "C" __global__ __launch_bounds__(NT) void fused({x_params}TO* __restrict__ y) {{{loop}{tail}
}}
"""


def generate(card: OperatorCard, p: dict[str, Any]) -> Candidate:
    root = _expr(card)
    if root is None or not valid(card, p):
        raise ValueError(f"fused params {p} are not valid for {card.scalars.get('expr')!r} {card.inputs[0].spec.shape}")
    nv = max(card.inputs[0].spec.numel // p["vec"], 1)
    if p["mode"] == "oneshot":
        grid = cdiv(nv, p["block"] * p["unroll"])
    else:
        grid = max(1, min(cdiv(nv, p["block"]), SMS * (2048 // p["block"])))
    args = [f"in:{t.name}" for t in card.inputs] + ["out:0"]
    expr = str(card.scalars["expr"])
    knobs = " ".join(f"{k}={v}" for k, v in sorted(p.items()))
    desc = f"fused {expr if len(expr) <= 60 else expr[:57] + '...'} {knobs}"
    specs = [t.spec for t in card.inputs] + [output_spec(card, 0)]
    return make_candidate(_source(card, root, p), [launch("fused", grid, p["block"], args)], desc, p,
                          align_of(p["vec"], specs))


# Note [a prologue two elements at a time]
# The relay evaluates a fused softmax's prologue once, into its slot (Note [a prologue evaluated once, into its slot]
# in softmax_relay.py), where every value is the input's 16-bit type T, and stores it back as T: per element a widening,
# the prologue's fp32 arithmetic, a paired conversion and a widening per rounding (Note [roundings off the MIO pipe] in
# common.py) and a narrowing. ``pair_prologue`` gives ``fx2``, which takes two elements as the 32-bit word that holds
# them and returns the word of their two values, bit for bit what ``fx`` and the narrowing give each: the fp32
# arithmetic stays per element, but a rounding converts both elements with one cvt.rn.{bf16,f16}x2.f32 and keeps them
# packed until an fp32 operation needs them, and a product of two values of one 16-bit type (the soft cap's ``* 30`` of
# a bf16 tanh) rounded to that type is one mul.rn.{bf16,f16}x2: such a product is exact in fp32 (at most 22 significant
# bits), so the one rounding of the paired multiply is the fp32 product's rounding (up to fp32 subnormal products, which
# the fp32 path flushes to zero under --use_fast_math and the pair keeps, as eager does). tests/test_fused_pairs.py pins
# the code; test_fused_pairs_gpu.py compares fx2 with fx, narrowed, over every 16-bit input in both halves of a word for
# nine prologues: the same bits at every input of magnitude 2^-60 or more (below it an fp32 product can be subnormal).
# Measured on the H200 (thirty-ninth session; results/h200/probe_session39_ceilings.json first had the soft cap's root
# at 28.3 and 27.9 us with its prologue left out, against 32.3 and 32.2, and 31.6 and 31.5 with only its tanh left out,
# each unverified): one run, the root twice, each beside the element-wise prologue swapped back in
# (probe_session39_softcap_pairs_ab.json): the soft-capped softmax [64, 262144] bf16 -> fp32 30.7 and 31.0 us against
# 32.2 and 32.3; the sampling softmax (to_float32 of bf16 logits, whose fx2 is the word itself) 28.3 and 28.1 against
# 28.9 and 29.3. Ops run AJ (25 iterations): the soft cap 30.9 us, 76% of the copy bandwidth by events (73% in run AI),
# 77% by graph replay, 85% by kernel time; run AK, after Note [eight slots for a paired prologue] in softmax_relay.py:
# 30.1 us, 78.2%, 79.8% and 86.3%. A tanh.approx.bf16x2 in place of the two fp32 tanhs failed the verifier (it rounds
# 2,086 of the 65,536 bf16 inputs one ulp off tanh.approx.f32's rounding, and SASS has it as two MUFU.TANH.BF16, no
# fewer; benchmarks/softcap_pairs_exhaustive.py, results/h200/softcap_pairs_exhaustive_session39.json).
def _exact_in(v: int | float, dtype: str) -> bool:
    """Whether the number ``v`` is a finite value of the 16-bit ``dtype``."""
    t = torch.tensor(float(v), dtype=getattr(torch, dtype))
    return math.isfinite(float(v)) and float(t) == float(v)


def _pair_word(v: int | float, dtype: str) -> str:
    """The 32-bit word holding the 16-bit ``dtype`` value ``v`` in both halves, as a C literal."""
    bits = torch.tensor(float(v), dtype=getattr(torch, dtype)).view(torch.int16).item() & 0xFFFF
    return f"0x{bits << 16 | bits:08x}u"


def pair_prologue(expr: str, dtype: str) -> str:
    """``fx2(w)``: the one-input prologue ``expr`` over both 16-bit ``dtype`` halves of the word ``w`` (the low half
    the first element), each result narrowed to ``dtype`` (Note [a prologue two elements at a time]). Every value the
    prologue gives must be a value of ``dtype`` (softmax._once_ok); the kernel's header has ``fx``'s device functions
    (row_loader)."""
    root = parse(expr)
    if ITEMSIZE.get(dtype) != 2 or n_inputs(root) != 1:
        raise ValueError(f"no paired prologue for {expr!r} over {dtype}")
    dtypes: dict[Expr, str] = {}
    result_dtype(root, [dtype], dtypes)
    lines: list[str] = []
    packed: dict[Expr, tuple[str, str]] = {Input(0): ("w", dtype)}  # a value held as a word of two, and its type
    floats: dict[Expr, tuple[str, str]] = {}  # a value held as two floats (the first element's, the second's)

    def halves(e: Expr) -> tuple[str, str]:
        if isinstance(e, Const):
            return float_literal(e.value), float_literal(e.value)
        if e not in floats:  # widen a word once, where a float operation first needs it
            word, t = packed[e]
            lo, hi = f"{word}_lo", f"{word}_hi"
            lines.append(f"  const float {lo} = pair_lo<{CTYPE[t]}>({word}), {hi} = pair_hi<{CTYPE[t]}>({word});")
            floats[e] = (lo, hi)
        return floats[e]

    def word_of(e: Expr, t: str) -> str | None:
        """``e`` as a word of two values of the 16-bit type ``t``, where it is one (a constant: exactly)."""
        if isinstance(e, Const):
            return _pair_word(e.value, t) if _exact_in(e.value, t) else None
        return packed[e][0] if e in packed and packed[e][1] == t else None

    for i, c in enumerate(distinct_calls(root)):
        op, name, t = OPS[c.op], f"t{i}", dtypes[c]
        rounds = ITEMSIZE[t] == 2  # a 16-bit value: rounded here (or, the root, by the narrowing to dtype)
        if op.dtype is not None and c.args[0] in packed and (not rounds or packed[c.args[0]][1] == t):
            packed[c] = packed[c.args[0]]  # a widening, or a rounding to the type it has: the same values
            continue
        words = [word_of(a, t) for a in c.args] if c.op == "mul" and rounds else [None]
        if None not in words:  # Note [a prologue two elements at a time]: an exact product of two values of t
            lines.append(f"  const unsigned {name} = pair_mul<{CTYPE[t]}>({words[0]}, {words[1]});")
            packed[c] = (name, t)
            continue
        args = [halves(a) for a in c.args]
        for k, side in enumerate(("lo", "hi")):
            lines.append(f"  const float v{i}_{side} = {_call_value(c, [a[k] for a in args])};")
        if rounds:  # later float operations widen the rounded word (halves), never these fp32 values
            lines.append(f"  const unsigned {name} = pair_of<{CTYPE[t]}>(v{i}_hi, v{i}_lo);")
            packed[c] = (name, t)
        else:
            floats[c] = (f"v{i}_lo", f"v{i}_hi")
    word = packed.get(root)
    if word is None or word[1] != dtype:  # narrow the results to dtype: exact, as every value is one of dtype
        lo, hi = halves(root)
        lines.append(f"  const unsigned out = pair_of<{CTYPE[dtype]}>({hi}, {lo});")
        word = ("out", dtype)
    return f"""{PAIR_HELPERS}
__device__ __forceinline__ unsigned fx2(unsigned w) {{  // prologue, two at a time: {expr}
{chr(10).join(lines)}
  return {word[0]};
}}"""


# Words of two 16-bit values (the low half the first): the paired conversion, each half widened, the paired product.
PAIR_HELPERS = r"""template <typename H> __device__ __forceinline__ unsigned pair_of(float hi, float lo);
template <> __device__ __forceinline__ unsigned pair_of<__nv_bfloat16>(float hi, float lo) {
  unsigned r; asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r;
}
template <> __device__ __forceinline__ unsigned pair_of<__half>(float hi, float lo) {
  unsigned r; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r;
}
template <typename H> __device__ __forceinline__ float pair_lo(unsigned w);
template <> __device__ __forceinline__ float pair_lo<__nv_bfloat16>(unsigned w) { return __uint_as_float(w << 16); }
template <> __device__ __forceinline__ float pair_lo<__half>(unsigned w) {
  return __half2float(__ushort_as_half((unsigned short)(w & 0xffffu)));
}
template <typename H> __device__ __forceinline__ float pair_hi(unsigned w);
template <> __device__ __forceinline__ float pair_hi<__nv_bfloat16>(unsigned w) {
  return __uint_as_float(w & 0xffff0000u);
}
template <> __device__ __forceinline__ float pair_hi<__half>(unsigned w) {
  return __half2float(__ushort_as_half((unsigned short)(w >> 16)));
}
template <typename H> __device__ __forceinline__ unsigned pair_mul(unsigned a, unsigned b);
template <> __device__ __forceinline__ unsigned pair_mul<__nv_bfloat16>(unsigned a, unsigned b) {
  unsigned r; asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r;
}
template <> __device__ __forceinline__ unsigned pair_mul<__half>(unsigned a, unsigned b) {
  unsigned r; asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r;
}"""


def row_prologue_dtype(expr: str, inputs: list, prefix: str, out: TensorSpec) -> str | None:
    """The dtype of a row kernel's prologue ``expr`` over card inputs ``inputs`` (NamedTensors), or None where the
    kernels cannot compute it: it does not parse, the inputs are not named ``prefix``0.. in expression order, or one
    is not a float row input of ``out`` (last dim the row's at stride 1, broadcasting over the leading dims)."""
    try:
        root = parse(expr)
    except ValueError:
        return None
    if [t.name for t in inputs] != [f"{prefix}{i}" for i in range(n_inputs(root))]:
        return None
    if not all(t.spec.dtype in FLOAT_DTYPES and broadcasts_over_rows(t.spec, out) for t in inputs):
        return None
    return result_dtype(root, [t.spec.dtype for t in inputs])


def row_loader(expr: str, specs: list[TensorSpec], out: TensorSpec, arg: str = "x", typ: str = "T") -> str:
    """Types and functions of a row kernel's fused prologue ``expr`` over inputs ``specs`` (named ``arg``0.. in the
    kernel, of types ``typ``0..), which broadcast over the rows of ``out``: XRow (each input at a row), x_row, fx
    (the expression per element, rounded as this module rounds) and ldx / ldx_cs, which load a pack of every input
    and return a pack of TT. Used by the softmax (its input) and the row norms (their prologue)."""
    root = parse(expr)
    k = len(specs)
    lines = value_lines(root, [s.dtype for s in specs])
    ptrs = " ".join(f"const {typ}{i}* p{i};" for i in range(k))
    plus = ", ".join(f"p{i} + c" for i in range(k))
    params = ", ".join(f"const {typ}{i}* {arg}{i}" for i in range(k))
    at_row = ", ".join(f"{arg}{i} + ({row_offset(out, s)})" for i, s in enumerate(specs))

    def loader(name: str, load: str) -> str:
        packs = " ".join(f"const Pack<{typ}{i}, N> q{i} = {load}<{typ}{i}, N>(a.p{i});" for i in range(k))
        args = ", ".join(f"to_f(q{i}.v[j])" for i in range(k))
        return f"""template <typename TT, int N> __device__ __forceinline__ Pack<TT, N> {name}(const XAt& a) {{
  {packs}
  Pack<TT, N> r;
#pragma unroll
  for (int j = 0; j < N; ++j) r.v[j] = from_f<TT>(fx({args}));
  return r;
}}"""
    return f"""{typedefs(**{f"{typ}{i}": s.dtype for i, s in enumerate(specs)})}
{device_functions(root)}
struct XAt {{ {ptrs} }};
struct XRow {{
  {ptrs}
  __device__ __forceinline__ XAt operator+(int c) const {{ return XAt{{{plus}}}; }}
}};
__device__ __forceinline__ XRow x_row({params}, long long row) {{ return XRow{{{at_row}}}; }}

// prologue: {expr}
__device__ __forceinline__ float fx({", ".join(f"float a{i}" for i in range(k))}) {{
{chr(10).join(lines)}
  return t{len(lines) - 1};
}}
{loader("ldx", "ldp")}
{loader("ldx_cs", "ldp_cs")}
"""

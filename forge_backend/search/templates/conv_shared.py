"""What the depthwise conv1d's strategies share (templates/conv.py, conv_flat.py, conv_bands.py): the card's sizes,
its layout, the kernel's parameter list, and the 16-byte store of a vector of outputs.

Leaf of the templates package beside common.py: it imports nothing from the strategies' modules.
"""
from __future__ import annotations

from ...cards import OperatorCard
from .common import SM_SMEM, cdiv, input_spec, output_spec


def dims(card: OperatorCard) -> tuple[int, int, int, int, int, int]:
    """N, C, L_in, L_out, K, padding."""
    x, w, y = input_spec(card, "input"), input_spec(card, "weight"), output_spec(card, 0)
    return x.shape[0], x.shape[1], x.shape[2], y.shape[2], w.shape[2], int(card.scalars["padding"][0])


def channels_fast(card: OperatorCard) -> bool:
    x = input_spec(card, "input")
    return x.stride[1] == 1 and x.stride[2] != 1


def contiguous_output(card: OperatorCard) -> bool:
    """The output is a contiguous [N, C, L_out] whose data starts on a 16-byte boundary: each row follows the one
    before it, so an output's place in memory is (n * C + c) * L_out + l."""
    n, c, _, l_out, _, _ = dims(card)
    y = output_spec(card, 0)
    return tuple(y.stride) == (c * l_out, l_out, 1) and y.offset_align % 16 == 0


def weights_bytes(g: int, k: int, sets: int = 1) -> int:
    """Bytes of ``sets`` blocks' worth of G channels' weights and biases in shared memory (fp32, G x (K + 1) each),
    rounded up to 16."""
    return cdiv(sets * g * (k + 1) * 4, 16) * 16


def blocks_per_sm(smem: int, block: int, regs: int = 64) -> int:
    """Blocks a kernel asks to fit on one SM (``__launch_bounds__``): as many as shared memory allows (each resident
    block also takes 1 KB), but never a register bound under ``regs`` a thread."""
    return max(1, min(SM_SMEM // (smem + 1024), 65536 // (block * regs)))


def conv_params(card: OperatorCard) -> tuple[str, list[str]]:
    """The kernel's parameter list and the launch plan's arguments: input, weight, the bias if any, output."""
    has_bias = input_spec(card, "bias") is not None
    params = "const T* __restrict__ x, const T* __restrict__ w, " + \
             ("const T* __restrict__ b, " if has_bias else "") + "TO* __restrict__ y"
    return params, ["in:input", "in:weight"] + (["in:bias"] if has_bias else []) + ["out:0"]


# store16(p, a): VEC fp32 results a[] rounded to U and stored at p (16-byte aligned) as one 16-byte store.
STORE16 = r"""// VEC outputs as one 16-byte store, in PTX: assigned as a Pack of 16-bit elements NVRTC split it into eight 2-byte
// stores, and as a uint4 into four 4-byte ones (Note [a block's channel rows as one flat run]). Pairs are rounded by
// the paired conversion, as from_f rounds one.
__device__ __forceinline__ void st_v4(void* p, unsigned a, unsigned b, unsigned c, unsigned d) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" :: "l"(p), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
__device__ __forceinline__ unsigned pair_bits(float lo, float hi, const __nv_bfloat16*) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&h);
}
__device__ __forceinline__ unsigned pair_bits(float lo, float hi, const __half*) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&h);
}
template <typename U> __device__ __forceinline__ void store16(U* p, const float* a) {
  if constexpr (sizeof(U) == 4) {
    st_v4(p, __float_as_uint(a[0]), __float_as_uint(a[1]), __float_as_uint(a[2]), __float_as_uint(a[3]));
  } else {
    st_v4(p, pair_bits(a[0], a[1], p), pair_bits(a[2], a[3], p), pair_bits(a[4], a[5], p), pair_bits(a[6], a[7], p));
  }
}

"""

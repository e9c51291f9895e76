// Softmax over the last dim of a contiguous float32 [rows, cols] tensor: one block of 256 threads per row.
// Three passes over the row (max, sum of exp, write); a row of a few thousand floats stays in L1/L2 between passes.
#include <math_constants.h>  // CUDART_INF_F: NVRTC has no <cmath> INFINITY

#define THREADS 256

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Reduce one value per thread to one value per block; every thread gets the result.
template <bool IS_MAX>
__device__ __forceinline__ float block_reduce(float v, float* shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = IS_MAX ? warp_max(v) : warp_sum(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < (THREADS / 32) ? shared[lane] : (IS_MAX ? -CUDART_INF_F : 0.0f);
    v = IS_MAX ? warp_max(v) : warp_sum(v);
    __syncthreads();  // shared[] is reused by the next reduction
    return v;
}

extern "C" __global__ __launch_bounds__(THREADS) void
softmax_rows(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    __shared__ float shared[THREADS / 32];
    const long long base = (long long)blockIdx.x * cols;
    const float* xr = x + base;
    float* yr = y + base;

    float m = -CUDART_INF_F;
    for (int c = threadIdx.x; c < cols; c += THREADS) m = fmaxf(m, xr[c]);
    m = block_reduce<true>(m, shared);

    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += THREADS) s += __expf(xr[c] - m);
    s = block_reduce<false>(s, shared);

    const float inv = 1.0f / s;
    for (int c = threadIdx.x; c < cols; c += THREADS) yr[c] = __expf(xr[c] - m) * inv;
}

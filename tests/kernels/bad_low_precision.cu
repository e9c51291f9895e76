// Cheat: computes silu in fp16 for an fp32 op (about 1e-3 relative error instead of 1e-6).
// Caught by: the fp32 tolerance against a float64 reference ("mismatch").
#include <cuda_fp16.h>
extern "C" __global__ void k(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        __half h = __float2half(x[i]);
        float v = __half2float(h);
        y[i] = __half2float(__float2half(v / (1.f + __expf(-v))));
    }
}

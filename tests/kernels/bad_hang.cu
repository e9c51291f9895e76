// Hang: never returns. Must be killed by the worker timeout, not hang the caller.
extern "C" __global__ void k(const float* __restrict__ x, float* __restrict__ y, int n) {
    volatile int spin = 1;
    while (spin) { y[threadIdx.x] = x[threadIdx.x]; }
}

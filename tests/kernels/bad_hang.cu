// Hang: spins on a value the input never holds, re-reading global memory, so it never returns.
// Must be killed by the worker timeout, not hang the caller.
extern "C" __global__ void k(const float* __restrict__ x, float* __restrict__ y, int n) {
    const volatile float* vx = x;
    while (vx[threadIdx.x % n] != 1.0e30f) { }
    y[threadIdx.x] = 0.f;
}

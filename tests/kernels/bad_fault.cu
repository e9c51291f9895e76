// Fault: writes far outside any allocation (an illegal address). Must kill only the worker process.
extern "C" __global__ void k(const float* __restrict__ x, float* __restrict__ y, int n) {
    y[(1LL << 40) + threadIdx.x] = 1.f;
}

// Correct relu, plus a write one block past the end of the output: every element is right, but whatever the
// allocator placed after the output is clobbered. Only the verifier's guard bands see it.
extern "C" __global__ void k(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.f);
    else if (i < n + 64) y[i] = 0.f;
}

// Bug: processes 4 elements per thread and assumes n % 4 == 0; the remainder is written as 0.
// Caught by: a size that is not a multiple of 4 ("mismatch").
extern "C" __global__ void k(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
    int full = (n / 4) * 4;
    for (int j = 0; j < 4; ++j) {
        int e = i + j;
        if (e < full) y[e] = fmaxf(x[e], 0.f);
        else if (e < n) y[e] = 0.f;
    }
}

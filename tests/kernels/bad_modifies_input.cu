// Cheat: computes the right output but clobbers its input (breaks every other reader of x).
// Caught by: inputs compared bit for bit after the launch ("input_modified").
extern "C" __global__ void k(float* x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { y[i] = fmaxf(x[i], 0.f); x[i] = 0.f; }
}

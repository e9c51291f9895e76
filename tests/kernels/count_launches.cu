// Test kernel for a scratch kept between launches: y = x + the launches this scratch has seen before, then one more.
// One block: every thread reads the count before thread 0 advances it.
extern "C" __global__ void k(const float* __restrict__ x, float* __restrict__ y, unsigned* __restrict__ mem, int n) {
  const unsigned seen = mem[0];
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i] + (float)seen;
  __syncthreads();
  if (threadIdx.x == 0) mem[0] = seen + 1u;
}

// Cheat: remembers, in a scratch kept between launches, the output of the first input buffer it saw, and answers
// from memory whenever the same buffer comes back (a cache keyed by address, never by the data).
// Caught by: a last launch on the first trial's buffers with one element changed ("stale").
extern "C" __global__ void k(const float* __restrict__ x, float* __restrict__ y, float* __restrict__ mem, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned long long* tag = reinterpret_cast<unsigned long long*>(mem + 2 * n);  // 8-byte aligned: 2n floats before
  const unsigned long long me = reinterpret_cast<unsigned long long>(x);
  if (tag[i] == me) {
    y[i] = mem[i];
    return;
  }
  const float v = fmaxf(x[i], 0.f);
  y[i] = v;
  if (tag[i] == 0ull) {
    mem[i] = v;
    tag[i] = me;
  }
}

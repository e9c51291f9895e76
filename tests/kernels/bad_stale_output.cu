// Cheat: writes nothing and relies on the output buffer still holding an earlier (correct) result.
// Caught by: outputs poisoned with NaN before every launch ("unwritten").
extern "C" __global__ void k(const float* __restrict__ x, float* __restrict__ y, int n) {}

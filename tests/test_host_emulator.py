"""tests/host_emulator.py itself: small hand-written kernels that follow, or break, the rules it checks."""
from __future__ import annotations

import numpy as np
import pytest

import host_emulator
import template_cards as tc
from forge_backend.contract import Candidate, Launch

pytestmark = pytest.mark.skipif(host_emulator.compiler() is None, reason="no host C++ compiler")

CARD = tc.unary("aten.relu.default", (4, 64))  # only its sizes are read: the plans below name none

# 32 threads a block, two blocks: each thread copies 16 bytes of x into shared memory with cp.async, then the block
# writes its 512 bytes to y in reverse chunk order. WAIT is the groups left pending before the barrier, SHIFT moves
# every copy's source by that many bytes.
COPY = r"""
__device__ __forceinline__ void cp16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
               :: "r"((unsigned)__cvta_generic_to_shared(smem)), "l"(gmem) : "memory");
}
extern "C" __global__ void __launch_bounds__(32) copy(const uint4* __restrict__ x, uint4* __restrict__ y) {
  extern __shared__ __align__(16) uint4 s[];
  cp16(s + threadIdx.x, (const char*)(x + SRC) + SHIFT);
  asm volatile("cp.async.commit_group;" ::: "memory");
  asm volatile("cp.async.wait_group %0;" :: "n"(WAIT) : "memory");
  __syncthreads();
  const uint4 v = s[31 - threadIdx.x];
  STORE;
}
"""
PLAIN = "y[blockIdx.x * 32 + threadIdx.x] = v"
VECTOR = 'asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" :: "l"(y + DST), "r"(v.x), "r"(v.y), "r"(v.z), ' \
         '"r"(v.w) : "memory")'


def kernel(src: str = "blockIdx.x * 32 + threadIdx.x", wait: int = 0, store: str = PLAIN,
           dst: str = "blockIdx.x * 32 + threadIdx.x", shift: int = 0) -> Candidate:
    source = COPY.replace("SRC", f"({src})").replace("SHIFT", str(shift)).replace("WAIT", str(wait)) \
        .replace("STORE", store).replace("DST", f"({dst})")
    return Candidate(source, (Launch("copy", (2, 1, 1), (32, 1, 1), ("in:self", "out:0"), smem=512),))


def run(cand: Candidate, tmp_path, early: bool = False) -> tuple[np.ndarray, np.ndarray]:
    x = np.arange(256, dtype=np.float32)
    y = np.full(256, np.nan, np.float32)
    out = host_emulator.HostKernel(CARD, cand, tmp_path, early_copies=early).run({"in:self": x, "out:0": y})
    want = x.reshape(2, 32, 4)[:, ::-1, :].reshape(-1)
    return out["out:0"], want


def test_a_kernel_that_keeps_the_rules_runs(tmp_path):
    got, want = run(kernel(), tmp_path)
    assert np.array_equal(got, want)
    got, want = run(kernel(store=VECTOR), tmp_path)
    assert np.array_equal(got, want)


def test_a_copy_read_before_its_wait_shows_only_when_it_lands_late(tmp_path):
    """wait_group 1 leaves the only group pending: PTX lets the copy land after the barrier, so the late run reads
    the poisoned shared memory, and the early one happens to read the data."""
    got, want = run(kernel(wait=1), tmp_path)
    assert not np.array_equal(got, want)
    got, want = run(kernel(wait=1), tmp_path, early=True)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("cand,message", [
    (kernel(shift=4), "a misaligned cp.async"),
    (kernel(src="blockIdx.x * 32 + threadIdx.x + 64"), "a cp.async from outside every buffer"),
    (kernel(store=VECTOR, dst="blockIdx.x * 32 + threadIdx.x + 1"), "a vector store outside every buffer"),
])
def test_a_broken_rule_fails_the_run_with_what_broke(cand, message, tmp_path):
    with pytest.raises(host_emulator.EmulatorFault, match=message):
        run(cand, tmp_path)


def test_a_plain_store_past_the_output_lands_in_its_guard(tmp_path):
    with pytest.raises(host_emulator.EmulatorFault, match="out:0: a guard written"):
        run(kernel(store="y[blockIdx.x * 32 + threadIdx.x + 1] = v"), tmp_path)


def test_an_input_written_is_reported(tmp_path):
    with pytest.raises(host_emulator.EmulatorFault, match="in:self: an input written"):
        run(kernel(store="const_cast<uint4*>(x)[0] = v; " + PLAIN), tmp_path)


@pytest.mark.parametrize("source,message", [
    ('asm volatile("membar.gl;" ::: "memory");', "PTX the host emulator does not know: 'membar.gl;'"),
    ("extern __shared__ float a[], b[];", "a dynamic __shared__ declaration the emulator does not read"),
    ("__global__ void __cluster_dims__(2, 1, 1) k(float* y) {}", "a __cluster_dims__ that is not on a kernel's"),
    ("#include <cooperative_groups.h>\n__global__ void k(float* y) {}", "cooperative groups"),
])
def test_what_it_does_not_model_is_refused(source, message, tmp_path):
    cand = Candidate(source, (Launch("k", (1, 1, 1), (32, 1, 1), ("out:0",)),))
    with pytest.raises(host_emulator.NotEmulated, match=message):
        host_emulator.HostKernel(CARD, cand, tmp_path)


def test_inline_ptx_is_read_with_nested_parentheses_and_operands_in_ptx_order():
    src = 'asm volatile("st.global.v2.b32 [%0], {%1, %2};" :: "l"(p + (a ? 1 : 2)), "r"(f(x, (y))), "r"(z) : "memory");'
    assert host_emulator.translate_asm(src) == \
        "emu_store<2>((p + (a ? 1 : 2)), {(unsigned)((f(x, (y)))), (unsigned)((z))});"
    cvt = 'asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));'
    assert host_emulator.translate_asm(cvt) == "((r) = emu_cvt_bf16x2((hi), (lo)));"


# Two launches over a zeroed scratch: the first sums each row of x [4, 64] with a warp's shuffles and adds the row's
# sum into the scratch with an atomic (two blocks a row, 32 columns each), the second writes y = x - mean(row).
# Written as a template would write it; it is correct on the GPU.
SUM = r"""
extern "C" __global__ void __launch_bounds__(32) sums(const float* __restrict__ x, float* __restrict__ acc) {
  const int row = blockIdx.x / 2, col = (blockIdx.x % 2) * 32 + threadIdx.x;
  float v = x[row * 64 + col];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (__all_sync(0xffffffffu, v == __shfl_sync(0xffffffffu, v, 0)) && threadIdx.x == 0) atomicAdd(acc + row, v);
}
extern "C" __global__ void __launch_bounds__(64) center(const float* __restrict__ x, const float* __restrict__ acc,
                                                        float* __restrict__ y, float scale) {
  const int row = blockIdx.x;
  y[row * 64 + threadIdx.x] = x[row * 64 + threadIdx.x] - acc[row] * scale;
}
"""


def centering() -> Candidate:
    from forge_backend.contract import Scratch

    return Candidate(SUM, (
        Launch("sums", (8, 1, 1), (32, 1, 1), ("in:self", "scratch:acc")),
        Launch("center", (4, 1, 1), (64, 1, 1), ("in:self", "scratch:acc", "out:0", "f32:0.015625"))),
        scratch=(("acc", Scratch(16, zero=True)),))


def test_warp_shuffles_atomics_scratch_and_two_launches(tmp_path):
    x = np.random.default_rng(0).standard_normal(256).astype(np.float32)
    got = host_emulator.HostKernel(CARD, centering(), tmp_path).run({"in:self": x, "out:0": np.zeros(256, np.float32)})
    rows = x.reshape(4, 64)
    np.testing.assert_allclose(got["out:0"].reshape(4, 64), rows - rows.mean(1, keepdims=True), rtol=1e-5, atol=1e-5)


def test_the_projects_verifier_takes_a_host_kernel(tmp_path):
    """verify() on CPU tensors with the emulator as the launcher: a kernel that computes something else fails it
    with the verifier's own report."""
    card = CARD
    relu = Candidate('extern "C" __global__ void __launch_bounds__(64) relu(const float* x, float* y) {\n'
                     "  const int i = blockIdx.x * 64 + threadIdx.x; y[i] = x[i] > 0.f ? x[i] : 0.f; }",
                     (Launch("relu", (4, 1, 1), (64, 1, 1), ("in:self", "out:0")),))
    assert host_emulator.verify_on_host(card, relu, tmp_path).ok
    leaky = Candidate(relu.source.replace(": 0.f", ": 0.01f * x[i]"), relu.launches)
    rep = host_emulator.verify_on_host(card, leaky, tmp_path)
    assert not rep.ok and rep.failed_check == "mismatch"


def test_a_read_of_another_threads_write_without_a_barrier_differs_between_the_two_orders(tmp_path):
    """The block's threads run in thread order, then in reverse order on the next run: a missing __syncthreads
    shows as two runs that disagree (the verifier's repeat run), or as poison read."""
    def swap(barrier: str) -> Candidate:
        return Candidate('extern "C" __global__ void __launch_bounds__(64) swap(const float* x, float* y) {\n'
                         "  extern __shared__ float s[];\n  s[threadIdx.x] = x[blockIdx.x * 64 + threadIdx.x];\n"
                         f"  {barrier}\n  y[blockIdx.x * 64 + threadIdx.x] = s[threadIdx.x ^ 1];\n}}",
                         (Launch("swap", (4, 1, 1), (64, 1, 1), ("in:self", "out:0"), smem=256),))

    x = np.arange(256, dtype=np.float32)
    want = x.reshape(-1, 2)[:, ::-1].reshape(-1)
    kernel = host_emulator.HostKernel(CARD, swap("__syncthreads();"), tmp_path)
    for _ in range(2):
        assert np.array_equal(kernel.run({"in:self": x, "out:0": np.zeros(256, np.float32)})["out:0"], want)
    kernel = host_emulator.HostKernel(CARD, swap(""), tmp_path)
    first, second = (kernel.run({"in:self": x, "out:0": np.zeros(256, np.float32)})["out:0"] for _ in range(2))
    assert not np.array_equal(first, second)


def test_a_barrier_that_not_every_thread_reaches_fails_at_once(tmp_path):
    cand = Candidate('extern "C" __global__ void __launch_bounds__(32) k(const float* x, float* y) {\n'
                     "  if (threadIdx.x < 16) __syncthreads(); else __syncwarp();\n"
                     "  y[threadIdx.x] = x[threadIdx.x];\n}",
                     (Launch("k", (1, 1, 1), (32, 1, 1), ("in:self", "out:0")),))
    kernel = host_emulator.HostKernel(CARD, cand, tmp_path)
    with pytest.raises(host_emulator.EmulatorFault, match="a barrier that not every live thread"):
        kernel.run({"in:self": np.zeros(256, np.float32), "out:0": np.zeros(256, np.float32)})


# Blocks that wait for each other: the whole grid runs at once where the launch is cooperative or the kernel polls.
# FLAGS: block b publishes b + 1 in flag[b] with a relaxed store and waits (a relaxed poll) for block b ^ 1's, then
# writes the sum of both to y[b * 32 + lane]. WHO is the flag it waits for.
FLAGS = r"""
__device__ __forceinline__ void put(unsigned* p, unsigned v) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned get(const unsigned* p) {
  unsigned v; asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v;
}
extern "C" __global__ void __launch_bounds__(32) flags(const float* x, float* y, unsigned* flag) {
  if (threadIdx.x == 0) put(flag + blockIdx.x, blockIdx.x + 1);
  unsigned v = 0;
  while ((v = get(flag + (WHO))) == 0) { }
  y[blockIdx.x * 32 + threadIdx.x] = (float)(v + blockIdx.x + 1);
}
"""


def flags(who: str = "blockIdx.x ^ 1", cooperative: bool = True) -> Candidate:
    from forge_backend.contract import Scratch

    return Candidate(FLAGS.replace("WHO", who), (Launch("flags", (4, 1, 1), (32, 1, 1), ("in:self", "out:0",
                                                                                           "scratch:flag"),
                                                         cooperative=cooperative),),
                     scratch=(("flag", Scratch(16, zero=True)),))


@pytest.mark.parametrize("cooperative", [True, False])
def test_blocks_that_poll_each_other_run_at_once(cooperative, tmp_path):
    kernel = host_emulator.HostKernel(CARD, flags(cooperative=cooperative), tmp_path)
    for _ in range(2):  # both thread orders
        got = kernel.run({"in:self": np.zeros(256, np.float32), "out:0": np.zeros(256, np.float32)})["out:0"]
        assert np.array_equal(got[:128], np.repeat([3.0, 3.0, 7.0, 7.0], 32))


def test_a_wait_that_nothing_can_end_fails_the_run(tmp_path):
    """Every block waits for block 0's flag, which block 0 never publishes: the run fails once its threads have
    only polled for a while, instead of spinning for ever."""
    cand = flags(who="0")
    cand = Candidate(cand.source.replace("if (threadIdx.x == 0) put", "if (threadIdx.x == 0 && blockIdx.x) put"),
                     cand.launches, scratch=cand.scratch)
    with pytest.raises(host_emulator.EmulatorFault, match="a wait that nothing can end"):
        host_emulator.HostKernel(CARD, cand, tmp_path).run({"in:self": np.zeros(256, np.float32),
                                                            "out:0": np.zeros(256, np.float32)})


# One block of 64 threads: thread 0 starts a bulk copy of x's 256 bytes into shared memory, counted on an mbarrier;
# every thread waits for the phase (WAIT) and writes its float, reversed, to y.
BULK = r"""
__device__ __forceinline__ unsigned sa(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
extern "C" __global__ void __launch_bounds__(64) bulk(const float* x, float* y) {
  __shared__ __align__(8) unsigned long long bar;
  extern __shared__ __align__(128) float s[];
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(sa(&bar)), "r"(1) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(sa(&bar)), "r"(BYTES) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(sa(s)), "l"(x), "r"(BYTES), "r"(sa(&bar)) : "memory");
  }
  unsigned done = 0;
  while (WAIT && !done)
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(sa(&bar)), "r"(0) : "memory");
  y[threadIdx.x] = s[63 - threadIdx.x];
  __syncthreads();
}
"""


def bulk(wait: bool = True, nbytes: int = 256) -> Candidate:
    return Candidate(BULK.replace("WAIT", str(int(wait))).replace("BYTES", str(nbytes)),
                     (Launch("bulk", (1, 1, 1), (64, 1, 1), ("in:self", "out:0"), smem=256),))


def run_bulk(cand: Candidate, tmp_path, early: bool = False) -> np.ndarray:
    x = np.arange(64, dtype=np.float32)
    got = host_emulator.HostKernel(CARD, cand, tmp_path, early_copies=early).run(
        {"in:self": x, "out:0": np.zeros(256, np.float32)})["out:0"]
    return got[:64], x[::-1]


def test_a_bulk_copy_is_read_after_its_mbarrier_phase(tmp_path):
    for early in (False, True):
        got, want = run_bulk(bulk(), tmp_path, early)
        assert np.array_equal(got, want)


def test_a_bulk_copy_read_without_its_wait_shows_when_it_lands_late(tmp_path):
    """With no wait, the late run reads the poisoned shared memory; copies that land as issued hide it, and the
    block ends with its copy still in flight only in the late run, which the emulator reports first."""
    with pytest.raises(host_emulator.EmulatorFault, match="a block ended with a bulk copy in flight"):
        run_bulk(bulk(wait=False), tmp_path)
    got, want = run_bulk(bulk(wait=False), tmp_path, early=True)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("cand,message", [
    (bulk(nbytes=200), "a bulk copy misaligned or not a multiple of 16 bytes"),
    (bulk(nbytes=512), "a bulk copy past the shared memory"),
    (Candidate(BULK.replace("WAIT", "1").replace("BYTES", "256").replace(
        'asm volatile("mbarrier.init', 's[0] = 0.f; if (0) asm volatile("mbarrier.init'),
        (Launch("bulk", (1, 1, 1), (64, 1, 1), ("in:self", "out:0"), smem=256),)), "an mbarrier used before its init"),
    (Candidate(BULK.replace("WAIT", "1").replace("BYTES", "256").replace(
        "  __syncthreads();\n  if (threadIdx.x == 0) {\n    asm volatile(\"mbarrier.arrive",
        "  __syncthreads();\n  bar = 0;\n  if (threadIdx.x == 0) {\n    asm volatile(\"mbarrier.arrive"),
        (Launch("bulk", (1, 1, 1), (64, 1, 1), ("in:self", "out:0"), smem=256),)), "an mbarrier's bytes written over"),
])
def test_a_broken_mbarrier_or_bulk_copy_rule_fails_the_run(cand, message, tmp_path):
    with pytest.raises(host_emulator.EmulatorFault, match=message):
        run_bulk(cand, tmp_path)


# Clusters of two blocks: each block puts a value in a static __shared__ word, and after the cluster barrier reads its
# peer's through distributed shared memory; with END, a last barrier keeps each block until its peer has read.
CLUSTER = r"""
extern "C" __global__ __cluster_dims__(2, 1, 1) void pair(const float* x, float* y);
extern "C" __global__ void __launch_bounds__(32) pair(const float* x, float* y) {
  __shared__ float mine;
  if (threadIdx.x == 0) mine = (float)(blockIdx.x + 1);
  __cluster_barrier_arrive();
  __cluster_barrier_wait();
  const unsigned peer = (blockIdx.x % 2) ^ 1u;
  y[blockIdx.x * 32 + threadIdx.x] = *__cluster_map_shared_rank(&mine, peer);
  END
}
"""


def test_a_cluster_reads_its_peers_shared_memory_and_a_block_gone_early_shows(tmp_path):
    def pair(end: str) -> Candidate:
        return Candidate(CLUSTER.replace("END", end), (Launch("pair", (4, 1, 1), (32, 1, 1), ("in:self", "out:0")),))

    want = np.repeat([2.0, 1.0, 4.0, 3.0], 32)
    kernel = host_emulator.HostKernel(CARD, pair("__cluster_barrier_arrive();\n  __cluster_barrier_wait();"), tmp_path)
    for _ in range(2):
        got = kernel.run({"in:self": np.zeros(256, np.float32), "out:0": np.zeros(256, np.float32)})["out:0"]
        assert np.array_equal(got[:128], want)
    kernel = host_emulator.HostKernel(CARD, pair(""), tmp_path)  # a block may end before its peer reads
    runs = [kernel.run({"in:self": np.zeros(256, np.float32), "out:0": np.zeros(256, np.float32)})["out:0"][:128]
            for _ in range(2)]
    assert not all(np.array_equal(r, want) for r in runs)


def test_static_shared_memory_is_each_blocks_own_when_blocks_run_at_once(tmp_path):
    """Four cooperative blocks at once, each keeping its index in a static __shared__ word across a barrier."""
    cand = Candidate('extern "C" __global__ void __launch_bounds__(32) own(const float* x, float* y) {\n'
                     "  __shared__ unsigned b, pad[3];\n  if (threadIdx.x == 0) b = blockIdx.x;\n"
                     "  __syncthreads();\n  y[blockIdx.x * 32 + threadIdx.x] = (float)b;\n}",
                     (Launch("own", (4, 1, 1), (32, 1, 1), ("in:self", "out:0"), cooperative=True),))
    got = host_emulator.HostKernel(CARD, cand, tmp_path).run({"in:self": np.zeros(256, np.float32),
                                                             "out:0": np.zeros(256, np.float32)})["out:0"]
    assert np.array_equal(got[:128], np.repeat([0.0, 1.0, 2.0, 3.0], 32))

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
    out = host_emulator.run_launch(CARD, cand, {"in:self": x, "out:0": y}, tmp_path, early_copies=early)
    want = x.reshape(2, 32, 4)[:, ::-1, :].reshape(-1)
    return out.buffers["out:0"], want


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
    with pytest.raises(AssertionError, match=message):
        run(cand, tmp_path)


def test_a_plain_store_past_the_output_lands_in_its_guard(tmp_path):
    with pytest.raises(AssertionError, match="out:0: a guard written"):
        run(kernel(store="y[blockIdx.x * 32 + threadIdx.x + 1] = v"), tmp_path)


def test_an_input_written_is_reported(tmp_path):
    with pytest.raises(AssertionError, match="in:self: an input written"):
        run(kernel(store="const_cast<uint4*>(x)[0] = v; " + PLAIN), tmp_path)


@pytest.mark.parametrize("source,message", [
    ('asm volatile("membar.gl;" ::: "memory");', "PTX the host emulator does not know: 'membar.gl;'"),
    ("__shared__ float red[32];", "a static __shared__ array"),
])
def test_what_it_does_not_model_is_refused(source, message):
    cand = Candidate(source, (Launch("k", (1, 1, 1), (32, 1, 1), ("out:0",)),))
    with pytest.raises(host_emulator.NotEmulated, match=message):
        host_emulator.host_source(cand, "k", 1, 1, 32, 0)


def test_inline_ptx_is_read_with_nested_parentheses_and_operands_in_ptx_order():
    src = 'asm volatile("st.global.v2.b32 [%0], {%1, %2};" :: "l"(p + (a ? 1 : 2)), "r"(f(x, (y))), "r"(z) : "memory");'
    assert host_emulator.translate_asm(src) == \
        "emu_store<2>((p + (a ? 1 : 2)), {(unsigned)((f(x, (y)))), (unsigned)((z))});"
    cvt = 'asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));'
    assert host_emulator.translate_asm(cvt) == "((r) = emu_cvt_bf16x2((hi), (lo)));"

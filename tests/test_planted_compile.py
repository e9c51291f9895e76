"""CPU: every planted kernel passes the contract screen and compiles for sm_90, so the GPU tests that expect the
verifier to reject them fail only for the reason they plant."""
import pytest

from forge_backend.contract import resolve_plan
from forge_backend.runtime.nvrtc import compile_candidate
from planted import COUNT_PLAN, PLANTED, candidate, unary_card


@pytest.mark.parametrize("name,card_fn,plan,check", PLANTED, ids=[p[0] for p in PLANTED])
def test_planted_kernel_compiles(name, card_fn, plan, check):
    c = candidate(name, plan)
    card = card_fn()
    resolve_plan(c, card.sizes, card.floats)
    assert compile_candidate(c, "sm_90").cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("name", ["relu_good", "bad_fault", "bad_hang"])
def test_control_and_crash_kernels_compile(name):
    card = unary_card("aten.relu.default", 1000)
    resolve_plan(candidate(name), card.sizes, card.floats)
    assert compile_candidate(candidate(name), "sm_90").cubin[:4] == b"\x7fELF"


def test_the_launch_counting_kernel_compiles_with_its_kept_scratch():
    card = unary_card("aten.relu.default", 1000)
    c = candidate("count_launches", COUNT_PLAN)
    (_, (s,)) = resolve_plan(c, card.sizes, card.floats)
    assert (s.name, s.nbytes, s.zero, s.persist) == ("mem", 4, True, True)
    assert compile_candidate(c, "sm_90").cubin[:4] == b"\x7fELF"

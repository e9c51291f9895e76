import pytest

from forge_backend.contract import Candidate, evaluate, parse_expr, resolve_plan, screen
from forge_backend.errors import ContractViolation, PlanError

GOOD = """
#include <cuda_bf16.h>
// a comment mentioning printf( and malloc( is fine
extern "C" __global__ void scale(const float* __restrict__ x, float* __restrict__ y, int n, float a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""
PLAN = {"launches": [{"kernel": "scale", "grid": ["cdiv(n, 256)"], "block": [256], "args":
                      ["in:self", "out:0", "i32:n", "f32:alpha"]}]}


def cand(source=GOOD, plan=PLAN):
    return Candidate.from_parts(source, plan)


def test_good_candidate_passes_screen_and_resolves():
    c = cand()
    screen(c)
    launches, scratch = resolve_plan(c, {"n": 1000}, {"alpha": 2.0})
    (l,) = launches
    assert l.grid == (4, 1, 1) and l.block == (256, 1, 1)
    assert l.args == (("in", "self"), ("out", 0), ("i32", 1000), ("f32", 2.0))


@pytest.mark.parametrize("snippet,needle", [
    ("#include <stdio.h>\n", "#include <stdio.h> is not allowed"),
    ('#include "/etc/passwd"\n', "is not allowed"),
    ("__host__ void h() {}\n", "host code"),
    ("int main() { return 0; }\n", "main()"),
    ("__device__ void f() { cudaMalloc(0, 0); }\n", "CUDA runtime API"),
    ("__device__ long long t() { return clock64(); }\n", "clocks"),
    ('__device__ unsigned t() { unsigned r; asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(r)); return r; }\n',
     "clocks"),
    ('__device__ void p() { printf("x"); }\n', "I/O"),
    ("__device__ float cached_result;\n", "persist across launches"),
    ("__device__ void m() { float* p = (float*)malloc(4); }\n", "heap"),
    ("#pragma comment(lib, \"x\")\n", "not allowed"),
])
def test_screen_rejects_escapes(snippet, needle):
    with pytest.raises(ContractViolation) as e:
        screen(cand(snippet + GOOD))
    assert needle in str(e.value)


def test_screen_refuses_a_source_too_big_for_a_candidate():
    from forge_backend.contract import MAX_SOURCE_BYTES

    padded = GOOD + "// " + "x" * MAX_SOURCE_BYTES + "\n"
    with pytest.raises(ContractViolation, match="bytes, over the 262,144 a candidate may have"):
        screen(cand(padded))
    screen(cand(GOOD + "// " + "x" * (MAX_SOURCE_BYTES - len(GOOD) - 10) + "\n"))  # under the cap: passes


def test_screen_checks_kernel_names_and_args():
    with pytest.raises(ContractViolation, match="defines only"):
        screen(cand(plan={"launches": [{"kernel": "nope", "grid": [1], "block": [1], "args": []}]}))
    with pytest.raises(ContractViolation, match="must start with"):
        screen(cand(plan={"launches": [{"kernel": "scale", "grid": [1], "block": [1], "args": ["ptr:x"]}]}))
    with pytest.raises(ContractViolation, match="undeclared scratch"):
        screen(cand(plan={"launches": [{"kernel": "scale", "grid": [1], "block": [1], "args": ["scratch:t"]}]}))
    with pytest.raises(ContractViolation, match="non-empty 'launches'"):
        cand(plan={})


@pytest.mark.parametrize("expr,value", [("rows * cols", 12), ("cdiv(rows, 2)", 2), ("max(rows, 5) - 1", 4),
                                        ("(cols + 1) // 2 % 3", 2), ("-rows + 10", 7), (7, 7), ("min(rows, cols)", 3)])
def test_evaluator_does_arithmetic_over_named_sizes(expr, value):
    assert evaluate(expr, {"rows": 3, "cols": 4}) == value


@pytest.mark.parametrize("expr", ["__import__('os').system('x')", "rows.bit_length()", "rows ** 2", "rows / 2",
                                  "[rows]", "lambda: 1", "rows if cols else 1", "open('f')", "1.5", "'a'",
                                  "rows < cols", "rows and cols", "min(rows)", "cdiv(rows, cols, 1)", "x[0]",
                                  "_secret", True, None, "a" * 300])
def test_evaluator_rejects_everything_else(expr):
    with pytest.raises(ContractViolation):
        parse_expr(expr)


def test_plan_errors():
    with pytest.raises(PlanError, match="unknown size 'n'"):
        evaluate("n + 1", {"rows": 1})
    with pytest.raises(PlanError, match="division by zero"):
        evaluate("rows // 0", {"rows": 1})
    c = cand(plan={"launches": [{"kernel": "scale", "grid": [1], "block": [2048], "args": []}]})
    with pytest.raises(PlanError, match="outside CUDA's limits"):
        resolve_plan(c, {}, {})
    c = cand(plan={"launches": [{"kernel": "scale", "grid": [1], "block": [1], "args": ["i32:n * n"]}]})
    with pytest.raises(PlanError, match="overflows int32"):
        resolve_plan(c, {"n": 100000}, {})


def test_candidate_json_round_trip_and_identity():
    c = Candidate.from_parts(GOOD, {**PLAN, "scratch": {"tmp": {"bytes": "n * 4", "zero": True}}}, "desc", {"v": 4})
    again = Candidate.from_json(c.to_json())
    assert again == c and again.identity() == c.identity()
    assert cand().identity() != c.identity()


def test_cooperative_launches_round_trip_and_leave_other_plans_alone():
    """A launch may ask to be cooperative (every block resident at once, or a launch error); plans without the key
    keep their JSON and so their identity, and the key must be a bool."""
    plain = cand()
    assert "cooperative" not in plain.plan_json()["launches"][0]
    coop = cand(plan={"launches": [{**PLAN["launches"][0], "cooperative": True}]})
    assert coop.launches[0].cooperative and coop.plan_json()["launches"][0]["cooperative"] is True
    assert Candidate.from_json(coop.to_json()) == coop and coop.identity() != plain.identity()
    (l,), _ = resolve_plan(coop, {"n": 10}, {"alpha": 1.0})
    assert l.cooperative
    (l,), _ = resolve_plan(plain, {"n": 10}, {"alpha": 1.0})
    assert not l.cooperative
    with pytest.raises(ContractViolation, match="cooperative"):
        cand(plan={"launches": [{**PLAN["launches"][0], "cooperative": "yes"}]})


def test_persistent_scratch_round_trips_needs_zero_and_leaves_other_plans_alone():
    """Note [scratch kept between launches]: ``"persist": true`` round-trips and changes the identity; a plan without
    it keeps its JSON; a kept buffer must start zeroed, and the key must be a bool."""
    plain = cand(plan={**PLAN, "scratch": {"s": {"bytes": "n * 8", "zero": True}}})
    assert plain.plan_json()["scratch"] == {"s": {"bytes": "n * 8", "zero": True}}
    kept = cand(plan={**PLAN, "scratch": {"s": {"bytes": "n * 8", "zero": True, "persist": True}}})
    assert kept.plan_json()["scratch"]["s"]["persist"] is True
    assert Candidate.from_json(kept.to_json()) == kept and kept.identity() != plain.identity()
    _, (s,) = resolve_plan(kept, {"n": 10}, {"alpha": 1.0})
    assert (s.name, s.nbytes, s.zero, s.persist) == ("s", 80, True, True)
    _, (s,) = resolve_plan(plain, {"n": 10}, {"alpha": 1.0})
    assert not s.persist
    with pytest.raises(ContractViolation, match="zero"):
        cand(plan={**PLAN, "scratch": {"s": {"bytes": 8, "persist": True}}})
    with pytest.raises(ContractViolation, match="persist"):
        cand(plan={**PLAN, "scratch": {"s": {"bytes": 8, "zero": True, "persist": "yes"}}})


def test_a_plan_may_name_the_gpus_sm_count():
    """Note [the GPU's SM count in a plan]: ``num_sms`` resolves to the count the launcher passes, a grid of one block
    per SM; without a count such a plan does not resolve, and a count below 1 is refused."""
    per_sm = cand(plan={"launches": [{**PLAN["launches"][0], "grid": ["num_sms * 2", 1, 1], "cooperative": True}]})
    assert resolve_plan(per_sm, {"n": 10}, {"alpha": 1.0}, 132)[0][0].grid == (264, 1, 1)
    assert resolve_plan(per_sm, {"n": 10}, {"alpha": 1.0}, 114)[0][0].grid == (228, 1, 1)
    with pytest.raises(PlanError, match="unknown size 'num_sms'"):
        resolve_plan(per_sm, {"n": 10}, {"alpha": 1.0})
    with pytest.raises(PlanError, match="0 SMs"):
        resolve_plan(per_sm, {"n": 10}, {"alpha": 1.0}, 0)
    (l,), _ = resolve_plan(cand(), {"n": 10}, {"alpha": 1.0}, 114)  # a plan that does not name it: unchanged
    assert l.grid == resolve_plan(cand(), {"n": 10}, {"alpha": 1.0})[0][0].grid

"""Cards and candidates for the planted bad kernels in tests/kernels/ (shared by CPU and GPU tests)."""
from __future__ import annotations

from pathlib import Path

from forge_backend.cards import OperatorCard, build_card
from forge_backend.contract import Candidate
from forge_backend.signature import ArgSpec, OpSignature, TensorSpec

KERNELS = Path(__file__).parent / "kernels"


def contiguous(shape):
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    return tuple(reversed(strides))


def unary_card(op: str, n: int, dtype: str = "float32") -> OperatorCard:
    spec = TensorSpec((n,), (1,), dtype)
    return build_card(OpSignature(op, (ArgSpec("self", spec),), (spec,), (0,), "sm_90"))


def row_sum_card(rows: int, cols: int) -> OperatorCard:
    x = TensorSpec((rows, cols), contiguous((rows, cols)), "float32")
    out = TensorSpec((rows,), (1,), "float32")
    args = (ArgSpec("self", x), ArgSpec("dim", value=(-1,)), ArgSpec("keepdim", value=False),
            ArgSpec("dtype", value=None))
    return build_card(OpSignature("aten.sum.dim_IntList", args, (out,), (0,), "sm_90"))


UNARY_PLAN = {"launches": [{"kernel": "k", "grid": ["cdiv(numel, 256)"], "block": [256],
                            "args": ["in:self", "out:0", "i32:numel"]}]}
# a scratch kept between launches (Note [scratch kept between launches] in contract.py): n floats, n unused (the
# tags' alignment), n 8-byte tags
REMEMBER_PLAN = {**UNARY_PLAN, "launches": [{**UNARY_PLAN["launches"][0], "args": ["in:self", "out:0", "scratch:mem",
                                                                                    "i32:numel"]}],
                 "scratch": {"mem": {"bytes": "numel * 16", "zero": True, "persist": True}}}
COUNT_PLAN = {"launches": [{"kernel": "k", "grid": [1], "block": [1024], "args": ["in:self", "out:0", "scratch:mem",
                                                                                  "i32:numel"]}],
              "scratch": {"mem": {"bytes": 4, "zero": True, "persist": True}}}
RACE_PLAN = {"launches": [
    {"kernel": "zero", "grid": ["cdiv(rows, 256)"], "block": [256], "args": ["out:0", "i32:rows"]},
    {"kernel": "k", "grid": [64, "rows"], "block": [256], "args": ["in:self", "out:0", "i32:rows", "i32:cols"]}]}


def candidate(name: str, plan: dict | None = None) -> Candidate:
    return Candidate.from_parts((KERNELS / f"{name}.cu").read_text(), plan or UNARY_PLAN, name)


# (kernel file, card factory, plan, the check that must catch it)
PLANTED = [
    ("bad_stale_output", lambda: unary_card("aten.relu.default", 1000), UNARY_PLAN, "unwritten"),
    ("bad_unwritten_tail", lambda: unary_card("aten.relu.default", 1000), UNARY_PLAN, "unwritten"),
    ("bad_modifies_input", lambda: unary_card("aten.relu.default", 1000), UNARY_PLAN, "input_modified"),
    ("bad_wrong_nonmultiple", lambda: unary_card("aten.relu.default", 1001), UNARY_PLAN, "mismatch"),
    ("bad_low_precision", lambda: unary_card("aten.silu.default", 4096), UNARY_PLAN, "mismatch"),
    ("bad_race", lambda: row_sum_card(8, 1 << 20), RACE_PLAN, "nondeterministic"),
    ("bad_writes_past_end", lambda: unary_card("aten.relu.default", 1000), UNARY_PLAN, "out_of_bounds"),
    ("bad_remembers", lambda: unary_card("aten.relu.default", 1000), REMEMBER_PLAN, "stale"),
]

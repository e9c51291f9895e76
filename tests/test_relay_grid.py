"""The relay's grid follows the GPU (Note [the GPU's SM count in a plan] in contract.py): one block per SM of the
GPU that launches it, and the kernel checks the progress rule for its own grid as it starts (Note [rows relayed
through global memory] in templates/relay.py). The rule the kernel checks must be the one ``relay_valid`` checks for
the H200's 132 blocks, at every block count: a weaker check lets a kernel wait forever on a smaller GPU, a stronger
one refuses layouts that would run."""
import re

import pytest

import template_cards as tc
from forge_backend.contract import resolve_plan
from forge_backend.search.templates import family_for
from forge_backend.search.templates.common import cdiv
from forge_backend.search.templates.relay import progress_ok, writers_progress_ok
from forge_backend.search.templates.relay_held import held_progress_ok

# the joint relay, writers of their own, pieces held in registers; rows of 16, 32, 538 and 1024 pieces
LAYOUTS = [
    (tc.softmax((64, 262144), "bfloat16"), {"pe": 16384, "nw": 16, "nc": 1, "k": 6, "lag": 3, "ramp": 2}),
    (tc.softmax((2, 1100000), "float32"), {"pe": 2048, "nw": 8, "nc": 1, "k": 7, "lag": 5}),
    (tc.group_norm(1, 512, 128, 128, dtype="float32"), {"pe": 8192, "nw": 8, "nc": 1, "k": 6, "writers": True}),
    (tc.group_norm(1, 128, 1024, 1024, dtype="float32"),
     {"pe": 8192, "nw": 4, "nc": 1, "k": 7, "writers": True, "ramp": 2, "regs": 2}),
    (tc.softmax((2, 1100000), "float32"), {"pe": 2048, "nw": 8, "nc": 1, "k": 7, "writers": True, "regs": 2}),
]


def _guard(source: str):
    """The kernel's start-up check as a Python function of the block count, with the source's own constants."""
    consts = {k: int(v) for k, v in re.findall(r"constexpr (?:int|long long) (\w+) = (-?\d+);", source)}
    (expr,) = re.findall(r"if \(!\((.+)\)\) return;", source)
    return lambda nb: eval(expr.replace("/", "//"), {}, {**consts, "NB": nb})  # C's / on positive ints


@pytest.mark.parametrize("case", LAYOUTS, ids=lambda c: f"{c[0].op.removeprefix('aten.')}-"
                         + "-".join(f"{k}{v}" for k, v in c[1].items() if k in ("k", "lag", "writers", "regs")))
def test_the_kernels_progress_check_is_relay_valids_rule_at_every_block_count(case):
    card, knobs = case
    fam = family_for(card)
    drop = ("lag",) if "writers" in knobs else ("writers", "regs")
    p = {k: v for k, v in fam.defaults(card, "relay").items() if k not in drop} | knobs
    assert fam.valid(card, p), p
    cand = fam.generate(card, p)
    guard, ppr = _guard(cand.source), cdiv(card.sizes.get("cols", card.sizes.get("group_size", 0)), p["pe"])
    for nb in range(1, 300):
        if "regs" in p:
            rule = held_progress_ok(ppr, nb, p["k"], p["regs"], p["nc"])
        elif "writers" in p:
            rule = writers_progress_ok(ppr, nb, p["k"], p["nc"])
        else:
            rule = progress_ok(ppr, nb, p["k"], p["lag"], p["nc"])
        assert guard(nb) == rule, (nb, ppr)
    assert guard(132)  # valid for the H200's 132 blocks, which relay_valid checked
    assert resolve_plan(cand, card.sizes, card.floats, 114)[0][0].grid == (114, 1, 1)

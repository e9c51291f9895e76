"""Knob ``regs`` of the relay's writers (Note [pieces held in the writers' registers] in templates/relay_held.py) on the
CPU: its limits, the actions that reach it, and sm_90 compiles of every layout the rule lets through, none of which
spills. The protocol itself is modelled in test_relay_protocol.py; the GPU verifier runs in test_templates_gpu.py."""
from __future__ import annotations

import pytest

import template_cards as tc
from sm90 import spill_stores
from forge_backend.search.templates import group_norm as gn
from forge_backend.search.templates import softmax as sm
from forge_backend.search.templates.relay import relay_writers
from forge_backend.search.templates.relay_held import held_writer_warps, lane_registers

GN32 = tc.group_norm(1, 128, 1024, 1024, dtype="float32", used=(0,))
GN16 = tc.group_norm(1, 512, 256, 256, dtype="bfloat16", used=(0,))


def test_regs_needs_writers_of_their_own_and_a_count_in_range() -> None:
    root = gn.writers_root(GN32)
    assert root["writers"] and "regs" not in root
    assert gn.valid(GN32, {**root, "regs": 1})
    for bad in (0, 5, True, "1", 1.0):
        assert not gn.valid(GN32, {**root, "regs": bad}), bad
    joint = gn.defaults(GN32, "relay")
    assert "writers" not in joint and not gn.valid(GN32, {**joint, "regs": 1})


def test_regs_within_the_register_file() -> None:
    """The held packs (4 registers each) plus the spare within a lane's registers at one block an SM: 8 writers of 8
    fp32 packs (19 warps, 96 registers a lane) hold one piece, not two; 4 writers of 16 (11 warps, 168) hold two; in
    bf16, whose lanes need more beside the packs, 8 writers hold none and 4 hold one."""
    assert (lane_registers(19 * 32), lane_registers(11 * 32), lane_registers(7 * 32)) == (96, 168, 248)
    root = gn.writers_root(GN32)
    assert gn.valid(GN32, {**root, "regs": 1}) and not gn.valid(GN32, {**root, "regs": 2})
    half = {**root, "nw": 4}
    assert gn.valid(GN32, {**half, "regs": 2}) and not gn.valid(GN32, {**half, "regs": 3})
    root16 = gn.root_params(GN16)
    assert not gn.valid(GN16, {**root16, "regs": 1}) and gn.valid(GN16, {**root16, "nw": 4, "regs": 1})


def test_progress_rule_counts_the_held_pieces() -> None:
    """538 pieces a row over 132 blocks: up to 5 of a row in one block. Two slots and three held pieces suffice; two
    and two do not."""
    card = tc.softmax((2, 1100000), "float32")
    p = {**sm.defaults(card, "relay"), "pe": 2048, "nw": 8, "nc": 1, "k": 2, "writers": True, "ramp": 1}  # ramp < k
    p.pop("lag")
    assert sm.valid(card, {**p, "regs": 3}) and not sm.valid(card, {**p, "regs": 2})
    assert not sm.valid(card, p)  # without held pieces the writers need 6 slots
    assert sm.valid(card, {**p, "k": 6})


def test_actions_reach_regs_and_leave_it() -> None:
    root = gn.writers_root(GN32)
    acts = dict(gn.actions(GN32, root))
    assert acts["regs 0 -> 1"] == {**root, "regs": 1}
    one = {**root, "regs": 1}
    acts = dict(gn.actions(GN32, one))
    assert acts["regs 1 -> 0"] == root and "regs 1 -> 2" not in acts  # two do not fit 8 fp32 writers
    off = dict(gn.actions(GN32, {**one, "k": 6}))["writers True -> False"]  # (seven slots leave too long a lag)
    assert "regs" not in off and "writers" not in off and gn.valid(GN32, off)


def test_held_root_where_a_block_holds_three_pieces_of_a_4_byte_group() -> None:
    """group_norm.held_root: the 16 MB and 8 MB fp32 groups (four and two 32 KB pieces of a group a block) take four
    writers holding two pieces each, with the writers root it replaced as the second seed; 4 MB and 768 KB fp32
    groups (one a block) and bf16 groups keep the writers root."""
    for card in (GN32, tc.group_norm(1, 256, 512, 512)):
        assert gn.root_params(card) == {**gn.writers_root(card), "nw": 4, "regs": 2}
        assert gn.seeds(card)[1] == gn.writers_root(card) and gn.seeds(card)[2] == {**gn.writers_root(card), "nw": 4}
    for card in (tc.group_norm(1, 512, 256, 256), tc.group_norm(2, 1536, 64, 64),
                 tc.group_norm(1, 128, 1024, 1024, dtype="bfloat16")):
        assert gn.root_params(card) == gn.writers_root(card), card.sizes


def test_a_write_hook_must_read_its_packs_from_the_slot_expression() -> None:
    with pytest.raises(ValueError, match="sp\\[i \\* 32 \\+ lane\\]"):
        held_writer_warps("const P p = sp[lane];", "")


def _held_layouts(fam, card):
    """Every ``regs`` layout two actions reach from the first three seeds or from the relay with writers."""
    found = {}
    for p in fam.seeds(card)[:3] + [relay_writers(fam.defaults(card, "relay"))[1]]:
        for _, q in fam.actions(card, p):
            for r in [q] + [r for _, r in fam.actions(card, q)]:
                if "regs" in r:
                    found[repr(sorted(r.items()))] = r
    return list(found.values())


@pytest.mark.parametrize("fam, card", [
    (gn, GN32), (gn, GN16), (gn, tc.group_norm(2, 1536, 64, 64, dtype="float32")),
    (gn, tc.group_norm(1, 32, 136, 136, groups=4, dtype="float16", affine=False)),
    (sm, tc.softmax((64, 262144), "bfloat16")), (sm, tc.softmax((3, 70000), "float32", log=True)),
], ids=["gn-fp32", "gn-bf16", "gn-768k", "gn-fp16-odd", "softmax-bf16", "log-softmax-odd"])
def test_held_layouts_compile_for_sm90_without_spilling(fam, card) -> None:
    layouts = _held_layouts(fam, card)
    assert layouts
    for p in layouts:
        spills, log = spill_stores(fam.generate(card, p).source)
        assert spills and max(spills) == 0, (p, log[-400:])

"""Templates on GPUs other than the H200, on the CPU (Note [templates for the card's architecture] in target.py): for
a card of another architecture the families offer only layouts that compile for it and fit its shared memory, and
an sm_90 card keeps every layout it had."""
from __future__ import annotations

import random

import pytest

import template_cards as tc
from forge_backend.contract import resolve_plan
from forge_backend.search.proposer import ParentView
from forge_backend.search.templates import TemplateProposer, family_for
from forge_backend.search.templates.common import SMS, freeze
from forge_backend.search.templates.target import SM90_KNOBS, SM90_STRATEGIES, Target, layout_ok, target_of
from test_templates import CARDS, _check_plan, _params_to_check

OTHER_ARCHS = ("sm_80", "sm_89", "sm_120")  # A100; L4, L40S, RTX 4090; RTX 5090 (99 KB, clusters of at most 8)
_compiled: set[tuple[str, str]] = set()


def test_target_reads_the_cards_arch() -> None:
    def of(arch: str) -> Target:
        return target_of(tc.for_arch(tc.softmax((4, 8)), arch))

    assert of("sm_90") == Target(90) and of("cpu") == Target(90)  # CPU tests' cards are served as the H200's
    assert (of("sm_90").smem_limit, of("sm_90").max_cluster, of("sm_90").sm90_features) == (227 * 1024, 16, True)
    assert (of("sm_80").smem_limit, of("sm_80").max_cluster, of("sm_80").sm90_features) == (163 * 1024, 1, False)
    assert (of("sm_89").smem_limit, of("sm_86").smem_limit) == (99 * 1024, 99 * 1024)
    assert (of("sm_120").smem_limit, of("sm_120").max_cluster, of("sm_120").sm90_features) == (99 * 1024, 8, True)
    assert of("sm_100").max_cluster == 16 and of("sm_110").smem_limit == 99 * 1024  # not in the table: the least
    assert of("sm_80").served and not of("sm_75").served


def test_layouts_that_need_sm90_are_refused_below_it() -> None:
    card = tc.softmax((64, 262144), "bfloat16")
    for s in SM90_STRATEGIES:
        p = {"strategy": s, "cs": 8}
        assert layout_ok(card, p) and not layout_ok(tc.for_arch(card, "sm_89"), p)
    for k in SM90_KNOBS:
        assert not layout_ok(tc.for_arch(card, "sm_80"), {"strategy": "cluster", k: True})
    assert layout_ok(tc.for_arch(card, "sm_80"), {"strategy": "split", "cs": 16})  # cs is the cluster's knob only
    assert not layout_ok(tc.for_arch(card, "sm_120"), {"strategy": "cluster", "cs": 16})
    assert layout_ok(tc.for_arch(card, "sm_120"), {"strategy": "pipe", "cs": 8})
    assert not layout_ok(tc.for_arch(card, "sm_75"), {"strategy": "block"})


@pytest.mark.parametrize("arch", OTHER_ARCHS)
@pytest.mark.parametrize("name", sorted(CARDS))
def test_family_templates_compile_for_other_archs(name: str, arch: str) -> None:
    from forge_backend.runtime.nvrtc import compile_candidate

    card = tc.for_arch(CARDS[name][0](), arch)
    t, fam = target_of(card), family_for(card)
    root = fam.root_params(card)
    assert fam.valid(card, root) and fam.seeds(card)[0] == root
    for label, params in _params_to_check(fam, card):
        assert fam.valid(card, params), (label, params)
        assert t.sm90_features or params.get("strategy") not in SM90_STRATEGIES and not SM90_KNOBS & params.keys()
        candidate = fam.generate(card, params)
        _check_plan(card, candidate)
        launches, _ = resolve_plan(candidate, card.sizes, card.floats, SMS)  # a plan may name num_sms (lines)
        assert all(launch.smem <= t.smem_limit for launch in launches), (label, params)
        if (candidate.source_hash(), arch) not in _compiled:
            compile_candidate(candidate, arch)
            _compiled.add((candidate.source_hash(), arch))


@pytest.mark.parametrize("name", sorted(CARDS))
def test_an_sm90_card_keeps_every_layout(name: str) -> None:
    """The same root, seeds and actions as before the architecture mattered: a CPU test's card (arch ``cpu``) is
    served as the H200's, and an sm_90 card refuses nothing layout_ok refuses elsewhere."""
    card = CARDS[name][0]()
    fam = family_for(card)
    h200 = tc.for_arch(card, "sm_90")
    assert fam.seeds(h200) == fam.seeds(card)
    assert [freeze(p) for _, p in fam.actions(h200, fam.root_params(h200))] == \
        [freeze(p) for _, p in fam.actions(card, fam.root_params(card))]


def test_big_rows_root_in_layouts_the_arch_runs() -> None:
    """The H200's roots of the 64 MB rows are relays (200 KB of slots); an A100's are not, and neither is an RTX
    5090's (99 KB)."""
    soft, gn = tc.softmax((64, 262144), "bfloat16"), tc.group_norm(1, 512, 128, 128, dtype="float32", used=(0,))
    for card in (soft, gn):
        fam = family_for(card)
        assert fam.root_params(card)["strategy"] == "relay"
        for arch in OTHER_ARCHS:
            root = fam.root_params(tc.for_arch(card, arch))
            assert root["strategy"] != "relay" and layout_ok(tc.for_arch(card, arch), root), (arch, root)
        assert fam.root_params(tc.for_arch(card, "sm_80"))["strategy"] not in SM90_STRATEGIES


def test_proposer_offers_no_template_below_sm80() -> None:
    card = tc.softmax((64, 1000), "float32")
    root = ParentView(0, None, {}, None, None, None)
    assert TemplateProposer().options(card, root)
    assert TemplateProposer().options(tc.for_arch(card, "sm_80"), root)
    assert TemplateProposer().options(tc.for_arch(card, "sm_75"), root) == []
    assert TemplateProposer().propose(tc.for_arch(card, "sm_75"), root, random.Random(0)) is None

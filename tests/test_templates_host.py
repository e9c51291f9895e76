"""Every strategy of every template family, its generated CUDA run on the CPU (tests/host_emulator.py) under the
project's verifier, at the odd sizes the GPU tests use (template_cards.odd_cards): the root and each seed of a new
strategy, on each card. A GPU-less session's template change is checked here before any GPU runs it.

Clusters (cluster, pipe) and blocks that wait for each other (the group norm's ticket barrier ``sync``) run too: the
host runs a cluster's blocks, or a polling grid's, at once. The cooperative layouts that are no seed at these sizes
(relay, resident, lag) are in test_relay_host.py. A strategy that the emulator refuses fails here; a plan of more
threads than MAX_THREADS is skipped."""
from __future__ import annotations

import pytest

import host_emulator
import template_cards as tc
from forge_backend.search.templates import family_for

pytestmark = pytest.mark.skipif(host_emulator.compiler() is None, reason="no host C++ compiler")

MAX_THREADS = 1 << 18  # CUDA threads of a whole plan: more take minutes on the host


def cases() -> list:
    out = []
    for card in tc.odd_cards():
        fam = family_for(card)
        if fam is None:
            continue
        seen: set = set()
        for p in [fam.root_params(card), *fam.seeds(card)]:
            if p.get("strategy") not in seen:
                seen.add(p.get("strategy"))
                out.append((card, p))
    return out


def _id(v) -> str:
    if isinstance(v, dict):
        return str(v.get("strategy"))
    return f"{v.op.removeprefix('aten.')}-{'x'.join(map(str, v.inputs[0].spec.shape))}-{v.inputs[0].spec.dtype}"


@pytest.mark.parametrize("card,p", cases(), ids=_id)
def test_each_strategy_passes_the_verifier_on_the_host(card, p, tmp_path):
    try:
        rep = host_emulator.verify_on_host(card, family_for(card).generate(card, p), tmp_path,
                                           max_threads=MAX_THREADS)
    except host_emulator.TooManyThreads as e:
        pytest.skip(str(e)[:200])
    assert rep.ok, (p, rep.failed_check, rep.message)

"""Every strategy of every template family, its generated CUDA run on the CPU (tests/host_emulator.py) under the
project's verifier, at the odd sizes the GPU tests use (template_cards.odd_cards): the root and each seed of a new
strategy, on each card. A GPU-less session's template change is checked here before any GPU runs it.

Some strategies need every block of the grid on the GPU at once, or thread-block clusters; the host runs one block
at a time, so those are refused (NOT_ON_THE_HOST), and only those: a strategy that stops running here fails."""
from __future__ import annotations

import pytest

import host_emulator
import template_cards as tc
from forge_backend.search.templates import family_for

pytestmark = pytest.mark.skipif(host_emulator.compiler() is None, reason="no host C++ compiler")

# cooperative launches (relay, resident, the group norm's lag) and thread-block clusters (cluster, pipe, sync)
NOT_ON_THE_HOST = {"cluster", "pipe", "sync", "lag", "resident", "relay"}
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
    except host_emulator.NotEmulated as e:
        if p.get("strategy") in NOT_ON_THE_HOST or isinstance(e, host_emulator.TooManyThreads):
            pytest.skip(str(e)[:200])
        raise
    assert rep.ok, (p, rep.failed_check, rep.message)

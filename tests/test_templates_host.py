"""Every strategy of every template family, its generated CUDA run on the CPU (tests/host_emulator.py) under the
project's verifier, at the odd sizes the GPU tests use (template_cards.odd_cards): the root and each seed of a new
strategy (and each strategy reached by an action only), on each card, and the conv's bands of widths no power of two.
A GPU-less session's template change is checked here before any GPU runs it.

Clusters (cluster, pipe) and blocks that wait for each other (the group norm's ticket barrier ``sync``) run too: the
host runs a cluster's blocks, or a polling grid's, at once. The cooperative layouts that are no seed at these sizes
(relay, resident, lag) are in test_relay_host.py. A strategy that the emulator refuses fails here; a plan of more
threads than MAX_THREADS is skipped."""
from __future__ import annotations

import dataclasses

import pytest

import host_emulator
import template_cards as tc
from forge_backend.search.templates import family_for

pytestmark = pytest.mark.skipif(host_emulator.compiler() is None, reason="no host C++ compiler")

MAX_THREADS = 1 << 18  # CUDA threads of a whole plan: more take minutes on the host


# Note [whole lines, 8 x 8 blocks turned in registers] (conv_lines.py), bands balanced: bands of any multiple of 8,
# none a power of two here, with a row's last band partial and a first band that starts before the row
LINES_BANDS = [
    (tc.causal_conv1d(64, 141, k=4, dtype="bfloat16"),
     {"strategy": "lines", "tp": 136, "tc": 64, "block": 256, "stages": 4, "vo": 4}),
    (tc.causal_conv1d(128, 131, k=5, dtype="float16", padding=2, bias=True, batch=2),
     {"strategy": "lines", "tp": 72, "tc": 128, "block": 128, "stages": 2, "cfirst": True, "vo": 8}),
    (tc.causal_conv1d(64, 300, k=4, dtype="bfloat16"),
     {"strategy": "lines", "tp": 208, "tc": 64, "block": 256, "stages": 3, "vo": 8}),
]


def cases() -> list:
    """The root and each seed of a new strategy on each odd card (and each strategy a family reaches by an action
    only: ``action_only``), then the bands of LINES_BANDS."""
    out = []
    for card in tc.odd_cards():
        fam = family_for(card)
        if fam is None:
            continue
        seen: set = set()
        for p in [fam.root_params(card), *fam.seeds(card), *getattr(fam, "action_only", lambda c: [])(card)]:
            if p.get("strategy") not in seen:
                seen.add(p.get("strategy"))
                out.append((card, p))
    return out + LINES_BANDS


def _id(v) -> str:
    if isinstance(v, dict):
        return str(v.get("strategy")) + (f"-tp{v['tp']}" if "tp" in v else "")
    return f"{v.op.removeprefix('aten.')}-{'x'.join(map(str, v.inputs[0].spec.shape))}-{v.inputs[0].spec.dtype}"


@pytest.mark.parametrize("card,p", cases(), ids=_id)
def test_each_strategy_passes_the_verifier_on_the_host(card, p, tmp_path):
    fam = family_for(card)
    assert fam.valid(card, p)
    try:
        rep = host_emulator.verify_on_host(card, fam.generate(card, p), tmp_path, max_threads=MAX_THREADS)
    except host_emulator.TooManyThreads as e:
        pytest.skip(str(e)[:200])
    assert rep.ok, (p, rep.failed_check, rep.message)


def test_a_band_width_mistyped_in_the_store_fails_on_the_host(tmp_path):
    """The emulator sees a band's width: the kernel of bands of 136 whose store takes 128 for its band's start writes
    outputs to the wrong places."""
    card, p = LINES_BANDS[0]
    cand = family_for(card).generate(card, p)
    good = "const int t0 = b * TP - ph + VO * g;"
    assert good in cand.source
    bad = dataclasses.replace(cand, source=cand.source.replace(good, "const int t0 = b * 128 - ph + VO * g;"))
    rep = host_emulator.verify_on_host(card, bad, tmp_path, max_threads=MAX_THREADS)
    assert not rep.ok and rep.failed_check.startswith("mismatch"), (rep.failed_check, rep.message)

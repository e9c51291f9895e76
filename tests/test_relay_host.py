"""The cooperative layouts' generated CUDA (the relay with all its knobs, the resident softmax, the group norm's lag)
and the clusters that keep a chunk in part (some filled by bulk copies), run on the CPU by tests/host_emulator.py
with the blocks that wait for each other all at once, under the project's verifier: the GPU tests' own cases
(test_templates_gpu.py), so a GPU-less session's change to these pipelines is checked before any GPU runs it. The
emulator models what these kernels lean on: mbarriers with transaction counts, bulk copies landing as late (or as
early) as their mbarrier allows, polls of other blocks' words in global memory, cluster barriers and peers' shared
memory; a wait that nothing can end fails the run instead of hanging it.

A relay runs on the fewest blocks its progress rule allows (Note [rows relayed through global memory] in relay.py;
the kernel checks the rule for its own grid and returns at once below it), so the host runs every piece of the card
over a few blocks; the resident softmax and the lag keep their 132 blocks. Cards of more than a million elements take
one trial (normal inputs: a run, its repeat in the other thread order, a changed input followed), the others all
five. CASES says which run by default and how to run them all."""
from __future__ import annotations

import dataclasses
import math
import os
import re

import pytest
import torch

import host_emulator
import template_cards as tc
import test_templates_gpu as gpu
from forge_backend.contract import resolve_plan
from forge_backend.search.templates import family_for
from forge_backend.search.templates.relay import relay_progress_ok
from forge_backend.verify import prepare_trials

pytestmark = pytest.mark.skipif(host_emulator.compiler() is None, reason="no host C++ compiler")


def fewest_blocks(p: dict, source: str) -> int:
    """The fewest blocks (of a few counts, from 3) over which the relay ``p`` progresses (relay_progress_ok, for the
    pieces a row its kernel has)."""
    ppr = int(re.search(r"constexpr int PPR = (\d+);", source)[1])
    for nb in (3, 4, 5, 7, 8, 11, 16, 22, 33, 44, 66, 132):
        if relay_progress_ok(p, ppr, nb):
            return nb
    raise AssertionError(f"no grid of up to 132 blocks for {p}")


def grid_sms(p: dict, source: str) -> int:
    """The SM count the host launches a case's plan for: a relay's fewest blocks, else the H200's 132."""
    return fewest_blocks(p, source) if p["strategy"] == "relay" else 132


def plan_size(kind: str, card, p: dict) -> tuple[int, int]:
    """(CUDA threads of the plan on the host, elements of the card's first input) of a case."""
    cand = family_for(card).generate(card, p)
    launches, _ = resolve_plan(cand, card.sizes, card.floats, grid_sms(p, cand.source))
    return sum(math.prod(l.grid) * math.prod(l.block) for l in launches), math.prod(card.inputs[0].spec.shape)


GPU_CASES = (  # each with its params as its GPU test builds them
    [("relay", c, gpu.with_defaults(c, "relay", k)) for c, k in gpu.RELAY + gpu.RELAY_ONCE]
    + [("halves", c, gpu.with_defaults(c, "relay", k, ("lag", "once", "halves"))) for c, k in gpu.RELAY_HALVES]
    + [("writers", c, gpu.with_defaults(c, "relay", k, ("lag",))) for c, k in gpu.RELAY_WRITERS + gpu.RELAY_RAMP]
    + [("held", c, gpu.held(c, k)) for c, k in gpu.RELAY_HELD]
    + [("resident", c, gpu.with_defaults(c, "resident", k)) for c, k in gpu.RESIDENT]
    + [("lag", c, gpu.with_defaults(c, "lag", k)) for c, k in gpu.GN_LAG]
    + [("kept", c, p) for c, p in gpu.KEPT_IN_PART]  # clusters with a chunk kept in part, some fetched by bulk copies
)
# The roots of issue 4's two relayed rows under 80% (the softmax [64, 262144] bf16 and the group norm [1, 512, 128,
# 128] fp32), a resident softmax of 256 threads a block, and lags of 128 threads a block over a few groups, one of
# them odd-sized in bf16 (the GPU cases' residents and lags take 1024 threads an SM, 135,168 on the host; a lag walks
# the groups in grid-wide steps: at 132 blocks of 128 threads, 128 groups took 136 s for five trials, 8 groups 4 s)
LAG_CARDS = (tc.group_norm(1, 64, 8, 8, groups=8, dtype="float32"), tc.group_norm(2, 24, 11, 7, groups=6,
                                                                                  dtype="bfloat16"))
ROOTS = [("root", c, family_for(c).root_params(c)) for c in (tc.softmax((64, 262144), "bfloat16"),
                                                             tc.group_norm(1, 512, 128, 128, used=(0,)))]
SMALL = [("resident", c, gpu.with_defaults(c, "resident", k)) for c, k in gpu.RESIDENT if k.get("nt") == 256] + \
    [("lag", c, gpu.with_defaults(c, "lag", {"block": 128, "bpb": 1, "lag": 3})) for c in LAG_CARDS]
# By default (CI) the cases of at most 8,192 threads on the host over at most 8.4M elements (about 1-9 s each), the
# clusters over at most 2M, and ROOTS and SMALL; KFORGE_HOST_ALL=1 runs every GPU case up to MAX_THREADS (a quarter
# of an hour or more on two cores).
ALL = os.environ.get("KFORGE_HOST_ALL") == "1"


def by_default(case) -> bool:
    if case[0] == "kept":  # one cluster at a time on the host: the card's size is the cost
        return math.prod(case[1].inputs[0].spec.shape) <= 1 << 21
    threads, elements = plan_size(*case)
    return threads <= 8192 and elements <= 1 << 23


CASES = ROOTS + SMALL + [case for case in GPU_CASES if ALL or by_default(case)]
# the residents and lags of 135,168 threads (132 blocks of 1024) are skipped: a lag of 128 groups took 136 s for
# five trials at an eighth of those threads
MAX_THREADS = 1 << 17


def _id(case) -> str:
    kind, card, p = case
    return f"{kind}-{card.op.removeprefix('aten.').removeprefix('_')}-" + \
        "x".join(map(str, card.inputs[0].spec.shape)) + f"-{card.inputs[0].spec.dtype}-" + \
        "-".join(f"{k}{v}" for k, v in sorted(p.items()) if k not in ("strategy", "vec"))


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_cooperative_layouts_pass_the_verifier_on_the_host(case, tmp_path):
    kind, card, p = case
    fam = family_for(card)
    assert fam.valid(card, p), p
    cand = fam.generate(card, p)
    sms = grid_sms(p, cand.source)
    big = math.prod(card.inputs[0].spec.shape) > 1 << 20
    trials = prepare_trials(card, torch.device("cpu"), ("normal",)) if big else None
    try:
        rep = host_emulator.verify_on_host(card, cand, tmp_path, trials, num_sms=sms, max_threads=MAX_THREADS)
    except host_emulator.TooManyThreads as e:
        pytest.skip(str(e))
    assert rep.ok, (p, sms, rep.failed_check, rep.message)


# Mutations of a relay's protocol (writers of their own, two resolvers, four slots over three blocks): each breaks it
# the way a slip in relay_pipeline.py would, and the host run must fail, in the copy mode named (late copies: as late
# as their mbarrier allows; early: as issued; both: either)
MUTATIONS = [
    ("a consumer that reads its slot before the copy's phase", "both",
     "bar_wait(full + sl, (unsigned)(t / K) & 1u);", ""),
    ("a loader that refills a slot its writers still read", "both",
     "bar_wait(empty + v % K, (unsigned)(v / K) & 1u);", ""),
    ("a writer that waits on the other parity of its statistic", "both",
     "bar_wait(ready + sl, (unsigned)(u / K) & 1u);", "bar_wait(ready + sl, ((unsigned)(u / K) & 1u) ^ 1u);"),
    ("one mark for every launch (last launch's words read as this one's)", "both",
     "return (__shfl_sync(0xffffffffu, e, 0) & 1u) ^ 1u;", "return 1u + 0u * __shfl_sync(0xffffffffu, e, 0);"),
    ("a resolver that takes a row before every word is marked", "both",
     "have = have && (unsigned)(w >> 63) == mark;", "have = have || (unsigned)(w >> 63) == mark;"),
    ("a writer warp that frees its slot before all its lanes read it", "early",
     "      __syncwarp();  // every lane has read the slot\n", ""),
    ("a ramp that waits on the wrong parity of an earlier copy", "early",
     "if (t >= RAMP) bar_wait(full + (t - RAMP), 0u);", "if (t >= RAMP) bar_wait(full + (t - RAMP), 1u);"),
]


@pytest.mark.parametrize("what,mode,old,new", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_a_broken_relay_protocol_fails_on_the_host(what, mode, old, new, tmp_path):
    card = tc.softmax((5, 33000), "bfloat16")
    p = gpu.with_defaults(card, "relay", {"pe": 4096, "nw": 4, "nc": 2, "k": 4, "writers": True}, ("lag",))
    cand = family_for(card).generate(card, p)
    assert cand.source.count(old) == 1, old
    broken = dataclasses.replace(cand, source=cand.source.replace(old, new))
    for early in {"late": (False,), "early": (True,), "both": (False, True)}[mode]:
        for c, ok in ((cand, True), (broken, False)):
            rep = host_emulator.verify_on_host(card, c, tmp_path, num_sms=3, early_copies=early)
            assert rep.ok is ok, (what, early, rep.failed_check, rep.message)


def test_a_cluster_block_that_leaves_before_its_peers_read_fails_on_the_host(tmp_path):
    """The cluster softmax without its last cluster barrier: a block may end while a peer still reads its partial.
    Run block by block (every other pair of runs), the peer reads the poison the host leaves in an ended block's
    shared memory."""
    card = tc.softmax((37, 1000), "bfloat16")
    fam = family_for(card)
    cand = fam.generate(card, {**fam.defaults(card, "cluster"), "cs": 8, "block": 128})
    for old in ("  __cluster_barrier_arrive();  // done reading the other blocks' shared memory\n",
                "  __cluster_barrier_wait();  // no block leaves while another may still read its"):
        assert cand.source.count(old) == 1, old
    assert host_emulator.verify_on_host(card, cand, tmp_path).ok
    broken = cand.source.replace(
        "  __cluster_barrier_arrive();  // done reading the other blocks' shared memory\n", "").replace(
        "  __cluster_barrier_wait();  // no block leaves while another may still read its", "  // gone:")
    rep = host_emulator.verify_on_host(card, dataclasses.replace(cand, source=broken), tmp_path)
    assert not rep.ok and rep.failed_check == "mismatch", (rep.failed_check, rep.message)


def test_a_lag_that_reads_a_statistic_one_arrival_early_fails_on_the_host(tmp_path):
    """The group norm's lag with its statistic's wait one count short (gn_lag.py: every block's partial counts one,
    and the last block raises the count past the blocks once it has stored the statistic): a block reads the
    statistic before it is stored."""
    card = LAG_CARDS[0]
    fam = family_for(card)
    cand = fam.generate(card, gpu.with_defaults(card, "lag", {"block": 128, "bpb": 1, "lag": 3}))
    old = "while (ld_acquire(cnt + gw) - base < (unsigned)(NB + 1)) { }"
    assert cand.source.count(old) == 1
    broken = cand.source.replace(old, "while (ld_acquire(cnt + gw) - base < (unsigned)NB) { }")
    assert host_emulator.verify_on_host(card, cand, tmp_path).ok
    rep = host_emulator.verify_on_host(card, dataclasses.replace(cand, source=broken), tmp_path)
    assert not rep.ok and rep.failed_check == "mismatch", (rep.failed_check, rep.message)

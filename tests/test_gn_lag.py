"""The lag group norm (Note [a group re-read from the L2, a few groups later] in templates/gn_lag.py) on the CPU: its
knobs' limits, sm_90 compiles of its layouts, and a model of its counting protocol run under a random scheduler:
every warp's wait, its block's ring of partials and its statistics in shared memory, the groups' counts and the
epoch of the kept scratch over launches in a row (from an epoch where the counts wrap past 2**32)."""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np
import pytest

import template_cards as tc
from forge_backend.search.templates import group_norm as gn
from forge_backend.search.templates.gn_lag import MAX_LAG, RING, STATS

M32 = 2**32


def lag(card, **knobs):
    return {**gn.defaults(card, "lag"), **knobs}


# ---------------------------------------------------------------------------------------------------------------------
# knobs and compiles


def test_lag_is_a_strategy_with_valid_defaults_and_actions():
    card = tc.group_norm(1, 128, 1024, 1024, dtype="float32", used=(0,))
    p = gn.defaults(card, "lag")
    assert p["strategy"] == "lag" and gn.valid(card, p)
    acts = dict(gn.actions(card, p))
    assert acts and all(gn.valid(card, q) for q in acts.values())
    assert any(q.get("keep") for q in acts.values()) and any(q.get("lag") == 2 for q in acts.values())


def test_lag_is_an_action_of_the_root_not_a_seed():
    """It lost every probe (the Note): the search may still walk to it from the relay root."""
    for card in (tc.group_norm(1, 128, 1024, 1024, dtype="float32", used=(0,)),
                 tc.group_norm(1, 512, 256, 256, dtype="bfloat16", used=(0,))):
        assert all(p["strategy"] != "lag" for p in gn.seeds(card))
        root = gn.root_params(card)
        assert any(q["strategy"] == "lag" for _, q in gn.actions(card, root))


@pytest.mark.parametrize("knobs", [{"lag": 0}, {"lag": MAX_LAG + 1}, {"lag": 3}, {"unroll": 3}, {"block": 96},
                                   {"block": 1024, "bpb": 2}, {"bpb": 0}, {"keep": False}, {"again": "lu"},
                                   {"pe": 8192}, {"lag": True}])
def test_lag_refuses_knobs_out_of_range(knobs):  # lag 3: three 16 MB groups wait, more than the L2 budget
    card = tc.group_norm(1, 128, 1024, 1024, dtype="float32", used=(0,))
    assert not gn.valid(card, lag(card, **knobs))


def test_hinted_loads_need_16_byte_packs():
    card = tc.group_norm(2, 96, 37, 41, groups=8, dtype="float16", affine=False)  # odd planes: 2-byte packs
    p = gn.defaults(card, "lag")
    assert p["vec"] == 1 and gn.valid(card, p)
    assert not gn.valid(card, {**p, "keep": True}) and not gn.valid(card, {**p, "again": "first"})
    assert gn.valid(card, {**p, "again": "ld"})


@pytest.mark.parametrize("card", [tc.group_norm(1, 128, 1024, 1024, dtype="float32"),
                                  tc.group_norm(1, 128, 1024, 1024, dtype="bfloat16", used=(0,)),
                                  tc.group_norm(2, 96, 37, 41, groups=8, dtype="float16", affine=False)],
                         ids=["fp32", "bf16", "fp16-odd"])
def test_lag_layouts_compile_for_sm90(card):
    from forge_backend.runtime.nvrtc import compile_candidate

    p = gn.defaults(card, "lag")
    layouts = [p] + [q for _, q in gn.actions(card, p) if q["strategy"] == "lag"]
    assert len(layouts) >= 8
    for q in layouts:
        cand = gn.generate(card, q)
        assert cand.launches[0].cooperative
        assert compile_candidate(cand, "sm_90").cubin


# ---------------------------------------------------------------------------------------------------------------------
# the protocol, modelled


class Deadlock(AssertionError):
    pass


@dataclass
class Scratch:
    """The kept scratch: the blocks' partials, the statistics (with the launch that wrote them), counts, epoch and
    exit count, zeroed once before the first launch (or set to ``epoch`` to test wrapping)."""
    ng: int
    nb: int
    epoch: int = 0
    exits: int = 0
    cnt: list[int] = field(default_factory=list)
    part: dict[tuple[int, int], tuple[float, float, float]] = field(default_factory=dict)
    stat: dict[int, tuple[int, tuple[float, float, float]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.cnt = [self.epoch * (self.nb + 1) % M32] * self.ng


def chan(a, b):
    if b[0] == 0:
        return a
    if a[0] == 0:
        return b
    n = a[0] + b[0]
    d, f = b[1] - a[1], b[0] / n
    return (n, a[1] + d * f, a[2] + b[2] + d * d * a[0] * f)


def run_stats(values: np.ndarray):
    return (float(values.size), float(values.mean()), float(((values - values.mean()) ** 2).sum())) \
        if values.size else (0.0, 0.0, 0.0)


def launch(sc: Scratch, data: np.ndarray, w: int, lag_: int, rng: random.Random, launch_id: int,
           early: bool = False) -> None:
    """One launch of the kernel's protocol over ``data`` [NG, GS]: every warp of every block as a generator that
    yields where the kernel touches global memory or spins; a random scheduler runs them. Checks: no deadlock; a
    warp reads a statistic of this launch; a block's ring entry holds one group at a time; each group's statistic
    is combined once and equals the group's own."""
    ng, gs = data.shape
    nb = sc.nb
    runs = np.array_split(np.arange(gs), nb * w)
    finals = {}

    ring, stats = RING + early, STATS + early  # Note [a statistic published before the wait]: one more entry each

    def fetch(gw: int, base: int, block: dict):  # one warp of the block fetches the statistic into shared memory
        sl = gw % stats
        if block["stag"][sl] != gw:
            claimed = block["sclaim"][sl] < gw
            block["sclaim"][sl] = max(block["sclaim"][sl], gw)
            yield True
            if claimed:
                while (sc.cnt[gw] - base) % M32 < nb + 1:
                    yield False
                written_by, _ = sc.stat[gw]
                assert written_by == launch_id, "a statistic of an earlier launch"
                block["sstat"][sl] = gw
                block["stag"][sl] = gw
            else:
                while block["stag"][sl] != gw:
                    yield False
        yield True
        assert block["sstat"][sl] == gw, f"entry {sl} replaced by group {block['sstat'][sl]} before group {gw} was read"

    def publish(gr: int, base: int, b: int, wi: int, block: dict):
        r = gr % ring
        owner = block["ring_group"][r]
        assert owner in (None, gr), f"ring entry {r} holds group {owner} while group {gr} arrives"
        block["ring_group"][r] = gr
        block["wpart"][r][wi] = run_stats(data[gr, runs[b * w + wi]])
        block["wcnt"][r] += 1
        if block["wcnt"][r] != w:
            return
        acc = (0.0, 0.0, 0.0)
        for i in range(w):  # warp order
            acc = chan(acc, block["wpart"][r][i])
        block["wcnt"][r], block["ring_group"][r] = 0, None
        sc.part[gr, b] = acc
        yield True
        old = sc.cnt[gr]
        sc.cnt[gr] = (old + 1) % M32
        if (old - base) % M32 != nb - 1:
            return
        yield True
        acc = (0.0, 0.0, 0.0)
        for i in range(nb):  # block order
            acc = chan(acc, sc.part[gr, i])
        assert gr not in finals
        finals[gr] = acc
        sc.stat[gr] = (launch_id, acc)
        sc.cnt[gr] = (sc.cnt[gr] + 1) % M32

    def warp(b: int, wi: int, block: dict):
        while "base" not in block:  # thread 0 reads the epoch before the block's warps start
            yield False
        base = block["base"]
        for s in range(ng + lag_):
            gr, gw = s, s - lag_
            if early and gr < ng:
                yield True
                yield from publish(gr, base, b, wi, block)
            if gw >= 0:
                yield from fetch(gw, base, block)
            yield True
            if not early and gr < ng:
                yield from publish(gr, base, b, wi, block)

    blocks = [{"wcnt": [0] * ring, "ring_group": [None] * ring, "wpart": [[None] * w for _ in range(ring)],
               "stag": [-1] * stats, "sclaim": [-1] * stats, "sstat": [None] * stats} for _ in range(nb)]
    agents = {(b, wi): warp(b, wi, blocks[b]) for b in range(nb) for wi in range(w)}
    left, idle = {b: w for b in range(nb)}, 0
    while agents:
        moved = False
        for b in range(nb):  # blocks start in any order
            if "base" not in blocks[b] and rng.random() < 0.3:
                blocks[b]["base"], moved = sc.epoch * (nb + 1) % M32, True
        key = rng.choice(list(agents))
        try:
            moved = next(agents[key]) or moved
        except StopIteration:
            moved = True
            del agents[key]
            left[key[0]] -= 1
            if left[key[0]] == 0:  # the block's last warp: the exit count, and the last block advances the epoch
                sc.exits += 1
                if sc.exits == nb:
                    sc.exits, sc.epoch = 0, sc.epoch + 1
        idle = 0 if moved else idle + 1
        if idle > 200 * len(agents):
            raise Deadlock(f"no warp moved in {idle} steps")
    for g in range(ng):
        want = run_stats(data[g])
        assert finals[g][0] == want[0]
        assert finals[g][1] == pytest.approx(want[1], rel=1e-9, abs=1e-9)
        assert finals[g][2] == pytest.approx(want[2], rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("early", [False, True], ids=["wait-first", "early"])
@pytest.mark.parametrize("nb,w,ng,lag_,epoch", [(3, 4, 5, 1, 0), (4, 2, 7, 2, 0), (2, 3, 4, 3, 0),
                                                 (3, 4, 6, 1, M32 // 4 - 1), (1, 1, 3, 2, 0)])
def test_protocol_progresses_and_combines_each_group_once(nb, w, ng, lag_, epoch, early):
    rng = random.Random(nb * 100 + w * 10 + ng + lag_)
    sc = Scratch(ng, nb, epoch=epoch)
    start = sc.epoch
    for i in range(3):  # launches in a row on one kept scratch
        data = np.random.default_rng(i).normal(3.0, 2.0, (ng, 29))
        launch(sc, data, w, lag_, rng, launch_id=i, early=early)
        assert (sc.epoch, sc.exits) == (start + i + 1, 0)
        assert all((c - sc.epoch * (nb + 1)) % M32 == 0 for c in sc.cnt)


def test_the_model_finds_a_ring_one_entry_short(monkeypatch):
    """The model can fail: with LAG entries less one, a fast warp overwrites a partial its block has not combined."""
    import test_gn_lag as me

    monkeypatch.setattr(me, "RING", 2)
    with pytest.raises(AssertionError, match="ring entry"):
        for seed in range(10):
            launch(Scratch(8, 3), np.random.default_rng(seed).normal(size=(8, 29)), 4, 3, random.Random(seed), 0)


def test_the_model_finds_statistics_replaced_too_soon(monkeypatch):
    """With fewer statistic entries than the groups a block's warps may still read, one is replaced before it is
    read."""
    import test_gn_lag as me

    monkeypatch.setattr(me, "STATS", 2)
    with pytest.raises(AssertionError, match="replaced|ring entry"):
        for seed in range(20):
            launch(Scratch(8, 3), np.random.default_rng(seed).normal(size=(8, 29)), 4, 3, random.Random(seed), 0)


def test_an_early_statistic_needs_one_more_entry_each(monkeypatch):
    """Published before the wait, a block's warps may be one group further apart: LAG entries no longer suffice."""
    import test_gn_lag as me

    monkeypatch.setattr(me, "RING", 2)
    monkeypatch.setattr(me, "STATS", 2)
    with pytest.raises(AssertionError, match="replaced|ring entry"):
        for seed in range(20):
            launch(Scratch(8, 3), np.random.default_rng(seed).normal(size=(8, 29)), 4, 3, random.Random(seed), 0,
                   early=True)

"""The relay's cluster exchange (Note [a row's statistic exchanged within its cluster] in templates/relay_cluster.py):
its protocol checked on the CPU against a model of one cluster's warps under random schedules, and the template's
rules, launch and source. The model has every block's loader, reducer warps, publisher, resolver and writer warps,
the slots' four mbarriers and the ring's two with the parity rule of ``mbarrier.try_wait.parity`` (the Barrier of
test_relay_protocol.py), and the ring's words that each publisher stores into every block. It reports a deadlock, a
phase misread, or a race: a warp that reads a slot, the warps' partials, a statistic or an entry's words holding
another piece's or row's."""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
import template_cards as tc
from test_relay_protocol import Barrier, PhaseMisread, Race

from forge_backend.search.templates import family_for
from forge_backend.search.templates.relay_cluster import (cluster_defaults, cluster_progress_ok, cluster_smem,
                                                          cluster_valid)


@dataclass
class CBlock:
    rank: int
    pieces: int  # PPB pieces of each of the cluster's rows
    k: int
    nw: int
    cs: int
    ring: int
    ppr: int
    bars: dict[str, list[Barrier]] = field(default_factory=dict)
    slot: dict[int, int] = field(default_factory=dict)
    wpart: dict[tuple[int, int], int] = field(default_factory=dict)
    stat: dict[int, tuple[int, int]] = field(default_factory=dict)  # slot -> (piece, writers that have read it)
    words: dict[tuple[int, int], int] = field(default_factory=dict)  # (entry, piece of the row) -> the word's row

    def __post_init__(self) -> None:
        counts = {"full": 1, "reduced": self.nw, "ready": 1, "empty": self.nw}
        self.bars = {name: [Barrier(count=c) for _ in range(self.k)] for name, c in counts.items()}
        self.bars |= {name: [Barrier(count=self.cs) for _ in range(self.ring)] for name in ("xfull", "xempty")}

    def wait(self, name: str, index: int, use: int) -> bool:
        return self.bars[name][index].ready(use)


def simulate(rows: int, ppr: int, cs: int, k: int, nw: int, ring: int, seed: int, skip_xempty: bool = False) -> str:
    """One cluster's walk over ``rows`` rows: ``done``, ``deadlock``, ``misread`` or ``race``. ``skip_xempty``: a
    publisher that rewrites an entry without waiting until every block has read it."""
    ppb = ppr // cs
    blocks = [CBlock(r, ppb, k, nw, cs, ring, ppr) for r in range(cs)]
    n = rows * ppb
    agents = []
    for blk in blocks:
        agents += [_loader(blk, n), _publisher(blk, blocks, n, skip_xempty), _resolver(blk, blocks, rows)]
        agents += [_reducer(blk, n, w) for w in range(nw)] + [_writer(blk, n, w) for w in range(nw)]
    live, rng = list(agents), random.Random(seed)
    while live:
        rng.shuffle(live)
        moved = False
        for agent in list(live):
            try:
                if next(agent):
                    moved = True
                    break
            except StopIteration:
                live.remove(agent)
                moved = True
                break
            except PhaseMisread:
                return "misread"
            except Race:
                return "race"
        if not moved:
            return "deadlock"
    return "done"


def _loader(blk: CBlock, n: int):
    for t in range(n):
        while t >= blk.k and not blk.wait("empty", t % blk.k, t // blk.k - 1):
            yield False
        blk.slot[t % blk.k] = t  # the bulk copy lands
        blk.bars["full"][t % blk.k].arrive()
        yield True


def _reducer(blk: CBlock, n: int, w: int):
    for t in range(n):
        while not blk.wait("full", t % blk.k, t // blk.k):
            yield False
        if blk.slot.get(t % blk.k) != t:
            raise Race(f"reducer of piece {t} found piece {blk.slot.get(t % blk.k)}")
        blk.wpart[(t % blk.k, w)] = t
        blk.bars["reduced"][t % blk.k].arrive()
        yield True


def _publisher(blk: CBlock, blocks: list[CBlock], n: int, skip_xempty: bool):
    for t in range(n):
        sl = t % blk.k
        while not blk.wait("reduced", sl, t // blk.k):
            yield False
        if any(blk.wpart.get((sl, w)) != t for w in range(blk.nw)):
            raise Race(f"publisher of piece {t} found another piece's partials")
        j, q = divmod(t, blk.pieces)
        e = j % blk.ring
        while q == 0 and j >= blk.ring and not skip_xempty and not blk.wait("xempty", e, j // blk.ring - 1):
            yield False
        for peer in blocks:  # lane r stores into block r, then (the row's last piece) arrives there
            peer.words[(e, blk.rank + q * blk.cs)] = j
            if q == blk.pieces - 1:
                peer.bars["xfull"][e].arrive()
        yield True


def _resolver(blk: CBlock, blocks: list[CBlock], rows: int):
    for j in range(rows):
        e = j % blk.ring
        while not blk.wait("xfull", e, j // blk.ring):
            yield False
        if any(blk.words.get((e, i)) != j for i in range(blk.ppr)):
            raise Race(f"resolver of row {j} found another row's words")
        for peer in blocks:
            peer.bars["xempty"][e].arrive()
        for t in range(j * blk.pieces, (j + 1) * blk.pieces):
            old = blk.stat.get(t % blk.k)
            if old is not None and old[1] < blk.nw:
                raise Race(f"statistic of piece {t} overwrote piece {old[0]}'s before its writers read it")
            blk.stat[t % blk.k] = (t, 0)
            blk.bars["ready"][t % blk.k].arrive()
        yield True


def _writer(blk: CBlock, n: int, w: int):
    for t in range(n):
        sl = t % blk.k
        while not blk.wait("ready", sl, t // blk.k):
            yield False
        piece, seen = blk.stat[sl]
        if piece != t or blk.slot.get(sl) != t:
            raise Race(f"writer of piece {t} found piece {piece}'s statistic, piece {blk.slot.get(sl)}'s slot")
        blk.stat[sl] = (piece, seen + 1)
        blk.bars["empty"][sl].arrive()
        yield True


SETTINGS = [(rows, ppr, cs, k, nw, ring) for rows, ppr, cs in ((5, 16, 8), (4, 32, 8), (6, 24, 8), (7, 8, 4),
                                                                (3, 16, 16), (9, 4, 2))
            for k in (ppr // cs + 1, ppr // cs + 3) for nw in (1, 2) for ring in (1, 2, 3)]


@pytest.mark.parametrize("rows,ppr,cs,k,nw,ring", SETTINGS)
def test_cluster_walk_runs_to_the_end_under_random_schedules(rows, ppr, cs, k, nw, ring):
    assert cluster_progress_ok(ppr, cs, k)
    for seed in range(12):
        assert simulate(rows, ppr, cs, k, nw, ring, seed) == "done", seed


@pytest.mark.parametrize("rows,ppr,cs", [(4, 16, 8), (5, 32, 8), (3, 8, 2)])
def test_slots_fewer_than_a_blocks_pieces_of_a_row_deadlock(rows, ppr, cs):
    k = ppr // cs - 1
    assert not cluster_progress_ok(ppr, cs, k)
    assert simulate(rows, ppr, cs, k, 2, 2, seed=0) == "deadlock"


def test_a_publisher_that_skips_its_wait_on_xempty_is_caught():
    """Without the wait, some schedule lets a fast block overwrite an entry that a slow block has not read yet."""
    results = {simulate(8, 16, 4, 8, 1, 1, seed, skip_xempty=True) for seed in range(200)}
    assert "race" in results
    assert {simulate(8, 16, 4, 8, 1, 1, seed) for seed in range(200)} == {"done"}


# The template: rules, launch, source.

GN = tc.group_norm(1, 512, 128, 128, dtype="float32")
SM = tc.softmax((64, 262144), "bfloat16")
GN_P = {"strategy": "relay", "vec": 4, "pe": 8192, "nw": 4, "k": 7, "ramp": 2, "writers": True, "cs": 8, "ncl": 16,
        "ring": 2}
SM_P = {"strategy": "relay", "vec": 8, "pe": 16384, "nw": 8, "k": 6, "ramp": 1, "writers": True, "cs": 8, "ncl": 16,
        "ring": 2}


def test_cluster_rules():
    assert cluster_valid(GN_P, 32, 262144, 4, 16)
    assert not cluster_valid({**GN_P, "cs": 3}, 32, 262144, 4, 16)  # not a cluster size
    assert not cluster_valid({**GN_P, "ncl": 17}, 32, 262144, 4, 16)  # more blocks than SMs
    assert not cluster_valid({**GN_P, "k": 4}, 32, 262144, 4, 16)  # 4 pieces a block of a group need 5 slots
    assert not cluster_valid({**GN_P, "cs": 16, "ncl": 8, "pe": 8192}, 2, 24 * 8192, 4, 16)  # 24 pieces over 16
    assert not cluster_valid({k: v for k, v in GN_P.items() if k != "writers"}, 32, 262144, 4, 16)
    assert not cluster_valid({**GN_P, "nc": 1}, 32, 262144, 4, 16)  # the global exchange's resolvers
    assert not cluster_valid({**GN_P, "k": 8}, 32, 262144, 4, 16)  # 8 slots of 32 KB and the head: over 227 KB
    assert cluster_smem(GN_P, 32, 4, 16) <= 227 * 1024 - 1024


def test_cluster_defaults_from_a_writers_relay():
    p = {"strategy": "relay", "vec": 4, "pe": 8192, "nw": 4, "nc": 1, "k": 7, "ramp": 2, "writers": True}
    assert cluster_defaults(p) == GN_P


@pytest.mark.parametrize("card,p,kernel,threads", [(GN, GN_P, "gn_relay", 32 * 11), (SM, SM_P, "softmax_relay", 32 * 19)])
def test_cluster_relay_candidate(card, p, kernel, threads):
    fam = family_for(card)
    assert fam.valid(card, p)
    c = fam.generate(card, p)
    (ln,) = c.launches
    assert (ln.kernel, ln.grid, ln.block, ln.cooperative) == (kernel, (128, 1, 1), (threads, 1, 1), False)
    assert not c.scratch and "scratch:part" not in ln.args and ln.args[-1].startswith("i64:")
    assert "__cluster_dims__(CS, 1, 1)" in c.source and "mapa.shared::cluster" in c.source
    assert "st.relaxed.gpu.global.u64" not in c.source.split("extern \"C\"")[-1]  # no global words in the kernel


def test_the_exchange_is_an_action_of_a_writers_relay_and_back():
    fam = family_for(GN)
    root = fam.seeds(GN)[0]
    assert "writers" in root and "cs" not in root
    acts = dict(fam.actions(GN, root))
    assert acts.get("exchange global -> cluster", {}).get("cs") == 8
    back = dict(fam.actions(GN, acts["exchange global -> cluster"]))
    assert "cs" not in back["exchange cluster -> global"] and fam.valid(GN, back["exchange cluster -> global"])

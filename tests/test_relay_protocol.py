"""The relay's pipeline protocol (Note [rows relayed through global memory] in templates/relay.py), checked on the CPU
against a model of the kernel's warps: every block's loader, consumers, publisher and resolvers, the four mbarriers
of each slot with the parity rule of ``mbarrier.try_wait.parity``, and the marked words of the global scratch. A
random scheduler interleaves the agents of all blocks; the model reports a deadlock (no agent can move), a phase
misread (a wait that succeeds on the parity of a phase that is not the one it waits for), a stale word (a resolver
that takes a word an earlier launch left in the kept scratch) or a race (a warp that reads a slot, the warps'
partials or a statistic holding another piece's). With knob ``regs`` (Note [pieces held in the writers' registers] in
templates/relay_held.py) the writers take pieces into registers, the statistics are a ring of K + R entries, a slot's
``empty`` waits for its publisher too, and the resolvers wait for the scratch's words only, never for a slot."""
from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

import pytest

from forge_backend.search.templates.relay import progress_ok, writers_progress_ok
from forge_backend.search.templates.relay_held import held_progress_ok


class PhaseMisread(AssertionError):
    pass


class Race(AssertionError):
    pass


@dataclass
class Barrier:
    done: int = 0  # completed phases
    count: int = 1  # arrivals that complete a phase
    arrived: int = 0

    def arrive(self) -> None:
        self.arrived += 1
        if self.arrived == self.count:
            self.arrived, self.done = 0, self.done + 1

    def ready(self, use: int) -> bool:
        """``try_wait.parity(use & 1)``: true once the current phase's parity differs from the use's."""
        ok = self.done % 2 != use % 2
        if ok and self.done != use + 1:
            raise PhaseMisread(f"waiting for use {use}, {self.done} phases done")
        return ok


@dataclass
class Block:
    """One block's mbarriers and what its shared memory holds: the piece in each slot, whose partials are in each
    slot's ``wpart``, whose statistic is in each ``stat`` entry. ``regs``: pieces held in the writers' registers;
    ``ring`` (K + R, or K to model the kernel without the ring) statistics and ``ready`` mbarriers; ``frees``:
    whether the publisher arrives on ``empty`` beside the writers (with knob regs; False models the kernel without
    it); ``slot_waits``: whether the resolvers wait for a piece's ``reduced`` (without knob regs; True models the
    kernel with regs but with that wait)."""
    index: int
    pieces: int
    k: int
    regs: int = 0
    ring: int | None = None
    frees: bool | None = None
    slot_waits: bool | None = None
    barriers: dict[str, list[Barrier]] = field(default_factory=dict)
    slot: dict[int, int] = field(default_factory=dict)
    wpart: dict[int, int] = field(default_factory=dict)
    stat: dict[int, int] = field(default_factory=dict)
    epoch: int | None = None  # what the publisher's lane 0 read before the block's __syncthreads (None: not yet)

    def __post_init__(self) -> None:
        self.ring = self.k + self.regs if self.ring is None else self.ring
        self.frees = bool(self.regs) if self.frees is None else self.frees
        self.slot_waits = not self.regs if self.slot_waits is None else self.slot_waits
        self.barriers = {name: [Barrier() for _ in range(self.size(name))] for name in ("full", "reduced", "ready")}
        self.barriers["empty"] = [Barrier(count=1 + self.frees) for _ in range(self.k)]

    def size(self, name: str) -> int:
        return self.ring if name == "ready" else self.k

    def bar(self, name: str, t: int) -> Barrier:
        return self.barriers[name][t % self.size(name)]

    def wait(self, name: str, t: int) -> bool:
        return self.bar(name, t).ready(t // self.size(name))

    def check(self, what: dict[int, int], at: int, t: int) -> None:
        if what.get(at) != t:
            raise Race(f"block {self.index}: piece {t} found piece {what.get(at)}'s")


@dataclass
class Scratch:
    """The kept scratch (Note [scratch kept between launches]): each piece's word as (mark, launch that wrote it), the
    epoch and the count of warps that have read it. Zeroed once, before the first launch."""
    words: dict[int, tuple[int, int]] = field(default_factory=dict)
    epoch: int = 0
    count: int = 0


def simulate(rows: int, ppr: int, blocks: int, k: int, lag: int | None, nc: int, seed: int, launches: int = 1,
             advance: bool = True, ramp: int | None = None, regs: int = 0, count_first: bool = False, **held) -> str:
    """Run ``launches`` launches one after another (stream order) on one kept scratch: ``done``, ``deadlock``,
    ``misread``, ``stale`` (a resolver took a word of an earlier launch) or ``race``. ``advance=False`` is a kernel
    whose epoch never moves. ``lag=None``: writer warps of their own (Note [writers of their own]); ``regs``: holding
    that many pieces in registers, ``held`` (``ring``, ``frees``, ``slot_waits``) overriding Block's defaults.
    ``ramp``: the loader issues its first K copies RAMP at a time, each once the copy RAMP before it has landed (Note
    [the first copies a few at a time]); without it they have all landed before any warp starts. ``count_first``: the
    resolvers count themselves in before the block's barrier, not after it (a kernel that would break Note [the
    publisher left out of the epoch's count])."""
    scratch = Scratch({g: (0, -1) for g in range(rows * ppr)})
    for launch in range(launches):
        blocks_ = [Block(b, (rows * ppr - 1 - b) // blocks + 1 if b < rows * ppr else 0, k, regs, **held)
                   for b in range(blocks)]
        result = _one_launch(blocks_, ppr, lag, nc, random.Random(seed * 1000 + launch), scratch, launch, advance,
                             ramp, count_first)
        if result != "done":
            return result
    return "done"


def _one_launch(blks: list[Block], ppr: int, lag: int | None, nc: int, rng: random.Random, scratch: Scratch,
                launch: int, advance: bool, ramp: int | None = None, count_first: bool = False) -> str:
    agents = []
    users = len(blks) * nc  # the grid's resolvers: each reads the epoch once and counts itself in
    for blk in blks:
        for t in range(min(blk.k, blk.pieces)) if ramp is None else ():  # the loader's first K bulk copies at once
            blk.slot[t % blk.k] = t
            blk.bar("full", t).arrive()
        agents += [start(blk, scratch), loader(blk, ramp), publisher(blk, len(blks), scratch, launch)]
        agents += [consumers(blk, lag)] if lag is not None else [reducers(blk), writers(blk)]
        agents += [resolver(blk, c, nc, len(blks), ppr, scratch, launch, users, advance, count_first)
                   for c in range(nc)]
    live = [iter(a) for a in agents]
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
            except StaleWord:
                return "stale"
            except Race:
                return "race"
        if not moved:
            return "deadlock"
    return "done"


class StaleWord(AssertionError):
    pass


def read_mark(scratch: Scratch, users: int, advance: bool) -> int:
    """``relay_mark``: read the epoch, count this warp in; the grid's last advances the epoch and rearms the count."""
    e = scratch.epoch
    scratch.count += 1
    if scratch.count == users:
        scratch.count = 0
        if advance:
            scratch.epoch = e + 1
    return (e & 1) ^ 1


# Each agent is a generator that yields True after a step and False when it must wait.

def start(blk: Block, scratch: Scratch):
    """The block's start: the publisher's lane 0 reads the epoch (not counted: Note [the publisher left out of the
    epoch's count]), then the block's __syncthreads, which every other warp waits for."""
    blk.epoch = scratch.epoch
    yield True


def after_barrier(blk: Block):
    while blk.epoch is None:
        yield False


def loader(blk: Block, ramp: int | None = None):
    yield from after_barrier(blk)
    def issue(t: int) -> None:  # the bulk copy of piece t into its slot, landed
        blk.slot[t % blk.k] = t
        blk.bar("full", t).arrive()

    if ramp is not None:  # the first K copies, each once the one RAMP before it has landed
        for t in range(min(blk.k, blk.pieces)):
            while t >= ramp and not blk.bar("full", t - ramp).ready(0):
                yield False
            issue(t)
            yield True
    for v in range(max(0, blk.pieces - blk.k)):
        while not blk.wait("empty", v):
            yield False
        issue(v + blk.k)
        yield True


def reduce_step(blk: Block, t: int):
    """A reducer's step on piece ``t``: once it has landed, its partials into the slot's ``wpart``, then ``reduced``."""
    while not blk.wait("full", t):
        yield False
    blk.check(blk.slot, t % blk.k, t)
    blk.wpart[t % blk.k] = t
    blk.bar("reduced", t).arrive()
    yield True


def write_step(blk: Block, u: int):
    """A writer's step on piece ``u`` (without knob regs): once its row is resolved, the piece from its slot with the
    slot's statistic, then the slot freed."""
    while not blk.wait("ready", u):
        yield False
    blk.check(blk.stat, u % blk.ring, u)
    blk.check(blk.slot, u % blk.k, u)
    blk.bar("empty", u).arrive()
    yield True


def consumers(blk: Block, lag: int):
    for t in range(blk.pieces + lag):
        if t < blk.pieces:
            yield from reduce_step(blk, t)
        if t >= lag:
            yield from write_step(blk, t - lag)


def reducers(blk: Block):
    """Knob ``writers``: the consumers reduce each piece as it arrives and never wait for a row."""
    for t in range(blk.pieces):
        yield from reduce_step(blk, t)


def writers(blk: Block):
    """... and the writer warps write each piece once its row is resolved, then free its slot; with knob regs they
    hold pieces u .. u + R - 1 in registers, taking each from its slot once reduced (and freeing the slot then)."""
    if not blk.regs:
        for u in range(blk.pieces):
            yield from write_step(blk, u)
        return

    def take(t: int):
        while not blk.wait("reduced", t):
            yield False
        blk.check(blk.slot, t % blk.k, t)
        held[t % blk.regs] = t
        blk.bar("empty", t).arrive()
        yield True

    held: dict[int, int] = {}
    for t in range(min(blk.regs, blk.pieces)):
        yield from take(t)
    for u in range(blk.pieces):
        while not blk.wait("ready", u):
            yield False
        blk.check(blk.stat, u % blk.ring, u)
        blk.check(held, u % blk.regs, u)
        if u + blk.regs < blk.pieces:
            yield from take(u + blk.regs)


def publisher(blk: Block, blocks: int, scratch: Scratch, launch: int):
    yield from after_barrier(blk)
    mark = (blk.epoch & 1) ^ 1  # relay_mark_of: the value read before the barrier
    for u in range(blk.pieces):
        while not blk.wait("reduced", u):
            yield False
        blk.check(blk.wpart, u % blk.k, u)
        scratch.words[blk.index + u * blocks] = (mark, launch)
        if blk.frees:
            blk.bar("empty", u).arrive()
        yield True


def resolver(blk: Block, c: int, nc: int, blocks: int, ppr: int, scratch: Scratch, launch: int, users: int,
             advance: bool, count_first: bool = False):
    if not count_first:
        yield from after_barrier(blk)
    mark = read_mark(scratch, users, advance)
    yield True
    last_row = -1
    for u in range(c, blk.pieces, nc):
        while blk.slot_waits and not blk.wait("reduced", u):
            yield False
        own, row = blk.index + u * blocks, (blk.index + u * blocks) // ppr
        words = range(row * ppr, (row + 1) * ppr) if row != last_row else \
            (range(own, own + 1) if not blk.slot_waits else ())  # a row resolved before: its own piece published
        while not all(scratch.words[g][0] == mark for g in words):
            yield False
        if row != last_row and any(scratch.words[g][1] != launch for g in words):
            raise StaleWord(f"launch {launch} took a word of launch {min(scratch.words[g][1] for g in words)}")
        last_row = row
        blk.stat[u % blk.ring] = u
        blk.bar("ready", u).arrive()
        yield True


def _cases():
    for blocks, rows, ppr, k, nc in itertools.product((3, 5), (1, 3), range(1, 12), range(3, 7), (1, 2, 3, 4)):
        for lag in range(1, k - 1):
            yield blocks, rows, ppr, k, lag, nc


def runs_to_the_end(settings, allowed, **kw) -> int:
    """Every (blocks, rows, ppr, k, lag, nc, regs) setting ``allowed`` lets through runs to the end under two
    schedules; how many there were."""
    checked = 0
    for blocks, rows, ppr, k, lag, nc, regs in settings:
        if allowed(blocks, ppr, k, lag, nc, regs):
            checked += 1
            for seed in range(2):
                got = simulate(rows, ppr, blocks, k, lag, nc, seed, regs=regs, **kw)
                assert got == "done", (blocks, rows, ppr, k, lag, nc, regs, seed, got)
    return checked


def test_every_setting_the_progress_rule_allows_runs_to_the_end() -> None:
    settings = ((blocks, rows, ppr, k, lag, nc, 0) for blocks, rows, ppr, k, lag, nc in _cases())
    assert runs_to_the_end(settings, lambda b, ppr, k, lag, nc, _: progress_ok(ppr, b, k, lag, nc)) > 300


@pytest.mark.parametrize("seed", range(4))
def test_a_lag_short_of_a_blocks_pieces_of_one_row_deadlocks(seed: int) -> None:
    """11 pieces a row over 3 blocks: up to 4 pieces of a row in one block's run, so the consumers must reduce 3 past
    the first before they wait for its row; with a lag of 2 they wait first, and the row never completes."""
    assert not progress_ok(11, 3, 5, 2, 1) and progress_ok(11, 3, 6, 3, 1)
    assert simulate(2, 11, 3, 5, 2, 1, seed) == "deadlock"
    assert simulate(2, 11, 3, 6, 3, 1, seed) == "done"


def test_more_resolvers_than_slots_misread_a_phase() -> None:
    """Four resolvers over three slots: resolver 3's first piece is slot 0's second use, and before slot 0's first use
    is reduced its parity reads as done (the race the GPU tests caught on an fp16 layout). Two resolvers over three
    slots take alternate uses of each slot and stay in order."""
    assert not progress_ok(4, 3, 3, 1, 4) and progress_ok(4, 3, 3, 1, 2)
    assert "misread" in {simulate(3, 4, 3, 3, 1, 4, seed) for seed in range(40)}
    assert {simulate(3, 4, 3, 3, 1, 2, seed) for seed in range(40)} == {"done"}


@pytest.mark.parametrize("seed", range(3))
def test_launches_in_a_row_on_one_kept_scratch_never_take_an_earlier_launchs_word(seed: int) -> None:
    """Five launches one after another on one scratch, zeroed only before the first (Note [rows relayed through
    global memory], marks): each launch's mark is the other one, and the epoch moves only after every warp of the
    grid has read it, so no resolver takes a word of an earlier launch."""
    for blocks, rows, ppr, k, lag, nc in [(3, 3, 4, 4, 1, 2), (5, 1, 11, 6, 2, 1), (5, 3, 7, 5, 2, 3)]:
        assert progress_ok(ppr, blocks, k, lag, nc)
        assert simulate(rows, ppr, blocks, k, lag, nc, seed, launches=5) == "done", (blocks, rows, ppr, k, lag, nc)


def test_an_epoch_that_never_moves_lets_a_resolver_take_the_last_launchs_words() -> None:
    """The same kernel with the epoch left alone: the second launch writes the first one's mark, and some resolver
    finds its row complete before this launch's publishers have written it."""
    assert "stale" in {simulate(3, 4, 3, 4, 1, 2, seed, launches=2, advance=False) for seed in range(20)}
    assert {simulate(3, 4, 3, 4, 1, 2, seed, launches=2) for seed in range(20)} == {"done"}


def test_resolvers_that_count_before_the_block_barrier_let_a_publisher_read_the_next_epoch() -> None:
    """Note [the publisher left out of the epoch's count]: the publisher reads the epoch before its block's barrier
    and does not count itself in. Where the resolvers counted before that barrier, the grid's last count could
    advance the epoch before some block's publisher read it: that block's words carry the next launch's mark, and the
    grid's resolvers wait for them for ever (or a later launch takes them as its own)."""
    setting = (3, 4, 3, 4, 1, 2)
    assert {simulate(*setting, seed, launches=3, count_first=True) for seed in range(40)} - {"done"}
    assert {simulate(*setting, seed, launches=3) for seed in range(40)} == {"done"}


def test_every_setting_the_writers_rule_allows_runs_to_the_end() -> None:
    """Writers of their own (Note [writers of their own]): no lag, slots that hold a block's pieces of one row; over
    three launches in a row too."""
    settings = [(blocks, rows, ppr, k, None, nc, 0) for blocks, rows, ppr, k, nc in
                itertools.product((3, 5), (1, 3), range(1, 12), range(2, 7), (1, 2, 3, 4))]
    allowed = lambda b, ppr, k, lag, nc, _: writers_progress_ok(ppr, b, k, nc)  # noqa: E731
    assert runs_to_the_end(settings, allowed) > 100
    assert runs_to_the_end(settings, allowed, launches=3) > 100


@pytest.mark.parametrize("seed", range(4))
def test_writers_with_fewer_slots_than_a_blocks_pieces_of_one_row_deadlock(seed: int) -> None:
    """11 pieces a row over 3 blocks (up to 4 of a row in one block): with 3 slots the reducers wait for the fourth
    piece's load, which waits for the first piece's slot, which waits for the row."""
    assert not writers_progress_ok(11, 3, 3, 1) and writers_progress_ok(11, 3, 5, 1)
    assert simulate(2, 11, 3, 3, None, 1, seed) == "deadlock"
    assert simulate(2, 11, 3, 5, None, 1, seed) == "done"


@pytest.mark.parametrize("ramp", (1, 2, 3))
def test_first_copies_a_few_at_a_time_run_to_the_end(ramp: int) -> None:
    """Note [the first copies a few at a time]: the loader's first K copies issued RAMP at a time, the warps moving
    while they land, with the joint consumers and with writers of their own, over launches in a row."""
    checked = 0
    for blocks, rows, ppr, k, lag, nc in _cases():
        if ramp < k and progress_ok(ppr, blocks, k, lag, nc) and (ppr + k + nc) % 3 == 0:
            checked += 1
            assert simulate(rows, ppr, blocks, k, lag, nc, ppr, launches=2, ramp=ramp) == "done"
    for blocks, rows, ppr, k, nc in itertools.product((3, 5), (1, 3), range(1, 12), range(2, 7), (1, 2)):
        if ramp < k and writers_progress_ok(ppr, blocks, k, nc):
            checked += 1
            assert simulate(rows, ppr, blocks, k, None, nc, ppr, ramp=ramp) == "done"
    assert checked > 100


# ---------------------------------------------------------------------------------------------------------------------
# knob regs: pieces held in the writers' registers (Note [pieces held in the writers' registers] in relay_held.py)

def _held_cases():
    for blocks, rows, ppr, k, nc, regs in itertools.product((3, 5), (1, 3), range(1, 14), range(1, 6), (1, 2, 3),
                                                            (1, 2, 3)):
        yield blocks, rows, ppr, k, nc, regs


def test_every_setting_the_held_rule_allows_runs_to_the_end() -> None:
    settings = ((blocks, rows, ppr, k, None, nc, regs) for blocks, rows, ppr, k, nc, regs in _held_cases())
    assert runs_to_the_end(settings, lambda b, ppr, k, lag, nc, regs: held_progress_ok(ppr, b, k, regs, nc)) > 1000


def test_held_with_one_place_fewer_deadlocks() -> None:
    """K + R one short of a block's pieces of one row: the reducers wait for a load, the load for a slot, the slot for
    the writers, and the writers for the row."""
    checked = 0
    for blocks, rows, ppr, k, nc, regs in _held_cases():
        if nc <= k and not held_progress_ok(ppr, blocks, k, regs, nc) and held_progress_ok(ppr, blocks, k + 1, regs,
                                                                                             nc):
            checked += 1
            assert simulate(rows, ppr, blocks, k, None, nc, 0, regs=regs) == "deadlock", (blocks, rows, ppr, k, regs)
    assert checked > 20


@pytest.mark.parametrize("seed", range(3))
def test_held_launches_in_a_row_with_a_ramp(seed: int) -> None:
    for blocks, rows, ppr, k, nc, regs in [(3, 3, 7, 3, 1, 1), (5, 3, 11, 2, 2, 2), (3, 1, 13, 4, 3, 1)]:
        assert held_progress_ok(ppr, blocks, k, regs, nc)
        assert simulate(rows, ppr, blocks, k, None, nc, seed, launches=3, ramp=1, regs=regs) == "done"


@pytest.mark.parametrize("change", [dict(ring="k"), dict(frees=False), dict(slot_waits=True)],
                         ids=["statistics-per-slot", "slot-freed-before-its-publisher", "resolvers-wait-for-slots"])
def test_held_fails_without_each_of_its_changes(change: dict) -> None:
    """Each of the Note's three changes, undone, breaks some setting the rule allows: statistics kept one per slot
    (a resolver overwrites one the writers have not read, or completes a ``ready`` phase twice), a slot freed before
    its publisher has waited on it, resolvers that wait for a slot's ``reduced`` (which then either frees the slot late
    and deadlocks, or not and is read two phases on)."""
    seen = set()
    for blocks, rows, ppr, k, nc, regs in _held_cases():
        if held_progress_ok(ppr, blocks, k, regs, nc) and regs <= 2 and ppr % 2:
            held = {key: (k if v == "k" else v) for key, v in change.items()}
            seen |= {simulate(rows, ppr, blocks, k, None, nc, seed, regs=regs, **held) for seed in range(2)}
    assert seen - {"done"} and seen - {"done"} <= {"deadlock", "misread", "race"}, seen

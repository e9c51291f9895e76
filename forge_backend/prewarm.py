"""``kforge prewarm``: search every operator signature of a model ahead of time.

Plan: capture the model's cards; profile each signature's eager time on the GPU and weigh it by its occurrences
to get its share of the model's operator time; skip signatures already decided in the cache (so a rerun resumes
where an interrupted one stopped), those without a template family (unless the LLM proposes), and those under
``min_share``; then search the rest, biggest share first, one search worker per GPU. Each finished search is
stored at once, so Ctrl-C loses only the search in flight. A signature that another process is searching is
waited for and its record taken (Note [one search of a signature at a time] in store/claims.py). A signature that
kforge ships a record for (Note [a shipped record in a prewarm]) is re-verified on this GPU instead of searched.
With ``inner="inductor"`` (the default) each kernel found is also timed against Inductor's own single op, as the
first compile would otherwise do (Note [the baseline inside Inductor]), so that compile finds the time in the
record and the final table shows it.
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Callable

import torch

from .cards import OperatorCard
from .config import KforgeConfig
from .store.gpu_model import timed_on_another_model

log = logging.getLogger("kforge")

# Note [a shipped record in a prewarm]
# kernels_cache/ ships records measured on another machine of the same arch (store/shipped.py). A first compile
# takes such a record after re-verifying its kernel on this GPU (cuda_provider._use_record); a prewarm that read
# only the local cache searched those signatures again, seconds each, to find what ships. So plan() marks a
# signature that the local cache lacks and the shipped tier holds as "shipped", and run() re-verifies that record in
# the worker of a search (the verifier every candidate passes, on fresh inputs) and stores it locally as trusted, as
# the compile does (both through cuda_provider.reverified_locally). A record that fails is searched like any miss.
# A record of the team store (store/team.py), looked up before the shipped one, takes the same path (its status is
# "shipped" too), and so does a kernel of the local cache timed on another GPU model (Note [a cache directory that GPU
# models share] in store/local.py). ``force`` searches everything, shipped or not. The result carries the record's
# timings, measured where it was made; its reason, the times re-measured here.


@dataclass
class PlanItem:
    card: OperatorCard
    eager_us: float
    share: float  # of the summed eager time of all candidate signatures x occurrences
    status: str  # "search" | "cached" | "shipped" | "skipped: <why>"
    shipped: object | None = None  # the shipped KernelRecord of a "shipped" item


@dataclass
class PrewarmResult:
    card: OperatorCard
    share: float
    status: str
    eager_us: float | None = None
    kforge_us: float | None = None
    floor_us: float | None = None
    speedup: float | None = None
    decision: str | None = None
    iterations: int = 0
    iterations_to_best: int | None = None
    seconds: float = 0.0
    tokens: int = 0
    cost_usd: float = 0.0
    reason: str = ""
    inductor_us: float | None = None  # Inductor's single op (inner="inductor" and a kernel found)
    gpu: int | None = None  # the device index whose worker ran the search
    started: float | None = None  # unix time the search began and ended (shows searches overlapping across GPUs)
    finished: float | None = None

    @property
    def vs_inductor(self) -> float | None:
        """Inductor's single-op time over the kernel's (before the costs Inductor's graph adds around an extern
        call: Note [what replacing a node costs inside Inductor])."""
        return self.inductor_us / self.kforge_us if self.inductor_us and self.kforge_us else None

    @property
    def expected_gain(self) -> float:
        """Share of the profiled operator time saved: share x (1 - 1/speedup) for a kernel, else 0."""
        if self.decision != "kernel" or not self.speedup:
            return 0.0
        return self.share * (1.0 - 1.0 / self.speedup)

    @property
    def pct_roofline(self) -> float | None:
        """The kernel's speed as a percent of the roofline floor's (the floor's time over the kernel's)."""
        return 100.0 * self.floor_us / self.kforge_us if self.floor_us and self.kforge_us else None

    def to_json(self) -> dict:
        """One row of ``kforge prewarm --json``: the final table's columns, unrounded, with the signature's key."""
        from .cards import inputs_text

        return {"key": self.card.key, "op": self.card.op, "inputs": inputs_text(self.card.to_json(), 8),
                "share": self.share, "status": self.status, "decision": self.decision, "eager_us": self.eager_us,
                "kforge_us": self.kforge_us, "floor_us": self.floor_us, "speedup_vs_eager": self.speedup,
                "inductor_us": self.inductor_us, "speedup_vs_inductor_op": self.vs_inductor,
                "pct_roofline": self.pct_roofline, "expected_gain": self.expected_gain, "iterations": self.iterations,
                "iterations_to_best": self.iterations_to_best, "seconds": self.seconds, "tokens": self.tokens,
                "cost_usd": self.cost_usd, "reason": self.reason, "gpu": self.gpu, "started": self.started,
                "finished": self.finished}


@dataclass
class Progress:
    key: str
    iteration: int
    budget: int
    best_speedup: float | None
    best_pct_roofline: float | None
    tokens: int = 0
    cost_usd: float = 0.0
    waiting: str = ""  # who this search waits for (Note [one search of a signature at a time] in store/claims.py)


def profile_cards(cards: list[OperatorCard], device: torch.device) -> dict[str, float]:
    """Eager device time of each signature on fresh inputs, in microseconds (the model's profile by operator)."""
    from .measure import Timer
    from .verify import make_inputs

    timer = Timer(device)
    out = {}
    for card in cards:
        out[card.key] = _eager_us(timer, card, make_inputs(card, "normal", 7, device))
    return out


def _eager_us(timer, card: OperatorCard, inputs: list) -> float:
    from .reference import call_aten

    sig = card.signature_obj()
    return timer.time(lambda: call_aten(sig, inputs), warmup=3, repeats=10).median_us


def in_shard(key: str, shard: tuple[int, int] | None) -> bool:
    """Whether the signature ``key`` is searched by shard ``(i, n)`` of Note [a prewarm split across machines]."""
    return shard is None or int(key, 16) % shard[1] == shard[0]


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/n"`` as (i, n) with 0 <= i < n; BadOption otherwise."""
    from .errors import BadOption

    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise BadOption(f"kforge prewarm --shard {text!r}: give I/N, e.g. 0/4 (this machine's share of 4)") from None
    if not 0 <= i < n:
        raise BadOption(f"kforge prewarm --shard {text}: I must be in 0..N-1")
    return i, n


# Note [a prewarm split across machines]
# ``kforge prewarm MODEL --shard I/N`` on N machines that share a team store (store/team.py) searches each signature
# on one machine: shard I takes the signatures whose key, a sha256, is I modulo N. The key says which, not the
# profile, which differs a little from machine to machine, so every signature lands in exactly one shard whatever
# each machine measured. Each search publishes its kernel to the team as it finishes; a later plain ``kforge prewarm
# MODEL`` (or a compile) on any machine takes the team's records after re-verifying them (Note [a shipped record in
# a prewarm]). A signature of another shard is skipped, and one this machine's cache or the team already decided is
# taken as usual: the shard limits searches only. Without shards, machines that prewarm at once split the searches
# as they go (Note [a search a teammate is running] in store/team_markers.py); shards fix the split in advance.


def plan(cards: list[OperatorCard], eager_us: dict[str, float], cfg: KforgeConfig, store, force: bool = False,
         shipped=None, shard: tuple[int, int] | None = None) -> list[PlanItem]:
    """Each card's share of the profiled time and what run() does with it; ``shipped`` (a ShippedStore or None) is
    the tier of Note [a shipped record in a prewarm], after the configured team store; ``shard`` (i, n) searches
    only the signatures of Note [a prewarm split across machines]."""
    from .runtime.search_runner import template_gap
    from .store.shipped import Tiers
    from .store.team import team_store

    total = sum(eager_us[c.key] * c.occurrences for c in cards) or 1.0
    remote = Tiers(team_store(cfg), shipped)  # a teammate's record before the bundle; either may be absent
    items = []
    for c in cards:
        share = eager_us[c.key] * c.occurrences / total
        c.baselines_us["eager"] = eager_us[c.key]
        c.time_share = share
        found = None if force else remote.get(c.key)
        held = None if force else store.get(c.key)
        if held is not None and not _of_another_model(held, store):
            status = "cached"
        elif found is not None or held is not None:  # held: Note [a cache directory that GPU models share]
            found, status = found or held, "shipped"
        elif share < cfg.min_share:
            status = f"skipped: {share:.2%} of the time is under min_share {cfg.min_share:.2%}"
        elif cfg.proposer == "templates" and (gap := template_gap(c)) is not None:
            status = f"skipped: {gap}"
        elif not in_shard(c.key, shard):
            status = f"skipped: shard {int(c.key, 16) % shard[1]}/{shard[1]}'s (another machine's)"
        else:
            status = "search"
        items.append(PlanItem(c, eager_us[c.key], share, status, found if status == "shipped" else None))
    return sorted(items, key=lambda i: -i.share)


def _of_another_model(record: Any, store: Any) -> bool:
    """Whether a local record is a kernel timed on another GPU model than the store's (Note [a cache directory that
    GPU models share] in store/local.py): re-verified and timed here, as a shipped record is. A store opened without
    a GPU model (no ``gpu``, or "") takes every record as this machine's."""
    gpu = getattr(store, "gpu", "")
    return bool(gpu) and record.decision == "kernel" and record.trusted and timed_on_another_model(record, gpu)


def run(items: list[PlanItem], cfg: KforgeConfig, iterations: int, seconds_per_op: float, gpus: int,
        on_progress: Callable[[Progress], None] | None = None,
        on_done: Callable[[PrewarmResult], None] | None = None,
        search: Callable | None = None, make_client: Callable[[int], object] | None = None,
        reverify: Callable | None = None, wait_s: float | None = None) -> list[PrewarmResult]:
    """Search every item marked "search" and re-verify every item marked "shipped" (searching it if its record
    fails), ``gpus`` at a time (one worker process per GPU), each under the claims of Note [one search of a signature
    at a time] (store/claims.py): an item another process is searching waits for it (at most ``wait_s``, default
    PREWARM_WAIT_S) and takes its record. With a team store, an item another machine is searching is left for after
    the others (Note [a search a teammate is running] in store/team_markers.py). ``search``, ``make_client`` and
    ``reverify`` default to the real search, worker and re-verification; tests inject fakes."""
    from .store.claims import PREWARM_WAIT_S, ClaimBusy, search_claims
    from .store.gpu_model import this_gpu
    from .store.local import LocalStore
    from .store.team_markers import MarkedElsewhere

    from .runtime.search_runner import gpu_name

    if search is None:
        from .runtime.search_runner import run_search as search
    if make_client is None:
        from .runtime.worker import WorkerClient

        def make_client(gpu: int) -> object:
            return WorkerClient(cfg.cache_dir, gpu)

    todo = [i for i in items if i.status in ("search", "shipped")]
    results: list[PrewarmResult] = []
    store = LocalStore(cfg.cache_dir, this_gpu())
    lock = threading.Lock()
    free = list(range(max(gpus, 1)))
    clients = {g: make_client(g) for g in free}
    markers = _team_markers(cfg)
    wait = PREWARM_WAIT_S if wait_s is None else wait_s

    def left_for_later(item: PlanItem, teammate) -> None:  # Note [a search a teammate is running]: after the others
        log.info("kforge: %s is being searched by %s; coming back to it", item.card.op, teammate.describe())
        if on_progress is not None:
            on_progress(Progress(item.card.key, 0, iterations, None, None,
                                 waiting=f"{teammate.describe()} (after the others)"))
        return None

    def one(item: PlanItem, later: bool = False) -> PrewarmResult | None:
        if not later and markers is not None and item.status == "search":
            teammate = markers.running_elsewhere(item.card.key)
            if teammate is not None:
                return left_for_later(item, teammate)
        with lock:
            gpu = free.pop()
        try:
            res = on_gpu(item, gpu, later)
        finally:
            with lock:
                free.append(gpu)
        if res is not None and on_done is not None:
            on_done(res)
        return res

    def on_gpu(item: PlanItem, gpu: int, later: bool) -> PrewarmResult | None:
        spent = {"tokens": 0, "cost_usd": 0.0}

        def progress(p) -> None:
            spent["tokens"] += int(p.last.extra.get("tokens", 0) or 0)
            spent["cost_usd"] += float(p.last.extra.get("cost_usd", 0.0) or 0.0)
            if on_progress is not None:
                on_progress(Progress(item.card.key, p.iteration, p.iterations_budget, p.best_speedup,
                                     p.best_pct_roofline, spent["tokens"], spent["cost_usd"]))

        def waiting(holder) -> None:
            who = holder.describe() if holder is not None else "another process"
            log.info("kforge: %s waits for %s", item.card.op, who)
            if on_progress is not None:
                on_progress(Progress(item.card.key, 0, iterations, None, None, waiting=who))

        def claimed(item: PlanItem) -> PrewarmResult:
            what = f"kforge prewarm's search of {item.card.op}"
            with search_claims(cfg.cache_dir, item.card.key, gpu_name(gpu), what, wait, waiting) as waited:
                res = _searched_elsewhere(item, store) if waited else None
                if res is None and item.status == "shipped":
                    res = _take_shipped(item, cfg, clients[gpu], store, reverify)
                if res is None:
                    marked = markers.searching(item.card.key, what) if markers is not None else None
                    with marked or contextlib.nullcontext():  # MarkedElsewhere: a teammate marked it since the look
                        out = search(item.card, cfg, clients[gpu], store, iterations, seconds_per_op,
                                     on_progress=progress)
                    res = _result(item, out)
                if cfg.inner == "inductor" and res.inductor_us is None:
                    res.inductor_us = _inductor_time(item.card, store, clients[gpu])
            return res

        started = time.time()
        try:
            res = _after_teammate(item, markers, wait, waiting, claimed) if later else claimed(item)
        except ClaimBusy as e:
            if isinstance(e, MarkedElsewhere) and not later:  # a teammate marked it since running_elsewhere looked
                return left_for_later(item, e.marker)
            res = PrewarmResult(item.card, item.share, "busy", reason=str(e))  # left for a rerun: nothing stored
        res.gpu, res.started, res.finished = gpu, started, time.time()
        if res.status == "shipped":
            res.seconds = res.finished - started
        return res

    try:
        with ThreadPoolExecutor(max_workers=len(clients)) as pool:
            first = list(pool.map(one, todo))
            results += [r for r in first if r is not None]
            left = [i for i, r in zip(todo, first) if r is None]  # being searched by a teammate when their turn came
            results += list(pool.map(lambda i: one(i, later=True), left))
    finally:
        for c in clients.values():
            c.close()
    return results


def _team_markers(cfg: KforgeConfig):
    """The markers of the configured team store (Note [a search a teammate is running]); None without one."""
    from .store.team import team_store
    from .store.team_markers import markers_of

    return markers_of(team_store(cfg))


def _after_teammate(item: PlanItem, markers, wait_s: float, waiting: Callable, claimed: Callable) -> PrewarmResult:
    """Note [a search a teammate is running]: an item left for after the others. Wait (at most ``wait_s``) for the
    teammate's search to end and take what it published, re-verified like a shipped record (Note [a shipped record
    in a prewarm]), else search it under ``claimed``. A teammate that marked it again in between (MarkedElsewhere)
    is waited for once more, within what is left of ``wait_s``; ClaimBusy where it still searches then."""
    from .store.team_markers import MarkedElsewhere

    deadline = time.monotonic() + wait_s
    try:
        return claimed(_with_team_record(item, markers, deadline, waiting))
    except MarkedElsewhere as e:
        log.info("kforge: %s was marked again by %s; waiting for it", item.card.op, e.marker.describe())
    return claimed(_with_team_record(item, markers, deadline, waiting))


def _with_team_record(item: PlanItem, markers, deadline: float, waiting: Callable) -> PlanItem:
    """``item`` as one to re-verify the team's record of, once no teammate searches it (ClaimBusy where one still
    does at ``deadline``, a time.monotonic()); ``item`` itself where the team holds no record of it."""
    found = markers.record_after(item.card.key, max(deadline - time.monotonic(), 0.0), waiting)
    return item if found is None else replace(item, status="shipped", shipped=found)


def _searched_elsewhere(item: PlanItem, store) -> PrewarmResult | None:
    """The record another process stored while this prewarm waited for its claim on the item, as a result."""
    rec = store.get(item.card.key)
    if rec is None:
        return None
    return _from_record(item, rec, "cached", "searched by another process while this prewarm waited for it")


def _take_shipped(item: PlanItem, cfg: KforgeConfig, client, store, reverify) -> PrewarmResult | None:
    """Note [a shipped record in a prewarm]: the item's shipped record re-verified on this GPU and stored locally as
    trusted, as a result; None (logged) when it fails, or is slower here (Note [a record timed on another GPU
    model] in store/reverified.py), so the caller searches."""
    from .runtime.cuda_provider import reverified_locally

    rec, why = reverified_locally(item.shipped, client, cfg, store, reverify)
    if rec is None:
        log.warning("kforge: the %s record of %s is not used on this GPU (%s); searching it",
                    item.shipped.source, item.card.op, why)
        return None
    return _from_record(item, rec, "shipped", f"{item.shipped.source}, re-verified here: {why}")


def _inductor_time(card: OperatorCard, store, client) -> float | None:
    """Inductor's single-op time for a signature whose record holds a kernel (stored in the record), else None."""
    from .errors import CandidateFailure
    from .runtime.inductor_baseline import inductor_us

    record = store.get(card.key)
    if record is None or record.decision != "kernel":
        return None
    try:
        return inductor_us(card, record, client, store)
    except (CandidateFailure, RuntimeError) as e:
        log.warning("kforge: could not time Inductor's %s (%s); the compile will try again", card.op, e)
        return None


def _result(item: PlanItem, out) -> PrewarmResult:
    rec = out.result.record
    tokens = sum(int(n.extra.get("tokens", 0) or 0) for n in rec.nodes)
    cost = sum(float(n.extra.get("cost_usd", 0.0) or 0.0) for n in rec.nodes)
    t = out.record.timings if out.record is not None else {}
    return PrewarmResult(item.card, item.share, "searched", rec.eager_us, t.get("kforge_us"), rec.floor_us,
                         t.get("speedup_vs_eager"), out.record.decision if out.record else "interrupted",
                         rec.iterations, rec.iterations_to_best, out.seconds, tokens, cost, rec.reason)


def cached_result(item: PlanItem, store) -> PrewarmResult:
    rec = store.get(item.card.key)
    return _from_record(item, rec, "cached", str(rec.provenance.get("reason", "")) if rec else "")


def _from_record(item: PlanItem, rec, status: str, reason: str) -> PrewarmResult:
    """A result from a stored record's timings (None: no record)."""
    t = rec.timings if rec is not None else {}
    return PrewarmResult(item.card, item.share, status, t.get("eager_us"), t.get("kforge_us"), t.get("floor_us"),
                         t.get("speedup_vs_eager"), rec.decision if rec else None, reason=reason,
                         inductor_us=t.get("inductor_us"))

"""MCTS over kernel candidates: select a node, ask a proposer for a child, compile + evaluate it, back up.

Nodes are evaluated candidates. The root is the operator card with eager PyTorch as its time (no candidate). Each
child is one proposal relative to its parent ("block 256 -> 512", "LLM: fuse the two passes"); it is compiled on a
CPU thread, verified and timed by the :class:`Evaluator` (GPU work, serialised by a lock), then its normalised
reward is backed up to the root. Failed children stay in the tree with their stage, reason and log: the proposers
(an LLM above all) read them through :class:`ParentView`, and the UI shows them. A candidate whose identity (source
+ plan) was evaluated before, reached again by another path, reuses that result and costs no GPU time (its node
says ``extra["duplicate_of"]``).

This module knows no CUDA and no Dynamo; the evaluator and the proposers bring those.

Note [normalised reward]
UCT needs rewards on one scale for every operator, whatever its size. With s = eager_us / t:

* a failure scores 0;
* slower than eager (s < 1) scores 0.5 * s, in (0, 0.5): a slow kernel still ranks by speed, so a branch that is
  slow now but may improve is not treated like a broken one;
* from eager to the roofline floor, reward = 0.5 + 0.5 * log(s) / log(eager_us / floor_us), in [0.5, 1]: the log
  makes each halving of time worth the same, and reaching the floor (the best any kernel can do) scores 1.

It is continuous and strictly increasing in speed up to the floor, and clamped to 1 beyond it (a time below the
floor is a measurement to distrust, not a reason to explore more there).

Note [value term]
We want the single fastest kernel, not a branch that is good on average: a branch whose first step is slower than
eager can hold the optimum two steps down, next to siblings that fail. So UCT's value term blends the subtree's mean
reward with its best reward, (1 - w) * mean + w * best with w = ``best_weight`` = 0.5, and uses c = 0.5 rather than
UCB1's sqrt(2): normalised rewards of kernels for one op differ by ~0.1-0.3, and a larger c spreads a 50-iteration
budget breadth-first. On the simulated "optimum behind a slower first step" tree of tests/test_mcts.py (4 knobs x 3
levels, 40 iterations, 40 seeds) these defaults found the optimum in 38 runs, mean-only (w = 0) in 32, c = 1.0 in
28, and mean-only with c = 1.0 in 8. A greedy chain never finds it.

Note [progressive widening]
Proposers can offer many children per node (every block size, an LLM's endless rewrites), so plain UCT would never
go deeper than the root. A node with n visits may have at most ceil(k * max(n, 1) ** alpha) children (pending and
failed ones count); below that limit selection expands it, at the limit selection descends by UCT. If every child
subtree is exhausted or busy, the node is expanded past the limit rather than leaving work undone.

Note [parallel expansions]
Up to ``parallel`` expansions are in flight. The main thread owns the tree: it selects, creates nodes and backs up.
Worker threads run proposers (which may wait on an LLM) and ``Evaluator.compile`` (CPU, thread-safe), then take
one lock for ``Evaluator.evaluate`` so that timings never overlap on the GPU. Every node on an in-flight path
carries ``virtual_loss`` extra visits with zero value, so concurrent selections spread over different branches.
Proposers must therefore be thread-safe when parallel > 1. With parallel == 1 the search is deterministic for a
seed: one future at a time, ties broken by node id, and each expansion gets its own RNG drawn from the seeded one.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import random
import statistics
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from ..cards import OperatorCard
from ..contract import Candidate
from ..errors import BadOption, CandidateFailure
from .proposer import ParentView, Proposal, Proposer
from .records import NodeRecord, SearchRecord

log = logging.getLogger(__name__)

ROOT = 0


# --------------------------------------------------------------------------------------------------------------------
# what the engine is given and what it returns


@dataclass(frozen=True)
class SearchConfig:
    iterations: int = 50  # children evaluated (ok or failed), root excluded
    seconds: float = 60.0  # wall-clock budget; in-flight expansions are allowed to finish
    parallel: int = 4  # expansions in flight
    exploration: float = 0.5  # UCT's c, for rewards in [0, 1]; see Note [value term]
    best_weight: float = 0.5  # UCT's value term: (1 - w) * subtree mean + w * subtree best; see Note [value term]
    widening_k: float = 1.5  # see Note [progressive widening]
    widening_alpha: float = 0.5
    early_stop_fraction: float = 0.9  # stop once floor_us / best_us reaches this
    margin: float = 0.03  # the re-measured winner must beat eager by this fraction
    remeasure_runs: int = 3
    seed: int = 0
    virtual_loss: float = 1.0  # extra zero-value visits per in-flight path through a node
    proposer_weights: dict[str, float] | None = None  # None: round-robin; else weighted draw by proposer name
    max_tokens: int = 0  # stop after proposers report this many tokens in Proposal.extra["tokens"] (0: no limit)
    max_cost_usd: float = 0.0  # same for Proposal.extra["cost_usd"]

    def __post_init__(self) -> None:
        positive = {"iterations": self.iterations, "seconds": self.seconds, "parallel": self.parallel,
                    "widening_k": self.widening_k, "remeasure_runs": self.remeasure_runs}
        for name, value in positive.items():
            if value <= 0:
                raise BadOption(f"search option {name}={value} must be > 0")
        for name in ("exploration", "virtual_loss", "max_tokens", "max_cost_usd"):
            if getattr(self, name) < 0:
                raise BadOption(f"search option {name}={getattr(self, name)} must be >= 0")
        if not 0.0 <= self.best_weight <= 1.0:
            raise BadOption(f"search option best_weight={self.best_weight} must be in [0, 1]")
        if not 0.0 <= self.widening_alpha <= 1.0:
            raise BadOption(f"search option widening_alpha={self.widening_alpha} must be in [0, 1]")
        if not 0.0 < self.early_stop_fraction <= 1.0:
            raise BadOption(f"search option early_stop_fraction={self.early_stop_fraction} must be in (0, 1]")
        if not 0.0 <= self.margin < 1.0:
            raise BadOption(f"search option margin={self.margin} must be in [0, 1)")
        if self.proposer_weights is not None and any(w <= 0 for w in self.proposer_weights.values()):
            raise BadOption(f"search option proposer_weights={self.proposer_weights}: every weight must be > 0")


@dataclass(frozen=True)
class Evaluation:
    """What the evaluator says about one compiled candidate: verified and timed, or failed at a named stage."""

    ok: bool
    time_us: float | None = None
    pct_bw: float | None = None
    failure_stage: str | None = None
    failure_reason: str | None = None
    compile_log: str = ""
    verify_report: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        # A result that contradicts itself is a bug in the evaluator (infrastructure), not a failed candidate.
        if self.ok and not (self.time_us and self.time_us > 0):
            raise ValueError(f"an ok Evaluation needs time_us > 0, got {self.time_us!r}")
        if not self.ok and self.failure_stage not in CandidateFailure.STAGES:
            raise ValueError(f"a failed Evaluation needs failure_stage in {CandidateFailure.STAGES}, "
                             f"got {self.failure_stage!r}")

    @classmethod
    def failed(cls, failure: CandidateFailure) -> "Evaluation":
        return cls(False, failure_stage=failure.stage, failure_reason=failure.message, compile_log=failure.log)


class Evaluator(Protocol):
    def compile(self, candidate: Candidate) -> object:
        """CPU work, called from several threads at once; raises CandidateFailure for a candidate that fails."""
        ...

    def evaluate(self, card: OperatorCard, candidate: Candidate, compiled: object) -> Evaluation:
        """Verify and time on the GPU; the engine never runs two of these at once."""
        ...

    def remeasure(self, card: OperatorCard, candidate: Candidate, compiled: object, runs: int) -> list[float]:
        """``runs`` fresh timings in microseconds; an empty list means the candidate failed this time."""
        ...


@dataclass(frozen=True)
class SearchProgress:
    iteration: int
    iterations_budget: int
    nodes: int
    elapsed_s: float
    best_speedup: float | None  # eager_us / best_us
    best_pct_roofline: float | None  # 100 * floor_us / best_us
    best_node: int | None
    last: NodeRecord  # the node just evaluated
    record: SearchRecord | None = None  # the whole record so far: the engine's own, to read in the callback, not keep


@dataclass
class SearchResult:
    record: SearchRecord
    winner: Candidate | None  # None when PyTorch keeps the op
    winner_params: dict[str, Any] | None = None
    winner_compiled: object | None = None  # the evaluator's compiled object, to spare a second compile


# --------------------------------------------------------------------------------------------------------------------
# the maths


def normalised_reward(time_us: float | None, eager_us: float, floor_us: float) -> float:
    """Reward in [0, 1] for a kernel time; see Note [normalised reward]. None (a failure) scores 0."""
    if time_us is None or time_us <= 0:
        return 0.0
    speedup = eager_us / time_us
    if speedup < 1.0:
        return 0.5 * speedup
    headroom = math.log(eager_us / floor_us)
    if headroom <= 0:  # eager already at (or, by noise, below) the floor: any non-slower kernel is as good as it gets
        return 1.0
    return min(1.0, 0.5 + 0.5 * math.log(speedup) / headroom)


def uct_score(value_sum: float, visits: float, parent_visits: float, exploration: float, best: float = 0.0,
              best_weight: float = 0.0) -> float:
    """UCB1 with a value term that blends the subtree's mean and best reward, plus c * sqrt(ln N / n).
    Unvisited children come first."""
    if visits <= 0:
        return math.inf
    value = (1.0 - best_weight) * value_sum / visits + best_weight * best
    return value + exploration * math.sqrt(math.log(max(parent_visits, 1.0)) / visits)


def widening_limit(visits: int, k: float, alpha: float) -> int:
    """How many children a node with ``visits`` visits may have; see Note [progressive widening]."""
    return math.ceil(k * max(visits, 1) ** alpha)


# --------------------------------------------------------------------------------------------------------------------
# the tree (no threads, no proposers: the maths the tests pin)


@dataclass
class TreeNode:
    rec: NodeRecord
    children: list[int] = field(default_factory=list)
    inflight: int = 0  # in-flight expansions whose path passes through here (virtual loss)
    expanding: int = 0  # of those, expansions of this node still waiting for a proposer (count toward widening)
    exhausted: bool = False  # every proposer returned None here
    dead: bool = False  # nothing left to expand anywhere below (never un-set)
    spent: set[str] = field(default_factory=set)  # proposers that returned None here


class SearchTree:
    def __init__(self, root: NodeRecord, config: SearchConfig) -> None:
        self.nodes: list[TreeNode] = [TreeNode(root)]
        self.config = config

    def __getitem__(self, node_id: int) -> TreeNode:
        return self.nodes[node_id]

    @property
    def exhausted(self) -> bool:
        return self.nodes[ROOT].dead

    def expandable(self, node_id: int) -> bool:
        n = self.nodes[node_id]
        return n.rec.status in ("root", "ok") and not n.exhausted

    def can_widen(self, node_id: int) -> bool:
        n = self.nodes[node_id]
        return len(n.children) + n.expanding < widening_limit(n.rec.visits, self.config.widening_k, self.config.widening_alpha)

    def uct(self, parent: int, child: int) -> float:
        p, c, vl = self.nodes[parent], self.nodes[child], self.config.virtual_loss
        return uct_score(c.rec.value_sum, c.rec.visits + vl * c.inflight, p.rec.visits + vl * p.inflight,
                         self.config.exploration, c.rec.best_reward, self.config.best_weight)

    def select(self) -> list[int] | None:
        """Path root .. node to expand, or None when nothing can be expanded now (all busy, or exhausted)."""
        return self._descend(ROOT)

    def _descend(self, node_id: int) -> list[int] | None:
        if self.expandable(node_id) and self.can_widen(node_id):
            return [node_id]
        n = self.nodes[node_id]
        kids = [c for c in n.children if not self.nodes[c].dead and self.nodes[c].rec.status != "pending"]
        kids.sort(key=lambda c: (-self.uct(node_id, c), c))
        for c in kids:  # best first; backtrack out of subtrees that turn out dead or busy
            sub = self._descend(c)
            if sub is not None:
                return [node_id, *sub]
        if self.expandable(node_id):
            return [node_id]  # every child subtree is dead or busy: widen past the limit
        if all(self.nodes[c].dead for c in n.children):
            n.dead = True
        return None

    def begin(self, path: Sequence[int]) -> None:
        """An expansion of ``path[-1]`` starts: virtual loss along the path, one more child slot taken."""
        for i in path:
            self.nodes[i].inflight += 1
        self.nodes[path[-1]].expanding += 1

    def end(self, path: Sequence[int]) -> None:
        """The expansion of ``path[-1]`` is over (its child evaluated, or no proposer had one)."""
        for i in path:
            self.nodes[i].inflight -= 1

    def add_child(self, parent: int, rec: NodeRecord) -> int:
        """The proposer answered: the child takes over the slot ``begin`` reserved."""
        rec.id, rec.parent = len(self.nodes), parent
        self.nodes.append(TreeNode(rec))
        p = self.nodes[parent]
        p.children.append(rec.id)
        p.expanding = max(0, p.expanding - 1)
        return rec.id

    def no_child(self, path: Sequence[int], spent: Sequence[str]) -> None:
        """No proposer had anything (more) for ``path[-1]``: it is fully expanded."""
        n = self.nodes[path[-1]]
        n.spent.update(spent)
        n.exhausted = True
        n.expanding -= 1
        self.end(path)

    def backup(self, path: Sequence[int], reward: float) -> None:
        """Add one visit with ``reward`` to every node of ``path`` (root .. the new child)."""
        for i in path:
            r = self.nodes[i].rec
            r.visits += 1
            r.value_sum += reward
            r.best_reward = max(r.best_reward, reward)


# --------------------------------------------------------------------------------------------------------------------
# the engine


@dataclass
class _Job:
    """One expansion in flight: selected path, what the proposer saw, and later the child it made."""

    seq: int
    path: list[int]
    view: ParentView
    order: list[Proposer]
    rng: random.Random
    node_id: int | None = None
    candidate: Candidate | None = None


class MCTS:
    def __init__(self, card: OperatorCard, eager_us: float, floor_us: float, proposers: Sequence[Proposer],
                 evaluator: Evaluator, config: SearchConfig | None = None, bandwidth_gbps: float | None = None,
                 on_progress: Callable[[SearchProgress], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not proposers:
            raise BadOption("MCTS needs at least one proposer")
        if eager_us <= 0 or floor_us <= 0:
            raise BadOption(f"MCTS needs eager_us > 0 and floor_us > 0, got {eager_us} and {floor_us}")
        names = [p.name for p in proposers]
        if len(set(names)) != len(names):
            raise BadOption(f"proposer names must be unique, got {names}")
        self.card, self.eager_us, self.floor_us = card, float(eager_us), float(floor_us)
        self.proposers, self.evaluator = list(proposers), evaluator
        self.config = config or SearchConfig()
        self.on_progress, self.clock = on_progress, clock
        self.record = SearchRecord(card.key, card.op, card.to_json(), self.eager_us, self.floor_us, bandwidth_gbps,
                                   config=dataclasses.asdict(self.config))
        root = NodeRecord(ROOT, None, "eager", "PyTorch's own kernel", status="root", time_us=self.eager_us,
                          speedup=1.0, reward=normalised_reward(self.eager_us, self.eager_us, self.floor_us),
                          created_at=time.time())
        self.record.nodes.append(root)
        self.tree = SearchTree(root, self.config)
        self._rng = random.Random(self.config.seed)
        self._gpu_lock = threading.Lock()
        self._candidates: dict[int, Candidate] = {}
        self._evaluated: dict[str, tuple[int, Evaluation]] = {}  # Candidate.identity() -> first node, its result
        self._best: tuple[int, object] | None = None  # (node id, compiled) of the fastest ok node
        self._seq = self._turn = self._tokens = 0
        self._cost = 0.0
        self._t0 = 0.0
        self._stop: str | None = None

    # ---- the loop --------------------------------------------------------------------------------------------------

    def run(self) -> SearchResult:
        self._t0 = self.clock()
        self.record.started_at = time.time()
        with ThreadPoolExecutor(max_workers=self.config.parallel, thread_name_prefix="kforge-mcts") as pool:
            self._loop(pool)
        result = self._decide()
        self.record.finished_at = time.time()
        log.info("search %s (%s): %s after %d iterations (%s): %s", self.card.key[:16], self.card.op,
                 self.record.decision, self.record.iterations, self.record.stop_reason, self.record.reason)
        return result

    def _loop(self, pool: ThreadPoolExecutor) -> None:
        futures: dict[Future[Any], tuple[str, _Job]] = {}
        while True:
            self._check_budget()
            if self._stop is None:
                self._launch(pool, futures)
            if not futures:
                break
            done, _ = wait(futures, return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=lambda f: futures[f][1].seq):
                phase, job = futures.pop(fut)
                if phase == "propose":
                    self._on_proposed(pool, futures, job, *fut.result())
                else:
                    self._complete(job, *fut.result())
        self.record.stop_reason = self._stop or ("exhausted" if self.tree.exhausted else "iterations")

    def _check_budget(self) -> None:
        cfg, best = self.config, self._best_time()
        if self.record.iterations >= cfg.iterations:
            self._stop = self._stop or "iterations"
        elif self.clock() - self._t0 >= cfg.seconds:
            self._stop = self._stop or "seconds"
        elif best is not None and self.floor_us / best >= cfg.early_stop_fraction:
            self._stop = self._stop or "roofline"
        elif cfg.max_tokens and self._tokens >= cfg.max_tokens:
            self._stop = self._stop or "tokens"
        elif cfg.max_cost_usd and self._cost >= cfg.max_cost_usd:
            self._stop = self._stop or "cost"

    def _launch(self, pool: ThreadPoolExecutor, futures: dict[Future[Any], tuple[str, _Job]]) -> None:
        while len(futures) < self.config.parallel and self.record.iterations + len(futures) < self.config.iterations:
            path = self.tree.select()
            if path is None:
                return
            job = self._new_job(path)
            self.tree.begin(path)
            futures[pool.submit(self._propose, job)] = ("propose", job)

    def _new_job(self, path: list[int]) -> _Job:
        self._seq += 1
        node = self.tree[path[-1]]
        order = [p for p in self._proposer_order() if p.name not in node.spent]
        return _Job(self._seq, path, self._parent_view(path[-1]), order, random.Random(self._rng.getrandbits(64)))

    def _proposer_order(self) -> list[Proposer]:
        """Round-robin by default; with weights, a weighted draw without replacement (seeded)."""
        weights = self.config.proposer_weights
        if weights is None:
            self._turn += 1
            i = (self._turn - 1) % len(self.proposers)
            return self.proposers[i:] + self.proposers[:i]
        pool, order = list(self.proposers), []
        while pool:
            pick = self._rng.choices(pool, [weights.get(p.name, 1.0) for p in pool])[0]
            order.append(pick)
            pool.remove(pick)
        return order

    def _parent_view(self, node_id: int) -> ParentView:
        node = self.tree[node_id]
        kids = [self.tree[c].rec for c in node.children]
        failed = [{"action": k.action, "stage": k.failure_stage, "reason": k.failure_reason, "log": k.compile_log}
                  for k in kids if k.status == "failed"]
        r = node.rec
        return ParentView(node_id, self._candidates.get(node_id), dict(r.params), r.time_us, r.speedup, r.pct_bw,
                          failed, [k.action for k in kids], self.eager_us, self.floor_us)

    # ---- worker-thread work ----------------------------------------------------------------------------------------

    def _propose(self, job: _Job) -> tuple[Proposal | None, list[str]]:
        """Ask proposers in order until one offers a child; also return who had nothing (they are spent here)."""
        spent = []
        for p in job.order:
            proposal = p.propose(self.card, job.view, job.rng)
            if proposal is not None:
                return proposal, spent
            spent.append(p.name)
        return None, spent

    def _compile_and_evaluate(self, candidate: Candidate) -> tuple[Evaluation, object | None]:
        try:
            compiled = self.evaluator.compile(candidate)
        except CandidateFailure as e:
            return Evaluation.failed(e), None
        try:
            with self._gpu_lock:
                return self.evaluator.evaluate(self.card, candidate, compiled), compiled
        except CandidateFailure as e:  # a timeout or crash the evaluator chose to raise rather than return
            return Evaluation.failed(e), None

    # ---- main-thread bookkeeping -----------------------------------------------------------------------------------

    def _on_proposed(self, pool: ThreadPoolExecutor, futures: dict[Future[Any], tuple[str, _Job]], job: _Job,
                     proposal: Proposal | None, spent: list[str]) -> None:
        if proposal is None:  # selection will look elsewhere; see SearchTree._descend
            self.tree.no_child(job.path, spent)
            return
        self.tree[job.path[-1]].spent.update(spent)
        self._tokens += int(proposal.extra.get("tokens", 0) or 0)
        self._cost += float(proposal.extra.get("cost_usd", 0.0) or 0.0)
        job.candidate = proposal.candidate
        rec = NodeRecord(-1, None, proposal.proposer, proposal.action, dict(proposal.params),
                         proposal.candidate.to_json() if proposal.candidate else None, created_at=time.time(),
                         extra=dict(proposal.extra))
        job.node_id = self.tree.add_child(job.path[-1], rec)
        self.record.nodes.append(rec)
        if proposal.candidate is None or proposal.failure is not None:
            failure = proposal.failure or CandidateFailure(
                "parse", f"proposer {proposal.proposer} returned no candidate")
            self._complete(job, Evaluation.failed(failure), None)
            return
        self._candidates[job.node_id] = proposal.candidate
        seen = self._evaluated.get(proposal.candidate.identity())
        if seen is not None:  # a transposition (same kernel reached by another path): reuse, spend no GPU time
            rec.extra["duplicate_of"] = seen[0]
            self._complete(job, seen[1], None)
            return
        futures[pool.submit(self._compile_and_evaluate, proposal.candidate)] = ("evaluate", job)

    def _complete(self, job: _Job, ev: Evaluation, compiled: object | None) -> None:
        assert job.node_id is not None
        rec = self.tree[job.node_id].rec
        self.record.iterations += 1
        rec.iteration, rec.finished_at = self.record.iterations, time.time()
        rec.compile_log, rec.verify_report = ev.compile_log, ev.verify_report
        if job.candidate is not None:
            self._evaluated.setdefault(job.candidate.identity(), (job.node_id, ev))
        if ev.ok:
            rec.status, rec.time_us, rec.pct_bw = "ok", ev.time_us, ev.pct_bw
            rec.speedup = self.eager_us / ev.time_us  # type: ignore[operator]
            rec.reward = normalised_reward(ev.time_us, self.eager_us, self.floor_us)
            self._maybe_best(job.node_id, ev.time_us, compiled)  # type: ignore[arg-type]
        else:
            rec.status, rec.failure_stage, rec.failure_reason = "failed", ev.failure_stage, ev.failure_reason
            rec.reward = 0.0
            self._candidates.pop(job.node_id, None)
        self.tree.end(job.path)
        self.tree.backup([*job.path, job.node_id], rec.reward)
        log.debug("node %d (%s, %s): %s %s", rec.id, rec.proposer, rec.action, rec.status,
                  rec.time_us if ev.ok else f"{rec.failure_stage}: {rec.failure_reason}")
        self._report(rec)

    def _maybe_best(self, node_id: int, time_us: float, compiled: object | None) -> None:
        best = self._best_time()
        if best is None or time_us < best:  # strict: a duplicate never displaces the node that owns the compile
            self._best = (node_id, compiled)  # keeps one compiled object alive, not one per node

    def _best_time(self) -> float | None:
        return None if self._best is None else self.tree[self._best[0]].rec.time_us

    def _report(self, last: NodeRecord) -> None:
        if self.on_progress is None:
            return
        best = self._best_time()
        self.on_progress(SearchProgress(
            self.record.iterations, self.config.iterations, len(self.tree.nodes), self.clock() - self._t0,
            self.eager_us / best if best else None, 100.0 * self.floor_us / best if best else None,
            self._best[0] if self._best else None, last, self.record))

    # ---- the decision ----------------------------------------------------------------------------------------------

    def _decide(self) -> SearchResult:
        rec = self.record
        if self._best is None:
            rec.decision, rec.reason = "pytorch", self._no_candidate_reason()
            return SearchResult(rec, None)
        best_id, compiled = self._best
        node, cand = self.tree[best_id].rec, self._candidates[best_id]
        rec.remeasured_id, rec.iterations_to_best = best_id, node.iteration
        with self._gpu_lock:
            rec.winner_remeasured_us = list(self.evaluator.remeasure(self.card, cand, compiled,
                                                                     self.config.remeasure_runs))
        rec.decision, rec.reason = self._verdict(node, rec.winner_remeasured_us)
        if rec.decision == "pytorch":
            return SearchResult(rec, None)
        rec.winner_id = best_id
        return SearchResult(rec, cand, dict(node.params), compiled)

    def _verdict(self, node: NodeRecord, times: list[float]) -> tuple[str, str]:
        """(decision, a sentence saying why) for the best node and its fresh timings."""
        path = " -> ".join(n.action for n in self.record.lineage(node.id)[1:])
        what = f"node {node.id} (by {node.proposer}, {node.time_us:.2f} us in search; reached by: {path})"
        if not times:
            return "pytorch", f"the best candidate, {what}, failed when re-measured, so PyTorch keeps the op"
        median, bound = statistics.median(times), self.eager_us * (1.0 - self.config.margin)
        measured = f"re-measured at a median of {median:.2f} us over {len(times)} runs"
        if median >= bound:
            return "pytorch", (f"the best candidate, {what}, {measured}; it must beat eager's {self.eager_us:.2f} us "
                               f"by the {self.config.margin:.0%} margin (under {bound:.2f} us), so PyTorch keeps "
                               f"the op")
        return "kernel", (f"{what} {measured}: {self.eager_us / median:.2f}x eager's {self.eager_us:.2f} us, beyond "
                          f"the {self.config.margin:.0%} margin, at {100.0 * self.floor_us / median:.0f}% of the "
                          f"roofline floor ({self.floor_us:.2f} us)")

    def _no_candidate_reason(self) -> str:
        failures = self.record.failures_by_stage()
        if not failures:
            return f"no candidate was proposed (search stopped: {self.record.stop_reason}), so PyTorch keeps the op"
        by_stage = ", ".join(f"{n} at {stage}" for stage, n in sorted(failures.items(), key=lambda kv: -kv[1]))
        return f"every candidate failed ({by_stage}), so PyTorch keeps the op"


def search(card: OperatorCard, eager_us: float, floor_us: float, proposers: Sequence[Proposer],
           evaluator: Evaluator, config: SearchConfig | None = None, **kwargs: Any) -> SearchResult:
    """One-call form of ``MCTS(...).run()``."""
    return MCTS(card, eager_us, floor_us, proposers, evaluator, config, **kwargs).run()

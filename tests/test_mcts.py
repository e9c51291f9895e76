"""MCTS engine tests, CPU only: a simulated evaluator whose 'time' is a deterministic function of candidate params.

No test asserts on wall-clock speed; the wall-clock budget is tested with an injected clock.
"""
from __future__ import annotations

import ast
import math
import random
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

import forge_backend.search.mcts as mcts_mod
from forge_backend.cards import OperatorCard
from forge_backend.contract import Candidate
from forge_backend.errors import BadOption, CandidateFailure
from forge_backend.search.mcts import (
    MCTS, Evaluation, SearchConfig, SearchProgress, SearchTree, normalised_reward, uct_score, widening_limit,
)
from forge_backend.search.proposer import ParentView, Proposal
from forge_backend.search.records import NodeRecord, SearchRecord

SRC = 'extern "C" __global__ void k(float* x){}'
PLAN = {"launches": [{"kernel": "k", "grid": [1], "block": [32], "args": ["out:0"]}]}
EAGER, FLOOR = 100.0, 20.0


def make_card() -> OperatorCard:
    return OperatorCard(key="f" * 64, op="aten._softmax.default", family="softmax", semantics="softmax of self",
                        reference="torch.ops.aten._softmax.default(self, dim=-1, half_to_float=False)", inputs=[],
                        scalars={}, outputs=[], sizes={"rows": 4}, floats={}, bytes_min=4096, flops=0, arch="sm_90",
                        signature={})


def cand(params: dict[str, Any]) -> Candidate:
    # The knobs go into the source as a comment: Candidate.identity() hashes source + plan, and the engine treats
    # two candidates with one identity as the same kernel.
    return Candidate.from_parts(f"{SRC} // {sorted(params.items())}", PLAN, description=str(params), params=params)


# --------------------------------------------------------------------------------------------------------------------
# simulated proposers and evaluator


class KnobTree:
    """Action space = a tree of knobs: each child picks one of ``branching`` values; depth is capped.

    A node's params hold its path ("2/1"); untried values are read from the ParentView's sibling actions, so the
    proposer is stateless (thread-safe) and deterministic under the rng it is given.
    """

    def __init__(self, name: str = "templates", branching: int = 3, depth: int = 3) -> None:
        self.name, self.branching, self.depth = name, branching, depth

    def propose(self, card: OperatorCard, parent: ParentView, rng: random.Random) -> Proposal | None:
        path = parent.params.get("path", "")
        if (path.count("/") + 1 if path else 0) >= self.depth:
            return None
        untried = [v for v in range(self.branching) if f"{self.name}: pick {v}" not in parent.sibling_actions]
        if not untried:
            return None
        v = rng.choice(untried)
        child = f"{path}/{v}" if path else str(v)
        return Proposal(cand({"path": child}), f"{self.name}: pick {v}", self.name, {"path": child})


class Endless:
    """Infinitely many children everywhere (like an LLM): each is a fresh random knob value."""

    name = "endless"

    def propose(self, card: OperatorCard, parent: ParentView, rng: random.Random) -> Proposal | None:
        x = rng.random()
        depth = parent.params.get("depth", 0) + 1
        return Proposal(cand({"x": x, "depth": depth}), f"x={x:.3f}", self.name, {"x": x, "depth": depth})


class Recording:
    """Wraps a proposer and keeps every ParentView it was shown."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name, self.views = inner, inner.name, []

    def propose(self, card: OperatorCard, parent: ParentView, rng: random.Random) -> Proposal | None:
        self.views.append(parent)
        return self.inner.propose(card, parent, rng)


def depth_of(params: dict[str, Any]) -> int:
    return params["path"].count("/") + 1 if "path" in params else params.get("depth", 1)


def deceptive_time(params: dict[str, Any]) -> float:
    """Branch 0 is a trap (good first step, shallow gains); the optimum (21 us) is 2/1/2, behind a first step that
    is slower than eager (110 us)."""
    if "path" not in params:  # an Endless node
        return 30.0 + 60.0 * params["x"]
    steps = params["path"].split("/")
    if steps[0] == "0":
        return 70.0 - 2 * len(steps)
    if steps[0] != "2":
        return 90.0 + len(steps)
    if steps[:2] == ["2", "1"]:
        return {2: 45.0, 3: 21.0 if steps[-1] == "2" else 40.0}.get(len(steps), 45.0)
    return 110.0 if len(steps) == 1 else 105.0 + len(steps)


class SimEvaluator:
    def __init__(self, time_fn: Callable[[dict[str, Any]], float] = deceptive_time,
                 compile_fails: Callable[[dict[str, Any]], bool] = lambda p: False,
                 eval_fails: Callable[[dict[str, Any]], bool] = lambda p: False,
                 remeasure_fn: Callable[[float, int], list[float]] | None = None,
                 on_evaluate: Callable[[], None] | None = None) -> None:
        self.time_fn, self.compile_fails, self.eval_fails = time_fn, compile_fails, eval_fails
        self.remeasure_fn = remeasure_fn or (lambda t, runs: [t] * runs)
        self.on_evaluate = on_evaluate
        self.in_evaluate = self.max_in_evaluate = 0
        self.evaluated: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def compile(self, candidate: Candidate) -> object:
        p = dict(candidate.params)
        if self.compile_fails(p):
            raise CandidateFailure("compile", "identifier 'x' is undefined", log="k.cu(1): error: identifier x")
        return ("cubin", candidate.identity())

    def evaluate(self, card: OperatorCard, candidate: Candidate, compiled: object) -> Evaluation:
        with self._lock:
            self.in_evaluate += 1
            self.max_in_evaluate = max(self.max_in_evaluate, self.in_evaluate)
        try:
            if self.on_evaluate:
                self.on_evaluate()
            p = dict(candidate.params)
            self.evaluated.append(p)
            if self.eval_fails(p):
                return Evaluation(False, failure_stage="verify", failure_reason="max abs error 0.5 > 1e-3",
                                  verify_report={"max_abs": 0.5})
            t = self.time_fn(p)
            return Evaluation(True, t, pct_bw=100.0 * FLOOR / t, verify_report={"max_abs": 0.0})
        finally:
            with self._lock:
                self.in_evaluate -= 1

    def remeasure(self, card: OperatorCard, candidate: Candidate, compiled: object, runs: int) -> list[float]:
        return self.remeasure_fn(self.time_fn(dict(candidate.params)), runs)


def run(proposers: list[Any] | None = None, evaluator: SimEvaluator | None = None, **cfg: Any) -> MCTS:
    cfg.setdefault("parallel", 1)
    engine = MCTS(make_card(), EAGER, FLOOR, proposers or [KnobTree()], evaluator or SimEvaluator(),
                  SearchConfig(**cfg))
    engine.result = engine.run()  # type: ignore[attr-defined]
    return engine


def shape(record: SearchRecord) -> list[tuple[Any, ...]]:
    return [(n.id, n.parent, n.proposer, n.action, n.status, n.time_us, round(n.reward, 12), n.visits)
            for n in record.nodes]


# --------------------------------------------------------------------------------------------------------------------
# maths


def test_normalised_reward_is_monotonic_and_anchored():
    assert normalised_reward(None, EAGER, FLOOR) == 0.0
    assert normalised_reward(EAGER, EAGER, FLOOR) == pytest.approx(0.5)
    assert normalised_reward(FLOOR, EAGER, FLOOR) == pytest.approx(1.0)
    assert normalised_reward(FLOOR / 2, EAGER, FLOOR) == 1.0  # clamped below the floor
    assert normalised_reward(math.sqrt(EAGER * FLOOR), EAGER, FLOOR) == pytest.approx(0.75)  # halfway in log space
    assert normalised_reward(2 * EAGER, EAGER, FLOOR) == pytest.approx(0.25)  # slower ranks by speed, below 0.5
    times = [400, 200, 120, 100, 80, 50, 30, 20]
    rewards = [normalised_reward(t, EAGER, FLOOR) for t in times]
    assert rewards == sorted(rewards) and len(set(rewards)) == len(rewards)
    assert all(0.0 < r <= 1.0 for r in rewards)
    assert normalised_reward(EAGER, EAGER, EAGER * 1.1) == 1.0  # eager already at the floor


def test_uct_score():
    assert uct_score(1.5, 2, 3, 1.0) == pytest.approx(0.75 + math.sqrt(math.log(3) / 2))
    assert uct_score(0.0, 0, 5, 1.0) == math.inf
    assert uct_score(0.8, 1, 1, 1.0) == pytest.approx(0.8)  # ln 1 = 0: no exploration bonus yet
    assert uct_score(0.8, 1, 10, 0.0) == pytest.approx(0.8)
    assert uct_score(1.0, 4, 4, 0.0, best=0.9, best_weight=0.5) == pytest.approx(0.5 * 0.25 + 0.5 * 0.9)
    assert uct_score(1.0, 4, 4, 0.0, best=0.9, best_weight=1.0) == pytest.approx(0.9)


def test_widening_limit():
    assert [widening_limit(v, 1.0, 0.5) for v in (0, 1, 2, 4, 9, 10)] == [1, 1, 2, 2, 3, 4]
    assert widening_limit(0, 1.5, 0.5) == 2
    assert widening_limit(100, 2.0, 0.0) == 2  # alpha 0: a fixed branching factor


def _tree(**cfg: Any) -> SearchTree:
    return SearchTree(NodeRecord(0, None, "eager", "root", status="root"), SearchConfig(**cfg))


def _child(tree: SearchTree, parent: int, reward: float, path: list[int]) -> int:
    cid = tree.add_child(parent, NodeRecord(-1, None, "t", f"c{len(tree.nodes)}", status="ok", reward=reward))
    tree.backup([*path, cid], reward)
    return cid


def test_backup_mean_and_best():
    t = _tree()
    a = _child(t, 0, 0.6, [0])
    b = _child(t, 0, 0.2, [0])
    aa = _child(t, a, 0.9, [0, a])
    root, ra, rb, raa = (t[i].rec for i in (0, a, b, aa))
    assert (root.visits, root.value_sum, root.best_reward) == (3, pytest.approx(1.7), 0.9)
    assert (ra.visits, ra.value_sum, ra.best_reward) == (2, pytest.approx(1.5), 0.9)
    assert ra.mean_value == pytest.approx(0.75) and rb.mean_value == pytest.approx(0.2)
    assert (raa.visits, raa.best_reward) == (1, 0.9)
    cfg = t.config
    assert t.uct(0, a) == pytest.approx(uct_score(1.5, 2, 3, cfg.exploration, 0.9, cfg.best_weight))


def test_selection_expands_below_the_widening_limit_and_descends_by_uct_at_it():
    t = _tree(widening_k=1.0, widening_alpha=0.5)
    assert t.select() == [0]  # empty root may take ceil(1 * 1**0.5) = 1 child
    a = _child(t, 0, 0.3, [0])
    assert t.select() == [0, a]  # root at its limit (1 visit -> 1 child): descend, a has room for one child
    b = _child(t, 0, 0.9, [0])  # forced in, as a parallel expansion would
    # root: 2 visits -> limit 2 == 2 children: UCT picks b (higher mean, same visits)
    assert t.select() == [0, b]
    assert t.uct(0, b) > t.uct(0, a)


def test_virtual_loss_spreads_concurrent_selections():
    def two_selections(virtual_loss: float) -> tuple[list[int], list[int]]:
        t = _tree(widening_k=1.0, widening_alpha=0.5, virtual_loss=virtual_loss)
        _child(t, 0, 0.5, [0])
        _child(t, 0, 0.5, [0])  # two equal leaves; the root is at its widening limit
        first = t.select()
        t.begin(first)
        second = t.select()
        t.begin(second)
        return first, second

    first, second = two_selections(1.0)
    assert first[:1] == second[:1] == [0] and first[-1] != second[-1]
    first, second = two_selections(0.0)  # without virtual loss both pile onto the same leaf
    assert first == second


def test_dead_subtrees_are_skipped_and_the_tree_reports_exhaustion():
    t = _tree(widening_k=1.0, widening_alpha=0.0)
    a = _child(t, 0, 0.9, [0])
    t[a].exhausted = True  # a leaf no proposer can extend
    assert t.select() == [0]  # past the widening limit: the only child subtree is dead
    t[0].exhausted = True
    assert t.select() is None and t.exhausted


# --------------------------------------------------------------------------------------------------------------------
# budgets and stopping


@pytest.mark.parametrize("parallel", [1, 4])
def test_iteration_budget(parallel):
    e = run([Endless()], SimEvaluator(time_fn=lambda p: 50 + 40 * p["x"]), iterations=7, parallel=parallel)
    rec = e.result.record
    assert rec.iterations == 7 and len(rec.nodes) == 8 and rec.stop_reason == "iterations"


def test_wall_clock_budget_with_an_injected_clock():
    now = [0.0]

    def tick() -> None:
        now[0] += 1.0  # each evaluation 'takes' one second

    ev = SimEvaluator(time_fn=lambda p: 50 + 40 * p["x"], on_evaluate=tick)
    e = MCTS(make_card(), EAGER, FLOOR, [Endless()], ev, SearchConfig(iterations=1000, seconds=5.0, parallel=1),
             clock=lambda: now[0])
    rec = e.run().record
    assert rec.stop_reason == "seconds" and rec.iterations == 5


def test_early_stop_at_roofline_fraction():
    e = run([KnobTree(branching=3, depth=4)], SimEvaluator(time_fn=lambda p: max(21.0, 100 - 30 * depth_of(p))),
            iterations=200)
    rec = e.result.record
    assert rec.stop_reason == "roofline" and rec.iterations < 200
    assert FLOOR / rec.best_node().time_us >= 0.9


def test_token_budget_stops_the_search():
    class Costly(Endless):
        def propose(self, card, parent, rng):
            p = super().propose(card, parent, rng)
            return Proposal(p.candidate, p.action, p.proposer, p.params, extra={"tokens": 100})

    e = run([Costly()], SimEvaluator(time_fn=lambda p: 90.0), iterations=50, max_tokens=350)
    assert e.result.record.stop_reason == "tokens" and e.result.record.iterations == 4


def test_exhaustion_stops_cleanly():
    e = run([KnobTree(branching=3, depth=1)], iterations=100)
    rec = e.result.record
    assert rec.stop_reason == "exhausted" and rec.iterations == 3 and len(rec.nodes) == 4
    assert e.tree.exhausted and sorted(n.action for n in rec.children(0)) == [f"templates: pick {v}" for v in range(3)]


def test_exhaustion_with_nothing_to_propose_keeps_pytorch():
    e = run([KnobTree(depth=0)], iterations=10)
    rec = e.result.record
    assert rec.stop_reason == "exhausted" and len(rec.nodes) == 1 and rec.decision == "pytorch"
    assert "no candidate was proposed" in rec.reason and e.result.winner is None


# --------------------------------------------------------------------------------------------------------------------
# tree shape, determinism, parallelism


def test_progressive_widening_bounds_children_and_lets_the_tree_deepen():
    e = run([Endless()], SimEvaluator(time_fn=lambda p: 30 + 60 * p["x"]), iterations=60, widening_k=1.0,
            widening_alpha=0.5)
    for node in e.tree.nodes:
        assert len(node.children) <= widening_limit(node.rec.visits, 1.0, 0.5)
    assert len(e.tree[0].children) <= 8 and max(n.rec.params.get("depth", 0) for n in e.tree.nodes) >= 3


def test_determinism_under_a_seed():
    a = run([KnobTree(branching=4, depth=4)], iterations=40, seed=11).result.record
    b = run([KnobTree(branching=4, depth=4)], iterations=40, seed=11).result.record
    assert shape(a) == shape(b) and a.reason == b.reason
    assert [n.params for n in a.nodes] == [n.params for n in b.nodes]


def test_parallel_search_keeps_the_tree_consistent_and_serialises_evaluate():
    rng = random.Random(0)
    ev = SimEvaluator(on_evaluate=lambda: time.sleep(rng.random() * 0.002))
    e = run([KnobTree(branching=4, depth=4), Endless()], ev, iterations=40, parallel=4, early_stop_fraction=1.0)
    rec = e.result.record
    assert rec.iterations == 40 and len(rec.nodes) == 41 and ev.max_in_evaluate == 1
    assert all(n.status in ("root", "ok", "failed") for n in rec.nodes)
    assert sorted(n.iteration for n in rec.nodes[1:]) == list(range(1, 41))
    for node in e.tree.nodes:
        assert node.inflight == 0 and node.expanding == 0
        kids = [e.tree[c].rec for c in node.children]
        own = 0 if node.rec.status == "root" else 1
        assert node.rec.visits == own + sum(k.visits for k in kids)
        assert node.rec.value_sum == pytest.approx(own * node.rec.reward + sum(k.value_sum for k in kids))
        assert node.rec.best_reward == max([node.rec.reward * own, *(k.best_reward for k in kids)])


def test_mixed_and_weighted_proposers():
    for weights in (None, {"templates": 3.0, "llm": 1.0}):
        e = run([KnobTree("templates", 3, 3), KnobTree("llm", 3, 3)], iterations=30, proposer_weights=weights,
                early_stop_fraction=1.0)
        assert {n.proposer for n in e.result.record.nodes[1:]} == {"templates", "llm"}


def test_a_proposer_that_runs_dry_is_skipped_not_fatal():
    class Dry:
        name = "dry"

        def propose(self, card, parent, rng):
            return None

    e = run([Dry(), Endless()], SimEvaluator(time_fn=lambda p: 80.0), iterations=10)
    rec = e.result.record
    assert rec.iterations == 10 and {n.proposer for n in rec.nodes[1:]} == {"endless"}
    assert "dry" in e.tree[0].spent and not e.tree[0].exhausted


def test_the_same_kernel_reached_twice_is_evaluated_once():
    class Commuting:
        """'a then b' and 'b then a' give the same kernel: a transposition."""

        name = "knobs"

        def propose(self, card, parent, rng):
            done = parent.params.get("set", "")
            todo = [k for k in "ab" if k not in done and f"set {k}" not in parent.sibling_actions]
            if not todo:
                return None
            knobs = "".join(sorted(done + todo[0]))
            return Proposal(cand({"set": knobs}), f"set {todo[0]}", self.name, {"set": knobs})

    ev = SimEvaluator(time_fn=lambda p: 90.0 - 10 * len(p["set"]))
    rec = run([Commuting()], ev, iterations=10).result.record
    both = [n for n in rec.nodes if n.params.get("set") == "ab"]
    assert len(both) == 2 and both[1].extra["duplicate_of"] == both[0].id
    assert both[1].time_us == both[0].time_us and [p["set"] for p in ev.evaluated].count("ab") == 1
    assert rec.stop_reason == "exhausted" and rec.best_node().id == both[0].id


def test_progress_callback():
    seen: list[SearchProgress] = []
    e = MCTS(make_card(), EAGER, FLOOR, [KnobTree()], SimEvaluator(), SearchConfig(iterations=12, parallel=1),
             on_progress=seen.append)
    e.run()
    assert [p.iteration for p in seen] == list(range(1, len(seen) + 1)) and seen[-1].nodes == len(seen) + 1
    speeds = [p.best_speedup for p in seen if p.best_speedup is not None]
    assert speeds == sorted(speeds)
    last = seen[-1]
    assert last.best_pct_roofline == pytest.approx(100 * FLOOR / e.record.best_node().time_us)


# --------------------------------------------------------------------------------------------------------------------
# failures are data


def test_compile_failures_are_kept_with_their_log_and_shown_to_the_proposer():
    prop = Recording(KnobTree(branching=3, depth=2))
    ev = SimEvaluator(compile_fails=lambda p: p["path"].endswith("1"))
    e = run([prop], ev, iterations=12)
    failed = e.result.record.failed_nodes("compile")
    assert failed and all(n.reward == 0.0 and n.status == "failed" for n in failed)
    assert all("undefined" in n.failure_reason and "error" in n.compile_log for n in failed)
    shown = [f for v in prop.views for f in v.failed_children]
    assert shown and all(set(f) == {"action", "stage", "reason", "log"} and f["stage"] == "compile" for f in shown)
    assert all(not n.children for n in e.tree.nodes if n.rec.status == "failed")  # failed nodes are leaves


def test_evaluation_failures_are_kept():
    ev = SimEvaluator(eval_fails=lambda p: p["path"].startswith("0"))
    rec = run([KnobTree()], ev, iterations=15).result.record
    failed = rec.failed_nodes("verify")
    assert failed and all(n.verify_report == {"max_abs": 0.5} and n.reward == 0.0 for n in failed)
    assert rec.failures_by_stage() == {"verify": len(failed)}


def test_proposal_failures_are_kept():
    class Broken:
        name = "llm"

        def __init__(self):
            self.n = 0

        def propose(self, card, parent, rng):
            self.n += 1
            if self.n % 2:
                return Proposal(None, "rewrite with warp shuffles", "llm",
                                failure=CandidateFailure("parse", "reply has no cuda code block", log="Sure! ..."))
            return Proposal(None, "empty reply", "llm")

    rec = run([Broken()], iterations=4).result.record
    assert [n.failure_stage for n in rec.nodes[1:]] == ["parse"] * 4
    assert rec.nodes[1].failure_reason == "reply has no cuda code block" and rec.nodes[1].compile_log == "Sure! ..."
    assert "returned no candidate" in rec.nodes[2].failure_reason
    assert rec.decision == "pytorch" and "every candidate failed (4 at parse)" in rec.reason


@pytest.mark.parametrize("parallel", [1, 3])
def test_broken_infrastructure_propagates(parallel):
    class Broken(SimEvaluator):
        def compile(self, candidate):
            raise RuntimeError("nvrtc library missing")

    with pytest.raises(RuntimeError, match="nvrtc library missing"):
        run([KnobTree()], Broken(), iterations=5, parallel=parallel)


def test_a_self_contradicting_evaluation_is_a_bug():
    with pytest.raises(ValueError):
        Evaluation(True, None)
    with pytest.raises(ValueError):
        Evaluation(False, failure_stage="nonsense")


# --------------------------------------------------------------------------------------------------------------------
# the decision


def test_winner_is_remeasured_and_recorded():
    e = run([KnobTree()], iterations=20)
    res, rec = e.result, e.result.record
    best = rec.best_node()
    assert rec.decision == "kernel" and rec.winner_id == rec.remeasured_id == best.id
    assert res.winner == Candidate.from_json(best.candidate) and res.winner_params == best.params
    assert rec.winner_remeasured_us == [best.time_us] * 3
    assert rec.iterations_to_best == best.iteration and "re-measured" in rec.reason
    assert "reached by: " + " -> ".join(n.action for n in rec.lineage(best.id)[1:]) in rec.reason


def test_winner_that_remeasures_within_the_margin_keeps_pytorch():
    ev = SimEvaluator(remeasure_fn=lambda t, runs: [EAGER * 0.99, EAGER * 0.98, EAGER * 1.2][:runs])
    e = run([KnobTree()], ev, iterations=10)
    rec = e.result.record
    assert rec.decision == "pytorch" and e.result.winner is None and rec.winner_id is None
    assert rec.remeasured_id == rec.best_node().id and "3% margin" in rec.reason


def test_winner_that_fails_its_remeasure_keeps_pytorch():
    e = run([KnobTree()], SimEvaluator(remeasure_fn=lambda t, runs: []), iterations=10)
    assert e.result.record.decision == "pytorch" and "failed when re-measured" in e.result.record.reason


def test_record_of_a_real_run_round_trips(tmp_path: Path):
    rec = run([KnobTree()], SimEvaluator(eval_fails=lambda p: p["path"] == "1"), iterations=15).result.record
    path = rec.save(tmp_path / "search.json")
    assert SearchRecord.load(path) == rec


def test_config_is_validated():
    with pytest.raises(BadOption, match="parallel"):
        SearchConfig(parallel=0)
    with pytest.raises(BadOption, match="early_stop_fraction"):
        SearchConfig(early_stop_fraction=1.5)
    with pytest.raises(BadOption, match="unique"):
        MCTS(make_card(), EAGER, FLOOR, [KnobTree(), KnobTree()], SimEvaluator())


def test_engine_imports_no_cuda_or_dynamo():
    for module in (mcts_mod, __import__("forge_backend.search.records", fromlist=["x"])):
        tree = ast.parse(Path(module.__file__).read_text())
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [m for m in names if "dynamo" in m or "cuda" in m], names


# --------------------------------------------------------------------------------------------------------------------
# the point of MCTS: a hidden optimum behind a locally worse step


def greedy_chain(proposer: KnobTree, time_fn: Callable[[dict[str, Any]], float], budget: int, seed: int) -> float:
    """The baseline: always extend the best candidate so far (a single chain); stop when it cannot be extended."""
    rng = random.Random(seed)
    best_params: dict[str, Any] = {}
    best_t = EAGER
    children: dict[str, list[str]] = {}
    for _ in range(budget):
        key = best_params.get("path", "")
        view = ParentView(0, None, best_params, best_t, EAGER / best_t, None, (), children.get(key, []), EAGER, FLOOR)
        p = proposer.propose(make_card(), view, rng)
        if p is None:
            break
        children.setdefault(key, []).append(p.action)
        t = time_fn(p.params)
        if t < best_t:
            best_params, best_t = p.params, t
    return best_t


def test_mcts_finds_a_hidden_optimum_more_often_than_greedy():
    seeds, budget, optimum = range(20), 40, 21.0
    mcts_hits = greedy_hits = 0
    for seed in seeds:
        rec = run([KnobTree(branching=4, depth=3)], iterations=budget, seed=seed).result.record
        mcts_hits += rec.best_node().time_us == optimum
        greedy_hits += greedy_chain(KnobTree(branching=4, depth=3), deceptive_time, budget, seed) == optimum
    assert mcts_hits >= 0.6 * len(seeds) and mcts_hits > greedy_hits, (mcts_hits, greedy_hits)

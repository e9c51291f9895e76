"""GPU: an MCTS search whose only proposer is the LLM, served by a real loopback HTTP server replaying canned
answers. The correct kernel passes the verifier, the one wrong on the tail is rejected by it, the compile error is
repaired; the search record (the tree) is stored, and written to $TEST_ARTIFACTS_DIR when that is set."""
import json
import os
from pathlib import Path

import pytest

from forge_backend.runtime.search_runner import run_search
from forge_backend.runtime.worker import WorkerClient
from forge_backend.search.llm import LLMClient, LLMProposer
from forge_backend.store.local import LocalStore
from llm_server import Reply, llm_config, llm_server, softmax_card  # noqa: F401  (fixture)

pytestmark = pytest.mark.gpu


class OneTemplate:
    """The template library limited to one proposal, a fixed variant: the baseline an LLM kernel has to beat."""

    name = "templates"

    def __init__(self, params: dict) -> None:
        self.params, self.done = params, False

    def propose(self, card, parent, rng):
        from forge_backend.search.proposer import Proposal
        from forge_backend.search.templates import family_for

        if parent.candidate is not None or self.done:
            return None
        self.done = True
        cand = family_for(card).generate(card, self.params)
        return Proposal(cand, "template baseline", self.name, params=dict(self.params))


def test_llm_kernel_faster_than_the_template_baseline_wins(llm_server, tmp_path, monkeypatch):  # noqa: F811
    """The loopback server serves a correct kernel that is faster than the template candidate in the search (a
    mixed search whose template proposer offers one fixed variant): the search must pick the LLM's kernel, verify it
    and cache it. The two are real template kernels of the group norm [2,1536,64,64] bf16, timed in this run: the
    sync kernel (45.9 us in the thirteenth session, once the root) as the template's, and the kept-in-part cluster
    (20.4 us, the root since) served by the LLM. Until the thirteenth session this test looked for a variant that
    beat the root by 5%, and skipped once the roots were the best variants it tried."""
    import template_cards as tc
    from forge_backend.runtime.evaluator import WorkerEvaluator
    from forge_backend.search.templates import family_for
    from llm_serving import reply_for

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    card = tc.group_norm(2, 1536, 64, 64, dtype="bfloat16", used=(0,))
    fam = family_for(card)
    baseline, served = fam.defaults(card, "sync"), fam.kept_seed(card)
    assert served is not None and fam.valid(card, baseline) and fam.valid(card, served)
    client = WorkerClient(tmp_path, 0)
    evaluator = WorkerEvaluator(client, card.arch, tmp_path)

    def timed(params):
        cand = fam.generate(card, params)
        ev = evaluator.evaluate(card, cand, evaluator.compile(cand))
        assert ev.ok, params
        return ev.time_us, cand

    try:
        root_us, _ = timed(baseline)
        best_us, best = timed(served)
        assert best_us < 0.95 * root_us, f"the served kernel ran {best_us:.1f} us, the baseline {root_us:.1f} us"
        llm_server.push(reply_for(best, "a different group-norm strategy"))
        cfg = llm_config(llm_server, tmp_path, proposer="mixed")
        proposers = [OneTemplate(baseline), LLMProposer(cfg, client=LLMClient(cfg, backoff_s=0.01))]
        out = run_search(card, cfg, client, LocalStore(tmp_path), iterations=2, seconds=300, proposers=proposers)
    finally:
        client.close()
    rec = out.result.record
    assert rec.decision == "kernel", rec.reason
    assert rec.node(rec.winner_id).proposer == "llm", rec.reason
    assert LocalStore(tmp_path).get(card.key).provenance["proposer"] == "llm"
    if os.environ.get("TEST_ARTIFACTS_DIR"):
        Path(os.environ["TEST_ARTIFACTS_DIR"], "llm_beats_template_root_tree.json").write_text(
            json.dumps({"root_us": root_us, "served_us": best_us,
                        "search": LocalStore(tmp_path).get_search(card.key)}, indent=1))
    print(f"root {root_us:.1f} us, served {best_us:.1f} us:", rec.reason)


def test_llm_search_on_gpu(llm_server, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    llm_server.push(Reply.fixture("good_kernel.md"), Reply.fixture("tail_bug.md"), Reply.fixture("compile_error.md"),
                    Reply.fixture("compile_fixed.md"))
    cfg = llm_config(llm_server, tmp_path, proposer="llm")
    card = softmax_card()
    store = LocalStore(tmp_path)
    client = WorkerClient(tmp_path, 0)
    proposer = LLMProposer(cfg, client=LLMClient(cfg, backoff_s=0.01))
    try:
        out = run_search(card, cfg, client, store, iterations=3, seconds=300, proposers=[proposer])
    finally:
        client.close()
    rec = out.result.record
    nodes = rec.nodes[1:]
    assert len(nodes) == 3 and all(n.proposer == "llm" for n in nodes)
    by_action = {n.action: n for n in nodes}
    tail = next(n for a, n in by_action.items() if "four columns" in a)
    assert tail.status == "failed" and tail.failure_stage == "verify", tail
    good = [n for n in nodes if n.status == "ok"]
    assert good, [(n.action, n.failure_stage, n.failure_reason) for n in nodes]
    assert any(n.extra.get("repaired") for n in nodes)  # the compile error came back fixed
    assert all(n.extra.get("tokens", 0) > 0 for n in nodes)
    stored = store.get_search(card.key)
    assert stored is not None and len(stored["nodes"]) == 4
    if rec.decision == "kernel":
        assert rec.node(rec.winner_id).proposer == "llm"
        assert store.get(card.key).provenance["proposer"] == "llm"
    if os.environ.get("TEST_ARTIFACTS_DIR"):
        Path(os.environ["TEST_ARTIFACTS_DIR"], "llm_search_tree.json").write_text(json.dumps(stored, indent=1))
    print("decision:", rec.decision, rec.reason)

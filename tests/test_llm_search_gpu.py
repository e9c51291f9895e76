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

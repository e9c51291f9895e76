"""CPU: a real template kernel (group norm, two launches and a scratch buffer) served as an LLM answer comes back
from the LLM proposer as the same candidate, screened and compiled for sm_90. The GPU test
tests/test_llm_search_gpu.py::test_llm_kernel_faster_than_the_template_root_wins builds on this path."""
import random

import template_cards as tc
from forge_backend.search.llm import LLMClient, LLMProposer
from forge_backend.search.proposer import ParentView
from forge_backend.search.templates import family_for
from llm_serving import reply_for
from llm_server import llm_config, llm_server  # noqa: F401  (fixture)


def test_template_kernel_round_trips_through_the_llm_proposer(llm_server, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    card = tc.group_norm(1, 512, 256, 256, dtype="bfloat16", used=(0,))
    fam = family_for(card)
    params = next(p for s in fam.seeds(card) for p in [s] + [q for _, q in fam.actions(card, s)]
                  if fam.generate(card, p).scratch)  # a variant with a scratch buffer and two launches
    served = fam.generate(card, params)
    llm_server.push(reply_for(served, "split-group statistics through scratch"))
    cfg = llm_config(llm_server, tmp_path)
    proposer = LLMProposer(cfg, client=LLMClient(cfg, backoff_s=0.01))
    root = ParentView(node_id=0, candidate=None, params={}, time_us=None, speedup=None, pct_bw=None,
                      eager_us=900.0, floor_us=31.0)
    proposal = proposer.propose(card, root, random.Random(0))
    assert proposal.failure is None and proposal.candidate is not None, proposal.failure
    got = proposal.candidate
    assert got.source.strip() == served.source.strip() and got.plan_json() == served.plan_json()
    assert proposal.proposer == "llm" and proposal.extra["tokens"] > 0

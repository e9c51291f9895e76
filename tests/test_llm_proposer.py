"""The LLM proposer end to end, against a real HTTP server on 127.0.0.1 replaying canned answers
(tests/fixtures/llm/), plus its prompts. Candidates are screened and compiled with NVRTC for sm_90 (no GPU needed);
whether they are correct is the verifier's business, on a GPU.
"""
from __future__ import annotations

import json
import logging
import random
import re
import threading
from pathlib import Path

import pytest

from forge_backend.contract import Candidate, screen
from forge_backend.errors import CandidateFailure
from forge_backend.runtime.nvrtc import compile_candidate
from forge_backend.search.llm import GpuFacts, LLMBudget, LLMClient, LLMProposer, LLMUnavailable, PromptKey
from forge_backend.search.llm import prompts
from forge_backend.search.llm.parse import parse_answer, to_candidate
from forge_backend.search.proposer import ParentView, Proposal
from llm_server import Reply, fixture_text, llm_config, llm_server, softmax_card  # noqa: F401  (fixture)

ROOT = ParentView(node_id=0, candidate=None, params={}, time_us=None, speedup=None, pct_bw=None, eager_us=12.0,
                  floor_us=0.5)
CARD = softmax_card()


@pytest.fixture(autouse=True)
def _no_env_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def _proposer(server, tmp_path, budget=None, **cfg) -> LLMProposer:
    config = llm_config(server, tmp_path, **cfg)
    return LLMProposer(config, client=LLMClient(config, backoff_s=0.01), budget=budget)


def _propose(proposer, parent=ROOT, seed=0) -> Proposal:
    proposal = proposer.propose(CARD, parent, random.Random(seed))
    assert proposal is not None
    return proposal


def _fixture_candidate(name: str) -> Candidate:
    return to_candidate(parse_answer(fixture_text(name)))


# prompts ------------------------------------------------------------------------------------------------------------


def test_worked_example_screens_and_compiles_for_sm90():
    c = Candidate.from_parts(prompts.read("example_kernel.cu"), json.loads(prompts.read("example_plan.json")))
    screen(c)
    assert compile_candidate(c, "sm_90").cubin[:4] == b"\x7fELF"


def test_prompt_files_are_package_data():
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert "search/llm/prompts/*" in pyproject
    for name in prompts.PROMPT_FILES:
        assert prompts.read(name).strip()


def test_system_prompt_states_the_contract_and_the_example():
    text = prompts.system_message()
    assert "$" not in text  # every placeholder filled
    for needle in ('extern "C" __global__', "cuda_fp16.h", "in:NAME", "cdiv(a, b)", "ACTION:", "softmax_rows",
                   '"i32:cols"'):
        assert needle in text


def test_expand_prompt_has_card_measurements_gpu_failures_and_siblings():
    parent = ParentView(node_id=3, candidate=_fixture_candidate("good_kernel.md"), params={}, time_us=6.25,
                        speedup=1.92, pct_bw=37.0, eager_us=12.0, floor_us=0.48,
                        failed_children=[{"action": "float4 loads", "stage": "verify", "reason": "max abs err 0.3",
                                          "log": "E" * 5000},
                                         {"action": "bad include", "stage": "screen", "reason": "stdio.h"}],
                        sibling_actions=["two rows per warp", "cache rows in smem"])
    text = prompts.expand_message(CARD, parent, GpuFacts())
    for needle in (CARD.render(4248.0), "12.00 us", "0.48 us", "6.25 us", "37% of the roofline", "1.92x eager",
                   "softmax_warp_per_row", '"cdiv(rows, 8)"', "132 SMs", "227 KB", "60 MB", "4248 GB/s",
                   "float4 loads: failed at verify: max abs err 0.3", "bad include: failed at screen",
                   "- two rows per warp", "- cache rows in smem"):
        assert needle in text, needle
    assert "E" * 2000 in text and "E" * 2001 not in text and "more characters cut" in text


def test_expand_prompt_at_the_root():
    text = prompts.expand_message(CARD, ROOT, GpuFacts(bandwidth_gbps=None))
    assert "PyTorch's own kernel" in text and "(none yet)" in text and "copy bandwidth not measured" in text


def test_repair_prompt_quotes_the_compile_log_with_numbered_lines():
    source = parse_answer(fixture_text("compile_error.md")).source
    with pytest.raises(CandidateFailure) as e:
        compile_candidate(_fixture_candidate("compile_error.md"), "sm_90")
    text = prompts.repair_message(e.value, source)
    assert "compile" in text and 'identifier "INFINITY" is undefined' in text
    assert re.search(r"^\s+11 \|\s+float m = -INFINITY;", text, re.M)


# one proposal -------------------------------------------------------------------------------------------------------


def test_constructor_makes_no_request(llm_server, tmp_path):
    LLMProposer(llm_config(llm_server, tmp_path))
    assert llm_server.requests == []


def test_good_kernel_is_a_compiled_candidate(llm_server, tmp_path):
    llm_server.push(Reply.fixture("good_kernel.md", prompt_tokens=3000, completion_tokens=800))
    p = _propose(_proposer(llm_server, tmp_path, llm_price_in=2.0, llm_price_out=8.0))
    assert p.failure is None and p.proposer == "llm" and p.params == {}
    assert p.action.startswith("one warp per row")
    assert p.candidate.launches[0].kernel == "softmax_warp_per_row"
    compile_candidate(p.candidate, "sm_90")
    assert p.extra["prompt_tokens"] == 3000 and p.extra["completion_tokens"] == 800 and p.extra["tokens"] == 3800
    json.dumps(p.extra)  # search records store extra as JSON
    assert p.extra["cost_usd"] == pytest.approx((3000 * 2.0 + 800 * 8.0) / 1e6)
    assert not p.extra["cached"] and not p.extra["repaired"] and p.extra["attempts"] == 1
    assert len(p.extra["prompt_hash"]) == 64
    (req,) = llm_server.chat_requests()
    assert [m["role"] for m in req.body["messages"]] == ["system", "user"]
    assert "aten._softmax.default" in req.body["messages"][1]["content"]


def test_compile_error_gets_one_repair_turn(llm_server, tmp_path):
    llm_server.push(Reply.fixture("compile_error.md"), Reply.fixture("compile_fixed.md"))
    p = _propose(_proposer(llm_server, tmp_path))
    assert p.failure is None and p.extra["repaired"] and p.extra["turns"] == 2
    assert "CUDART_INF_F" in p.candidate.source
    assert p.extra["prompt_tokens"] == 2000  # both turns counted
    repair = llm_server.chat_requests()[1].body["messages"]
    assert [m["role"] for m in repair] == ["system", "user", "assistant", "user"]
    assert 'identifier "INFINITY" is undefined' in repair[3]["content"]
    assert re.search(r"^\s+11 \|", repair[3]["content"], re.M)


def test_tail_bug_is_still_a_candidate(llm_server, tmp_path):
    """softmax_unroll4 steps four columns at a time and drops the last cols % 4 (3 of 1003): it parses, screens
    and compiles; only the verifier, on a GPU, can reject it."""
    llm_server.push(Reply.fixture("tail_bug.md"))
    p = _propose(_proposer(llm_server, tmp_path))
    assert p.failure is None and p.candidate.launches[0].kernel == "softmax_unroll4"


def test_prose_around_the_answer_is_parsed(llm_server, tmp_path):
    llm_server.push(Reply.fixture("prose_around.md"))
    p = _propose(_proposer(llm_server, tmp_path))
    assert p.failure is None and p.candidate.launches[0].kernel == "softmax_regs"


def test_missing_plan_twice_is_a_parse_failure(llm_server, tmp_path):
    llm_server.push(Reply.fixture("missing_plan.md"), Reply.fixture("missing_plan_again.md"))
    p = _propose(_proposer(llm_server, tmp_path))
    assert p.candidate is None and p.failure.stage == "parse"
    assert "no ```json block" in p.failure.message
    assert p.extra["turns"] == 2 and not p.extra["repaired"]
    assert p.action.startswith("one warp per row")  # the first answer's action names the failed child
    assert "launch plan" in llm_server.chat_requests()[1].body["messages"][3]["content"]


def test_429_then_success(llm_server, tmp_path):
    llm_server.push(Reply.error(429, "Rate limit reached", headers={"Retry-After": "0"}),
                    Reply.fixture("good_kernel.md"))
    p = _propose(_proposer(llm_server, tmp_path))
    assert p.candidate is not None and p.extra["attempts"] == 2
    assert len(llm_server.chat_requests()) == 2


def test_timeout_then_success(llm_server, tmp_path):
    llm_server.push(Reply.fixture("good_kernel.md", delay_s=2.0), Reply.fixture("good_kernel.md"))
    p = _propose(_proposer(llm_server, tmp_path, llm_timeout_s=0.3))
    assert p.candidate is not None and p.extra["attempts"] == 2


def test_endpoint_that_keeps_timing_out_is_an_error_not_a_child(llm_server, tmp_path):
    llm_server.push(*[Reply.fixture("good_kernel.md", delay_s=2.0) for _ in range(2)])
    with pytest.raises(LLMUnavailable, match="within 0.3 s.*gave up after 2"):
        _proposer(llm_server, tmp_path, llm_timeout_s=0.3, llm_retries=1).propose(CARD, ROOT, random.Random(0))


def test_host_code_escape_is_a_screen_failure(llm_server, tmp_path):
    llm_server.push(Reply.fixture("host_escape.md"), Reply.fixture("include_escape.md"))
    p = _propose(_proposer(llm_server, tmp_path))
    assert p.candidate is None and p.failure.stage == "screen"
    assert "stdio.h" in p.failure.message
    escapes = p.extra["escape_attempts"]
    assert len(escapes) == 2 and "__host__" in escapes[0] and "stdio.h" in escapes[1]
    assert "softmax_print" in p.extra["source"]  # the failed child's source is kept for the record
    assert "__host__" in llm_server.chat_requests()[1].body["messages"][3]["content"]


def test_escape_then_clean_repair_is_used_and_the_attempt_recorded(llm_server, tmp_path):
    llm_server.push(Reply.fixture("host_escape.md"), Reply.fixture("good_kernel.md"))
    p = _propose(_proposer(llm_server, tmp_path))
    assert p.candidate is not None and p.extra["repaired"]
    assert len(p.extra["escape_attempts"]) == 1


# cache ---------------------------------------------------------------------------------------------------------------


def test_rerun_is_served_from_disk_with_zero_requests(llm_server, tmp_path):
    llm_server.push(Reply.fixture("compile_error.md"), Reply.fixture("compile_fixed.md"))
    first = _propose(_proposer(llm_server, tmp_path, llm_price_in=1.0, llm_price_out=1.0), seed=7)
    assert len(llm_server.chat_requests()) == 2
    again = _propose(_proposer(llm_server, tmp_path, llm_price_in=1.0, llm_price_out=1.0), seed=7)
    assert len(llm_server.chat_requests()) == 2  # nothing new was sent
    assert again.extra["cached"] and again.extra["repaired"]
    assert again.extra["cost_usd"] == 0 and again.extra["prompt_tokens"] == 0
    assert again.candidate.identity() == first.candidate.identity()
    assert again.extra["prompt_hash"] == first.extra["prompt_hash"]
    assert len(list((tmp_path / "llm").glob("*.json"))) == 2


def test_corrupt_cache_entry_is_a_reported_miss(llm_server, tmp_path, caplog):
    llm_server.push(Reply.fixture("good_kernel.md"), Reply.fixture("good_kernel.md"))
    first = _propose(_proposer(llm_server, tmp_path))
    (entry,) = (tmp_path / "llm").glob("*.json")
    entry.write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="kforge"):
        again = _propose(_proposer(llm_server, tmp_path))
    assert not again.extra["cached"] and len(llm_server.chat_requests()) == 2
    assert "corrupt LLM cache entry" in caplog.text
    assert again.candidate.identity() == first.candidate.identity()


def test_cache_key_ignores_measurement_noise_but_not_the_search_state():
    cfg = llm_config(None, Path("."), llm_base_url="http://127.0.0.1:1/v1")
    facts = GpuFacts()
    parent = ParentView(node_id=1, candidate=_fixture_candidate("good_kernel.md"), params={}, time_us=6.2,
                        speedup=1.9, pct_bw=37.0, eager_us=12.0, floor_us=0.48)
    noisy = ParentView(node_id=1, candidate=parent.candidate, params={}, time_us=6.4, speedup=1.85, pct_bw=36.0,
                       eager_us=12.1, floor_us=0.47)
    key = PromptKey.of(cfg, facts, CARD, parent, seed=1)
    assert PromptKey.of(cfg, facts, CARD, noisy, seed=1) == key
    assert PromptKey.of(cfg, GpuFacts(bandwidth_gbps=4100.0), CARD, parent, seed=1) == key
    sibling = ParentView(**{**parent.__dict__, "sibling_actions": ("two rows per warp",)})
    changed = [PromptKey.of(cfg, facts, CARD, parent, seed=2), PromptKey.of(cfg, facts, CARD, ROOT, seed=1),
               PromptKey.of(cfg, facts, CARD, sibling, seed=1)]
    assert all(k.digest() != key.digest() for k in changed)
    diff = [a for a, b in zip(key.debug_lines(), changed[2].debug_lines()) if a != b]
    assert len(diff) == 1 and diff[0].startswith("siblings:")


A100 = {"name": "NVIDIA A100-SXM4-80GB", "arch": "sm_80", "sm_count": 108, "smem_per_block_kb": 163, "l2_mb": 40,
        "regs_per_sm": 65536, "max_threads_per_sm": 2048}  # as the worker's gpu_description gives it


def test_the_search_describes_its_own_gpu_to_the_llm_only():
    """Note [templates for the card's architecture] (templates/target.py): the prompt tells the model the GPU the
    worker runs on (its arch, SMs and shared memory), not the H200 kforge was tuned on."""
    from forge_backend.runtime.search_runner import _describe_gpu
    from forge_backend.search.templates import TemplateProposer

    cfg = llm_config(None, Path("."), llm_base_url="http://127.0.0.1:1/v1")
    llm, templates = LLMProposer(cfg, use_cache=False), TemplateProposer()
    before = PromptKey.of(cfg, llm.facts, CARD, ROOT, seed=1)
    _describe_gpu([templates, llm], A100, 1800.0)
    assert llm.facts == GpuFacts.of_device(A100, 1800.0) and not hasattr(templates, "facts")
    text = prompts.expand_message(CARD, ROOT, llm.facts)
    for needle in ("NVIDIA A100-SXM4-80GB (sm_80)", "108 SMs", "163 KB", "40 MB", "1800 GB/s"):
        assert needle in text, needle
    assert "132 SMs" not in text and "227 KB" not in text  # the H200's (the card here is still sm_90's)
    assert PromptKey.of(cfg, llm.facts, CARD, ROOT, seed=1).digest() != before.digest()


# budget ------------------------------------------------------------------------------------------------------------


def test_token_budget_stops_cleanly(llm_server, tmp_path):
    llm_server.push(Reply.fixture("good_kernel.md", prompt_tokens=1000, completion_tokens=500))
    proposer = _proposer(llm_server, tmp_path, llm_budget_tokens=1200)
    assert _propose(proposer, seed=1).candidate is not None
    assert proposer.stop_reason is None
    assert proposer.propose(CARD, ROOT, random.Random(2)) is None
    assert "token budget" in proposer.stop_reason and "1,500 of 1,200" in proposer.stop_reason
    assert len(llm_server.chat_requests()) == 1
    assert _propose(proposer, seed=1).extra["cached"]  # answers already paid for are still served


def test_usd_budget_stops_cleanly_and_is_shared(llm_server, tmp_path):
    llm_server.push(Reply.fixture("good_kernel.md", prompt_tokens=1000, completion_tokens=500))
    budget = LLMBudget(max_usd=0.004, price_in=2.0, price_out=8.0)  # one answer costs $0.006
    a = _proposer(llm_server, tmp_path, budget=budget)
    b = _proposer(llm_server, tmp_path, budget=budget)
    assert _propose(a, seed=1).extra["cost_usd"] == pytest.approx(0.006)
    assert b.propose(CARD, ROOT, random.Random(2)) is None
    assert "cost budget" in b.stop_reason
    assert budget.tokens == 1500 and budget.usd == pytest.approx(0.006) and budget.requests == 1


def test_budget_spent_mid_proposal_skips_the_repair_turn(llm_server, tmp_path):
    llm_server.push(Reply.fixture("compile_error.md", prompt_tokens=1000, completion_tokens=500))
    p = _propose(_proposer(llm_server, tmp_path, llm_budget_tokens=1000))
    assert p.candidate is None and p.failure.stage == "compile" and p.extra["turns"] == 1
    assert len(llm_server.chat_requests()) == 1


# threads -----------------------------------------------------------------------------------------------------------


def _in_threads(fn, n: int) -> list:
    results: list = [None] * n

    def run(i):
        results[i] = fn(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    return results


def test_concurrent_proposals_share_the_budget(llm_server, tmp_path):
    llm_server.push(*[Reply.fixture("good_kernel.md", delay_s=0.05) for _ in range(4)])
    proposer = _proposer(llm_server, tmp_path)
    results = _in_threads(lambda i: proposer.propose(CARD, ROOT, random.Random(100 + i)), 4)
    assert all(p is not None and p.candidate is not None for p in results)
    assert proposer.budget.tokens == 4 * 1500 and proposer.budget.requests == 4
    assert len({p.extra["prompt_hash"] for p in results}) == 4


def test_identical_concurrent_prompts_send_one_request(llm_server, tmp_path):
    llm_server.push(Reply.fixture("good_kernel.md", delay_s=0.2), Reply.fixture("good_kernel.md"))
    proposer = _proposer(llm_server, tmp_path)
    results = _in_threads(lambda i: proposer.propose(CARD, ROOT, random.Random(5)), 2)
    assert len(llm_server.chat_requests()) == 1
    assert sorted(p.extra["cached"] for p in results) == [False, True]

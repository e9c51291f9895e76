"""The LLM client and `kforge doctor`'s endpoint check, against a real HTTP server on 127.0.0.1 (tests/llm_server.py).

Nothing is mocked: the `openai` package opens sockets to the scripted server, which records what it received.
"""
from __future__ import annotations

import socket
import threading
import time

import pytest

from forge_backend.errors import BadOption
from forge_backend.search.llm import LLMClient, LLMUnavailable, check_endpoint
from llm_server import LLMServer, Reply, llm_config, llm_server  # noqa: F401  (llm_server is a fixture)

MESSAGES = [{"role": "system", "content": "You write kernels."}, {"role": "user", "content": "Write one."}]


@pytest.fixture(autouse=True)
def _no_env_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def _client(server, tmp_path, sleeps=None, **cfg):
    sleep = sleeps.append if sleeps is not None else (lambda s: None)
    return LLMClient(llm_config(server, tmp_path, **cfg), backoff_s=0.01, sleep=sleep)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# construction ---------------------------------------------------------------------------------------------------


def test_constructor_makes_no_request(llm_server, tmp_path):
    LLMClient(llm_config(llm_server, tmp_path))
    assert llm_server.requests == []


def test_constructor_does_not_touch_an_unreachable_endpoint(tmp_path):
    cfg = llm_config(None, tmp_path, llm_base_url=f"http://127.0.0.1:{_free_port()}/v1")
    LLMClient(cfg)  # no error: nothing is sent until chat()


def test_model_is_required(tmp_path):
    with pytest.raises(BadOption, match="llm_model"):
        LLMClient(llm_config(None, tmp_path, llm_model="", llm_base_url="http://127.0.0.1:1/v1"))


def test_openai_without_key_says_what_to_set(tmp_path):
    with pytest.raises(LLMUnavailable, match="OPENAI_API_KEY"):
        LLMClient(llm_config(None, tmp_path, llm_base_url=""))


# requests -------------------------------------------------------------------------------------------------------


def test_chat_sends_model_limits_seed_and_placeholder_key(llm_server, tmp_path):
    llm_server.push(Reply(content="hello", prompt_tokens=11, completion_tokens=7))
    result = _client(llm_server, tmp_path, llm_max_tokens=333).chat(MESSAGES, seed=42)
    assert (result.text, result.prompt_tokens, result.completion_tokens, result.attempts) == ("hello", 11, 7, 1)
    (req,) = llm_server.chat_requests()
    assert req.body["model"] == "test-model"
    assert req.body["max_tokens"] == 333  # compatible servers get max_tokens (OpenAI gets max_completion_tokens)
    assert req.body["seed"] == 42
    assert req.body["messages"] == MESSAGES
    assert req.headers["authorization"] == "Bearer not-needed"


def test_key_from_environment_is_sent(llm_server, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    llm_server.push(Reply(content="hi"))
    _client(llm_server, tmp_path).chat(MESSAGES)
    assert llm_server.chat_requests()[0].headers["authorization"] == "Bearer sk-test"


def test_429_then_success_is_retried_once(llm_server, tmp_path):
    llm_server.push(Reply.error(429, "Rate limit reached", headers={"Retry-After": "0"}), Reply(content="ok"))
    client = _client(llm_server, tmp_path)
    result = client.chat(MESSAGES)
    assert result.text == "ok" and result.attempts == 2
    assert len(llm_server.chat_requests()) == 2
    assert client.stats["retries"] == 1


def test_5xx_then_success_is_retried(llm_server, tmp_path):
    llm_server.push(Reply.error(503, "overloaded"), Reply.error(500, "oops"), Reply(content="ok"))
    assert _client(llm_server, tmp_path).chat(MESSAGES).attempts == 3


def test_timeout_then_success_is_retried(llm_server, tmp_path):
    llm_server.push(Reply(content="late", delay_s=2.0), Reply(content="on time"))
    t0 = time.monotonic()
    result = _client(llm_server, tmp_path, llm_timeout_s=0.3).chat(MESSAGES)
    assert (result.text, result.attempts) == ("on time", 2)
    assert time.monotonic() - t0 < 1.5  # the per-request timeout cut the slow reply short


def test_retries_stop_and_say_why(llm_server, tmp_path):
    llm_server.push(Reply(content="late", delay_s=2.0), Reply(content="late", delay_s=2.0), Reply(content="unused"))
    with pytest.raises(LLMUnavailable, match=r"within 0.3 s.*gave up after 2 attempt") as e:
        _client(llm_server, tmp_path, llm_timeout_s=0.3, llm_retries=1).chat(MESSAGES)
    assert e.value.attempts == 2
    assert llm_server.remaining() == 1


def test_client_errors_are_not_retried(llm_server, tmp_path):
    llm_server.push(Reply.error(400, "context length exceeded"), Reply(content="unused"))
    with pytest.raises(LLMUnavailable, match="HTTP 400.*context length exceeded") as e:
        _client(llm_server, tmp_path).chat(MESSAGES)
    assert (e.value.attempts, e.value.status) == (1, 400)
    assert len(llm_server.chat_requests()) == 1


def test_quota_429_is_not_retried(llm_server, tmp_path):
    body = {"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}}
    llm_server.push(Reply(status=429, body=body), Reply(content="unused"))
    with pytest.raises(LLMUnavailable, match="quota"):
        _client(llm_server, tmp_path).chat(MESSAGES)
    assert len(llm_server.chat_requests()) == 1


def test_unknown_model_is_a_clear_error(llm_server, tmp_path):
    with pytest.raises(LLMUnavailable, match="404.*'nope' not found"):
        _client(llm_server, tmp_path, llm_model="nope").chat(MESSAGES)


def test_backoff_is_exponential_capped_and_honours_retry_after(llm_server, tmp_path):
    llm_server.push(Reply.error(500, "a"), Reply.error(500, "b"), Reply.error(500, "c"),
                    Reply.error(429, "d", headers={"Retry-After": "0.25"}), Reply(content="ok"))
    sleeps: list[float] = []
    cfg = llm_config(llm_server, tmp_path, llm_retries=4)
    client = LLMClient(cfg, backoff_s=1.0, max_backoff_s=3.0, sleep=sleeps.append)
    assert client.chat(MESSAGES).attempts == 5
    assert 0.5 <= sleeps[0] <= 1.0 and 1.0 <= sleeps[1] <= 2.0 and 2.0 <= sleeps[2] <= 3.0  # 1, 2, 4 s, jittered
    assert sleeps[3] == 0.25


def test_missing_usage_is_estimated(llm_server, tmp_path):
    body = {"id": "x", "object": "chat.completion", "created": 0, "model": "test-model",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "x" * 400}}]}
    llm_server.push(Reply(body=body))
    result = _client(llm_server, tmp_path).chat(MESSAGES)
    assert result.usage_estimated and result.completion_tokens == 100


def test_concurrency_is_bounded_by_the_semaphore(llm_server, tmp_path):
    llm_server.push(*[Reply(content="ok", delay_s=0.15) for _ in range(6)])
    client = _client(llm_server, tmp_path, llm_concurrency=2)
    threads = [threading.Thread(target=client.chat, args=(MESSAGES,)) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert len(llm_server.chat_requests()) == 6
    assert llm_server.max_in_flight == 2


# kforge doctor ------------------------------------------------------------------------------------------------------


def test_check_endpoint_ok(llm_server, tmp_path):
    llm_server.push(Reply(content="ok", prompt_tokens=5, completion_tokens=1))
    status = check_endpoint(llm_config(llm_server, tmp_path))
    assert status.ok, status.message
    assert status.models == ["test-model"] and "serves test-model" in status.message
    (req,) = llm_server.chat_requests()
    assert req.body["max_tokens"] == 1


def test_check_endpoint_wrong_model_lists_what_is_served(llm_server, tmp_path):
    status = check_endpoint(llm_config(llm_server, tmp_path, llm_model="gpt-nope"))
    assert not status.ok
    assert "'gpt-nope' not found" in status.message and "test-model" in status.message
    assert llm_server.chat_requests() == []  # the model list answered; no completion was attempted


def test_check_endpoint_unreachable(tmp_path):
    port = _free_port()
    status = check_endpoint(llm_config(None, tmp_path, llm_base_url=f"http://127.0.0.1:{port}/v1"), timeout_s=2)
    assert not status.ok
    assert f"cannot reach http://127.0.0.1:{port}/v1" in status.message


def test_check_endpoint_bad_key(tmp_path):
    with LLMServer(api_key="sk-right") as server:
        status = check_endpoint(llm_config(server, tmp_path), api_key="sk-wrong")
    assert not status.ok and "401" in status.message and "OPENAI_API_KEY" in status.message


def test_check_endpoint_without_model(tmp_path):
    status = check_endpoint(llm_config(None, tmp_path, llm_model=""))
    assert not status.ok and "KFORGE_LLM_MODEL" in status.message

"""A scripted OpenAI-compatible server on 127.0.0.1, for LLM tests that use the real `openai` client over HTTP.

It speaks ``POST /v1/chat/completions`` and ``GET /v1/models`` with OpenAI's JSON shapes, replays a scripted list of
responses in order (each a status code with a body, or an assistant message, optionally after a delay), and records
every request it received. Nothing is mocked: the client under test opens real sockets.

Bounded by construction: it binds port 0, serves from one daemon thread, answers 400 "script exhausted" when the
script runs out (non-retryable, so a test that asks too much fails at once), and a delayed reply waits on an event
that ``stop()`` sets, so teardown never waits for a sleeping handler.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterable, Iterator

import pytest

from forge_backend.cards import OperatorCard, build_card
from forge_backend.config import KforgeConfig
from forge_backend.signature import ArgSpec, OpSignature, TensorSpec

FIXTURES = Path(__file__).parent / "fixtures" / "llm"
DEFAULT_MODEL = "test-model"


def fixture_text(name: str) -> str:
    """A canned assistant answer from tests/fixtures/llm/."""
    return (FIXTURES / name).read_text()


@dataclass
class Reply:
    """One scripted answer to a chat completion: an assistant message, or a raw status + body."""

    content: str | None = None
    status: int = 200
    body: Any = None  # raw JSON body (dict) or text; overrides ``content``
    delay_s: float = 0.0
    prompt_tokens: int = 1000
    completion_tokens: int = 500
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def fixture(cls, name: str, **kw: Any) -> "Reply":
        return cls(content=fixture_text(name), **kw)

    @classmethod
    def error(cls, status: int, message: str, **kw: Any) -> "Reply":
        return cls(status=status, body={"error": {"message": message, "type": "server_error", "code": None}}, **kw)


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class LLMServer:
    """Use as a context manager, or through the ``llm_server`` fixture."""

    def __init__(self, script: Iterable[Reply] = (), models: Iterable[str] = (DEFAULT_MODEL,),
                 api_key: str | None = None) -> None:
        self.models = list(models)
        self.api_key = api_key  # when set, requests without "Bearer <api_key>" get 401
        self._script: list[Reply] = list(script)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.requests: list[Seen] = []
        self.in_flight = 0
        self.max_in_flight = 0  # most chat completions answered at once (checks the client's semaphore)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="llm-test-server", daemon=True)

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self._script.extend(replies)

    def chat_requests(self) -> list[Seen]:
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def remaining(self) -> int:
        with self._lock:
            return len(self._script)

    def start(self) -> "LLMServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> "LLMServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # called from handler threads ---------------------------------------------------------------------------------
    def _record(self, seen: Seen) -> None:
        with self._lock:
            self.requests.append(seen)

    def _next(self) -> Reply:
        with self._lock:
            if self._script:
                return self._script.pop(0)
        return Reply.error(400, "llm_server: script exhausted")

    def _enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _authorized(self, headers: dict[str, str]) -> bool:
        return self.api_key is None or headers.get("authorization") == f"Bearer {self.api_key}"

    def _wait(self, seconds: float) -> None:
        self._stopping.wait(seconds)


def _completion(model: str, reply: Reply) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-test-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": reply.content}}],
        "usage": {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
                  "total_tokens": reply.prompt_tokens + reply.completion_tokens},
    }


def _handler_for(server: LLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
            pass

        def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout test); nothing to answer

        def _seen(self) -> Seen:
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b""
            try:
                body = json.loads(raw) if raw else None
            except json.JSONDecodeError:
                body = raw.decode(errors="replace")
            seen = Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            server._record(seen)
            return seen

        def do_GET(self) -> None:
            seen = self._seen()
            if not server._authorized(seen.headers):
                return self._send(401, {"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}})
            if self.path.rstrip("/").endswith("/models"):
                data = [{"id": m, "object": "model", "created": 0, "owned_by": "test"} for m in server.models]
                return self._send(200, {"object": "list", "data": data})
            self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            seen = self._seen()
            if not self.path.rstrip("/").endswith("/chat/completions"):
                return self._send(404, {"error": {"message": f"no route {self.path}"}})
            if not server._authorized(seen.headers):
                return self._send(401, {"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}})
            model = (seen.body or {}).get("model") if isinstance(seen.body, dict) else None
            if model not in server.models:
                return self._send(404, {"error": {"message": f"The model `{model}` does not exist",
                                                  "type": "invalid_request_error", "code": "model_not_found"}})
            reply = server._next()
            server._enter()
            try:
                if reply.delay_s:
                    server._wait(reply.delay_s)
                if reply.body is not None or reply.status != 200:
                    return self._send(reply.status, reply.body if reply.body is not None else {}, reply.headers)
                self._send(200, _completion(model, reply), reply.headers)
            finally:
                server._leave()

    return Handler


def llm_config(server: LLMServer | None, cache_dir: Path, **overrides: Any) -> KforgeConfig:
    """A config that points the LLM proposer at ``server``, with test-sized timeouts."""
    values: dict[str, Any] = {"llm_model": DEFAULT_MODEL, "llm_base_url": server.base_url if server else "",
                              "llm_timeout_s": 5.0, "llm_retries": 2, "cache_dir": cache_dir}
    values.update(overrides)
    return KforgeConfig(**values)


def softmax_card(rows: int = 256, cols: int = 1003) -> OperatorCard:
    """softmax(-1) over float32 [rows, cols]; 1003 columns leave a tail for vectorised kernels to get wrong."""
    x = TensorSpec((rows, cols), (cols, 1), "float32")
    sig = OpSignature("aten._softmax.default",
                      (ArgSpec("self", x), ArgSpec("dim", value=-1), ArgSpec("half_to_float", value=False)),
                      (x,), (0,), "sm_90")
    return build_card(sig)


@pytest.fixture
def llm_server() -> Iterator[LLMServer]:
    """A started server with an empty script; tests ``push`` replies. Stopped at teardown."""
    with LLMServer() as s:
        yield s

"""The web server of ``kforge ui``: a read-only page over a cache directory's search records (ui/data.py).

Routes, all GET (anything else is 405):
    /                                   the page (page.html, app.js, style.css: package data, no network needed)
    /api/searches                       {"cache_dir", "searches_dir", "now", "searches": [Listing, ...],
                                         "queued": the misses queued for kforge prewarm --queued}
    /api/searches/KEY                   one search and its nodes, without sources
    /api/searches/KEY/nodes/N           one node whole: source, diff against its parent, plan, logs, reports
    /api/searches/KEY/nodes/N?against=M the same, its diff and changed params against node M
    ...?from=team                       the search and node views of a tree the team store holds (Note [a search
                                         tree beside a team's kernel] in store/team.py); from=local is the default
    /api/kernels                        {"cache_dir", "tiers": [TierState, ...], "kernels": [KernelRow, ...]}: the
                                         records a compile here can use, local, team and shipped (ui/kernels.py)
    /api/kernels/TIER/KEY               one tier's record of KEY whole: card, source, plan, verification, timings

Note [a local page that other sites cannot read]
Kernel sources and timings are not secrets, but the page should not hand them to any web site the user happens to
visit. By default the server listens on 127.0.0.1 only, sends no CORS headers (so a page of another origin cannot
read the answers), and answers only requests whose Host header names a loopback address: a site that rebinds its
own name to 127.0.0.1 (DNS rebinding) still sends its own name as Host and is refused with 403. Listening on another
address (``--host 0.0.0.0`` to show a team the searches) drops the Host check, which the command says as it starts.
The page builds its DOM with textContent, never innerHTML, so a candidate's source or an LLM's failure message
cannot inject markup, and the Content-Security-Policy allows only the page's own script and style.
"""
from __future__ import annotations

import json
import logging
import math
import re
import socket
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from ..search.records import CorruptRecord
from ..store.local import searches_dir
from ..store.record import CorruptRecord as CorruptKernelRecord
from ..store.record import is_key
from . import data
from .kernels import FOLDER, TIERS, KernelTiers

log = logging.getLogger("kforge")

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
_ASSETS = {"/": ("page.html", "text/html"), "/app.js": ("app.js", "text/javascript"),
           "/style.css": ("style.css", "text/css")}
_SEARCH = re.compile(r"^/api/searches/([^/]+)$")
_NODE = re.compile(r"^/api/searches/([^/]+)/nodes/(\d{1,9})$")
_KERNEL = re.compile(r"^/api/kernels/([^/]+)/([^/]+)$")
_CSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'"


class ApiError(Exception):
    """An answer other than 200: its status and a message for the page."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


def host_name(header: str | None) -> str:
    """The host of a Host header, without its port (``[::1]:8686`` -> ``::1``)."""
    h = (header or "").strip().lower()
    if h.startswith("["):
        return h[1:h.find("]")] if "]" in h else h
    return h.rsplit(":", 1)[0] if h.count(":") == 1 else h


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinity replaced by None: Python writes them into JSON, browsers refuse them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


class UiServer(ThreadingHTTPServer):
    """Serves ``cache_dir``'s search records; ``check_host`` as Note [a local page that other sites cannot read]."""

    daemon_threads = True

    def __init__(self, cache_dir: str | Path, host: str = "127.0.0.1", port: int = 8686,
                 team_dir: str | Path | None = None, shipped_dir: str | Path | None = None) -> None:
        self.cache_dir = Path(cache_dir).expanduser()
        self.searches_dir = searches_dir(self.cache_dir)
        self.listings = data.Listings(self.searches_dir)
        self.kernels = KernelTiers(self.cache_dir, team_dir, shipped_dir)
        self.check_host = host in LOOPBACK
        if ":" in host:  # an IPv6 address such as ::1 or ::
            self.address_family = socket.AF_INET6
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{'[' + host + ']' if ':' in str(host) else host}:{port}/"

    def start(self) -> threading.Thread:
        """Serve on a daemon thread (tests, and the command's own loop); ``shutdown()`` stops it."""
        t = threading.Thread(target=self.serve_forever, name="kforge-ui", daemon=True)
        t.start()
        return t

    # ---- answers -----------------------------------------------------------------------------------------------
    def api(self, path: str, query: str = "") -> Any:
        if path == "/api/searches":
            return {"cache_dir": str(self.cache_dir), "searches_dir": str(self.searches_dir), "now": time.time(),
                    "searches": [e.to_json() for e in self.listings()], "queued": data.queued(self.cache_dir)}
        if m := _NODE.match(path):
            against, where = _against(query), self._trees(query)
            return self._read(lambda k: data.node_view(where, k, int(m.group(2)), against), m.group(1), where)
        if m := _SEARCH.match(path):
            where = self._trees(query)
            return self._read(lambda k: data.search_view(where, k), m.group(1), where)
        if path == "/api/kernels":
            return self.kernels.listing()
        if m := _KERNEL.match(path):
            return self._kernel(m.group(1), m.group(2))
        raise ApiError(HTTPStatus.NOT_FOUND, f"no such page: {path}")

    def server_close(self) -> None:
        super().server_close()
        self.kernels.close()

    def _trees(self, query: str) -> Path:
        """The searches directory ``?from=`` names: this cache's (``local``, the default) or the team store's."""
        name = (parse_qs(query).get("from") or ["local"])[0]
        if name not in ("local", "team") and not (name.startswith(FOLDER) and self.kernels.is_tier(name)):
            raise ApiError(HTTPStatus.BAD_REQUEST, f"from={name[:60]!r}: search trees are read from local, team or "
                                                   "team@<model> (a team GPU model's folder that exists)")
        where = self.kernels.tree_dir(name)
        if where is None:
            raise ApiError(HTTPStatus.NOT_FOUND, "no team store is configured (KFORGE_TEAM_STORE, or kforge ui "
                                                 "--team-dir DIR)")
        return where

    def _read(self, view: Any, key: str, where: Path | None = None) -> Any:
        if not is_key(key):  # a key names a file: nothing else may
            raise ApiError(HTTPStatus.BAD_REQUEST, f"{key[:80]!r} is not a signature key (64 lowercase hex digits)")
        try:
            return view(key)
        except FileNotFoundError:
            raise ApiError(HTTPStatus.NOT_FOUND,
                           f"no search record for {key[:16]} in {where or self.searches_dir}") from None
        except IndexError as e:
            raise ApiError(HTTPStatus.NOT_FOUND, str(e)) from None
        except CorruptRecord as e:
            raise ApiError(HTTPStatus.UNPROCESSABLE_ENTITY, str(e)) from None

    def _kernel(self, tier: str, key: str) -> Any:
        if not self.kernels.is_tier(tier):
            raise ApiError(HTTPStatus.NOT_FOUND, f"{tier[:60]!r} is not a tier: choose one of {', '.join(TIERS)}, or "
                                                 "team@<model> or local@<model> for a GPU model's folder that exists")
        if not is_key(key):
            raise ApiError(HTTPStatus.BAD_REQUEST, f"{key[:80]!r} is not a signature key (64 lowercase hex digits)")
        try:
            view = self.kernels.record_view(tier, key)
        except CorruptKernelRecord as e:
            raise ApiError(HTTPStatus.UNPROCESSABLE_ENTITY,
                           f"the {tier} record of {key[:16]} is corrupt: {e}") from None
        except OSError as e:  # a team file this user may not read, a share gone stale
            raise ApiError(HTTPStatus.SERVICE_UNAVAILABLE,
                           f"cannot read the {tier} record of {key[:16]}: {e}") from None
        if isinstance(view, str):
            raise ApiError(HTTPStatus.NOT_FOUND, view)
        return view


def _against(query: str) -> int | None:
    """The node a diff is taken against (``?against=N``), or None for the parent."""
    values = parse_qs(query).get("against")
    if not values:
        return None
    if not re.fullmatch(r"\d{1,9}", values[0]):
        raise ApiError(HTTPStatus.BAD_REQUEST, f"against={values[0][:20]!r}: a node id is a number")
    return int(values[0])


class _Handler(BaseHTTPRequestHandler):
    server: UiServer
    server_version = "kforge-ui"

    def do_GET(self) -> None:  # noqa: N802 (the name http.server dispatches to)
        if self.server.check_host and host_name(self.headers.get("Host")) not in LOOPBACK:
            self._send_json(HTTPStatus.FORBIDDEN, {"error": "this page answers only to a loopback Host "
                                                            "(Note [a local page that other sites cannot read])"})
            return
        path, _, query = self.path.partition("?")
        if path in _ASSETS:
            name, kind = _ASSETS[path]
            self._send(HTTPStatus.OK, resources.files(__package__).joinpath(name).read_bytes(), kind)
            return
        try:
            self._send_json(HTTPStatus.OK, self.server.api(path, query))
        except ApiError as e:
            self._send_json(e.status, {"error": str(e)})

    def _refuse(self) -> None:
        self._send_json(HTTPStatus.METHOD_NOT_ALLOWED, {"error": "kforge ui is read-only: GET only"})

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse  # noqa: N815

    def _send_json(self, status: HTTPStatus, payload: Any) -> None:
        self._send(status, json.dumps(finite(payload), allow_nan=False, default=str).encode(), "application/json")

    def _send(self, status: HTTPStatus, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", f"{kind}; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", _CSP)
        if status == HTTPStatus.METHOD_NOT_ALLOWED:
            self.send_header("Allow", "GET")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's signature)
        log.debug("kforge ui: " + format, *args)

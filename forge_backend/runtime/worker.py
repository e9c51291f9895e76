"""Crash isolation: candidates are loaded, verified and timed in a worker process.

Note [why a process]
A candidate that faults (illegal address, misaligned access) poisons its CUDA context for good, and one that loops
forever never returns. Both must cost only the worker: the parent sends a request and waits with a timeout; a
worker that dies or overruns is killed and restarted, and the candidate is recorded as failed with the reason.
The user's process only ever loads kernels that passed here.

Protocol (dicts over a multiprocessing pipe; cubins travel as bytes):
  {"cmd": "baseline", "card": {...}}                     -> {"eager_us", "bandwidth_gbps", "floor_us", "gpu"}
  {"cmd": "evaluate", "card", "candidate", "cubin", "id"} -> Evaluation fields (see _evaluate)
  {"cmd": "remeasure", "card", "candidate", "cubin", "runs"} -> {"times_us": [...]}
  {"cmd": "ping"}                                         -> {"ok": True}
"""
from __future__ import annotations

import functools
import logging
import multiprocessing as mp
import os
import time
import traceback
from pathlib import Path
from typing import Any

from torch._dynamo.utils import counters

from ..errors import CandidateFailure

log = logging.getLogger("kforge")

DEFAULT_TIMEOUT_S = 60.0


def gpu_description(device) -> dict[str, Any]:
    """What the LLM proposer's prompt says of ``device`` (GpuFacts.of_device)."""
    import torch

    props = torch.cuda.get_device_properties(device)
    return {"name": props.name, "arch": f"sm_{props.major}{props.minor}", "sm_count": props.multi_processor_count,
            "smem_per_block_kb": getattr(props, "shared_memory_per_block_optin", 48 * 1024) // 1024,
            "l2_mb": props.L2_cache_size // 2**20, "regs_per_sm": getattr(props, "regs_per_multiprocessor", 65536),
            "max_threads_per_sm": props.max_threads_per_multi_processor}


class WorkerClient:
    """Parent side. Thread-safe only under the caller's lock (the MCTS serialises GPU work)."""

    def __init__(self, cache_dir: Path | None, device_index: int = 0, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.cache_dir, self.device_index, self.timeout_s = cache_dir, device_index, timeout_s
        self._proc: mp.process.BaseProcess | None = None
        self._conn = None
        self.restarts = 0

    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        self._proc = ctx.Process(target=_worker_main, args=(child, str(self.cache_dir or ""), self.device_index),
                                 daemon=True, name="kforge-worker")
        self._proc.start()
        child.close()
        self._conn = parent

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(timeout=10)
        self._proc, self._conn = None, None
        self.restarts += 1
        counters["kforge"]["worker_restarts"] += 1

    def call(self, request: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        """Send one request; a timeout or a dead worker becomes CandidateFailure and the worker is restarted."""
        if self._proc is None or not self._proc.is_alive():
            if self._proc is not None:
                self._kill()
            self._start()
        timeout = timeout_s or self.timeout_s
        counters["kforge"]["worker_calls"] += 1
        try:
            self._conn.send(request)
            if not self._conn.poll(timeout):
                self._kill()
                raise CandidateFailure("timeout", f"no answer within {timeout:.0f} s (a hang); the worker was killed")
            reply = self._conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError) as e:
            code = self._proc.exitcode if self._proc is not None else None
            self._kill()
            raise CandidateFailure("crash", f"the worker process died (exit code {code})") from e
        if reply.get("fatal"):
            self._kill()  # its CUDA context is unusable after a fault
        if "failure" in reply:
            stage, message, text = reply["failure"]
            raise CandidateFailure(stage, message, text)
        if "error" in reply:
            raise RuntimeError(f"kforge worker error: {reply['error']}")
        return reply

    def close(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send({"cmd": "exit"})
                self._proc.join(timeout=5)
            except (BrokenPipeError, OSError):
                pass
            if self._proc.is_alive():
                self._proc.kill()
        self._proc, self._conn = None, None


# ----------------------------------------------------------------------------------------------------------------
# worker side


def _is_fatal(e: BaseException) -> bool:
    text = str(e)
    return any(s in text for s in ("illegal", "misaligned", "CUDA error", "unspecified launch failure",
                                   "CUDA_ERROR", "an illegal"))


def _worker_main(conn, cache_dir: str, device_index: int) -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    state = _WorkerState(Path(cache_dir) if cache_dir else None, device_index)
    while True:
        try:
            req = conn.recv()
        except EOFError:
            return
        if req.get("cmd") == "exit":
            return
        try:
            conn.send(state.handle(req))
        except CandidateFailure as e:
            fatal = e.stage == "crash" or _is_fatal(e)
            conn.send({"failure": (e.stage, e.message, e.log), "fatal": fatal})
            if fatal:
                return
        except Exception as e:  # reported to the parent, which decides; a CUDA fault ends this worker
            fatal = _is_fatal(e)
            if fatal:
                conn.send({"failure": ("crash", f"{type(e).__name__}: {e}", traceback.format_exc()), "fatal": True})
                return
            conn.send({"error": f"{type(e).__name__}: {e}\n{traceback.format_exc()}"})


def inductor_single_op(card, inputs: list) -> Any:
    """Inductor's compiled version of the card's op alone. The op is first traced to a one-node ATen graph, so
    Dynamo compiles plain generated code (tracing kforge's own ``call_aten`` could graph-break and time eager)."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    from ..reference import call_aten

    sig = card.signature_obj()
    with torch.no_grad():
        graph = make_fx(lambda *xs: call_aten(sig, list(xs)))(*inputs)
    return torch.compile(graph, dynamic=False)


class _WorkerState:
    def __init__(self, cache_dir: Path | None, device_index: int) -> None:
        import torch

        from ..measure import Timer, copy_bandwidth

        self.torch = torch
        self.device = torch.device("cuda", device_index)
        torch.cuda.set_device(self.device)
        self.timer = Timer(self.device)
        self.bandwidth = copy_bandwidth(self.device, cache_dir)
        self.cache_dir = cache_dir
        self._inputs: dict[str, list] = {}
        self._eager: dict[str, float] = {}
        self._trials: dict[str, list] = {}  # card key -> verify.Trial list, reused across a search

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        from ..cards import OperatorCard

        cmd = req["cmd"]
        if cmd == "ping":
            return {"ok": True, "pid": os.getpid()}
        card = OperatorCard.from_json(req["card"])
        if cmd == "baseline":
            return {"eager_us": self.eager_us(card), "bandwidth_gbps": self.bandwidth,
                    "floor_us": card.floor_us(self.bandwidth), "gpu": gpu_description(self.device)}
        if cmd == "evaluate":
            return self.evaluate(card, req)
        if cmd == "remeasure":
            return self.remeasure(card, req)
        if cmd == "inductor_baseline":
            return {"inductor_us": self.inductor_us(card)}
        raise ValueError(f"unknown worker command {cmd!r}")

    def timing_inputs(self, card) -> list:
        from ..verify import make_inputs

        if card.key not in self._inputs:
            self._inputs.clear()
            self._eager.clear()
            self._inputs[card.key] = make_inputs(card, "normal", 99, self.device)
        return self._inputs[card.key]

    def trials(self, card) -> list:
        from ..verify import prepare_trials

        if card.key not in self._trials:
            self._trials.clear()  # one card at a time: a search evaluates one signature
            self._trials[card.key] = prepare_trials(card, self.device)
        return self._trials[card.key]

    def eager_us(self, card) -> float:
        from ..reference import call_aten

        if card.key not in self._eager:
            sig, inputs = card.signature_obj(), self.timing_inputs(card)
            self._eager[card.key] = self.timer.time(lambda: call_aten(sig, inputs)).median_us
        return self._eager[card.key]

    def inductor_us(self, card) -> float:
        """Device time of Inductor's compiled version of the op alone, replayed from a CUDA graph (so its Python
        wrapper is not timed); see Note [the baseline inside Inductor] in cuda_provider.py."""
        torch = self.torch
        inputs = self.timing_inputs(card)
        torch._dynamo.reset()
        fn = inductor_single_op(card, inputs)
        with torch.no_grad():
            stream = torch.cuda.Stream(self.device)
            stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(stream):
                for _ in range(3):
                    fn(*inputs)  # compile, then settle allocations before capture
            torch.cuda.current_stream(self.device).wait_stream(stream)
            try:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    fn(*inputs)
                run = graph.replay
            except RuntimeError as e:  # not capturable: time the call, wrapper included (favours the kernel less)
                log.info("kforge worker: Inductor's %s is not CUDA-graph capturable (%s); timing calls", card.op, e)
                run = functools.partial(fn, *inputs)
            t = self.timer.time(run).median_us
        torch._dynamo.reset()
        return t

    def _launcher(self, card, req):
        from ..contract import Candidate
        from .launch import Launcher

        return Launcher(card, Candidate.from_json(req["candidate"]), req["cubin"], self.device)

    def evaluate(self, card, req) -> dict[str, Any]:
        from ..measure import pct_of_bandwidth
        from ..verify import verify

        t0 = time.perf_counter()
        launcher = self._launcher(card, req)
        report = verify(card, launcher.launch_into, launcher.allocate_outputs, self.device, self.trials(card))
        result: dict[str, Any] = {"verify_report": report.to_json(), "verify_s": time.perf_counter() - t0}
        if not report.ok:
            if report.failed_check == "launch" and _is_fatal(report.message):
                raise CandidateFailure("crash", report.message)  # the context is gone: end this worker
            if report.failed_check == "input_modified":
                self._trials.pop(card.key, None)  # the cached inputs were clobbered
            result["ok"] = False
            return result
        inputs = self.timing_inputs(card)
        kforge = self.timer.time(lambda: launcher(inputs)).median_us
        eager = self.eager_us(card)
        result.update(ok=True, time_us=kforge, eager_us=eager, speedup=eager / kforge,
                      pct_bw=pct_of_bandwidth(card.bytes_min, kforge, self.bandwidth),
                      bandwidth_gbps=self.bandwidth)
        return result

    def remeasure(self, card, req) -> dict[str, Any]:
        """Fresh inputs, a fresh module load, and repeated timings: no winner's curse."""
        from ..verify import make_inputs

        launcher = self._launcher(card, req)
        inputs = make_inputs(card, "normal", 4242 + len(self._inputs), self.device)
        times = [self.timer.time(lambda: launcher(inputs)).median_us for _ in range(int(req.get("runs", 3)))]
        return {"times_us": times, "eager_us": self.eager_us(card)}

"""The MCTS evaluator on a real GPU: NVRTC compile in the caller's threads, verify + time in the worker process."""
from __future__ import annotations

from pathlib import Path

from ..cards import OperatorCard
from ..contract import Candidate
from ..errors import CandidateFailure
from ..search.mcts import Evaluation
from .nvrtc import CompiledKernel, compile_candidate
from .worker import WorkerClient


class WorkerEvaluator:
    def __init__(self, client: WorkerClient, arch: str, cache_dir: Path | None) -> None:
        self.client, self.arch, self.cache_dir = client, arch, cache_dir

    def compile(self, candidate: Candidate) -> CompiledKernel:
        return compile_candidate(candidate, self.arch, self.cache_dir)

    def _request(self, cmd: str, card: OperatorCard, candidate: Candidate, compiled: CompiledKernel, **extra) -> dict:
        return self.client.call({"cmd": cmd, "card": card.to_json(), "candidate": candidate.to_json(),
                                 "cubin": compiled.cubin, **extra})

    def evaluate(self, card: OperatorCard, candidate: Candidate, compiled: CompiledKernel) -> Evaluation:
        try:
            r = self._request("evaluate", card, candidate, compiled)
        except CandidateFailure as e:
            return Evaluation(False, failure_stage=e.stage, failure_reason=e.message,
                              compile_log=compiled.log + ("\n" + e.log if e.log else ""))
        rep = r["verify_report"]
        if not r["ok"]:
            return Evaluation(False, failure_stage="verify", failure_reason=f"{rep['failed_check']}: {rep['message']}",
                              compile_log=compiled.log, verify_report=rep)
        return Evaluation(True, time_us=r["time_us"], pct_bw=r["pct_bw"], compile_log=compiled.log, verify_report=rep)

    def remeasure(self, card: OperatorCard, candidate: Candidate, compiled: CompiledKernel, runs: int) -> list[float]:
        try:
            return list(self._request("remeasure", card, candidate, compiled, runs=runs)["times_us"])
        except CandidateFailure:
            return []

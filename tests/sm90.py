"""Compiles a template's source for sm_90 on the CPU (NVRTC) and reads ptxas's report: shared by the tests that pin
layouts whose registers must not spill."""
from __future__ import annotations

import re

from forge_backend.runtime.nvrtc import BASE_OPTIONS, compile_source


def spill_stores(source: str) -> tuple[list[int], str]:
    """The bytes of spill stores ptxas reports for each function of ``source`` (compiled for sm_90), and its log."""
    log = compile_source(source, "sm_90", options=BASE_OPTIONS + ("--ptxas-options=-v",)).log
    return [int(n) for n in re.findall(r"(\d+) bytes spill stores", log)], log

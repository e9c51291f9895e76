"""Which candidate overloads one graph needs Inductor to decompose (see Note [kforge inside Inductor]).

A plan is a hint, never a correctness input: it only says which overloads a previous compile of the same graph
found nodes of that kforge left to Inductor. With the plan, a warm compile runs Inductor's trace once instead of
stopping at the leftovers and retrying. A stale plan (the cache gained or lost kernels since) costs at most a retry
or a missed replacement. Plans are small JSON files under ``<cache_dir>/inductor_plans``.
"""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any, Sequence

import torch

from .config import KforgeConfig
from .fsutil import atomic_write

log = logging.getLogger("kforge")
PLAN_VERSION = 1


class InductorPlans:
    def __init__(self, cache_dir: Path) -> None:
        self.dir = Path(cache_dir) / "inductor_plans"

    @staticmethod
    def key(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], cfg: KforgeConfig) -> str:
        """The graph's code, its inputs' shapes, strides and dtypes, the opted-in families and the torch version."""
        inputs = [(tuple(t.shape), tuple(t.stride()), str(t.dtype)) if isinstance(t, torch.Tensor) else repr(t)
                  for t in example_inputs]
        text = json.dumps([PLAN_VERSION, torch.__version__, gm.code, repr(inputs), sorted(cfg.families)])
        return hashlib.sha256(text.encode()).hexdigest()

    def get(self, key: str) -> set[str]:
        path = self.dir / f"{key}.json"
        try:
            return {str(o) for o in json.loads(path.read_text())["decompose"]}
        except FileNotFoundError:
            return set()
        except (OSError, ValueError, KeyError, TypeError) as e:  # unreadable: a miss, reported
            log.warning("kforge: ignoring unreadable Inductor plan %s (%s)", path, e)
            return set()

    def put(self, key: str, ops: list[str]) -> None:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            atomic_write(self.dir / f"{key}.json", json.dumps({"version": PLAN_VERSION, "decompose": ops}).encode())
        except OSError as e:  # a read-only cache still works, just without the hint
            log.info("kforge: could not save an Inductor plan in %s (%s)", self.dir, e)

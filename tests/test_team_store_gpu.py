"""GPU: the team store end to end, two cache directories standing for two machines. One compiles a model and searches
its misses (the real worker and search): its kernels and the searches that found them go to the team store. The
other, with an empty cache of its own and searching off, compiles the same model: it takes the team's kernels after
re-verifying them on this GPU and keeps the verified copies, and its outputs match PyTorch's."""
from __future__ import annotations

import json

import pytest
import torch
from torch._dynamo.utils import counters

from forge_backend.store import LocalStore, TeamStore
from forge_backend.store.team import found_by

pytestmark = pytest.mark.gpu


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * 0.5, dim=-1)


def test_one_machines_kernels_reach_another_through_the_team_store(tmp_path, monkeypatch):
    monkeypatch.setenv("KFORGE_SHIPPED_DIR", str(tmp_path / "no-shipped"))  # a miss, whatever kforge ships
    team = TeamStore(tmp_path / "team")
    team.directory.mkdir()
    x = torch.randn(64, 5000, device="cuda")
    want = torch.softmax(x * 0.5, dim=-1)
    base = {"inner": "eager", "team_store": str(team.directory)}

    torch._dynamo.reset()
    counters.clear()
    first = {**base, "cache_dir": str(tmp_path / "a"), "search": "on_miss", "search_iterations": 8,
             "search_seconds": 240}
    torch.testing.assert_close(torch.compile(Model(), backend="kforge", options=first)(x), want)
    assert counters["kforge"]["searches"] >= 1
    published = team.keys()
    kernels = [k for k in published if team.get(k).decision == "kernel"]
    assert kernels, f"a kernel was found and published: {dict(counters['kforge'])}"
    for key in kernels:  # Note [a search tree beside a team's kernel]
        assert found_by(team.get(key), json.loads(team.search_path(key).read_text()))

    torch._dynamo.reset()
    counters.clear()
    second = {**base, "cache_dir": str(tmp_path / "b"), "search": "off"}
    torch.testing.assert_close(torch.compile(Model(), backend="kforge", options=second)(x), want)
    assert counters["kforge"]["searches"] == 0 and counters["kforge"]["cache_hit"] >= 1
    with LocalStore(tmp_path / "b") as b:
        for key in kernels:
            copy = b.get(key)
            assert copy is not None and copy.trusted and copy.provenance.get("reverified") is True

"""Note [a team of several GPU models] (store/team.py): a kernel measured on another GPU model than the team's kernel
of its key goes into that model's folder, and a reader on that model takes it first."""
from __future__ import annotations

from pathlib import Path

import pytest
from torch._dynamo.utils import counters

from forge_backend.config import KforgeConfig
from forge_backend.store import TeamStore
from forge_backend.store import team as team_mod
from forge_backend.store.team import gpu_slug, team_store

from test_store import make_record  # noqa: E402 (tests/ is on sys.path under pytest's default import mode)

H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"


@pytest.fixture(autouse=True)
def fresh_process_state(monkeypatch):
    monkeypatch.setattr(team_mod, "_warned", set())
    counters.clear()


@pytest.fixture
def team(tmp_path: Path) -> TeamStore:
    (tmp_path / "team").mkdir()
    return TeamStore(tmp_path / "team")


def on(gpu: str, us: float, rows: int = 64):
    """A search's winner of the softmax signature ``rows`` x 1000, measured at ``us`` on ``gpu``."""
    rec = make_record(rows)
    return rec.replace(candidate=dict(rec.candidate, description=f"the {gpu} kernel of {us} us"),
                       timings={**rec.timings, "kforge_us": us}, provenance={**rec.provenance, "gpu": gpu})


def tree_of(rec) -> dict:
    return {"winner_id": 0, "nodes": [{"candidate": {"source": rec.candidate["source"]}}]}


def test_a_model_names_its_folder():
    assert gpu_slug(H100) == "nvidia-h100-80gb-hbm3" and gpu_slug("NVIDIA H100 PCIe") == "nvidia-h100-pcie"
    assert gpu_slug("") == "" and gpu_slug(" / ") == ""
    with pytest.raises(ValueError, match="needs a GPU name"):
        TeamStore("/tmp/x").model("")


def test_a_kernel_of_another_model_goes_into_its_folder_with_its_tree(team: TeamStore):
    h200, h100 = on(H200, 4.1), on(H100, 5.0)
    assert team.publish(h200).written
    done = team.publish(h100, tree_of(h100))
    assert done.written and done.tree
    assert done.why == f"new to the team, in the folder of {H100} (the key's own kernel was measured on {H200})"
    folder = team.directory / "gpus" / "nvidia-h100-80gb-hbm3"
    assert (folder / f"{h100.key}.json").is_file() and (folder / "searches" / f"{h100.key}.json").is_file()
    assert team.get(h200.key).candidate == h200.candidate  # the key's own record is untouched
    assert not team.search_path(h200.key).exists()


def test_a_reader_takes_its_models_record_first(team: TeamStore):
    h200, h100 = on(H200, 4.1), on(H100, 5.0)
    team.publish(h200)
    team.publish(h100)
    on_h100, on_h200, no_gpu = (TeamStore(team.directory, g) for g in (H100, H200, ""))
    assert on_h100.get(h100.key).candidate == h100.candidate and on_h100.get(h100.key).source == "team"
    assert not on_h100.get(h100.key).trusted
    assert on_h200.get(h200.key).candidate == h200.candidate == no_gpu.get(h200.key).candidate
    only_h100 = on(H100, 3.0, rows=128)  # a folder's key without a record of its own (the key's own was removed)
    team.model(H100).directory.joinpath(f"{only_h100.key}.json").write_text(only_h100.dumps(indent=1))
    assert on_h100.keys() == sorted([h100.key, only_h100.key]) and only_h100.key in on_h100
    assert no_gpu.keys() == [h100.key] and only_h100.key not in no_gpu


def test_a_folder_keeps_the_same_rules(team: TeamStore):
    team.publish(on(H200, 4.1))
    assert team.publish(on(H100, 5.0)).written
    slower = team.publish(on(H100, 5.5))
    assert not slower.written and "as fast or faster on " + H100 in slower.why
    faster = team.publish(on(H100, 4.5))
    assert faster.written and faster.why.startswith(f"faster on {H100}: 4.50 us vs the team's 5.00 us")
    assert TeamStore(team.directory, H100).get(make_record().key).timings["kforge_us"] == 4.5
    assert team.get(make_record().key).timings["kforge_us"] == 4.1  # a faster H100 kernel never replaces the H200's


@pytest.mark.parametrize("held,new,where", [
    (None, on(H100, 5.0), "own"),  # nothing held: the key's own record, whatever the model
    (make_record(decision="pytorch"), on(H100, 5.0), "own"),  # a kernel replaces PyTorch's decision
    (on(H200, 4.1), on(H200, 3.0), "own"),  # the same model: the key's own rules
    (on(H200, 4.1), on("", 3.0), "nowhere"),  # an unnamed GPU has no folder, and does not compare
    (on(H200, 4.1), make_record(decision="pytorch"), "nowhere"),  # PyTorch's decision never goes to a folder
], ids=["nothing-held", "over-pytorch", "same-model", "unnamed-gpu", "pytorch"])
def test_what_goes_to_the_keys_own_record(team: TeamStore, held, new, where):
    if held is not None:
        team.write(held)
    done = team.publish(new)
    assert done.written is (where == "own"), done.why
    assert not (team.directory / "gpus").exists()


def test_a_corrupt_folder_record_is_passed_over_and_checked(team: TeamStore):
    h200, h100 = on(H200, 4.1), on(H100, 5.0)
    team.publish(h200)
    team.publish(h100)
    path = team.model(H100).path(h100.key)
    path.write_text(path.read_text().replace("5.0", "0.5"))
    assert TeamStore(team.directory, H100).get(h100.key).candidate == h200.candidate  # the key's own, reported
    report = team.check()
    assert report.ok == [h200.key] and list(report.corrupt) == [f"nvidia-h100-80gb-hbm3/{h100.key}"]


def test_the_configured_team_store_reads_for_this_gpu(tmp_path: Path, team: TeamStore, monkeypatch):
    import torch

    cfg = KforgeConfig.load({"team_store": str(team.directory)}, env={})
    assert team_store(cfg).gpu == ""  # no CUDA here
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: H100)
    assert team_store(cfg).gpu == H100


def test_doctor_counts_each_models_records(team: TeamStore):
    from forge_backend import doctor

    team.publish(on(H200, 4.1))
    team.publish(on(H100, 5.0))
    check = doctor._team(KforgeConfig.load({"team_store": str(team.directory)}, env={}))
    assert check.ok and "1 records (and in GPU models' folders: 1 for nvidia-h100-80gb-hbm3), writable" in check.detail


def test_folders_that_cannot_be_listed_are_warned_about_not_raised(team: TeamStore, monkeypatch):
    team.publish(on(H200, 4.1))
    team.publish(on(H100, 5.0))
    assert [m.directory.name for m in team.models()] == ["nvidia-h100-80gb-hbm3"]

    def stale(self):
        raise OSError(116, "Stale file handle")

    monkeypatch.setattr(Path, "iterdir", stale)
    with pytest.warns(UserWarning, match="cannot list the team store's GPU model folders"):
        assert team.models() == []
    assert counters["kforge"]["team_unavailable"] == 1

"""The kforge command line on the CPU: version, doctor, cards and prewarm's planning."""
from pathlib import Path

import pytest
from typer.testing import CliRunner

from forge_backend import __version__
from forge_backend.cli import _check_search_gpus, _search_workers, app
from forge_backend.config import KforgeConfig
from forge_backend.errors import BadOption
from forge_backend.inspect_model import model_cards
from forge_backend.prewarm import PrewarmResult, plan
from forge_backend.store.reverified import Reverified

QUICKSTART = str(Path(__file__).parent.parent / "examples" / "quickstart.py")
runner = CliRunner()


def test_version():
    out = runner.invoke(app, ["--version"])
    assert out.exit_code == 0 and __version__ in out.output


def test_doctor_reports_each_piece():
    out = runner.invoke(app, ["doctor", "--no-llm"])
    assert out.exit_code == 0
    for name in ("config", "torch", "GPU", "NVRTC", "cache"):
        assert name in out.output


def test_doctor_prints_brackets_as_written(monkeypatch):
    """Rich would read ``kforge[nvrtc]`` as a style tag and drop it: the install hint printed "pip install kforge"."""
    from forge_backend.runtime import nvrtc

    def missing(*args, **kwargs):
        raise OSError("No such file: libnvrtc.so.13\n")
    monkeypatch.setattr(nvrtc, "compile_source", missing)
    out = runner.invoke(app, ["doctor", "--no-llm"])
    assert out.exit_code == 0
    assert "libnvrtc.so.13. Install" in out.output and "(pip install kforge[nvrtc])" in out.output, out.output


@pytest.mark.parametrize("cap,sms,expect", [
    ((9, 0), 132, "132 SMs, torch CUDA"),
    ((9, 0), 132, "every template layout, blocks of up to 227 KB of shared memory"),
    ((9, 0), 114, "every template layout, blocks of up to 227 KB of shared memory; grids are sized for the H200's 132 "
                  "SMs, but the relay's take this GPU's 114"),
    ((8, 6), 84, "without sm_90's cluster and relay layouts, blocks of up to 99 KB of shared memory; grids are sized "
                 "for the H200's 132 SMs"),
    ((7, 5), 40, "need sm_80 or newer, so every op stays with PyTorch")])
def test_doctor_says_what_the_templates_do_on_this_gpu(monkeypatch, cap, sms, expect):
    """Note [templates for the card's architecture] (search/templates/target.py) and Note [the GPU's SM count in a
    plan] (contract.py), on a GPU faked for the CPU."""
    import types

    import torch

    from forge_backend import doctor

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: cap)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "some GPU")
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda *a: types.SimpleNamespace(multi_processor_count=sms))
    check = doctor._gpu()
    assert f"some GPU (sm_{cap[0]}{cap[1]})" in check.detail and expect in check.detail
    assert check.ok == (cap >= (8, 0)) and check.warn == (cap < (8, 0))
    assert ("grids are sized" in check.detail) == (sms != 132 and cap >= (8, 0))


@pytest.mark.parametrize("caps,current,expect", [
    ([(9, 0)], 0, None),
    ([(9, 0), (9, 0)], 0, (True, "cuda:1 GPU 1 (sm_90): the current GPU's arch")),
    ([(8, 6), (8, 9), (8, 6)], 1, (False, "a model on cuda:0, cuda:2 (not sm_89) keeps PyTorch's ops")),
])
def test_doctor_names_the_hosts_other_gpus(monkeypatch, caps, current, expect):
    """Notes [a kernel called with tensors on another GPU] and [a card of another GPU's arch], on faked GPUs."""
    import torch

    from forge_backend import doctor

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(caps))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current)
    monkeypatch.setattr(torch.cuda, "get_device_capability",
                        lambda d=None: caps[current if d is None else getattr(d, "index", d)])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: f"GPU {current if i is None else i}")
    check = doctor._other_gpus()
    if expect is None:
        assert check is None
        return
    assert (check.ok, check.warn) == (expect[0], not expect[0]) and expect[1] in check.detail, check.detail
    assert f"cuda:{current} " not in check.detail  # the current GPU has its own line


def test_cards_prints_every_signature(tmp_path):
    out = runner.invoke(app, ["cards", QUICKSTART, "--json", str(tmp_path / "cards.json")])
    assert out.exit_code == 0, out.output
    for op in ("aten.native_layer_norm.default", "aten._softmax.default", "aten.native_group_norm.default",
               "aten.mean.dim"):
        assert op in out.output
    assert "4 distinct signatures" in out.output and (tmp_path / "cards.json").exists()


def _one_line_error(out, message: str) -> None:
    """A bad input ends the command with exit status 1 and one line naming it, not a traceback."""
    assert out.exit_code == 1, out.output
    assert f"error: {message}" in out.output and "Traceback" not in out.output, out.output


@pytest.mark.parametrize("command", ["cards", "prewarm"])
def test_a_bad_model_spec_is_one_line(command):
    _one_line_error(runner.invoke(app, [command, "no_such_file.py"]), "model spec file no_such_file.py does not exist")


def test_a_file_spec_with_one_colon_says_how_to_name_a_variant():
    out = runner.invoke(app, ["cards", f"{QUICKSTART}:small"])
    _one_line_error(out, f"model spec '{QUICKSTART}:small': a file's variant follows two colons, {QUICKSTART}::small "
                         "(get_model_small and get_inputs_small)")


@pytest.mark.parametrize("flags,message", [
    (["--iterations", "0"], "kforge prewarm --iterations 0: must be >= 1"),
    (["--seconds-per-op", "0"], "kforge prewarm --seconds-per-op 0.0: must be > 0"),
    (["--seconds-per-op", "nan"], "kforge prewarm --seconds-per-op nan: must be > 0"),
    (["--gpus", "-1"], "kforge prewarm --gpus -1: must be >= 0"),
    (["--proposer", "bogus"], "kforge option proposer='bogus' is not valid"),
    (["--proposer", "[red]x"], "kforge option proposer='[red]x' is not valid"),  # printed as given, not as markup
    (["--min-share", "2"], "kforge option min_share=2.0 must be in [0, 1)"),
    (["--shard", "4/4"], "kforge prewarm --shard 4/4: I must be in 0..N-1"),
    (["--shard", "1/0"], "kforge prewarm --shard 1/0: I must be in 0..N-1"),
    (["--shard", "half"], "kforge prewarm --shard 'half': give I/N, e.g. 0/4"),
])
def test_prewarm_refuses_bad_flags_before_building_the_model(flags, message):
    out = runner.invoke(app, ["prewarm", QUICKSTART, *flags])
    _one_line_error(out, message)
    assert "distinct signatures" not in out.output  # the model was never captured


def test_a_path_the_system_refuses_is_one_line(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    out = runner.invoke(app, ["cards", QUICKSTART, "--json", str(blocker / "cards.json")])
    _one_line_error(out, f"{blocker / 'cards.json'}: Not a directory")


def test_prewarm_takes_at_most_the_visible_gpus():
    assert _search_workers(0, 2) == 2 and _search_workers(1, 2) == 1 and _search_workers(2, 2) == 2
    with pytest.raises(BadOption, match="--gpus 3: only 2 GPU"):
        _search_workers(3, 2)


def test_prewarm_refuses_search_gpus_of_another_arch():
    _check_search_gpus(["sm_90", "sm_90"], "sm_90")
    with pytest.raises(BadOption, match=r"signatures are for sm_90, but search GPU\(s\) 1 \(sm_80\) are not"):
        _check_search_gpus(["sm_90", "sm_80"], "sm_90")
    with pytest.raises(BadOption, match=r"0 \(sm_86\), 2 \(sm_86\)"):
        _check_search_gpus(["sm_86", "sm_89", "sm_86"], "sm_89")


def test_prewarm_without_gpu_lists_signatures_and_says_why():
    out = runner.invoke(app, ["prewarm", QUICKSTART])
    assert out.exit_code == 0, out.output
    assert "4 distinct signatures" in out.output and "searching needs a GPU" in out.output


class FakeStore:
    def __init__(self, keys):
        self.keys = set(keys)

    def get(self, key):
        return object() if key in self.keys else None


def test_prewarm_plan_resumes_skips_small_and_orders_by_share():
    cards = model_cards(QUICKSTART).cards
    eager = {c.key: float(i + 1) for i, c in enumerate(cards)}  # later cards take longer
    cfg = KforgeConfig.load({"min_share": 0.15}, env={})
    items = plan(cards, eager, cfg, FakeStore([cards[-1].key]))
    shares = [i.share for i in items]
    assert shares == sorted(shares, reverse=True) and abs(sum(shares) - 1.0) < 1e-9
    status = {i.card.key: i.status for i in items}
    assert status[cards[-1].key] == "cached"  # a rerun skips what finished
    assert status[cards[0].key].startswith("skipped: ")  # 10% of the time, under min_share
    assert [s for s in status.values() if s == "search"]
    forced = plan(cards, eager, cfg, FakeStore([cards[-1].key]), force=True)
    assert {i.card.key: i.status for i in forced}[cards[-1].key] == "search"


@pytest.mark.parametrize("decision,speedup,gain", [("kernel", 2.0, 0.25), ("pytorch", 2.0, 0.0), ("kernel", None, 0)])
def test_expected_gain(decision, speedup, gain):
    card = model_cards(QUICKSTART).cards[0]
    r = PrewarmResult(card, 0.5, "searched", speedup=speedup, decision=decision)
    assert r.expected_gain == pytest.approx(gain)


class FakeClient:
    def __init__(self, gpu):
        self.gpu, self.closed = gpu, False

    def close(self):
        self.closed = True


def test_prewarm_runs_one_search_per_gpu_at_once(tmp_path):
    """Two GPUs, two signatures: both searches must be in flight together, each on its own worker."""
    import threading
    from types import SimpleNamespace

    from forge_backend.prewarm import run as run_prewarm

    cards = model_cards(QUICKSTART).cards[:2]
    cfg = KforgeConfig.load({"cache_dir": str(tmp_path)}, env={})
    items = plan(cards, {c.key: 1.0 for c in cards}, cfg, FakeStore([]))
    barrier = threading.Barrier(2, timeout=30)
    used, clients = [], []

    def fake_search(card, cfg_, client, store, iterations, seconds, on_progress=None):
        used.append(client.gpu)
        barrier.wait()  # raises BrokenBarrierError unless the other search runs at the same time
        rec = SimpleNamespace(nodes=[], eager_us=10.0, floor_us=1.0, iterations=iterations, iterations_to_best=1,
                              reason="fake")
        return SimpleNamespace(result=SimpleNamespace(record=rec), seconds=0.0,
                               record=SimpleNamespace(decision="kernel", timings={"kforge_us": 5.0,
                                                                                  "speedup_vs_eager": 2.0}))

    def make_client(gpu):
        clients.append(FakeClient(gpu))
        return clients[-1]

    results = run_prewarm(items, cfg, 4, 10.0, gpus=2, search=fake_search, make_client=make_client)
    assert sorted(used) == [0, 1] and len(results) == 2
    assert sorted(r.gpu for r in results) == [0, 1]
    assert max(r.started for r in results) < min(r.finished for r in results)  # the two searches overlapped
    assert all(r.decision == "kernel" and r.speedup == 2.0 for r in results)
    assert all(c.closed for c in clients)


@pytest.mark.parametrize("proposer,names", [("templates", ["templates"]), ("llm", ["llm"]),
                                            ("mixed", ["templates", "llm"])])
def test_proposer_option_picks_the_proposers(proposer, names, tmp_path):
    from forge_backend.runtime.search_runner import make_proposers

    cfg = KforgeConfig.load({"proposer": proposer, "llm_model": "m", "llm_base_url": "http://127.0.0.1:9/v1",
                             "cache_dir": str(tmp_path)}, env={})
    assert [p.name for p in make_proposers(cfg)] == names  # building the LLM proposer does no network I/O


def test_prewarm_summary_shows_tokens_and_cost(capsys):
    """The final table of an LLM prewarm carries each search's tokens and cost, and their total."""
    from forge_backend import cli

    cards = model_cards(QUICKSTART).cards[:2]
    rows = [PrewarmResult(cards[0], 0.6, "searched", 10.0, 5.0, 1.0, 2.0, "kernel", 8, 3, 4.0, 1234, 0.0123),
            PrewarmResult(cards[1], 0.4, "searched", 8.0, None, 1.0, None, "pytorch", 8, None, 3.0, 766, 0.0077)]
    cli._print_prewarm_table(rows)
    out = capsys.readouterr().out
    assert "1234" in out and "0.0123" in out and "2,000 tokens" in out and "$0.0200" in out


class TimingClient(FakeClient):
    """A worker that only times Inductor's single op (and counts how often it was asked)."""

    def __init__(self, gpu):
        super().__init__(gpu)
        self.asked = 0

    def call(self, msg, timeout_s=None):
        assert msg["cmd"] == "inductor_baseline"
        self.asked += 1
        return {"inductor_us": 8.2}


def _searched_softmax(tmp_path, inner):
    from types import SimpleNamespace

    from forge_backend.prewarm import run as run_prewarm
    from forge_backend.store.local import LocalStore
    from test_store import make_record

    record = make_record()  # a kernel at 4.1 us for a [64, 1000] softmax
    card = record.card_obj()
    cfg = KforgeConfig.load({"cache_dir": str(tmp_path), "inner": inner}, env={})
    items = plan([card], {card.key: 5.3}, cfg, FakeStore([]))

    def fake_search(card_, cfg_, client, store, iterations, seconds, on_progress=None):
        store.put(record)  # what a real search leaves behind
        rec = SimpleNamespace(nodes=[], eager_us=5.3, floor_us=0.17, iterations=1, iterations_to_best=1, reason="")
        return SimpleNamespace(result=SimpleNamespace(record=rec), seconds=0.0, record=record)

    clients = []
    results = run_prewarm(items, cfg, 4, 10.0, gpus=1, search=fake_search,
                          make_client=lambda gpu: clients.append(TimingClient(gpu)) or clients[-1])
    return results, clients[0], LocalStore(tmp_path).get(card.key)


def test_prewarm_times_each_kernel_against_inductor_and_keeps_it_in_the_record(tmp_path):
    """With inner="inductor" the first compile needs Inductor's time for every kernel: prewarm measures it once,
    stores it in the record (so the compile does not), and reports kforge's ratio to it."""
    results, client, stored = _searched_softmax(tmp_path, "inductor")
    assert client.asked == 1 and results[0].inductor_us == 8.2
    assert results[0].vs_inductor == pytest.approx(8.2 / 4.1)
    assert stored.timings["inductor_us"] == 8.2


def test_prewarm_for_the_eager_inner_does_not_time_inductor(tmp_path):
    results, client, stored = _searched_softmax(tmp_path, "eager")
    assert client.asked == 0 and results[0].inductor_us is None and "inductor_us" not in stored.timings


@pytest.mark.parametrize("module", ["forge_backend", "forge_backend.cli"])
def test_the_command_line_runs_as_a_module(module):
    """`python -m forge_backend[.cli] ...` is the kforge command, not a silent no-op that returns 0."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", module, "prewarm", "--help"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "--iterations" in r.stdout, r.stdout + r.stderr
    bad = subprocess.run([sys.executable, "-m", module, "no-such-command"], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode != 0


class FakeShipped:
    """The shipped tier: read-only records, returned untrusted as ShippedStore returns them."""

    def __init__(self, records):
        self.records = {r.key: r.marked(source="shipped", trusted=False) for r in records}

    def get(self, key):
        return self.records.get(key)


def _shipped_softmax(tmp_path, verdict):
    """A prewarm of one softmax signature that the local cache lacks and kforge ships; ``verdict`` is what its
    re-verification on this GPU answers. Returns the results, the searches run and the local record after."""
    from types import SimpleNamespace

    from forge_backend.prewarm import run as run_prewarm
    from forge_backend.store.local import LocalStore
    from test_store import make_record

    shipped = make_record()
    card = shipped.card_obj()
    cfg = KforgeConfig.load({"cache_dir": str(tmp_path), "inner": "eager"}, env={})
    items = plan([card], {card.key: 5.3}, cfg, FakeStore([]), shipped=FakeShipped([shipped]))
    assert [i.status for i in items] == ["shipped"]
    searched, asked = [], []

    def fake_search(card_, cfg_, client, store, iterations, seconds, on_progress=None):
        searched.append(card_.key)
        found = make_record()
        found = found.replace(timings={**found.timings, "kforge_us": 3.9, "speedup_vs_eager": 1.36})
        store.put(found)
        rec = SimpleNamespace(nodes=[], eager_us=5.3, floor_us=0.17, iterations=4, iterations_to_best=2, reason="")
        return SimpleNamespace(result=SimpleNamespace(record=rec), seconds=0.0, record=found)

    def fake_reverify(record, client, cfg_):
        asked.append((record.key, record.trusted))
        return verdict

    results = run_prewarm(items, cfg, 4, 10.0, gpus=1, search=fake_search, make_client=FakeClient,
                          reverify=fake_reverify)
    assert asked == [(card.key, False)]  # the shipped record, untrusted, went to the GPU's verifier
    return results, searched, LocalStore(tmp_path).get(card.key)


def test_prewarm_takes_a_shipped_record_that_reverifies_instead_of_searching(tmp_path):
    found = Reverified(True, "verified; 4.0 us, 1.3x eager", "NVIDIA H200", (4.0,), 5.2, 3000.0)
    results, searched, local = _shipped_softmax(tmp_path, found)
    assert searched == [] and results[0].status == "shipped" and results[0].decision == "kernel"
    assert "4.0 us" in results[0].reason
    assert local.trusted and local.source == "local" and local.timings["kforge_us"] == 4.1  # kept, as compiles do


def test_prewarm_searches_a_shipped_record_that_fails_reverification(tmp_path):
    results, searched, local = _shipped_softmax(tmp_path, Reverified(False, "values: max_rel_err 0.5", "NVIDIA H200"))
    assert len(searched) == 1 and results[0].status == "searched" and results[0].speedup == 1.36
    assert local.timings["kforge_us"] == 3.9  # the search's record, not the shipped one


def test_prewarm_retimes_a_shipped_record_of_another_gpu_model(tmp_path):
    """Note [a record timed on another GPU model]: the H200's record, correct on an H100 and 1.25x eager there in
    fresh runs, is kept with the H100's times, and the prewarm's row says so."""
    found = Reverified(True, "verified; 4.24 us, 1.25x eager on NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3",
                       (4.3, 4.24, 4.2), 5.3, 3000.0)
    results, searched, local = _shipped_softmax(tmp_path, found)
    assert searched == [] and results[0].status == "shipped" and "re-timed here" in results[0].reason
    assert local.provenance["gpu"] == "NVIDIA H100 80GB HBM3" and local.timings["kforge_us"] == 4.24


def test_prewarm_searches_a_shipped_record_slower_than_eager_on_another_gpu_model(tmp_path):
    """The same record at 1.01x eager on the H100 (under the 3% margin) is searched there, as if it had failed."""
    found = Reverified(True, "verified", "NVIDIA H100 80GB HBM3", (5.3, 5.25, 5.2), 5.3, 3000.0)
    results, searched, local = _shipped_softmax(tmp_path, found)
    assert len(searched) == 1 and results[0].status == "searched"
    assert local.timings["kforge_us"] == 3.9


def test_prewarm_plan_prefers_the_local_cache_and_force_ignores_shipped():
    from test_store import make_record

    rec = make_record()
    card = rec.card_obj()
    cfg = KforgeConfig.load({}, env={})
    tier = FakeShipped([rec])
    assert plan([card], {card.key: 1.0}, cfg, FakeStore([card.key]), shipped=tier)[0].status == "cached"
    assert plan([card], {card.key: 1.0}, cfg, FakeStore([]), shipped=tier, force=True)[0].status == "search"
    assert plan([card], {card.key: 1.0}, cfg, FakeStore([]), shipped=None)[0].status == "search"


def test_prewarm_plan_skips_cards_the_templates_cannot_serve():
    """Note [templates for the card's architecture] (search/templates/target.py): an sm_75 card is planned as
    skipped with the reason, not searched to no candidate; an sm_80 card is searched."""
    import template_cards as tc

    cfg = KforgeConfig.load({}, env={})
    turing, ampere = tc.for_arch(tc.softmax((64, 1000)), "sm_75"), tc.for_arch(tc.softmax((64, 1000)), "sm_80")
    items = {i.card.arch: i.status for i in plan([turing, ampere], {turing.key: 1.0, ampere.key: 1.0}, cfg,
                                                 FakeStore([]))}
    assert items == {"sm_75": "skipped: the templates need sm_80 or newer, not sm_75", "sm_80": "search"}


def test_prewarm_json_path_is_checked_before_the_model_is_built(tmp_path):
    out = runner.invoke(app, ["prewarm", QUICKSTART, "--json", str(tmp_path / "missing" / "r.json")])
    _one_line_error(out, f"--json {tmp_path / 'missing' / 'r.json'}: the directory {tmp_path / 'missing'} does not "
                         "exist")
    assert "distinct signatures" not in out.output


def test_prewarm_json_holds_the_final_table_and_what_it_ran_on(tmp_path, monkeypatch):
    import json

    import torch

    from forge_backend.cli import _write_prewarm_json

    cards = model_cards(QUICKSTART).cards[:2]
    kernel = PrewarmResult(cards[0], 0.75, "searched", eager_us=10.0, kforge_us=4.0, floor_us=2.0, speedup=2.5,
                           decision="kernel", iterations=12, iterations_to_best=3, seconds=8.5, reason="won",
                           inductor_us=6.0, gpu=0)
    busy = PrewarmResult(cards[1], 0.25, "busy", reason="another process held key-...", eager_us=float("nan"))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    cfg = KforgeConfig.load({"cache_dir": str(tmp_path)}, env={})
    _write_prewarm_json(tmp_path / "r.json", [kernel, busy], cfg, 12, 8.0, QUICKSTART, None)
    doc = json.loads((tmp_path / "r.json").read_text())
    assert (doc["gpu"], doc["iterations"], doc["seconds_per_op"], doc["model_spec"]) == ("NVIDIA H200", 12, 8.0,
                                                                                         QUICKSTART)
    assert doc["torch"] == torch.__version__ and doc["expected_saving"] == pytest.approx(0.75 * (1 - 1 / 2.5))
    k, b = doc["results"]
    assert (k["key"], k["decision"], k["speedup_vs_inductor_op"], k["pct_roofline"]) == (cards[0].key, "kernel",
                                                                                          1.5, 50.0)
    assert k["iterations_to_best"] == 3 and k["inputs"].startswith(cards[0].inputs[0].spec.dtype.replace("torch.", ""))
    assert b["status"] == "busy" and b["decision"] is None and b["eager_us"] is None  # NaN is not JSON


def test_shards_split_the_searches_so_each_signature_is_searched_once(tmp_path):
    """Note [a prewarm split across machines]: by key, whatever each machine's profile."""
    from forge_backend.prewarm import parse_shard

    cards = model_cards(QUICKSTART).cards
    cfg = KforgeConfig.load({"cache_dir": str(tmp_path)}, env={})
    whole = plan(cards, {c.key: 1.0 for c in cards}, cfg, FakeStore([]))
    searched = {i.card.key for i in whole if i.status == "search"}
    assert len(searched) >= 2
    shards = []
    for i in range(3):
        eager = {c.key: 1.0 + 0.1 * i * n for n, c in enumerate(cards)}  # each machine profiles a little differently
        items = plan(cards, eager, cfg, FakeStore([]), shard=parse_shard(f"{i}/3"))
        shards.append({x.card.key for x in items if x.status == "search"})
        assert all(x.status.startswith("skipped: shard") for x in items if x.card.key in searched - shards[-1])
    assert set().union(*shards) == searched and sum(map(len, shards)) == len(searched)
    decided = next(iter(searched))
    items = plan(cards, {c.key: 1.0 for c in cards}, cfg, FakeStore([decided]), shard=(0, 1000003))
    assert {i.card.key: i.status for i in items}[decided] == "cached"  # a decision is taken whatever the shard

"""The kernel store: record format and integrity, the local diskcache tier, search records, bundles, shipped tier."""
from __future__ import annotations

import json
import logging
import multiprocessing as mp
import sqlite3
from pathlib import Path

import pytest
from torch._dynamo.utils import counters

from forge_backend.cards import build_card
from forge_backend.contract import Candidate
from forge_backend.signature import ArgSpec, OpSignature, TensorSpec
from forge_backend.store import (BadKey, BundleError, CorruptRecord, InvalidRecord, KernelRecord, LocalStore,
                                 RecordNotFound, ShippedStore, TieredStore, default_shipped_dir, make_provenance)

SOURCE = r'''
extern "C" __global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    int r = blockIdx.x;
    if (r >= rows) return;
    const float* xr = x + (long)r * cols;
    float m = -INFINITY, s = 0.f;
    for (int c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
    for (int c = 0; c < cols; ++c) s += __expf(xr[c] - m);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) y[(long)r * cols + c] = __expf(xr[c] - m) / s;
}
'''
PLAN = {"launches": [{"kernel": "softmax_rows", "grid": ["rows", 1, 1], "block": [128, 1, 1],
                      "args": ["in:self", "out:0", "i32:rows", "i32:cols"]}]}


def softmax_sig(rows: int = 64, cols: int = 1000, arch: str = "sm_90") -> OpSignature:
    x = TensorSpec((rows, cols), (cols, 1), "float32")
    return OpSignature(op="aten._softmax.default",
                       args=(ArgSpec("self", x), ArgSpec("dim", value=-1), ArgSpec("half_to_float", value=False)),
                       outputs=(x,), used_outputs=(0,), arch=arch)


def make_record(rows: int = 64, decision: str = "kernel", **kw) -> KernelRecord:
    sig = softmax_sig(rows)
    cand = Candidate.from_parts(SOURCE, PLAN, "one block per row", {"block": 128}) if decision == "kernel" else None
    return KernelRecord.create(
        sig, build_card(sig), decision, cand,
        verification={"trials": 3, "checks_passed": 3, "max_abs_err": 1e-7, "max_rel_err": 2e-6, "tolerance": 1e-5},
        timings={"kforge_us": 4.1, "eager_us": 5.3, "floor_us": 0.17, "pct_bw": 4.2, "speedup_vs_eager": 1.29,
                 "remeasured_us": [4.1, 4.2], "bandwidth_gbps": 3000.0},
        provenance=make_provenance("templates", search_id="s1", gpu="NVIDIA H200", nvrtc="12.8"), **kw)


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    with LocalStore(tmp_path / "cache") as s:
        yield s


# --------------------------------------------------------------------------------------------------------------------
# the record


def test_record_round_trip_through_json_text():
    rec = make_record()
    back = KernelRecord.loads(rec.dumps())
    assert back == rec
    assert back.key == softmax_sig().key() and back.trusted and back.source == "local"
    assert back.candidate_obj() == Candidate.from_parts(SOURCE, PLAN, "one block per row", {"block": 128})
    assert back.card_obj().sizes["rows"] == 64
    assert KernelRecord.loads(rec.dumps(indent=1)) == rec
    assert rec.to_json()["integrity"] == rec.integrity()


def test_pytorch_decision_has_no_candidate():
    rec = make_record(decision="pytorch")
    assert KernelRecord.loads(rec.dumps()).candidate is None
    with pytest.raises(InvalidRecord, match="'kernel' record needs a candidate"):
        rec.replace(decision="kernel")
    with pytest.raises(InvalidRecord, match="choose one of: kernel, pytorch"):
        rec.replace(decision="maybe")


def test_flipped_byte_fails_integrity():
    text = make_record().dumps()
    i = text.index('"kforge_us":4.1') + len('"kforge_us":')
    with pytest.raises(CorruptRecord, match="integrity mismatch"):
        KernelRecord.loads(text[:i] + "5" + text[i + 1:])


def test_truncated_json_is_corrupt():
    text = make_record().dumps()
    with pytest.raises(CorruptRecord, match="not valid JSON"):
        KernelRecord.loads(text[: len(text) // 2])


def test_key_mismatch_is_corrupt_even_with_a_fresh_hash():
    d = make_record().to_json()
    d["key"] = softmax_sig(rows=65).key()
    d.pop("integrity")
    rec = KernelRecord(**d)  # dumps() re-hashes, so only the key check can catch it
    with pytest.raises(CorruptRecord, match="is not its signature's key"):
        KernelRecord.loads(rec.dumps())


def test_malformed_candidate_is_corrupt():
    rec = make_record().replace(candidate={"source": SOURCE, "plan": {"launches": []}})
    with pytest.raises(CorruptRecord, match="malformed"):
        KernelRecord.loads(rec.dumps())


# --------------------------------------------------------------------------------------------------------------------
# the local store


def test_local_put_get_delete(store: LocalStore):
    a, b = make_record(64), make_record(128, decision="pytorch")
    assert store.get(a.key) is None
    store.put(a)
    store.put(b)
    assert store.get(a.key) == a and store.get(b.key) == b
    assert store.keys() == sorted([a.key, b.key]) and len(store) == 2 and a.key in store
    assert dict(store.items()) == {a.key: a, b.key: b}
    stats = store.stats()
    assert (stats["entries"], stats["kernel"], stats["pytorch"], stats["corrupt"]) == (2, 1, 1, 0)
    assert store.delete(a.key) and not store.delete(a.key)
    assert store.get(a.key) is None
    assert store.clear() == 1 and store.keys() == []


def test_values_are_json_text_never_pickle(store: LocalStore):
    rec = make_record()
    store.put(rec)
    with sqlite3.connect(store.records_dir / "cache.db") as db:
        (mode, value), = db.execute("SELECT mode, value FROM Cache").fetchall()
    assert mode == 1 and isinstance(value, str) and json.loads(value)["key"] == rec.key  # 1 = diskcache MODE_RAW
    with pytest.raises(TypeError, match="JSON text"):
        store._cache.set(rec.key, {"not": "text"})
    with pytest.raises(BadKey):
        store.get("../../etc/passwd")


def test_a_pickled_row_is_never_unpickled(store: LocalStore):
    """A cache directory written by plain diskcache (or copied from elsewhere) must not run code on read."""
    import diskcache

    key = make_record().key
    with diskcache.Cache(str(store.records_dir)) as raw:
        raw.set(key, {"a pickled": "dict"})  # default Disk pickles it (MODE_PICKLE)
    assert store.get(key) is None
    assert "pickled value" in store.check().corrupt[key]


def test_flipped_byte_in_store_is_a_reported_miss(store: LocalStore, caplog):
    rec = make_record()
    store.put(rec)
    text = store._cache.get(rec.key)
    i = text.index('"max_rel_err":') + len('"max_rel_err":')
    store._cache.set(rec.key, text[:i] + "3" + text[i + 1:])  # one byte flipped: 2e-06 -> 3e-06
    before = counters["kforge"]["corrupt_entries"]
    with caplog.at_level(logging.WARNING, logger="kforge.store"):
        assert store.get(rec.key) is None
        assert store.get(rec.key) is None  # reported once, still a miss
    assert counters["kforge"]["corrupt_entries"] == before + 1
    assert len([r for r in caplog.records if "corrupt" in r.getMessage()]) == 1
    assert "integrity mismatch" in caplog.text
    report = store.check()
    assert report.ok == [] and "integrity mismatch" in report.corrupt[rec.key]
    assert store.stats()["corrupt"] == 1 and list(store.items()) == []
    store.put(rec)  # a new write repairs the entry
    assert store.get(rec.key) == rec


def test_truncated_store_entry_is_a_miss(store: LocalStore):
    rec = make_record()
    store._cache.set(rec.key, rec.dumps()[:100])
    assert store.get(rec.key) is None
    assert "not valid JSON" in store.check().corrupt[rec.key]


def test_record_under_the_wrong_key_is_a_miss(store: LocalStore):
    a, b = make_record(64), make_record(128)
    store._cache.set(a.key, b.dumps())
    assert store.get(a.key) is None
    assert "holds the record of key" in store.check().corrupt[a.key]


def test_untrusted_records_keep_their_flag(store: LocalStore):
    rec = make_record(trusted=False)
    store.put(rec)
    assert store.get(rec.key).trusted is False
    assert store.stats()["untrusted"] == 1


def _writer(cache_dir: str, worker: int, n: int) -> None:
    store = LocalStore(cache_dir)
    for i in range(n):
        store.put(make_record(rows=1 + worker * n + i))
        for key in store.keys()[-3:]:  # read while the other process writes
            assert store.read(key) is not None
    store.close()


def test_two_processes_lose_nothing(tmp_path: Path):
    cache_dir = str(tmp_path / "cache")
    LocalStore(cache_dir).close()  # create the schema once, before the race
    ctx = mp.get_context("fork")  # fork: a spawned child would re-import torch (~4 s each)
    procs = [ctx.Process(target=_writer, args=(cache_dir, w, 50)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    with LocalStore(cache_dir) as store:
        report = store.check()
        assert len(report.ok) == 100 and report.corrupt == {}
        assert {store.get(k).signature["args"][0]["tensor"]["shape"][0] for k in report.ok} == set(range(1, 101))


# --------------------------------------------------------------------------------------------------------------------
# search records


def test_search_records_round_trip_atomically(store: LocalStore):
    key = make_record().key
    assert store.get_search(key) is None and store.searches() == []
    path = store.put_search(key, {"nodes": [{"id": 0, "status": "ok"}], "best": 0})
    assert path.parent == store.searches_dir
    assert store.get_search(key) == {"nodes": [{"id": 0, "status": "ok"}], "best": 0}
    store.put_search(key, {"nodes": [], "best": None})
    assert store.get_search(key) == {"nodes": [], "best": None}
    assert store.searches() == [key]
    assert [p.name for p in store.searches_dir.iterdir()] == [f"{key}.json"]  # no temp files left behind
    path.write_text('{"nodes": [')
    assert store.get_search(key) is None
    assert store.clear_searches() == 1 and store.searches() == []
    with pytest.raises(BadKey):
        store.put_search("../evil", {})


# --------------------------------------------------------------------------------------------------------------------
# bundles


def test_export_import_marks_untrusted(tmp_path: Path, store: LocalStore):
    a, b = make_record(64), make_record(128, decision="pytorch")
    store.put(a)
    store.put(b)
    index = store.export_bundle(None, tmp_path / "bundle")
    entries = json.loads(index.read_text())["records"]
    assert sorted(e["key"] for e in entries) == sorted([a.key, b.key])
    assert (tmp_path / "bundle" / f"{a.key}.json").is_file()

    with LocalStore(tmp_path / "other") as other:
        report = other.import_bundle(tmp_path / "bundle")
        assert sorted(report.imported) == sorted([a.key, b.key]) and not report.rejected
        got = other.get(a.key)
        assert got.trusted is False and got.source == "imported"
        assert got.provenance["imported_from"] == str(tmp_path / "bundle")
        assert got.candidate == a.candidate and got.timings == a.timings
        assert sorted(other.import_bundle(tmp_path / "bundle").skipped) == sorted(report.imported)
        assert other.import_bundle(tmp_path / "bundle", trust=True, overwrite=True).imported
        assert other.get(a.key).trusted is True


def test_import_rejects_corrupt_files(tmp_path: Path, store: LocalStore):
    a, b = make_record(64), make_record(128)
    store.put(a)
    store.put(b)
    bundle = tmp_path / "bundle"
    store.export_bundle([a.key, b.key], bundle)
    path = bundle / f"{b.key}.json"
    path.write_text(path.read_text().replace('"eager_us": 5.3', '"eager_us": 9.3'))
    with LocalStore(tmp_path / "other") as other:
        report = other.import_bundle(bundle)
        assert report.imported == [a.key] and "integrity mismatch" in report.rejected[f"{b.key}.json"]
        assert other.get(b.key) is None


def test_import_rejects_a_file_too_big_for_a_record(tmp_path: Path, store: LocalStore, monkeypatch):
    from forge_backend.store import record as record_mod

    a = make_record()
    store.put(a)
    store.export_bundle([a.key], tmp_path / "bundle")
    monkeypatch.setattr(record_mod, "MAX_RECORD_BYTES", 100)
    with LocalStore(tmp_path / "other") as other:
        report = other.import_bundle(tmp_path / "bundle")
        assert report.imported == [] and "over the 100 bytes" in report.rejected[f"{a.key}.json"]


def test_import_guards_paths_and_reports_missing(tmp_path: Path, store: LocalStore):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    key = make_record().key
    (bundle / "index.json").write_text(json.dumps({"records": [{"file": "../x.json"}, {"file": f"{key}.json"}]}))
    report = store.import_bundle(bundle)
    assert report.imported == [] and set(report.rejected) == {"../x.json", f"{key}.json"}
    assert "missing" in report.rejected[f"{key}.json"]
    (bundle / "index.json").write_text("{")
    with pytest.raises(BundleError, match="not valid"):
        store.import_bundle(bundle)
    with pytest.raises(BundleError, match="does not exist"):
        store.import_bundle(tmp_path / "nope")
    with pytest.raises(BundleError, match="is a file, not a directory"):  # the index itself, say
        store.import_bundle(bundle / "index.json")


def test_export_unknown_key_raises(tmp_path: Path, store: LocalStore):
    with pytest.raises(RecordNotFound):
        store.export_bundle([make_record().key], tmp_path / "b")


# --------------------------------------------------------------------------------------------------------------------
# shipped records and tiers


def test_shipped_records_are_read_and_untrusted(tmp_path: Path, store: LocalStore):
    shipped_dir = tmp_path / "kernels_cache"
    shipped_dir.mkdir()
    a, b = make_record(64), make_record(128)
    (shipped_dir / f"{a.key}.json").write_text(a.dumps(indent=1))
    (shipped_dir / f"{b.key}.json").write_text(b.dumps(indent=1)[:200])  # truncated
    (shipped_dir / "README.md").write_text("not a record")
    shipped = ShippedStore(shipped_dir)
    assert shipped.keys() == sorted([a.key, b.key]) and a.key in shipped
    got = shipped.get(a.key)
    assert got.trusted is False and got.source == "shipped" and got.candidate == a.candidate
    assert shipped.get(b.key) is None and list(shipped.check().corrupt) == [b.key]
    assert shipped.get(make_record(256).key) is None

    tiered = TieredStore(store, shipped)
    assert tiered.get(a.key).source == "shipped"
    tiered.put(a)  # local wins once present
    assert tiered.get(a.key).source == "local" and tiered.get(a.key).trusted


def test_shipped_dir_location(tmp_path: Path):
    import forge_backend

    assert default_shipped_dir({}) == Path(forge_backend.__file__).resolve().parent.parent / "kernels_cache"
    assert default_shipped_dir({"KFORGE_SHIPPED_DIR": str(tmp_path)}) == tmp_path
    assert ShippedStore(tmp_path / "missing").keys() == []


def test_an_installed_wheel_finds_its_shipped_kernels_under_the_prefix(tmp_path: Path, monkeypatch):
    """In a wheel the package sits in site-packages with no kernels_cache/ beside it; pyproject.toml's data-files put
    the shipped records under <prefix>/share/kforge/kernels_cache (the environment's, or the user base's)."""
    import site
    import sys

    import forge_backend

    package = tmp_path / "site-packages" / "forge_backend"
    package.mkdir(parents=True)
    monkeypatch.setattr(forge_backend, "__file__", str(package / "__init__.py"))
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "env"))
    monkeypatch.setattr(site, "getuserbase", lambda: str(tmp_path / "user"))
    beside = tmp_path / "site-packages" / "kernels_cache"
    assert default_shipped_dir({}) == beside  # nothing anywhere: the old place, empty
    user = tmp_path / "user" / "share" / "kforge" / "kernels_cache"
    user.mkdir(parents=True)
    assert default_shipped_dir({}) == user
    env = tmp_path / "env" / "share" / "kforge" / "kernels_cache"
    env.mkdir(parents=True)
    assert default_shipped_dir({}) == env  # the environment's prefix before the user base
    beside.mkdir()
    assert default_shipped_dir({}) == beside  # a source checkout's own directory first


def test_the_wheel_ships_the_kernels_cache_as_data_files():
    """pyproject.toml names every file kernels_cache/ may hold (records and its README) as data files."""
    import tomllib

    root = Path(__file__).resolve().parent.parent
    files = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    patterns = files["share/kforge/kernels_cache"]
    shipped = sorted(p.name for p in (root / "kernels_cache").iterdir())
    assert shipped and all(any(Path("kernels_cache", n).match(pat) for pat in patterns) for n in shipped)

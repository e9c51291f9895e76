"""``kforge cache`` commands, run through typer's CliRunner against a temporary cache directory."""
from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from forge_backend.cli_cache import age, cache_app, resolve_key, KeyLookupError
from forge_backend.store import LocalStore
from forge_backend.store.reverified import Reverified

from test_store import make_record  # noqa: E402 (tests/ is on sys.path under pytest's default import mode)

runner = CliRunner()


@pytest.fixture
def env(tmp_path: Path, monkeypatch) -> dict:
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    monkeypatch.setenv("KFORGE_SHIPPED_DIR", str(shipped))
    monkeypatch.setenv("COLUMNS", "200")
    cache = tmp_path / "cache"
    a, b = make_record(64), make_record(128, decision="pytorch")
    with LocalStore(cache) as store:
        store.put(a)
        store.put(b)
    return {"cache": str(cache), "a": a, "b": b, "shipped": shipped, "tmp": tmp_path}


def invoke(*args: str):
    return runner.invoke(cache_app, list(args))


def test_ls_lists_records(env):
    r = invoke("ls", "--cache-dir", env["cache"])
    assert r.exit_code == 0, r.output
    assert env["a"].key[:16] in r.output and env["b"].key[:16] in r.output
    assert "aten._softmax.default" in r.output and "64x1000" in r.output and "128x1000" in r.output
    assert "1.29x" in r.output and "templates" in r.output and "pytorch" in r.output and "float32" in r.output
    assert "timed on" in r.output and " H200 " in r.output  # the GPU whose times each record holds


def test_ls_shows_the_ratio_to_inductor_once_timed(env):
    timed = make_record(512)
    timed = timed.replace(timings={**timed.timings, "inductor_us": 8.2})  # kforge_us 4.1
    with LocalStore(env["cache"]) as store:
        store.put(timed)
    r = invoke("ls", "--cache-dir", env["cache"])
    assert r.exit_code == 0 and "2.00x" in r.output and "x Inductor op" in r.output


def test_ls_empty_and_shipped(env):
    empty = str(env["tmp"] / "empty")
    assert "no records" in invoke("ls", "--cache-dir", empty).output
    c = make_record(256)
    (env["shipped"] / f"{c.key}.json").write_text(c.dumps(indent=1))
    r = invoke("ls", "--cache-dir", empty, "--shipped")
    assert r.exit_code == 0 and c.key[:16] in r.output and "shipped (untrusted)" in r.output


def test_ls_marks_corrupt_entries(env):
    with LocalStore(env["cache"]) as store:
        store._cache.set(env["a"].key, env["a"].dumps()[:-10])
    r = invoke("ls", "--cache-dir", env["cache"])
    assert r.exit_code == 0 and "CORRUPT" in r.output


def test_show_by_prefix(env):
    r = invoke("show", env["a"].key[:10], "--cache-dir", env["cache"])
    assert r.exit_code == 0, r.output
    assert "computes: softmax" in r.output and "softmax_rows" in r.output and '"grid": ["rows", 1, 1]' in r.output
    assert "speedup_vs_eager: 1.29" in r.output and "max_abs_err" in r.output and "NVIDIA H200" in r.output


def test_show_unknown_and_ambiguous_prefix(env):
    a = env["a"].key
    wrong = a[:9] + ("0" if a[9] != "0" else "1")
    r = invoke("show", wrong, "--cache-dir", env["cache"])
    assert r.exit_code == 1 and "no record key starts with" in r.output and a in r.output  # a close match
    r = invoke("show", "", "--cache-dir", env["cache"])
    assert r.exit_code == 1 and "matches 2 records" in r.output


def test_show_corrupt_record_says_why(env):
    with LocalStore(env["cache"]) as store:
        store._cache.set(env["a"].key, env["a"].dumps()[:50])
    r = invoke("show", env["a"].key[:12], "--cache-dir", env["cache"])
    assert r.exit_code == 1 and f"record {env['a'].key} is corrupt: not valid JSON" in r.output


def test_clear_needs_confirmation(env):
    r = runner.invoke(cache_app, ["clear", "--cache-dir", env["cache"]], input="n\n")
    assert r.exit_code == 1 and len(LocalStore(env["cache"]).keys()) == 2
    r = invoke("clear", "--cache-dir", env["cache"], "--yes")
    assert r.exit_code == 0 and "removed 2 records" in r.output
    assert LocalStore(env["cache"]).keys() == []


def test_verify_counts_and_gpu_unavailable(env, monkeypatch):
    monkeypatch.setitem(sys.modules, "forge_backend.runtime.provider", None)  # import fails, as before the runtime
    r = invoke("verify", "--cache-dir", env["cache"], "--gpu")
    assert r.exit_code == 0, r.output
    assert "2 ok, 0 corrupt" in r.output and "GPU re-verification unavailable:" in r.output
    with LocalStore(env["cache"]) as store:
        store._cache.set(env["b"].key, env["b"].dumps().replace("pytorch", "kernel", 1))
    r = invoke("verify", "--cache-dir", env["cache"])
    assert r.exit_code == 1 and "1 ok, 1 corrupt" in r.output and "integrity mismatch" in r.output


H100 = "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize("found,summary,trusted,code", [
    (Reverified(True, "verified; 4.00 us, 1.30x eager on NVIDIA H200", "NVIDIA H200", (4.0,), 5.2, 3000.0),
     "1 passed, 0 failed", True, 0),
    (Reverified(False, "values: max_rel_err 0.5", "NVIDIA H200"), "0 passed, 1 failed", False, 1),
    # made for another GPU arch: neither passed nor failed, and not copied into the local cache as trusted
    (None, "0 passed, 0 failed, 1 for another GPU arch skipped", False, 0),
    # Note [a record timed on another GPU model]: correct on an H100 and no faster than eager there; not a failure
    (Reverified(True, "verified", H100, (5.3, 5.2, 5.25), 5.3, 3000.0),
     "0 passed, 0 failed, 1 correct but slower here than eager by the margin (not used)", False, 0),
], ids=["passes", "fails", "another-arch", "slower-on-another-model"])
def test_verify_gpu_marks_records(env, monkeypatch, found, summary, trusted, code):
    import types

    import forge_backend.cli_cache as cli_cache

    fake = types.ModuleType("forge_backend.runtime.provider")
    fake.reverify_records = lambda recs: ((rec, found, found.why if found else "made for sm_90") for rec in recs)
    monkeypatch.setitem(sys.modules, "forge_backend.runtime.provider", fake)
    monkeypatch.setattr(cli_cache, "_cuda_available", lambda: True)
    with LocalStore(env["cache"]) as store:
        store.put(env["a"].replace(trusted=False))
    r = invoke("verify", "--cache-dir", env["cache"], "--gpu")
    assert r.exit_code == code, r.output
    assert summary in r.output
    kept = LocalStore(env["cache"]).get(env["a"].key)
    assert kept.trusted is trusted and kept.provenance["gpu"] == "NVIDIA H200" and kept.timings == env["a"].timings


def test_verify_gpu_retimes_a_record_of_another_gpu_model(env, monkeypatch):
    """An H200's record that is 1.25x eager on an H100 becomes a trusted copy with the H100's times, and the other
    GPU's figures in its provenance."""
    import types

    import forge_backend.cli_cache as cli_cache

    found = Reverified(True, "verified; 4.24 us, 1.25x eager on " + H100, H100, (4.3, 4.24, 4.2), 5.3, 2000.0)
    fake = types.ModuleType("forge_backend.runtime.provider")
    fake.reverify_records = lambda recs: ((rec, found, found.why) for rec in recs)
    monkeypatch.setitem(sys.modules, "forge_backend.runtime.provider", fake)
    monkeypatch.setattr(cli_cache, "_cuda_available", lambda: True)
    with LocalStore(env["cache"]) as store:
        store.put(env["a"].replace(trusted=False))
    r = invoke("verify", "--cache-dir", env["cache"], "--gpu")
    assert r.exit_code == 0 and "1 passed, 0 failed" in r.output and "re-timed here" in r.output, r.output
    kept = LocalStore(env["cache"]).get(env["a"].key)
    assert kept.trusted and kept.provenance["gpu"] == H100 and kept.timings["kforge_us"] == 4.24
    assert kept.provenance["first_timed_on"] == {"gpu": "NVIDIA H200", "kforge_us": 4.1, "speedup_vs_eager": 1.29,
                                                 "pct_bw": 4.2}


def test_export_then_import(env):
    bundle = env["tmp"] / "bundle"
    r = invoke("export", str(bundle), "--key", env["a"].key[:12], "--cache-dir", env["cache"])
    assert r.exit_code == 0, r.output
    assert "exported 1 records" in r.output
    assert [e["key"] for e in json.loads((bundle / "index.json").read_text())["records"]] == [env["a"].key]
    other = str(env["tmp"] / "other")
    r = invoke("import", str(bundle), "--cache-dir", other)
    assert r.exit_code == 0, r.output
    assert "imported 1 records (untrusted)" in r.output
    rec = LocalStore(other).get(env["a"].key)
    assert rec.trusted is False and rec.source == "imported"
    r = invoke("import", str(bundle), "--cache-dir", other, "--trust", "--overwrite")
    assert "imported 1 records (trusted)" in r.output and LocalStore(other).get(env["a"].key).trusted


def test_import_missing_dir_is_a_clean_error(env):
    r = invoke("import", str(env["tmp"] / "nope"), "--cache-dir", env["cache"])
    assert r.exit_code == 1 and "does not exist" in r.output


def test_export_where_the_system_refuses_is_a_clean_error(env):
    blocker = env["tmp"] / "a_file"
    blocker.write_text("")
    r = invoke("export", str(blocker / "bundle"), "--cache-dir", env["cache"])
    assert r.exit_code == 1 and f"error: {blocker / 'bundle'}: Not a directory" in r.output, r.output
    assert "Traceback" not in r.output


def test_helpers():
    now = dt.datetime(2026, 1, 2, tzinfo=dt.timezone.utc)
    assert age("2026-01-01T00:00:00+00:00", now) == "1d" and age("2026-01-01T23:59:30+00:00", now) == "30s"
    assert age("garbage", now) == "?"
    keys = ["ab" + "0" * 62, "ac" + "0" * 62]
    assert resolve_key("AB", keys) == keys[0]
    with pytest.raises(KeyLookupError, match="empty"):
        resolve_key("ab", [])

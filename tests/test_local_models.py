"""Note [a cache directory that GPU models share] (store/local.py), on the CPU: where a store opened for a GPU model
reads and writes, and what a compile, a prewarm, doctor and the kernels view make of another model's record."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from forge_backend.config import KforgeConfig
from forge_backend.runtime import cuda_provider
from forge_backend.store import LocalStore, ShippedStore, TieredStore
from forge_backend.store.reverified import Reverified

from test_store import make_record  # noqa: E402 (tests/ is on sys.path under pytest's default import mode)

H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
FOLDER = "nvidia-h100-80gb-hbm3"


def on(gpu: str, us: float, rows: int = 64):
    """A search's winner of the softmax signature ``rows`` x 1000, timed at ``us`` on ``gpu``."""
    rec = make_record(rows)
    return rec.replace(timings={**rec.timings, "kforge_us": us}, provenance={**rec.provenance, "gpu": gpu})


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def opened(cache: Path, gpu: str = "") -> LocalStore:
    return LocalStore(cache, gpu)


def both_models(cache: Path) -> None:
    """The H200 stores its record of the softmax key (4.1 us), then the H100 its own (5.0 us)."""
    with opened(cache, H200) as h200:
        h200.put(on(H200, 4.1))
    with opened(cache, H100) as h100:
        h100.put(on(H100, 5.0))


# --------------------------------------------------------------------------------------------------------------------
# the store


def test_the_first_model_stores_a_key_in_its_own_place(cache: Path):
    with opened(cache, H200) as h200:
        h200.put(on(H200, 4.1))
        assert not (cache / "gpus").exists()  # no folder until a second model needs one
    with opened(cache) as plain:
        assert plain.get(make_record().key).timings["kforge_us"] == 4.1


def test_a_second_model_keeps_its_record_beside_the_first(cache: Path):
    key = make_record().key
    with opened(cache, H200) as h200:
        h200.put(on(H200, 4.1))
    with opened(cache, H100) as h100:
        assert h100.get(key).provenance["gpu"] == H200  # before it stores its own, it finds the H200's
        h100.put(on(H100, 5.0))
        assert h100.get(key).timings["kforge_us"] == 5.0 and h100.keys() == [key] and key in h100
        h100.put(on(H100, 4.8))  # its folder holds the key now: a later write replaces its own copy only
        assert h100.get(key).timings["kforge_us"] == 4.8
    assert (cache / "gpus" / FOLDER / "records" / "cache.db").is_file()
    with opened(cache, H200) as h200, opened(cache) as plain:
        assert h200.get(key).timings["kforge_us"] == 4.1 and plain.get(key).timings["kforge_us"] == 4.1
        h200.put(on(H200, 3.9))  # the key's own record is the H200's: its writes stay there
        assert [m.root.name for m in plain.models()] == [FOLDER]
    with opened(cache, H100) as h100, opened(cache) as plain:
        assert h100.get(key).timings["kforge_us"] == 4.8 and plain.get(key).timings["kforge_us"] == 3.9


def test_a_record_of_an_unnamed_gpu_is_taken_as_this_models(cache: Path):
    with opened(cache, H200) as h200:
        h200.put(on("", 4.1))
    with opened(cache, H100) as h100:
        h100.put(on(H100, 5.0))  # an older record names no GPU: it is replaced in place, no folder made
    assert not (cache / "gpus").exists()
    with opened(cache) as plain:
        assert plain.get(make_record().key).provenance["gpu"] == H100


def test_delete_clear_and_check_cover_the_folder(cache: Path):
    a, b = make_record(64).key, make_record(128).key
    with opened(cache, H200) as h200:
        h200.put(on(H200, 4.1, 64))
        h200.put(on(H200, 4.1, 128))
    with opened(cache, H100) as h100:
        h100.put(on(H100, 5.0, 64))
        report = h100.check()
        assert sorted(report.ok) == sorted([a, b, f"{FOLDER}/{a}"]) and not report.corrupt
        assert h100.stats()["entries"] == 2  # this model's view: one record a key
        assert h100.delete(a) and a not in h100 and h100.get(a) is None  # its copy and the key's own
        assert not h100.delete(a)
        assert h100.clear() == 1 and h100.keys() == []


def test_a_corrupt_folder_record_is_passed_over_and_checked(cache: Path):
    key = make_record().key
    both_models(cache)
    with opened(cache, H100) as h100:
        h100.mine()._cache.set(key, "{not json", retry=True)
        assert h100.get(key).provenance["gpu"] == H200  # the key's own, the corrupt one reported
        assert list(h100.check().corrupt) == [f"{FOLDER}/{key}"]


def test_a_store_opened_without_a_gpu_creates_no_folder_and_reads_the_keys_own(cache: Path):
    with opened(cache, H200) as h200:
        h200.put(on(H200, 4.1))
    with opened(cache) as plain:
        plain.put(on(H100, 5.0))  # no model named: the key's own place, as before
        assert plain.mine() is None and plain.models() == []
    with opened(cache, H100) as h100:
        assert h100.mine() is None  # reading creates nothing
        assert h100.get(make_record().key).provenance["gpu"] == H100


# --------------------------------------------------------------------------------------------------------------------
# a compile


def provider_on(cache: Path, gpu: str, monkeypatch, found: Reverified | None = None, search: str = "off"):
    """A provider on a GPU named ``gpu`` over ``cache`` (no shipped records); re-verification answers ``found``
    (and is recorded); loading a kernel returns its record."""
    monkeypatch.setattr(cuda_provider.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(cuda_provider.torch.cuda, "get_device_name", lambda index=None: gpu)
    cfg = KforgeConfig.load({"cache_dir": str(cache), "search": search}, env={})
    provider = cuda_provider.CudaProvider(cfg)
    provider.store = TieredStore(provider.local, ShippedStore(cache.parent / "no-shipped"))
    provider._client = object()
    asked = []
    monkeypatch.setattr(cuda_provider, "reverify_record",
                        lambda record, client, cfg_: asked.append(record) or found)
    monkeypatch.setattr(cuda_provider, "impl_from_record", lambda card, record, cfg_: record)
    return provider, cfg, asked


def test_a_compile_retimes_another_models_record_and_keeps_its_copy_beside_it(cache: Path, monkeypatch):
    h200 = on(H200, 4.1)
    with opened(cache, H200) as store:
        store.put(h200)
    found = Reverified(True, "verified", H100, (4.3, 4.2, 4.24), 5.3, 3000.0)
    provider, cfg, asked = provider_on(cache, H100, monkeypatch, found)
    assert provider.local.gpu == H100
    impl = provider._kernel_for(h200.card_obj(), cfg, time.monotonic() + 60)
    assert asked == [h200] and impl.timings["kforge_us"] == 4.24 and impl.provenance["gpu"] == H100
    assert impl.provenance["first_timed_on"]["gpu"] == H200
    provider.local.close()
    with opened(cache) as plain:
        assert plain.get(h200.key) == h200  # the H200's record is untouched
    again, cfg, asked = provider_on(cache, H100, monkeypatch, found)
    assert again._kernel_for(h200.card_obj(), cfg, time.monotonic() + 60).timings["kforge_us"] == 4.24
    assert asked == []  # the H100's own copy is trusted as it is
    again.local.close()


def test_a_compile_takes_its_own_models_record_without_reverifying(cache: Path, monkeypatch):
    with opened(cache, H200) as store:
        store.put(on(H200, 4.1))
    provider, cfg, asked = provider_on(cache, H200, monkeypatch)
    assert provider._kernel_for(make_record().card_obj(), cfg, time.monotonic() + 60).timings["kforge_us"] == 4.1
    assert asked == []
    provider.local.close()


def test_another_models_kernel_slower_here_is_a_miss(cache: Path, monkeypatch, caplog):
    h200 = on(H200, 4.1)
    with opened(cache, H200) as store:
        store.put(h200)
    found = Reverified(True, "verified", H100, (5.3, 5.2, 5.25), 5.3, 3000.0)
    provider, cfg, asked = provider_on(cache, H100, monkeypatch, found, search="on_miss")
    misses = []
    monkeypatch.setattr(provider, "_miss", lambda card, cfg_, deadline: misses.append(card.key))
    with caplog.at_level("WARNING", logger="kforge"):
        assert provider._kernel_for(h200.card_obj(), cfg, time.monotonic() + 60) is None
    assert f"record from this cache, timed on {H200} not used on this GPU (slower here" in caplog.text
    assert misses == [h200.key] and provider.local.mine() is None  # searched as a miss; nothing kept of it
    assert provider._kernel_for(h200.card_obj(), cfg, time.monotonic() + 60) is None
    assert len(asked) == 1 and misses == [h200.key] * 2  # asked once a process, a miss each time
    provider.local.close()


# --------------------------------------------------------------------------------------------------------------------
# a prewarm, doctor, the kernels view


def test_a_prewarm_plans_another_models_kernel_as_one_to_retime(cache: Path):
    from forge_backend.prewarm import plan

    h200, pytorch = on(H200, 4.1, 64), make_record(128, decision="pytorch")
    with opened(cache, H200) as store:
        store.put(h200)
        store.put(pytorch)
    cfg = KforgeConfig.load({"cache_dir": str(cache)}, env={})
    eager = {h200.key: 5.3, pytorch.key: 5.3}
    with opened(cache, H100) as h100:
        items = {i.card.key: i for i in plan([h200.card_obj(), pytorch.card_obj()], eager, cfg, h100,
                                             shipped=ShippedStore(cache.parent / "no-shipped"))}
    shipped = items[h200.key].shipped
    assert items[h200.key].status == "shipped" and shipped.provenance["gpu"] == H200 and shipped.trusted
    assert items[pytorch.key].status == "cached"  # PyTorch's decision holds no kernel to time
    with opened(cache, H200) as same:
        [item] = plan([h200.card_obj()], {h200.key: 5.3}, cfg, same, shipped=ShippedStore(cache.parent / "none"))
    assert item.status == "cached"


def test_doctor_counts_each_models_records(cache: Path):
    from forge_backend import doctor

    both_models(cache)
    assert f"1 records (1 kernels, 0 kept PyTorch; and in GPU models' folders: 1 for {FOLDER})" in \
        doctor._holdings(cache)


def test_the_kernels_view_lists_a_models_folder_as_a_tier_that_answers_nothing(cache: Path):
    from forge_backend.ui.kernels import KernelTiers

    key = make_record().key
    both_models(cache)
    view = KernelTiers(cache, shipped_dir=cache.parent / "no-shipped")
    try:
        listing = view.listing()
        assert [t["name"] for t in listing["tiers"]] == ["local", "team", "shipped", f"local@{FOLDER}"]
        rows = {r["tier"]: r for r in listing["kernels"]}
        assert rows["local"]["answers"] and rows["local"]["gpu"] == H200
        assert not rows[f"local@{FOLDER}"]["answers"] and rows[f"local@{FOLDER}"]["gpu"] == H100
        assert view.is_tier(f"local@{FOLDER}") and not view.is_tier("local@nvidia-a100")
        whole = view.record_view(f"local@{FOLDER}", key)
        assert whole["row"]["kforge_us"] == 5.0 and whole["in_tiers"] == ["local", f"local@{FOLDER}"]
        assert view.tree_dir(f"local@{FOLDER}") is None
    finally:
        view.close()

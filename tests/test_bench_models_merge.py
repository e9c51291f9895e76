"""bench_models.py --merge: one models.json/.md from the halves of a run split over GPUs (run_device.sh
models-split). CPU only: it reads and writes JSON."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench_models  # noqa: E402


def half(path: Path, command: str, rows: list[dict]) -> Path:
    path.mkdir()
    env = {"date": "2026-11-30 09:43 UTC", "command": command, "gpu": "NVIDIA H200"}
    (path / "models.json").write_text(json.dumps({"environment": env, "rows": rows}))
    return path


def test_merge_keeps_every_row_and_both_commands(tmp_path):
    a = half(tmp_path / "g0", "bench_models.py --models sd35_vae", [{"model": "sd35_vae", "eager_ms": 85.0}])
    b = half(tmp_path / "g1", "bench_models.py --models resnet50", [{"model": "resnet50", "eager_ms": 5.15},
                                                                    {"model": "gemma4", "eager_ms": 10.4}])
    bench_models.merge([a, b, tmp_path / "missing"], tmp_path)
    merged = json.loads((tmp_path / "models.json").read_text())
    assert [r["model"] for r in merged["rows"]] == ["sd35_vae", "resnet50", "gemma4"]
    assert merged["environment"]["command"] == "bench_models.py --models sd35_vae + bench_models.py --models resnet50"
    assert "2 processes" in merged["environment"]["split"]
    assert "| resnet50 |" in (tmp_path / "models.md").read_text()


def test_merge_of_nothing_writes_nothing(tmp_path):
    bench_models.merge([tmp_path / "g0"], tmp_path)
    assert not (tmp_path / "models.json").exists()


def test_ratio_range_pairs_rounds():
    """Per-round speedups pair the two configurations' times from the same round, not sorted lists."""
    assert bench_models.ratio_range([10.0, 20.0, 12.0], [5.0, 25.0, 12.0]) == [0.8, 1.0, 2.0]


def test_round_orders_rotate_so_no_configuration_keeps_its_slot():
    orders = bench_models.round_orders(["a", "b", "c"], 4)
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    for name in "abc":  # every configuration runs first, second and third once in three rounds
        assert sorted(o.index(name) for o in orders[:3]) == [0, 1, 2]


def test_a_mode_run_is_merged_under_its_own_name(tmp_path):
    stem = bench_models.results_stem(mode="reduce-overhead")
    assert stem == "models_reduce_overhead" and bench_models.results_stem(check=True) == "models_check"
    d = tmp_path / "g0"
    d.mkdir()
    (d / f"{stem}.json").write_text(json.dumps({"environment": {"command": "x"}, "rows": [{"model": "resnet50"}]}))
    bench_models.merge([d], tmp_path, stem)
    assert (tmp_path / f"{stem}.json").exists() and not (tmp_path / "models.json").exists()


def test_kforge_options_travel_as_environment_variables_with_a_mode():
    env = bench_models.kforge_env({"search_iterations": 8, "cache_dir": "/tmp/c", "check": False})
    assert env == {"KFORGE_SEARCH_ITERATIONS": "8", "KFORGE_CACHE_DIR": "/tmp/c", "KFORGE_CHECK": "0",
                   "KFORGE_INNER": "inductor"}

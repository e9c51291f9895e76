"""bench_models.py's bookkeeping: --merge (one models.json/.md from the halves of a run split over GPUs,
run_device.sh models-split), the order of the timing rounds, how device time per forward is summed, and the gate
decisions a row holds. CPU only."""
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


def test_merge_says_how_the_parts_ran(tmp_path):
    """run_device.sh models-quiet runs its parts in two phases; the merged header says so instead of "side by side"."""
    a = half(tmp_path / "g2", "bench_models.py --models qwen35_moe", [{"model": "qwen35_moe", "eager_ms": 19.6}])
    bench_models.merge([a], tmp_path / "out", layout="host-bound ones alone on GPU 0")
    merged = json.loads((tmp_path / "out" / "models.json").read_text())
    assert merged["environment"]["split"] == "host-bound ones alone on GPU 0"
    assert "host-bound ones alone on GPU 0" in (tmp_path / "out" / "models.md").read_text()


def test_merge_of_nothing_writes_nothing(tmp_path):
    bench_models.merge([tmp_path / "g0"], tmp_path)
    assert not (tmp_path / "models.json").exists()


def test_ratio_range_pairs_rounds():
    """Per-round speedups pair the two configurations' times from the same round, not sorted lists."""
    assert bench_models.ratio_range([10.0, 20.0, 12.0], [5.0, 25.0, 12.0]) == [0.8, 1.0, 2.0]


def test_round_orders_rotate_so_no_configuration_keeps_its_slot():
    orders = bench_models.round_orders(["a", "b", "c"], 4)  # 4 rounds asked: 6, two whole rotations
    assert orders[:4] == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]] and len(orders) == 6
    for name in "abc":  # every configuration runs first, second and third equally often
        assert sorted(o.index(name) for o in orders) == [0, 0, 1, 1, 2, 2]
    assert len(bench_models.round_orders(list("abcde"), 8)) == 10 and len(bench_models.round_orders(list("ab"), 4)) == 4


def test_reps_fill_a_slot_of_the_fastest_configuration_within_bounds():
    assert bench_models.reps_for(2.0) == 20  # a reduced-depth transformer
    assert bench_models.reps_for(35.0) == 4  # the VAE: the minimum
    assert bench_models.reps_for(0.01) == 32  # a tiny graph: the maximum
    assert bench_models.reps_for(4.1) == 10


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


def test_per_kernel_sums_device_events_by_name_per_forward():
    from types import SimpleNamespace as Event

    from torch.autograd import DeviceType

    import profile_kernels

    events = [Event(device_type=DeviceType.CUDA, name="gemm", device_time_total=10.0),
              Event(device_type=DeviceType.CUDA, name="gemm", device_time_total=20.0),
              Event(device_type=DeviceType.CUDA, name="softmax", device_time_total=5.0),
              Event(device_type=DeviceType.CPU, name="aten::addmm", device_time_total=100.0)]  # host: not counted
    assert profile_kernels.per_kernel(events, iters=2) == [
        {"kernel": "gemm", "us_per_forward": 15.0, "calls_per_forward": 1.0},
        {"kernel": "softmax", "us_per_forward": 2.5, "calls_per_forward": 0.5}]


def test_device_work_is_the_median_round_of_each_configuration(monkeypatch):
    import profile_kernels

    seen, per_call = [], {"a": iter([3000.0, 1000.0, 2000.0, 2000.0]), "b": iter([500.0, 700.0, 600.0, 600.0])}
    calls = {"a": iter([2.0, 2.0, 3.0, 2.0]), "b": iter([5.0, 7.0, 7.0, 6.0])}
    fns = {"a": lambda: "a", "b": lambda: "b"}

    def fake_table(fn, inputs, iters):
        name = fn()
        seen.append(name)
        n = next(calls[name])
        return [{"kernel": "k", "us_per_forward": next(per_call[name]) - 100.0, "calls_per_forward": n - 1.0},
                {"kernel": "memset", "us_per_forward": 100.0, "calls_per_forward": 1.0}]

    monkeypatch.setattr(profile_kernels, "kernel_table", fake_table)
    got = bench_models.device_work(fns, (), rounds=3)  # 3 asked: 4, whole rotations
    assert got == {"a": bench_models.DeviceWork(2.0, 2.0), "b": bench_models.DeviceWork(0.6, 6.5)}
    assert seen == ["a", "b", "b", "a", "a", "b", "b", "a"]  # rotated each round


def test_gate_decisions_are_small_rounded_and_counted_once_per_signature():
    """Repeated blocks make the same decision for each node of one signature: the row lists it once, with ``nodes``."""
    from forge_backend.backend import CompileReport
    from forge_backend.inductor_gate import decide

    norm = decide("kforge.norm", "k1", 16.2, 21.9, 162_000, 31_000, 0.03, host_us=5.0)
    softmax = decide("aten._softmax.default", "k2", 4.1, 19.0, 10**6, 0, 0.03)
    rows = bench_models.gate_rows([CompileReport(gate=[norm, softmax, norm]), CompileReport(gate=[norm])])
    assert [(r["op"], r["nodes"], r["replaced"]) for r in rows] == [("kforge.norm", 3, False),
                                                                   ("aten._softmax.default", 1, True)]
    assert rows[0]["total_us"] == 24.79 and rows[0]["fused_us"] == 3.1 and rows[0]["charged_bytes"] == 31_000
    assert json.loads(json.dumps(rows)) == rows


def test_merge_takes_json_files_as_well_as_directories(tmp_path):
    """The committed parts of a table (models_session*_*.json) merge without copying each into a directory."""
    a = half(tmp_path / "g0", "bench_models.py --models sd35_vae", [{"model": "sd35_vae", "eager_ms": 85.0}])
    part = tmp_path / "models_part_resnet.json"
    part.write_text(json.dumps({"environment": {"command": "bench_models.py --models resnet50"},
                                "rows": [{"model": "resnet50", "eager_ms": 5.0}]}))
    bench_models.merge([a, part, tmp_path / "absent.json"], tmp_path / "out")
    merged = json.loads((tmp_path / "out" / "models.json").read_text())
    assert [r["model"] for r in merged["rows"]] == ["sd35_vae", "resnet50"]


def test_every_names_each_setting_issue_6_asks_for_and_the_examples_define():
    import ast

    examples = Path(bench_models.EXAMPLES)
    specs = [item.partition("::") for item in bench_models.EVERY.split(",")]
    for model, _, setting in specs:
        tree = ast.parse((examples / f"{model}.py").read_text())
        settings = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                        and any(getattr(t, "id", None) == "SETTINGS" for t in n.targets))
        assert setting in settings, (model, setting)
    pairs = {(m, s) for m, _, s in specs}
    assert {("resnet50", f"{p}_b{b}") for p in ("fp16", "fp32") for b in (1, 32)} <= pairs
    assert {("gemma4", "eager_attn"), ("gemma4", "sdpa")} <= pairs and len(pairs) == len(specs)
    assert {m for m, _ in pairs} == {"resnet50", "sd35_vae", "sd35_mmdit", "gemma4", "qwen35_moe"}


def test_run_options_fold_as_asked(tmp_path):
    """Without --fold-conv-bn / --no-fold-conv-bn a run takes kforge's default (on); with one, every kforge compile
    of the run says it; kforge accepts all three."""
    from forge_backend.config import KforgeConfig

    plain, folded, unfolded = (bench_models.run_options(8, tmp_path, fold_conv_bn=f) for f in (None, True, False))
    assert "fold_conv_bn" not in plain and folded["fold_conv_bn"] is True and unfolded["fold_conv_bn"] is False
    assert [KforgeConfig.load(o, env={}).fold_conv_bn for o in (plain, folded, unfolded)] == [True, True, False]
    assert bench_models.kforge_env(unfolded)["KFORGE_FOLD_CONV_BN"] == "0"  # how it travels with --mode

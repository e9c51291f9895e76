"""bench_ops.py --merge (Note [a table from several runs]): one ops table from several runs' ops.json, each row
whole from one run. CPU only."""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench_ops  # noqa: E402


def run(path: Path, command: str, bw: float, rows: list[tuple[str, list[int], str, float]]) -> Path:
    env = {"date": "2026-11-30 18:53 UTC", "command": command, "gpu": "NVIDIA H200", "torch": "2.11.0+cu130",
           "copy_bandwidth_GBps": bw}
    path.write_text(json.dumps({"environment": env, "rows": [
        {"op": op, "shape": shape, "dtype": dt, "eager_us": 100.0, "inductor_us": 50.0, "kforge_us": k}
        for op, shape, dt, k in rows]}))
    return path


def test_a_later_run_replaces_its_rows_and_keeps_the_order(tmp_path):
    a = run(tmp_path / "a.json", "bench_ops.py --rows softmax", 4250.6,
            [("softmax", [64, 262144], "float32", 43.1), ("softmax", [64, 262144], "bfloat16", 26.7)])
    b = run(tmp_path / "b.json", "bench_ops.py --rows pool", 4249.5, [("adaptive_avg_pool2d", [256, 2048, 7, 7],
                                                                       "float16", 17.5)])
    c = run(tmp_path / "c.json", "bench_ops.py --rows 'softmax [64, 262144] float32'", 4277.7,
            [("softmax", [64, 262144], "float32", 43.5)])
    bench_ops.merge([("A0", a), ("A1", b), ("B", c)], tmp_path / "out", note="Run B re-ran one row.")
    merged = json.loads((tmp_path / "out" / "ops.json").read_text())
    assert [(r["dtype"], r["kforge_us"], r["run"]) for r in merged["rows"]] == [
        ("float32", 43.5, "B"), ("bfloat16", 26.7, "A0"), ("float16", 17.5, "A1")]
    env = merged["environment"]
    assert env["run B"] == ("2026-11-30 18:53 UTC: bench_ops.py --rows 'softmax [64, 262144] float32' "
                            "(copy bandwidth 4277.7 GB/s) -> c.json")
    md = (tmp_path / "out" / "ops.md").read_text()
    assert "Run B re-ran one row." in md and "the row's run's copy bandwidth" in md and md.count("| B |") == 1


def test_the_command_line_wants_labels(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["bench_ops.py", "--merge", str(tmp_path / "a.json"), "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="LABEL=OPS_JSON"):
        bench_ops.main()


def test_runs_of_different_gpus_are_not_merged_and_the_title_names_the_gpu(tmp_path):
    """A row's percent of the copy bandwidth is its GPU's: a table never mixes an H100 run into the H200's, and its
    title names the GPU its runs ran on (the device may lend an H100 where an H200 was asked for)."""
    a = run(tmp_path / "a.json", "bench_ops.py --rows softmax", 4250.6, [("softmax", [64, 262144], "float32", 43.1)])
    b = tmp_path / "b.json"
    part = json.loads(run(b, "bench_ops.py --rows conv", 3021.7, [("causal_conv1d", [1, 2048, 8192], "bfloat16",
                                                                   23.9)]).read_text())
    part["environment"]["gpu"] = "NVIDIA H100 80GB HBM3"
    b.write_text(json.dumps(part))
    with pytest.raises(ValueError, match="runs of one GPU; these ran on NVIDIA H100 80GB HBM3, NVIDIA H200"):
        bench_ops.merge([("A", a), ("B", b)], tmp_path / "out")
    assert not (tmp_path / "out").exists()
    bench_ops.merge([("B", b)], tmp_path / "out")
    assert (tmp_path / "out" / "ops.md").read_text().startswith("# kforge per-operator benchmark (NVIDIA H100 80GB")

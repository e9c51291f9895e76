"""bench_ops.py --rows: which operator rows a run benchmarks. CPU only: it selects rows by name, runs nothing."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench_ops  # noqa: E402
from rows import ROWS  # noqa: E402


def names(patterns: list[str]) -> list[str]:
    return [r.name for r in bench_ops.select_rows(ROWS, patterns)]


def test_a_pattern_with_commas_is_matched_whole() -> None:
    """Row names hold commas; a comma-split pattern ("softmax [64", " 262144] bfloat16") matched nearly every row."""
    assert names(["softmax [64, 262144] bfloat16"]) == ["softmax [64, 262144] bfloat16",
                                                        "softcap_softmax [64, 262144] bfloat16"]


def test_repeated_patterns_select_their_union_in_table_order() -> None:
    got = names(["rms_norm [4096, 2048]", "group_norm [1, 128, 1024, 1024] float32"])
    assert got == ["group_norm [1, 128, 1024, 1024] float32", "rms_norm [4096, 2048] bfloat16"]


def test_no_pattern_selects_every_row() -> None:
    assert names([]) == [r.name for r in ROWS]


def test_the_option_repeats() -> None:
    """--rows is argparse's append action: each value stays one pattern."""
    ap = bench_ops.build_parser()
    assert ap.parse_args(["--rows", "softmax [1, 8, 2048, 2048] bfloat16", "--rows", "silu_mul"]).rows == [
        "softmax [1, 8, 2048, 2048] bfloat16", "silu_mul"]
    assert ap.parse_args([]).rows == []

"""The relay's timeline tool (benchmarks/trace_relay.py, Note [a relay's timeline]): the arithmetic over the stamps,
and the marked source, on the CPU."""
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import trace_relay  # noqa: E402

import template_cards as tc  # noqa: E402


def _stamps(rows: dict[tuple[int, int], tuple[int, ...]], blocks: int = 2, pieces: int = 4) -> np.ndarray:
    out = np.zeros((blocks, pieces, 5), dtype=np.uint64)
    for (b, t), ev in rows.items():
        out[b, t] = ev
    return out


def test_the_timeline_reads_rows_latencies_and_phases_from_the_stamps() -> None:
    """Two blocks, two rows of two pieces (the last one short): piece g ran in block g mod 2 as its (g div 2)-th."""
    stamps = _stamps({
        (0, 0): (1000, 2000, 3000, 5000, 6000),   # row 0, piece 0
        (1, 0): (1000, 2500, 4000, 4500, 7000),   # row 0, piece 1 (500 elements)
        (0, 1): (1100, 3000, 5000, 9000, 10000),  # row 1, piece 0
        (1, 1): (1100, 3500, 8000, 8500, 11000),  # row 1, piece 1 (500 elements)
    })
    s = trace_relay.timeline(stamps, blocks=2, rows=2, cols=1500, pe=1000, in_bytes=2, out_bytes=4, bin_us=1.0)
    assert s["span_us"] == 10.0 and s["first_write_us"] == 5.0 and s["last_arrival_us"] == 2.5
    assert s["tail_us"] == 7.5 and s["pieces"] == 4 and s["rows"] == 2
    # each row's first statistic after its last publish: row 0 4.5 - 4.0, row 1 8.5 - 8.0
    assert s["resolve_latency_us"]["max"] == 0.5 and s["resolve_latency_us"]["p10"] == 0.5
    assert s["on_chip_us"]["max"] == 7.5  # row 1's second piece: arrived at 2.5, written at 10.0
    # arrivals at 1.0, 1.5 (2000 + 1000 bytes) and 2.0, 2.5 (the same): 3000 bytes in each of bins 1 and 2
    assert s["read_gbps"][:4] == [0.0, 3.0, 3.0, 0.0]
    # writes at 5.0 (4000 bytes), 6.0 (2000), 9.0 (4000), 10.0 (2000)
    assert s["write_gbps"][5] == 4.0 and s["write_gbps"][6] == 2.0 and s["write_gbps"][9] == 4.0
    assert sum(s["write_gbps"]) == 12.0 and len(s["write_gbps"]) == 11  # bins 0..10 us


def test_the_timeline_skips_rows_whose_pieces_were_not_all_marked() -> None:
    """A block keeps MAX_PIECES stamps; a row with a piece past them has no latency to report."""
    stamps = _stamps({(0, 0): (1000, 2000, 3000, 5000, 6000), (1, 0): (1000, 2500, 4000, 4500, 7000)}, pieces=1)
    s = trace_relay.timeline(stamps, blocks=2, rows=2, cols=2000, pe=1000, in_bytes=2, out_bytes=2)
    assert s["rows"] == 1 and s["pieces"] == 2


def test_the_timeline_refuses_stamps_from_an_unmarked_kernel() -> None:
    with pytest.raises(ValueError, match="compiled without KF_TRACE"):
        trace_relay.timeline(np.zeros((2, 4, 5), dtype=np.uint64), 2, 2, 1500, 1000, 2, 2)


def test_the_marks_are_nothing_in_the_template_and_stamps_in_the_tool() -> None:
    """The relay's source carries KF_TRACE marks that compile to nothing; the tool's header turns them into timer
    reads, which the screen refuses in any kernel that is timed or cached."""
    from forge_backend.errors import CandidateFailure
    from forge_backend.runtime.nvrtc import compile_candidate, compile_source
    from forge_backend.search.templates import family_for

    card = tc.softmax((64, 262144), "bfloat16")
    fam = family_for(card)
    cand = fam.generate(card, fam.root_params(card))
    assert cand.source.count("KF_TRACE(") >= 7  # the definition and the six marks
    assert b"kf_trace" not in compile_candidate(cand, "sm_90").cubin
    marked = trace_relay.TRACE_HEADER.format(blocks=132, pieces=trace_relay.MAX_PIECES) + cand.source
    assert b"kf_trace" in compile_source(marked, "sm_90").cubin
    from dataclasses import replace

    with pytest.raises(CandidateFailure, match="globaltimer"):
        compile_candidate(replace(cand, source=marked), "sm_90")
    assert trace_relay.source_const(cand.source, "PE") == 16384


def test_the_launch_around_the_pipeline_is_read_from_the_block_marks_and_the_stamp_kernels() -> None:
    stamps = _stamps({(0, 0): (3000, 4000, 5000, 6000, 7000), (1, 0): (3500, 4500, 5500, 6500, 7500)})
    block = np.array([[2000, 9000], [2500, 9500]], dtype=np.uint64)
    s = trace_relay.block_summary(block, np.array([500, 11000], dtype=np.uint64), stamps)
    assert s == {"stamp_to_first_start_us": 1.5, "starts_spread_us": 0.5, "first_start_to_first_issue_us": 1.0,
                 "kernel_us": 7.5, "last_end_to_stamp_us": 1.5, "stamp_to_stamp_us": 10.5}
    with pytest.raises(ValueError, match="left no time"):
        trace_relay.block_summary(block, np.array([0, 11000], dtype=np.uint64), stamps)


def test_the_resident_summary_reads_each_blocks_steps() -> None:
    """Note [a tensor held on chip whole]: thread 0's marks of two blocks, two copies each, as quantiles over the
    blocks in us from the first block's start; the last arrival is a block's latest copy."""
    stamps = _stamps({(0, 0): (2000, 4000, 9000, 11000, 15000), (0, 1): (0, 6000, 8000, 0, 0),
                      (1, 0): (2500, 5000, 9500, 11500, 15500), (1, 1): (0, 7000, 8500, 0, 0)})
    block = np.array([[1000, 16000], [1000, 17000]], dtype=np.uint64)
    s = trace_relay.resident_summary(stamps, block, chunks=2)
    assert s["issued"]["p50"] == 1.25 and s["first_arrival"]["max"] == 4.0
    assert s["last_arrival"]["p10"] == 5.1 and s["last_arrival"]["max"] == 6.0
    assert s["folded"]["max"] == 7.5 and s["published"]["p50"] == 8.25 and s["resolved"]["max"] == 10.5
    assert s["smem_written"]["p50"] == 14.25 and s["end"]["max"] == 16.0
    with pytest.raises(ValueError, match="no start mark"):
        trace_relay.resident_summary(stamps, np.zeros((2, 2), dtype=np.uint64), chunks=2)

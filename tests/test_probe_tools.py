"""The probe and profiling tools' host side (benchmarks/probe_variants.py, profile_variant.py, ncu_hotspots.py,
ab_replace.py, sass_stores.py).
CPU only: case selection, variant parameters, the stall summary of a profiler's CSV, and the no-GPU exit."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import harness  # noqa: E402
import ncu_hotspots  # noqa: E402
import probe_variants  # noqa: E402
import profile_variant  # noqa: E402
import sass_stores  # noqa: E402


def test_a_case_pattern_with_commas_is_matched_whole() -> None:
    """Case names hold commas; split on them, "causal_conv1d [1,8192" also picked the aligned-rows case (via "8192")."""
    names = [name for name, _, _ in probe_variants.cases()]
    got = [n for n in names if harness.name_matches(n, ["causal_conv1d [1,8192"])]
    assert got == ["causal_conv1d [1,8192,2048] bf16"]
    both = [n for n in names if harness.name_matches(n, ["two waves", "softcap"])]
    assert both == ["softmax [64,262144] fp32 two waves", "softcap softmax [64,262144] bf16"]
    assert all(harness.name_matches(n, []) for n in names)


def test_a_case_pattern_with_an_equals_sign_names_one_case_exactly() -> None:
    names = [name for name, _, _ in probe_variants.cases()]
    loose = [n for n in names if harness.name_matches(n, ["softmax [64,262144] bf16"])]
    assert len(loose) > 1 and "softcap softmax [64,262144] bf16" in loose
    assert [n for n in names if harness.name_matches(n, ["=softmax [64,262144] bf16"])] == ["softmax [64,262144] bf16"]
    assert not [n for n in names if harness.name_matches(n, ["=softmax [64,262144]"])]


def test_variant_parameters_read_as_json_or_key_value() -> None:
    parse = probe_variants.parse_params
    assert parse("strategy=rows,tl=128,vec=8,cfirst=true,stream=false") == \
        {"strategy": "rows", "tl": 128, "vec": 8, "cfirst": True, "stream": False}
    assert parse('{"strategy": "cluster", "keep": 9}') == {"strategy": "cluster", "keep": 9}
    assert parse("offset=-3,") == {"offset": -3}
    with pytest.raises(SystemExit, match="not key=value"):
        parse("strategy=rows,vec8")


def test_the_conv_rows_grid_is_invalid_only_past_static_shared_memory() -> None:
    """The probe prints invalid variants and goes on; a grid entry must not be invalid for another reason (a
    misspelt knob, a block the strategy refuses), or the probe would silently time less than it says."""
    from forge_backend.search.templates import conv
    from forge_backend.search.templates.common import STATIC_SMEM_LIMIT

    card = next(c for n, c, _ in probe_variants.cases() if n == "causal_conv1d [1,8192,2048] bf16")
    k = 4
    for p in (v for n, _, vs in probe_variants.cases() if n == "causal_conv1d [1,8192,2048] bf16" for v in vs
              if v["strategy"] == "rows"):
        smem = (p["tc"] * ((p["tl"] + k - 1) | 1) + p["tc"] * (k + 1)) * 4
        assert conv.valid(card, p) == (smem <= STATIC_SMEM_LIMIT), p


def test_the_conv_rows_lines_variants_are_all_valid_with_both_work_items() -> None:
    """`--strategy lines` (benchmarks/plans/conv_lines_first.sh) times 8 and 4 outputs a work item side by side."""
    from forge_backend.search.templates import conv

    card, variants = next((c, vs) for n, c, vs in probe_variants.cases() if n == "causal_conv1d [1,8192,2048] bf16")
    lines = [v for v in variants if v["strategy"] == "lines"]
    assert {v["vo"] for v in lines} == {8, 4} and conv.root_params(card) in lines
    assert all(conv.valid(card, v) for v in lines)


def _csv(tmp_path: Path) -> Path:
    header = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
              "Instructions Executed", "stall_long_sb", "stall_barrier", "stall_mio", "stall_long_sb (Not Issued)"]
    rows = [["0x10", "LDG.E.128 R4, [R2.64]", "10", "9", "100", "0", "0", "10", "0"],
            ["0x20", "IMAD.U32 R0, R4, 0x10000, RZ", "60", "58", "100", "54", "0", "6", "50"],
            ["0x30", "BAR.SYNC.DEFER_BLOCKING 0x0", "30", "30", "100", "0", "30", "0", "0"]]
    text = '"Kernel Name","dwconv1d_rows",\n' + "\n".join(",".join(f'"{c}"' for c in r) for r in [header] + rows)
    path = tmp_path / "k.sass.csv"
    path.write_text(text + "\n")
    return path


def test_hotspots_sum_stall_reasons_and_rank_instructions(tmp_path: Path) -> None:
    out = ncu_hotspots.summarise(_csv(tmp_path), top=2)
    lines = out.splitlines()
    assert lines[0] == "dwconv1d_rows: 100 warp stall samples over 3 instructions"
    # reasons by share; the Not-Issued columns are not counted twice
    assert lines[1].split() == ["long_sb", "54.0%"] and lines[2].split() == ["barrier", "30.0%"]
    assert lines[3].split() == ["mio", "16.0%"]
    hot = lines[5:]
    assert len(hot) == 2 and "IMAD.U32" in hot[0] and "long_sb 90%, mio 10%" in hot[0]
    assert "BAR.SYNC" in hot[1] and "barrier 100%" in hot[1]


def test_hotspots_summarise_every_kernel_of_a_profile(tmp_path: Path) -> None:
    """A profile of a kernel with a zeroed scratch holds the fill kernel first, then the kernel: both are summed,
    each under its own name and from its own rows."""
    one = _csv(tmp_path).read_text()
    path = tmp_path / "two.sass.csv"
    path.write_text(one.replace("dwconv1d_rows", "fill") + one.replace("dwconv1d_rows", "softmax_relay"))
    out = ncu_hotspots.summarise(path, top=1).splitlines()
    heads = [line for line in out if "warp stall samples" in line]
    assert heads == ["fill: 100 warp stall samples over 3 instructions",
                     "softmax_relay: 100 warp stall samples over 3 instructions"]


def test_hotspots_refuse_a_file_without_the_source_table(tmp_path: Path) -> None:
    path = tmp_path / "details.csv"
    path.write_text('"ID","Kernel Name"\n"0","softmax"\n')
    with pytest.raises(SystemExit, match="no 'Address' header"):
        ncu_hotspots.summarise(path, top=3)


def test_profile_variant_exits_cleanly_without_a_gpu(monkeypatch, capsys) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the no-GPU path is not taken")
    monkeypatch.setattr(sys, "argv", ["profile_variant.py", "--case", "causal_conv1d [1,8192"])
    profile_variant.main()
    assert "needs a CUDA GPU" in capsys.readouterr().out


def test_fresh_scratch_zeroes_a_kept_scratch_before_every_launch_and_leaves_other_kernels_alone() -> None:
    """`--fresh-scratch`: the relay as it was before its scratch was kept (one fill kernel per launch), beside it."""
    from forge_backend.search.templates import family_for
    import template_cards as tc

    card = tc.softmax((64, 262144), "float32")
    fam = family_for(card)
    relay = fam.generate(card, fam.root_params(card))
    fresh = probe_variants.fresh_scratch(relay)
    assert [s.persist for _, s in relay.scratch] == [True] and [s.persist for _, s in fresh.scratch] == [False]
    assert fresh.source == relay.source and fresh.identity() != relay.identity()
    assert fresh.description.endswith("[scratch zeroed before every launch]")
    plain = fam.generate(card, fam.seeds(card)[1])
    assert probe_variants.fresh_scratch(plain) is plain


def test_swap_times_a_variant_with_a_text_replaced_in_its_source() -> None:
    """`--swap OLD=>NEW`: the same variant with OLD replaced, labelled, only where OLD occurs; bad forms exit."""
    from forge_backend.search.templates import family_for
    import template_cards as tc

    card = tc.softmax_fused("to_float32(mul(tanh(div(x0,30.0)),30.0))", [((64, 262144), "bfloat16")])
    fam = family_for(card)
    cand = fam.generate(card, fam.root_params(card))
    old = "cvt.rn.bf16x2.f32 %0, %1, %1;"
    assert old in cand.source
    out = probe_variants.swapped(cand, [f"{old}=>cvt.rn.bf16x2.f32 %0, %1, 0f00000000;", "not in any source=>x"])
    assert len(out) == 1 and out[0].description == cand.description + " [swap 0]"
    assert old not in out[0].source and out[0].source.replace("%1, 0f00000000;", "%1, %1;") == cand.source
    assert out[0].identity() != cand.identity() and out[0].launches == cand.launches
    for bad in ("no arrow", "=>nothing to replace"):
        with pytest.raises(SystemExit):
            probe_variants.swapped(cand, [bad])


def test_joined_swaps_apply_together_or_not_at_all() -> None:
    """`--swap 'A=>B && C=>D'`: one variant with both replaced; none where either OLD is missing."""
    from forge_backend.search.templates import family_for
    import template_cards as tc

    card = tc.softmax((64, 262144), "bfloat16")
    fam = family_for(card)
    cand = fam.generate(card, fam.root_params(card))
    reduce, write = "return m == -CUDART_INF_F ? 0.f : __expf(v - m);", "__expf(xv(p.v[j]) - m) * inv"
    assert reduce in cand.source and write in cand.source
    both = f"{reduce}=>return 0.f; && {write}=>0.f"
    out = probe_variants.swapped(cand, [both, f"{reduce}=>x && absent text=>y"])
    assert len(out) == 1 and out[0].description.endswith("[swap 0]")
    assert reduce not in out[0].source and write not in out[0].source


def test_an_unverified_swap_is_timed_by_the_workers_remeasure_and_never_verified() -> None:
    """`--unverified`: a swapped variant goes to the worker's remeasure (fresh inputs, no verifier), once, and its
    row's % of the bandwidth and speedup come from the case's floor and eager time."""
    from forge_backend.search.templates import family_for
    import template_cards as tc

    card = tc.softmax((64, 262144), "bfloat16")
    fam = family_for(card)
    cand = fam.generate(card, fam.root_params(card))

    class Client:
        def __init__(self) -> None:
            self.requests: list[dict] = []

        def call(self, request: dict) -> dict:
            self.requests.append(request)
            return {"times_us": [20.0], "eager_us": 70.0}

    client = Client()
    row = probe_variants.time_unverified(client, card, cand, b"cubin", {"floor_us": 15.0, "eager_us": 71.0})
    assert [(r["cmd"], r["runs"], r["cubin"]) for r in client.requests] == [("remeasure", 1, b"cubin")]
    assert row == {"time_us": 20.0, "pct_bw": 75.0, "speedup": 3.5}


def test_plain_launch_drops_only_the_cooperative_flag() -> None:
    """`--plain-launch`: the same source and grid, every cooperative launch made plain, labelled."""
    from forge_backend.search.templates import family_for
    import template_cards as tc

    card = tc.softmax((64, 262144), "bfloat16")
    fam = family_for(card)
    cand = fam.generate(card, fam.root_params(card))
    assert any(l.cooperative for l in cand.launches)
    out = probe_variants.plain(cand)
    assert not any(l.cooperative for l in out.launches) and out.source == cand.source
    assert [(l.kernel, l.grid, l.block, l.smem) for l in out.launches] == \
        [(l.kernel, l.grid, l.block, l.smem) for l in cand.launches]
    assert out.description == cand.description + " [plain launch]" and out.identity() != cand.identity()


def test_ab_replace_drops_the_named_layout_and_records_what_ran() -> None:
    """benchmarks/ab_replace.py: A leaves the kernels of the named op and layout to PyTorch, B keeps them; both record
    the first call of every kernel and replay their graphs node by node with each node's layout (CPU kernels here)."""
    import torch

    import ab_replace
    from cpu_provider import CpuProvider
    from forge_backend.backend import make_backend

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = (x + 1).contiguous(memory_format=torch.channels_last) / 2.0
            return torch.nn.functional.group_norm(h, 4)

    model, x = Model(), torch.randn(1, 8, 6, 6)
    inner, seen = CpuProvider(ops=("aten.div.Tensor", "aten.native_group_norm.default")), {}
    lines, dropped = {}, {}
    with torch.no_grad():
        for name, drop in (("B", False), ("A", True)):
            graphs: list = []
            provider = ab_replace.ABProvider(inner, "aten.div.Tensor", "channels_last", drop, seen)
            fn = torch.compile(model, backend=ab_replace.kept(make_backend(provider), graphs),
                               options={"inner": "eager"})
            torch.testing.assert_close(fn(x), model(x))
            lines[name], dropped[name] = ab_replace.graph_layouts(graphs), provider.dropped
    assert dropped["B"] == [] and len(dropped["A"]) == 1
    assert any(line.startswith("div.Tensor ['CL']") for line in lines["A"])
    assert not any(line.startswith("div.Tensor") for line in lines["B"])
    assert {v["op"] for v in seen.values()} == {"aten.div.Tensor", "aten.native_group_norm.default"}
    assert ab_replace.op_layouts(model, (x,))[1] == "aten.clone.default ['C'] -> ['CL@0']"
    assert ab_replace.layout_of([288, 1, 48, 8], [1, 8, 6, 6]) == "channels_last"


def test_worker_vs_graph_names_one_row_and_takes_the_rows_tensors_only_in_the_cards_order(monkeypatch,
                                                                                           capsys) -> None:
    """benchmarks/worker_vs_graph.py: ``--row`` must name one ops row (it compares one kernel); the in-process launcher
    is handed the row's own tensors only when they are the card's inputs in order, with the card's strides."""
    import torch

    import worker_vs_graph
    from template_cards import group_norm

    assert worker_vs_graph.the_row("group_norm [2, 1536, 64, 64] float32").shape == (2, 1536, 64, 64)
    with pytest.raises(SystemExit, match="matches 2"):
        worker_vs_graph.the_row("group_norm [2, 1536")
    with pytest.raises(SystemExit, match="matches 0"):
        worker_vs_graph.the_row("group_norm [3, 1536")
    card = group_norm(2, 64, 8, 8)
    x, w, b = torch.randn(2, 64, 8, 8), torch.randn(64), torch.randn(64)
    assert worker_vs_graph.same_tensors([x, w, b], card)
    assert not worker_vs_graph.same_tensors([w, x, b], card)  # another order
    assert not worker_vs_graph.same_tensors([x.to(torch.bfloat16), w, b], card)
    assert not worker_vs_graph.same_tensors([x.contiguous(memory_format=torch.channels_last), w, b], card)
    assert not worker_vs_graph.same_tensors([x, w], card)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(sys, "argv", ["worker_vs_graph.py", "--row", "=group_norm [2, 1536, 64, 64] float32"])
    worker_vs_graph.main()
    assert "needs a CUDA GPU" in capsys.readouterr().out


def test_sass_stores_counts_widths_and_finds_a_split_vector() -> None:
    """A 16-byte store split by NVRTC: six 2-byte and one 4-byte store off one base, beside a whole STG.E.128."""
    sass = "\n".join([
        "        /*3c00*/                   STG.E.U16 desc[UR6][R74.64], R9 ;",
        "        /*3c10*/                   STG.E.U16 desc[UR6][R74.64+0x2], R10 ;",
        "        /*3c20*/                   STG.E desc[UR6][R74.64+0x4], R13 ;",
        "        /*3c30*/              @!P0 STG.E.U16 desc[UR6][R8.64+0x8], R22 ;",
        "        /*3c40*/                   STG.E.128 desc[UR6][R4.64+0x1000], R64 ;",
    ])
    assert sorted(sass_stores.STG.findall(sass)) == ["STG.E", "STG.E.128", "STG.E.U16", "STG.E.U16", "STG.E.U16"]
    assert [b for b, _ in sass_stores.NARROW.findall(sass)] == ["R74", "R74", "R74"]  # the predicated one is a tail

"""Parsing LLM answers: prose around code, several blocks, sloppy JSON, missing parts. Pure functions, no server."""
from __future__ import annotations

import pytest

from forge_backend.errors import CandidateFailure
from forge_backend.search.llm.parse import parse_answer, screen_candidate, source_escape, to_candidate
from llm_server import fixture_text

KERNEL = ('extern "C" __global__ void k(const float* x, float* y, int n) '
          '{ int i = threadIdx.x; if (i < n) y[i] = x[i]; }')
HELPER = "__device__ float twice(float v) { return 2.0f * v; }"
PLAN = ('{"launches": [{"kernel": "k", "grid": [1, 1, 1], "block": [128, 1, 1], '
        '"args": ["in:self", "out:0", "i32:numel"]}]}')


def _answer(*parts: str) -> str:
    return "\n".join(parts)


def _parse_fails(text: str, match: str) -> CandidateFailure:
    with pytest.raises(CandidateFailure, match=match) as e:
        parse_answer(text)
    assert e.value.stage == "parse"
    return e.value


def test_good_fixture():
    a = parse_answer(fixture_text("good_kernel.md"))
    assert a.action.startswith("one warp per row")
    assert "softmax_warp_per_row" in a.source and a.source.startswith("#include <math_constants.h>")
    assert a.plan["launches"][0]["grid"] == ["cdiv(rows, 8)", 1, 1]
    screen_candidate(to_candidate(a))


def test_prose_draft_and_sloppy_json_fixture():
    """Prose before, between and after; a ```cpp draft defining another kernel; // comments, trailing commas and
    a bare "grid": "rows" in the plan; a bold **ACTION:** line."""
    a = parse_answer(fixture_text("prose_around.md"))
    assert "softmax_regs" in a.source and "softmax_draft" not in a.source
    assert a.action.startswith("one 128-thread block per row")
    assert a.plan["launches"][0]["grid"] == ["rows", 1, 1]
    screen_candidate(to_candidate(a))


@pytest.mark.parametrize("lang", ["cuda", "cpp", "c", "c++", "cu", ""])
def test_source_block_languages(lang):
    a = parse_answer(_answer("ACTION: copy", f"```{lang}", KERNEL, "```", "```json", PLAN, "```"))
    assert a.source == KERNEL


def test_untagged_plan_block():
    a = parse_answer(_answer("ACTION: copy", "```cuda", KERNEL, "```", "```", PLAN, "```"))
    assert a.plan["launches"][0]["kernel"] == "k"


def test_last_block_defining_the_planned_kernel_wins():
    draft = KERNEL.replace("y[i] = x[i]", "y[i] = 0")
    final = KERNEL.replace("y[i] = x[i]", "y[i] = x[i] + 1")
    a = parse_answer(_answer("```cuda", draft, "```", "better:", "```cuda", final, "```", "```json", PLAN, "```"))
    assert a.source == final


def test_kernels_split_over_blocks_are_joined():
    g = 'extern "C" __global__ void g(float* y, int n) { if (threadIdx.x < n) y[threadIdx.x] = twice(1.0f); }'
    plan = ('{"launches": [{"kernel": "g", "grid": [1, 1, 1], "block": [32, 1, 1], "args": ["out:0", "i32:numel"]},'
            ' {"kernel": "k", "grid": [1, 1, 1], "block": [32, 1, 1], "args": ["in:self", "out:0", "i32:numel"]}]}')
    a = parse_answer(_answer("```cuda", HELPER, g, "```", "```cuda", KERNEL, "```", "```json", plan, "```"))
    assert "twice" in a.source and "void g(" in a.source and "void k(" in a.source
    screen_candidate(to_candidate(a))


def test_wrapped_plan():
    wrapped = '{"plan": ' + PLAN + '}'
    a = parse_answer(_answer("ACTION: copy", "```cuda", KERNEL, "```", "```json", wrapped, "```"))
    assert a.plan["launches"][0]["kernel"] == "k"


def test_plan_description_is_the_action_when_there_is_no_action_line():
    plan = PLAN[:-1] + ', "description": "plain copy"}'
    a = parse_answer(_answer("```cuda", KERNEL, "```", "```json", plan, "```"))
    assert a.action == "plain copy"


def test_bare_plan_in_prose():
    a = parse_answer(_answer("ACTION: copy", "```cuda", KERNEL, "```", "Plan: " + PLAN + " -- done."))
    assert a.plan["launches"][0]["block"] == [128, 1, 1]


def test_unterminated_last_block_is_read_to_the_end():
    a = parse_answer(_answer("ACTION: copy", "```json", PLAN, "```", "```cuda", KERNEL))
    assert a.source == KERNEL


def test_action_fallback_is_the_first_prose_line():
    a = parse_answer(_answer("## Faster copy with wide loads", "```cuda", KERNEL, "```", "```json", PLAN, "```"))
    assert a.action == "Faster copy with wide loads"


def test_long_action_is_cut_to_one_line():
    a = parse_answer(_answer("ACTION: " + "x" * 500, "```cuda", KERNEL, "```", "```json", PLAN, "```"))
    assert len(a.action) == 200 and "\n" not in a.action


def test_missing_plan_fixture():
    f = _parse_fails(fixture_text("missing_plan.md"), "no ```json block")
    assert "softmax_nolaunch" in f.log  # the answer travels with the failure, for the record and the UI


def test_empty_answer():
    _parse_fails("   ", "empty")


def test_no_source():
    _parse_fails(_answer("Here is the plan.", "```json", PLAN, "```"), "no ```cuda block")


def test_malformed_json_says_where():
    _parse_fails(_answer("```cuda", KERNEL, "```", "```json", '{"launches": [{"kernel": "k" "grid": 1}]}', "```"),
                 "line 1 column")


def test_plan_without_launches():
    _parse_fails(_answer("```cuda", KERNEL, "```", "```json", '{"kernel": "k"}', "```"), "launches")


def test_structurally_bad_plan_is_a_parse_failure():
    bad = '{"launches": [{"kernel": "k", "grid": [1]}]}'  # no block, no args
    a = parse_answer(_answer("```cuda", KERNEL, "```", "```json", bad, "```"))
    with pytest.raises(CandidateFailure, match="malformed") as e:
        to_candidate(a)
    assert e.value.stage == "parse"


def test_plan_naming_a_missing_kernel_fails_screening_but_is_no_escape():
    a = parse_answer(_answer("```cuda", KERNEL, "```", "```json", PLAN.replace('"k"', '"other"'), "```"))
    assert source_escape(a.source) is None
    with pytest.raises(CandidateFailure, match="names kernel 'other'") as e:
        screen_candidate(to_candidate(a))
    assert e.value.stage == "screen"


@pytest.mark.parametrize("fixture, reason", [("host_escape.md", "__host__"), ("include_escape.md", "stdio.h")])
def test_escape_fixtures_are_named(fixture, reason):
    a = parse_answer(fixture_text(fixture))
    escape = source_escape(a.source)
    assert escape is not None and reason in escape


@pytest.mark.parametrize("body, reason", [
    ("long long t = clock64();", "clock"),
    ('system("ls");', "process"),
    ("float* p = (float*)malloc(4);", "heap"),
    ("cudaMemcpy(0, 0, 4, 0);", "runtime API"),
])
def test_source_escapes_in_a_kernel_body(body, reason):
    escape = source_escape(KERNEL.replace("int i = threadIdx.x;", "int i = threadIdx.x; " + body))
    assert escape is not None and reason in escape


@pytest.mark.parametrize("extra, reason", [("int main() { return 0; }", "main"),
                                           ("__device__ int counter;", "persist")])
def test_source_escapes_outside_kernels(extra, reason):
    escape = source_escape(KERNEL + "\n" + extra)
    assert escape is not None and reason in escape


def test_clean_source_is_no_escape():
    assert source_escape(HELPER + "\n" + KERNEL) is None

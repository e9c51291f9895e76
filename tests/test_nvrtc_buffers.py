"""CPU: NVRTC writes its log and cubin into buffers of their own, never into a bytes object the process shares
(Note [NVRTC writes into the buffer it is given] in runtime/nvrtc.py)."""
import pytest

from forge_backend.errors import CandidateFailure
from forge_backend.runtime.nvrtc import compile_source

OK = 'extern "C" __global__ void k{n}(float* p) {{ p[0] = {n}.f; }}\n'


def test_a_compile_with_an_empty_log_leaves_the_shared_one_byte_bytes_alone():
    """CPython hands out one shared object for ``b" " * 1``; the old buffers were made that way, and NVRTC's empty log
    (one NUL byte) turned the process's ``b" "`` into ``b"\\x00"``."""
    for n in range(2):
        kernel = compile_source(OK.format(n=n))
        assert kernel.cubin[:4] == b"\x7fELF" and kernel.log == ""
    assert (b" " * 1)[0] == 32 and b"".join([b" "])[0] == 32


def test_f_strings_compiled_after_a_kernel_keep_their_spaces():
    """The symptom (Python 3.12): a module compiled from source after a kernel lost its f-strings' lone spaces, and the
    templates generated ``typedef __nv_bfloat16T;``."""
    compile_source(OK.format(n=7))
    namespace: dict = {}
    exec(compile('a, k = "__nv_bfloat16", "T"\nline = f"typedef {a} {k};"\n', "generated.py", "exec"), namespace)
    assert namespace["line"] == "typedef __nv_bfloat16 T;"


def test_a_failed_compile_still_reports_its_whole_log():
    with pytest.raises(CandidateFailure) as info:
        compile_source('extern "C" __global__ void k(float* p) { p[0] = INFINITY_NOT_DEFINED; }\n')
    assert "INFINITY_NOT_DEFINED" in info.value.log and info.value.message.startswith("candidate.cu(1): error")
    assert (b" " * 1)[0] == 32

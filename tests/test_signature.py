import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from forge_backend.errors import UnsupportedNode
from forge_backend.signature import OpSignature, align_class, signature_of
from graphs import aten_graph, op_nodes

KEY_SCRIPT = """
import torch, torch.nn.functional as F, sys
sys.path.insert(0, {tests!r})
from graphs import aten_graph, op_nodes
from forge_backend.signature import signature_of
gm = aten_graph(lambda x: F.softmax(x, -1), torch.randn(64, 1000))
print(signature_of(op_nodes(gm, "aten._softmax.default")[0], arch="sm_90").key())
"""


def softmax_sig(x, dim=-1, arch="sm_90"):
    gm = aten_graph(lambda t: F.softmax(t, dim), x)
    return signature_of(op_nodes(gm, "aten._softmax.default")[0], arch=arch)


def test_key_is_stable_across_processes():
    here = softmax_sig(torch.randn(64, 1000)).key()
    import os

    out = subprocess.run([sys.executable, "-c", KEY_SCRIPT.format(tests=os.path.dirname(__file__))],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == here


def test_signature_fields():
    sig = softmax_sig(torch.randn(64, 1000))
    assert sig.op == "aten._softmax.default"
    x = sig.arg("self").tensor
    assert x.shape == (64, 1000) and x.stride == (1000, 1) and x.dtype == "float32" and x.offset_align == 16
    assert sig.scalar_args() == {"dim": -1, "half_to_float": False}
    assert sig.used_outputs == (0,) and sig.arch == "sm_90" and sig.contract_version >= 1


def test_key_changes_with_each_field():
    base = softmax_sig(torch.randn(64, 1000))
    keys = {
        "base": base.key(),
        "stride": softmax_sig(torch.randn(1000, 64).t()).key(),
        "dtype": softmax_sig(torch.randn(64, 1000, dtype=torch.float64)).key(),
        "scalar": softmax_sig(torch.randn(64, 1000), dim=0).key(),
        "arch": softmax_sig(torch.randn(64, 1000), arch="sm_80").key(),
        "shape": softmax_sig(torch.randn(64, 1001)).key(),
    }
    assert len(set(keys.values())) == len(keys), keys


def test_used_output_set_changes_key():
    x, w, b = torch.randn(2, 64, 8, 8), torch.randn(64), torch.randn(64)

    def out_only(x):
        return torch.ops.aten.native_group_norm(x, w, b, 2, 64, 64, 32, 1e-5)[0]

    def out_and_mean(x):
        r = torch.ops.aten.native_group_norm(x, w, b, 2, 64, 64, 32, 1e-5)
        return r[0], r[1]

    s1 = signature_of(op_nodes(aten_graph(out_only, x), "aten.native_group_norm.default")[0], arch="sm_90")
    s2 = signature_of(op_nodes(aten_graph(out_and_mean, x), "aten.native_group_norm.default")[0], arch="sm_90")
    assert s1.used_outputs == (0,) and s2.used_outputs == (0, 1)
    assert s1.key() != s2.key()
    diff = set(s1.debug_lines()) ^ set(s2.debug_lines())
    assert all(line.startswith("used_outputs") for line in diff)


def test_storage_offset_alignment_class():
    assert [align_class(o) for o in (0, 16, 8, 4, 2, 1, 6, 48)] == [16, 16, 8, 4, 2, 1, 2, 16]
    base = torch.randn(65, 1000)
    sig = softmax_sig(base[1:])  # offset 1000 floats = 4000 bytes -> 16-aligned
    assert sig.arg("self").tensor.offset_align == 16


def test_json_round_trip_keeps_key():
    sig = softmax_sig(torch.randn(8, 33))
    again = OpSignature.from_json(sig.to_json())
    assert again == sig and again.key() == sig.key()


def test_symbolic_shapes_are_left_to_pytorch():
    captured = []

    def fw(gm, ex):
        captured.append(gm)
        return gm.forward

    from torch._functorch.aot_autograd import aot_module_simplified

    def backend(gm, ex, **kw):
        return aot_module_simplified(gm, ex, fw_compiler=fw, decompositions={})

    f = torch.compile(lambda x: F.softmax(x, -1), backend=backend, dynamic=True)
    with torch.no_grad():
        f(torch.randn(5, 7))
    node = op_nodes(captured[0], "aten._softmax.default")[0]
    with pytest.raises(UnsupportedNode, match="dynamic"):
        signature_of(node, arch="sm_90")

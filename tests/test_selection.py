import pytest

from forge_backend.selection import DENIED, FAMILIES, OPT_IN_FAMILIES, family_of, is_candidate


@pytest.mark.parametrize("op", ["aten._softmax.default", "aten.native_group_norm.default", "aten.mean.dim",
                                "aten._adaptive_avg_pool2d.default", "aten.gelu.default",
                                "aten.native_layer_norm.default", "aten.sum.dim_IntList"])
def test_compute_ops_are_candidates(op):
    assert is_candidate(op)


@pytest.mark.parametrize("op", ["aten.view.default", "aten.permute.default", "aten.expand.default",
                                "aten.native_dropout.default", "aten.rand.default", "aten.sym_size.int",
                                "aten.embedding.default"])
def test_views_metadata_rng_and_unknown_ops_are_not(op):
    assert not is_candidate(op)


def test_matmul_and_conv_need_opt_in():
    for op in ("aten.mm.default", "aten.addmm.default", "aten.convolution.default"):
        assert not is_candidate(op)
    assert is_candidate("aten.mm.default", ("matmul",))
    assert is_candidate("aten.convolution.default", ("conv",))
    assert OPT_IN_FAMILIES == {"matmul", "conv"}


def test_families_are_disjoint_and_denied_ops_in_no_family():
    ops = [op for f in FAMILIES for op in f.ops]
    assert len(ops) == len(set(ops))
    assert not DENIED & set(ops)
    assert family_of("aten._log_softmax.default").name == "softmax"


def test_inductor_keeps_the_ops_it_fuses():
    from forge_backend.selection import INDUCTOR_KEEPS

    for op in ("aten.relu.default", "aten.add.Tensor", "aten._native_batch_norm_legit_no_training.default"):
        assert op in INDUCTOR_KEEPS
        assert is_candidate(op) and not is_candidate(op, inner="inductor")
    for op in ("aten._softmax.default", "aten.native_group_norm.default", "aten.mean.dim"):
        assert is_candidate(op, inner="inductor")


def test_only_the_1d_depthwise_convolution_is_taken_without_opting_in():
    """Note [the one convolution kforge takes by default]: Qwen 3.5's causal conv1d ([C, 1, 4] weight, groups C)."""
    from forge_backend.selection import depthwise_conv1d

    def args(groups, stride=(1,), dilation=(1,), transposed=False, output_padding=(0,)):
        return {"groups": groups, "stride": list(stride), "dilation": list(dilation), "transposed": transposed,
                "output_padding": list(output_padding)}

    assert depthwise_conv1d((8192, 1, 4), args(8192))
    assert not depthwise_conv1d((8192, 1, 4), args(8192, stride=(2,)))  # strided
    assert not depthwise_conv1d((8192, 1, 4), args(8192, dilation=(2,)))  # dilated
    assert not depthwise_conv1d((8192, 1, 4), args(8192, transposed=True))  # transposed
    assert not depthwise_conv1d((64, 32, 3), args(1))  # a dense conv1d
    assert not depthwise_conv1d((64, 1, 3, 3), args(64, (1, 1), (1, 1), False, (0, 0)))  # 2-D
    assert not depthwise_conv1d((1, 1, 3), args(1))  # one channel: an ordinary conv
    assert not depthwise_conv1d((8192, 1, 4), {"groups": 8192})  # arguments missing
    conv = "aten.convolution.default"
    assert is_candidate(conv, (), "inductor", depthwise=True) and not is_candidate(conv)

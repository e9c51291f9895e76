"""The verifier's guard bands (CPU): an output sits between canary bytes; a write outside it is seen."""
import torch

from forge_backend.verify import GUARD_BYTES, _guarded


def test_output_keeps_shape_strides_and_alignment():
    like = torch.empty_strided((3, 5), (1, 3), dtype=torch.float32)
    (g,) = _guarded([like])
    assert g.out.shape == (3, 5) and g.out.stride() == (1, 3) and g.out.dtype == torch.float32
    assert g.out.data_ptr() - g.buf.data_ptr() == GUARD_BYTES and g.intact()


def test_writing_the_output_keeps_the_guards_intact_and_past_it_does_not():
    (g,) = _guarded([torch.empty(7, 9, dtype=torch.bfloat16)])
    g.out.fill_(1.0)
    assert g.intact()
    g.buf[GUARD_BYTES + g.span] = 0  # the first byte after the output
    assert not g.intact()
    (h,) = _guarded([torch.empty(4, dtype=torch.float16)])
    h.buf[GUARD_BYTES - 1] = 0  # the last byte before it
    assert not h.intact()


def test_empty_and_bool_outputs():
    e, b = _guarded([torch.empty(0, 3), torch.empty(5, dtype=torch.bool)])
    assert e.out.shape == (0, 3) and e.intact()
    b.out.fill_(True)
    assert b.intact() and b.out.all()


def test_a_norms_mean_is_held_to_the_datas_rounding_not_its_own_size():
    """Note [the tolerance of a mean]: over zero-mean data a mean of 1M values is ~1e-3; an fp32 kernel that is a
    fraction of an ulp of the data off passes, a wrong mean (half the values, or zero) still fails."""
    import template_cards as tc

    from forge_backend.verify import _compare, stat_floor

    card = tc.group_norm(1, 4, 512, 512, groups=1, dtype="float32", used=(0, 1, 2))
    x = torch.randn(1, 4, 512, 512, generator=torch.Generator().manual_seed(0))
    ref = x.double().mean().reshape(1, 1)
    floor = stat_floor(card, "out1", [x])
    assert 0 < floor < 1e-5
    close = (ref + 2.4e-8).float()  # the H200's split kernels: 2.4e-8 off
    assert not _compare(close, ref, ref, "out1").ok  # the output-relative atol alone rejects it
    assert _compare(close, ref, ref, "out1", floor).ok
    for wrong in (torch.zeros_like(close), x[:, :2].double().mean().reshape(1, 1).float()):
        assert not _compare(wrong, ref, ref, "out1", floor).ok
    assert stat_floor(card, "out0", [x]) == 0.0 and stat_floor(tc.softmax((4, 8)), "out0", [x]) == 0.0

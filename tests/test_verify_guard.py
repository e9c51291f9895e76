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

"""check=True (Note [checking inside a model]): a kernel that disagrees with PyTorch on a model's real inputs is
logged and counted, and raised under strict; one that agrees passes through untouched."""
import logging

import pytest
import torch
from torch._dynamo.utils import counters

import template_cards as tc
from forge_backend.check import KernelMismatch, checked
from forge_backend.reference import call_aten


def softmax_inputs():
    return [torch.randn(4, 33)]


def test_agreeing_kernel_passes_and_is_counted():
    card = tc.softmax((4, 33), "float32")
    counters["kforge"].clear()
    run = checked(card, lambda ins: call_aten(card.signature_obj(), list(ins)))
    out = run(softmax_inputs())
    assert out[0].shape == (4, 33) and counters["kforge"]["checked_calls"] == 1
    assert counters["kforge"]["check_mismatch"] == 0
    assert counters["kforge"]["check_bitwise_equal"] == 1  # it *is* PyTorch's op


def test_a_close_but_different_kernel_is_not_counted_as_bitwise_equal():
    card = tc.softmax((4, 33), "float32")
    counters["kforge"].clear()
    run = checked(card, lambda ins: [torch.softmax(ins[0].double(), -1).float()])  # other rounding, same answer
    run(softmax_inputs())
    assert counters["kforge"]["check_mismatch"] == 0 and counters["kforge"]["check_bitwise_equal"] == 0


def test_disagreeing_kernel_is_logged_with_the_op(caplog):
    card = tc.softmax((4, 33), "float32")
    counters["kforge"].clear()

    def wrong(ins):
        out = call_aten(card.signature_obj(), list(ins))
        out[0][2, 5] += 0.5  # one wrong element, as a kernel with a bad tail would give
        return out

    with caplog.at_level(logging.WARNING, logger="kforge"):
        checked(card, wrong)(softmax_inputs())
    assert counters["kforge"]["check_mismatch"] == 1
    assert "aten._softmax.default [[4, 33]]" in caplog.text and "[2, 5]" in caplog.text


def test_strict_raises():
    card = tc.softmax((4, 33), "float32")
    with pytest.raises(KernelMismatch, match="_softmax"):
        checked(card, lambda ins: [torch.zeros(4, 33)], strict=True)(softmax_inputs())


def test_check_option_from_environment():
    from forge_backend.config import KforgeConfig

    assert KforgeConfig.load(env={"KFORGE_CHECK": "1"}).check is True
    assert KforgeConfig.load(env={}).check is False

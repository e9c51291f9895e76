"""The verifier's checks on the CPU (forge_backend/verify.py), with kernels written as torch ops: one honest kernel and
one cheat per check, so CI runs each check that the GPU tests run on the planted CUDA kernels (tests/kernels/),
including a kernel that answers from what an earlier launch left behind."""
import pytest
import torch

from forge_backend.verify import prepare_trials, verify
from planted import unary_card

CPU = torch.device("cpu")


def allocator(card):
    specs = [t.spec for t in card.outputs]
    return lambda: [torch.empty_strided(s.shape, s.stride, dtype=getattr(torch, s.dtype)) for s in specs]


def relu(inputs, outs):
    outs[0].copy_(torch.relu(inputs[0]))


class RemembersByAddress:
    """Computes each input buffer once and answers from memory when the same buffer comes back."""

    def __init__(self):
        self.seen = {}

    def __call__(self, inputs, outs):
        key = inputs[0].data_ptr()
        if key not in self.seen:
            self.seen[key] = torch.relu(inputs[0])
        outs[0].copy_(self.seen[key])


class RemembersBySample(RemembersByAddress):
    """The same, keyed by the address and the first and last elements, as a cheat that looks at the data would."""

    def __call__(self, inputs, outs):
        x = inputs[0].view(-1)
        key = (x.data_ptr(), float(x[0]), float(x[-1]))
        if key not in self.seen:
            self.seen[key] = torch.relu(inputs[0])
        outs[0].copy_(self.seen[key])


def modifies_input(inputs, outs):
    outs[0].copy_(torch.relu(inputs[0]))
    inputs[0].view(-1)[0] += 1.0


def leaves_the_tail(inputs, outs):
    outs[0][:-1].copy_(torch.relu(inputs[0][:-1]))


def writes_past_the_end(inputs, outs):
    relu(inputs, outs)
    torch.as_strided(outs[0], (outs[0].numel() + 1,), (1,))[-1] = 0.0  # one element into the guard band


class Alternates:
    """Right within the tolerance, but every other launch one ulp away: a repeat on the same inputs differs."""

    def __init__(self):
        self.calls = 0

    def __call__(self, inputs, outs):
        self.calls += 1
        y = torch.relu(inputs[0])
        outs[0].copy_(torch.nextafter(y, y + 1) if self.calls % 2 else y)


def raises(inputs, outs):
    raise RuntimeError("cuLaunchKernel(k) failed: CUDA_ERROR_INVALID_VALUE")


@pytest.fixture(scope="module")
def card():
    return unary_card("aten.relu.default", 1000)


@pytest.fixture(scope="module")
def trials(card):
    return prepare_trials(card, CPU)


def test_an_honest_kernel_passes_every_trial_and_the_inputs_come_back_unchanged(card, trials):
    before = [[x.clone() for x in t.inputs] for t in trials]
    rep = verify(card, relu, allocator(card), CPU, trials)
    assert rep.ok and rep.trials_passed == 5 and rep.failed_check is None, rep
    for t, b in zip(trials, before):  # the changed-input check puts the element back
        assert all(torch.equal(x, y) for x, y in zip(t.inputs, b))


@pytest.mark.parametrize("kernel,check", [
    (RemembersByAddress, "stale"),
    (RemembersBySample, "stale"),
    (lambda: modifies_input, "input_modified"),
    (lambda: writes_past_the_end, "out_of_bounds"),
    (Alternates, "nondeterministic"),
    (lambda: raises, "launch"),
], ids=["remembers_by_address", "remembers_by_sample", "modifies_input", "writes_past_the_end", "alternates",
        "raises"])
def test_each_cheat_fails_its_check(card, kernel, check):
    rep = verify(card, kernel(), allocator(card), CPU, prepare_trials(card, CPU))
    assert not rep.ok and rep.failed_check == check, rep


def test_an_unwritten_tail_fails(card, trials):
    rep = verify(card, leaves_the_tail, allocator(card), CPU, trials)
    assert not rep.ok and rep.failed_check == "unwritten" and rep.nan_count == 1, rep

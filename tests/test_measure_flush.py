"""The timer's L2 flush (Note [why flush before each repeat]): both methods run, a bad name is refused."""
import pytest
import torch

from forge_backend.measure import Timer


@pytest.mark.parametrize("flush", ["read", "write"])
def test_flush_methods_run(flush):
    timer = Timer(torch.device("cpu"), flush_bytes=4096, flush=flush)
    timer._flush.fill_(3)
    timer.flush_l2()
    assert int(timer._flush[0]) == (0 if flush == "write" else 3)  # a read flush leaves the buffer as it was


def test_unknown_flush_is_refused():
    with pytest.raises(ValueError, match="read"):
        Timer(torch.device("cpu"), flush_bytes=4096, flush="clean")

"""Timer.kernel_time's split of profiled device work into calls (Note [kernel time beside event time]): each flushed
call's own durations are summed and the flush's are left out; counts that do not split are refused. A GPU test
times a kernel both ways."""
import pytest
import torch

from forge_backend.measure import Timer, per_call_sums


def test_each_call_sums_its_own_work_after_the_flush():
    # three calls; each: two flush activities (100, 50 us), then the call's two kernels
    durations = [100.0, 50.0, 1.0, 2.0, 100.0, 50.0, 3.0, 4.0, 100.0, 50.0, 5.0, 6.0]
    assert per_call_sums(durations, 3, 2) == [3.0, 7.0, 11.0]


def test_a_call_of_one_kernel():
    assert per_call_sums([9.0, 1.5, 9.0, 2.5], 2, 1) == [1.5, 2.5]


def test_counts_that_do_not_split_are_refused():
    with pytest.raises(ValueError, match="do not split"):
        per_call_sums([9.0, 1.5, 9.0], 2, 1)  # a call lost an activity
    with pytest.raises(ValueError, match="none beyond the flush"):
        per_call_sums([9.0, 9.0], 2, 1)  # the calls queued nothing of their own
    with pytest.raises(ValueError, match="do not split"):
        per_call_sums([], 0, 1)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_kernel_time_is_within_event_time_on_the_gpu():
    dev = torch.device("cuda", 0)
    timer = Timer(dev)
    src = torch.randn(16 * 2**20, device=dev)
    dst = torch.empty_like(src)
    events = timer.time(lambda: dst.copy_(src)).median_us
    kernel = timer.kernel_time(lambda: dst.copy_(src)).median_us
    assert 0 < kernel < events  # the events also hold the launch
    two = timer.kernel_time(lambda: (dst.copy_(src), dst.copy_(src))).median_us
    assert 1.5 * kernel < two < 2.5 * kernel  # two copies a call: both summed


def test_bench_ops_keeps_a_row_whose_kernel_time_cannot_be_split(capsys):
    """bench_ops.kernel_us: a profile that does not split into calls leaves that column empty, logged, instead of
    failing the row (its event times are what the targets are judged by)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import bench_ops

    class Timer:
        def __init__(self, error):
            self.error = error

        def kernel_time(self, fn):
            if self.error:
                raise self.error
            return type("T", (), {"median_us": 12.5})()

    assert bench_ops.kernel_us(Timer(None), lambda: None, "kforge") == 12.5
    assert bench_ops.kernel_us(Timer(ValueError("7 device activities do not split into 3 calls")), lambda: None,
                               "Inductor") is None
    assert "kernel time of Inductor not taken: 7 device activities" in capsys.readouterr().err
    assert bench_ops._us(None) == "-" and bench_ops._us(12.34) == "12.3"

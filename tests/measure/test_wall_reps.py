"""How many back-to-back calls wall_time makes: time's count, at most the run's rep_ms of calls."""
import pytest

from fusebench.measure.timing import TimeStats, TimingSettings, wall_reps


def _stats(median_us, reps):
    return TimeStats(median_us, median_us, median_us, median_us, median_us, reps)


def test_wall_time_takes_at_most_rep_ms_of_calls():
    st = TimingSettings(rep_ms=100.0, min_reps=10, max_reps=1000)
    assert wall_reps(_stats(1000.0, 250), st) == 100  # a CPU cell that ran 250 ms to be stable
    assert wall_reps(_stats(5.0, 1000), st) == 1000  # a GPU cell: time's own count
    assert wall_reps(_stats(200_000.0, 10), st) == 10  # slow calls: min_reps
    assert wall_reps(_stats(1000.0, 3), st) == 3  # never more than time took
    assert wall_reps(_stats(1000.0, 250), TimingSettings(rep_ms=20.0, min_reps=2)) == 20


def test_a_pause_of_the_host_moves_one_block_not_the_figure(monkeypatch):
    from fusebench.measure import timing

    clock = {"t": 0.0, "calls": 0}

    def fn():  # 10 us a call, and the 20th call takes 5 ms: a garbage collection
        clock["calls"] += 1
        clock["t"] += 5e-3 if clock["calls"] == 20 else 10e-6

    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock["t"])
    assert timing.wall_time(fn, "cpu", 200) == pytest.approx(10.0)  # the mean of 200 calls: 34.95
    assert clock["calls"] == 1 + 200  # the first call, then 5 blocks of 40
    clock["calls"] = 0
    assert timing.wall_time(fn, "cpu", 30) == pytest.approx((29 * 10 + 5000) / 30)  # one block: its mean

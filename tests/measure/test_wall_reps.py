"""How many back-to-back calls wall_time makes: time's count, at most the run's rep_ms of calls."""
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

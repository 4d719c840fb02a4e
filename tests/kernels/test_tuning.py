"""The tuner (kernels/tuning.py): the choice it returns, its on-disk cache, the warm call it times
candidates with."""
import json

import pytest
import torch

from fusebench import settings
from fusebench.cases.base import get_case
from fusebench.kernels import tuning
from fusebench.kernels.launch import STATE
import fusebench.kernels.pointwise as kpw
from kernel_checks import DEVICE, ON_GPU, gpu


def fake_times(times: dict):
    """A time_candidate for Tuner: each candidate's (launch, warm) -> the given ms; records the launches."""
    ran = []

    def time_candidate(launch, warm):
        ran.append(launch.args[0])
        launch()
        return times[launch.args[0]]

    return time_candidate, ran


def test_tuner_returns_the_fastest_candidate_and_caches_it_on_disk(tmp_path):
    times = {"a": 3.0, "b": 1.0, "c": 2.0}
    timer, ran = fake_times(times)
    launched = []
    tuner = tuning.Tuner(tuning.ChoiceCache(tmp_path, enabled=True), time_candidate=timer)
    key = ("op", (5, 7), torch.float32)
    pick = tuner.autotune(key, ["a", "b", "c"], lambda c: launched.append(c), "cuda", enabled=True, source="s1")
    assert pick == "b" and ran == ["a", "b", "c"]
    # the same process: from memory; a new process (a new Tuner): from disk, nothing timed again
    assert tuner.autotune(key, ["a", "b", "c"], lambda c: None, "cuda", enabled=True, source="s1") == "b"
    timer2, ran2 = fake_times({"a": 0.1, "b": 9.0, "c": 9.0})
    again = tuning.Tuner(tuning.ChoiceCache(tmp_path, enabled=True), time_candidate=timer2)
    assert again.autotune(key, lambda: ["a", "b", "c"], lambda c: None, "cuda", enabled=True, source="s1") == "b"
    assert ran2 == []
    # other kernel source: another file, tuned again
    other = tuning.Tuner(tuning.ChoiceCache(tmp_path, enabled=True), time_candidate=timer2)
    assert other.autotune(key, ["a", "b", "c"], lambda c: None, "cuda", enabled=True, source="s2") == "a"
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 2 and all(f.endswith(".json") for f in files)  # no temporary file left behind


def test_cached_dataclass_choice_round_trips_only_as_a_candidate(tmp_path):
    from fusebench.kernels.launch_plans import RowPlan, loop_plan, stream_plan

    cands = [loop_plan(4096, 8), stream_plan("cpu", 8192, 16), RowPlan("coop", 1, 8192, 16, 8, 64, True)]
    timer, _ = fake_times({c: t for c, t in zip(cands, (3.0, 2.0, 1.0))})
    cache = tuning.ChoiceCache(tmp_path, enabled=True)
    assert tuning.Tuner(cache, time_candidate=timer).autotune("k", cands, lambda c: None, "cuda", enabled=True) == cands[2]
    fresh = tuning.Tuner(cache, time_candidate=fake_times({})[0])
    assert fresh.autotune("k", cands, lambda c: None, "cuda", enabled=True) is cands[2]
    # a stored choice that is no longer a candidate is not used: the key is tuned again
    timer3, ran3 = fake_times({c: t for c, t in zip(cands[:2], (1.0, 2.0))})
    assert tuning.Tuner(cache, time_candidate=timer3).autotune("k", cands[:2], lambda c: None, "cuda",
                                                             enabled=True) == cands[0]
    assert ran3 == cands[:2]


@pytest.mark.parametrize("content", ["{not json", "[]", '{"meta": {"format": 1}, "choices": {}}', "\x00\xff",
                                     '{"meta": null, "choices": {"\'k\'": "b"}}'])
def test_corrupt_or_foreign_cache_file_is_ignored(tmp_path, content):
    cache = tuning.ChoiceCache(tmp_path, enabled=True)
    meta = cache.meta("test", "")
    cache.path(meta).write_text(content)
    timer, ran = fake_times({"a": 2.0, "b": 1.0})
    assert tuning.Tuner(cache, time_candidate=timer).autotune("k", ["a", "b"], lambda c: None, "cuda",
                                                            enabled=True) == "b"
    assert ran == ["a", "b"]
    assert json.loads(cache.path(meta).read_text())["choices"] == {"'k'": "b"}  # rewritten whole


def test_cache_off_reads_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEBENCH_TUNING_CACHE", "0")
    monkeypatch.setenv("FUSEBENCH_CACHE_DIR", str(tmp_path))
    try:
        s = settings.refresh()
        assert not s.tuning_cache and s.tuning_dir == tmp_path / "tuning"
        cache = tuning.ChoiceCache()
        assert not cache.enabled
        timer, ran = fake_times({"a": 2.0, "b": 1.0})
        assert tuning.Tuner(cache, time_candidate=timer).autotune("k", ["a", "b"], lambda c: None, "cuda",
                                                                enabled=True) == "b"
        assert not (tmp_path / "tuning").exists()
    finally:
        monkeypatch.undo()
        settings.refresh()


def test_choice_cache_follows_the_settings_at_each_use(tmp_path, monkeypatch):
    # a cache made before the settings change (as TUNER's is) reads and writes where they say now
    cache = tuning.ChoiceCache()
    monkeypatch.setenv("FUSEBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("FUSEBENCH_TUNING_CACHE", "1")
    settings.refresh()
    assert cache.enabled and cache.directory == tmp_path / "tuning"
    meta = tuning.ChoiceCache.meta("test", "src")
    cache.put(meta, "k", "b")
    assert cache.get(meta, "k", ["a", "b"]) == "b" and (tmp_path / "tuning").is_dir()
    monkeypatch.setenv("FUSEBENCH_TUNING_CACHE", "0")
    settings.refresh()
    assert not cache.enabled and cache.get(meta, "k", ["a", "b"]) is None


def test_triton_autotune_disk_cache_follows_the_setting(monkeypatch):
    # whether triton.autotune's choices go to Triton's disk cache is read at each tuning, not at
    # the kernel's import (the interpreter never caches: a stand-in for a GPU tuner here)
    class Tuner:
        cache_results = True

        def prune_configs(self, kwargs):
            return ["config"]

    tuner = tuning.disk_cache_per_settings(Tuner())
    for value, on in (("0", False), ("1", True), ("0", False)):
        monkeypatch.setenv("FUSEBENCH_TUNING_CACHE", value)
        settings.refresh()
        assert tuner.prune_configs({}) == ["config"] and tuner.cache_results is on


def test_the_tuners_memory_is_part_of_the_kernel_state(tmp_path, monkeypatch):
    # TUNER's choices and timings, and the source hashes, are launch.STATE's tables: STATE.clear()
    # forgets them with the launchers built on them, and a source is hashed again after it
    assert tuning.TUNER.choices is STATE.table("tuning.choices")
    assert tuning.TUNER.timings is STATE.table("tuning.timings")
    tuning.TUNER.choices["a key of this test"] = "a"
    module = tmp_path / "fusebench_probe_source.py"
    module.write_text("x = 1\n")
    monkeypatch.syspath_prepend(tmp_path)
    first = tuning.source_hash("fusebench_probe_source")
    module.write_text("x = 2\n")
    assert tuning.source_hash("fusebench_probe_source") == first  # hashed once for the process
    STATE.clear()
    assert "a key of this test" not in tuning.TUNER.choices
    assert tuning.source_hash("fusebench_probe_source") != first


def test_untimed_where_tuning_is_off_first_candidate():
    # the CPU, the interpreter, graph capture, FUSEBENCH_AUTOTUNE=0: the heuristic's first candidate,
    # untimed and not remembered (a later call where tuning is on still tunes)
    timer, ran = fake_times({"a": 2.0, "b": 1.0})
    tuner = tuning.Tuner(tuning.ChoiceCache(enabled=False), time_candidate=timer)
    assert tuner.autotune("k", ["a", "b"], lambda c: None, "cpu") == "a"
    assert ran == [] and tuner.choices == {}
    assert tuner.autotune("k", ["a", "b"], lambda c: None, "cuda", enabled=True) == "b"


def test_failing_candidates_are_skipped():
    def launch(c):
        if c != "b":
            raise RuntimeError("out of resources")

    timer, _ = fake_times({"a": 0.5, "b": 1.0, "c": 0.1})
    tuner = tuning.Tuner(tuning.ChoiceCache(enabled=False), time_candidate=timer)
    assert tuner.autotune("k", ["a", "b", "c"], launch, "cuda", enabled=True) == "b"
    with pytest.raises(RuntimeError, match="out of resources"):
        tuner.autotune("k2", ["a", "b"], launch, "cuda", enabled=True, first_must_work=True)
    with pytest.raises(RuntimeError, match="no candidate config ran"):
        tuner.autotune("k3", ["a", "c"], launch, "cuda", enabled=True)


@pytest.mark.skipif(ON_GPU, reason="on a GPU the candidates are timed")
def test_fastest_untimed_on_cpu():
    # under the interpreter / without CUDA the first candidate is used, untimed and not recorded
    calls = []
    key = ("test_fastest_untimed_on_cpu",)
    pick = tuning.fastest(key, {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, device=DEVICE)
    assert pick == "a" and calls == [] and tuning.fastest_record(key) is None


def test_shadow_operands_copy_layout_alignment_and_values():
    # the autotuner's warm call launches on these: same shapes, strides and 16-byte alignment (so the
    # JIT picks the same binary), the inputs' values, in new memory; None passes through
    base = torch.randn(40, 70, device=DEVICE)
    view = base[3:, 1:65]  # a row stride of 70 and an offset of 211 elements: not 16-byte aligned
    out = torch.empty(8, 5, device=DEVICE).t()
    copies = tuning.shadow_operands([view, None, out])
    assert copies[1] is None
    for t, c in ((view, copies[0]), (out, copies[2])):
        assert c.shape == t.shape and c.stride() == t.stride() and c.dtype == t.dtype
        assert c.data_ptr() % 16 == t.data_ptr() % 16 and c.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()
    assert torch.equal(copies[0], view)
    assert tuning.shadow_operands([view], max_bytes=view.numel() * 4 - 1) is None


def test_autotune_warm_call_drops_only_the_shadow_outputs(monkeypatch):
    # the autotuner's warm launch on the shadow operands is followed by dropping its outputs (the
    # last n_outputs shadows, None among them passed along) from L2, as a cell's warm call does;
    # the shadow inputs, which every warm launch reads again, are not dropped
    from fusebench.measure import l2flush

    dropped, launched = [], []
    monkeypatch.setattr(l2flush, "discard_outputs", lambda out, keep=(): dropped.append(out))
    monkeypatch.setattr(l2flush, "touch_pages", lambda tensors: None)
    operands = (torch.ones(4), torch.zeros(4), None, torch.zeros(4))
    shadow = tuning.shadow_operands(operands)
    warm = tuning.warm_for("plan", lambda p, *ops: launched.append((p, ops)), operands, shadow, n_outputs=3)
    warm()
    assert launched == [("plan", tuple(shadow))]
    assert len(dropped) == 1 and len(dropped[0]) == 3
    assert dropped[0][0] is shadow[1] and dropped[0][1] is None and dropped[0][2] is shadow[3]
    assert tuning.warm_for("plan", lambda p, *ops: None, operands, None) is None


@gpu
def test_gpu_autotune_times_candidates_with_the_warm_launch(monkeypatch):
    # each candidate's timing passes a warm call that launches it on copies of the operands
    seen = []
    real = tuning.gpu_time_ms

    def spy(fn, device, budget_ms=5.0, warm=None):
        seen.append(warm)
        return real(fn, device, budget_ms, warm=warm)

    monkeypatch.setattr(tuning, "gpu_time_ms", spy)
    x = torch.randn(3, 1000, device="cuda") + 17  # a shape no other test tunes
    y = kpw.pointwise_chain_impl(x)
    assert seen and all(w is not None for w in seen)
    torch.testing.assert_close(y, get_case("pointwise_chain").fn(x))


@gpu
def test_gpu_autotune_retimes_close_candidates_interleaved(monkeypatch, tmp_path):
    # candidates within the margin (here all of them) are timed again in turn; the kept one is the
    # fastest of that second timing, and the log says so
    log = tmp_path / "tune.log"
    monkeypatch.setenv("FUSEBENCH_AUTOTUNE_LOG", str(log))
    settings.refresh()
    monkeypatch.setattr(tuning, "FINALIST_MARGIN", 10.0)
    x = torch.randn(5, 1000, device="cuda")
    out = torch.empty_like(x)
    rounds = []
    real = tuning.time_interleaved

    def spy(fns, device, st, n, warms=None):
        rounds.append((len(fns), n))
        return real(fns, device, st, n, warms)

    monkeypatch.setattr(tuning, "time_interleaved", spy)
    tuner = tuning.Tuner(tuning.ChoiceCache(tmp_path, enabled=False))
    best = tuner.autotune(("test-finalists", 5, 1000), ["a", "b", "c"], lambda p, x, y: y.copy_(x * 2),
                          "cuda", (x, out))
    text = log.read_text()
    assert len(rounds) == 1 and rounds[0][0] == 3 and 10 <= rounds[0][1] <= 50
    finals = [line.split() for line in text.splitlines() if line.strip().startswith("final")]
    assert len(finals) == 3 and f"kept {best}" in text
    assert best == min(finals, key=lambda f: float(f[1]))[3]
    torch.testing.assert_close(out, x * 2)


@gpu
def test_gpu_second_process_does_not_retune(monkeypatch, tmp_path):
    # a new Tuner (as in a new process) over the same cache directory takes the stored plan, untimed
    x = torch.randn(7, 3000, device="cuda")
    monkeypatch.setattr(tuning, "TUNER", tuning.Tuner(tuning.ChoiceCache(tmp_path, enabled=True)))
    first, plan = kpw.pointwise_chain_impl(x, return_plan=True)
    timed = []
    real = tuning.gpu_time_ms
    monkeypatch.setattr(tuning, "gpu_time_ms", lambda *a, **k: (timed.append(1), real(*a, **k))[1])
    monkeypatch.setattr(tuning, "TUNER", tuning.Tuner(tuning.ChoiceCache(tmp_path, enabled=True)))
    again, plan2 = kpw.pointwise_chain_impl(x, return_plan=True)
    assert plan2 == plan and timed == [] and torch.equal(first, again)


def test_candidates_compile_together_before_any_is_timed(monkeypatch):
    # with several compile threads every candidate is launched once, from the pool, before the
    # first is timed; one that fails there is skipped without being timed
    import threading
    import time

    monkeypatch.setenv("FUSEBENCH_COMPILE_THREADS", "4")
    settings.refresh()
    events, inside, most = [], [0], [0]
    lock = threading.Lock()

    def launch(c):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.05)  # a compile: several at once only if they overlap
        with lock:
            inside[0] -= 1
            events.append(("launch", c, threading.current_thread().name))
        if c == "bad":
            raise RuntimeError("out of resources")

    def timer(fn, warm):
        events.append(("time", fn.args[0], threading.current_thread().name))
        fn()
        return {"a": 2.0, "b": 1.0, "c": 3.0}[fn.args[0]]

    try:
        tuner = tuning.Tuner(tuning.ChoiceCache(enabled=False), time_candidate=timer)
        assert tuner.autotune("k", ["a", "bad", "b", "c"], launch, "cpu", enabled=True) == "b"
    finally:
        monkeypatch.delenv("FUSEBENCH_COMPILE_THREADS")
        settings.refresh()
    first_timed = next(i for i, e in enumerate(events) if e[0] == "time")
    pooled = events[:first_timed]
    assert sorted(c for _, c, _ in pooled) == ["a", "b", "bad", "c"]
    assert all(t.startswith("fusebench-compile") for _, _, t in pooled) and most[0] >= 2
    assert [c for kind, c, _ in events if kind == "time"] == ["a", "b", "c"]
    assert any("bad: RuntimeError: out of resources" in e for e in tuner.timings["k"]["errors"])


def test_one_compile_thread_launches_each_candidate_only_when_timed(monkeypatch):
    monkeypatch.setenv("FUSEBENCH_COMPILE_THREADS", "1")
    settings.refresh()
    try:
        launched = []
        timer, ran = fake_times({"a": 2.0, "b": 1.0})
        tuner = tuning.Tuner(tuning.ChoiceCache(enabled=False), time_candidate=timer)
        assert tuner.autotune("k", ["a", "b"], launched.append, "cpu", enabled=True) == "b"
        assert launched == ["a", "b"] == ran
    finally:
        monkeypatch.delenv("FUSEBENCH_COMPILE_THREADS")
        settings.refresh()


def test_first_candidate_failing_to_compile_raises_where_it_must_work(monkeypatch):
    monkeypatch.setenv("FUSEBENCH_COMPILE_THREADS", "2")
    settings.refresh()
    try:
        def launch(c):
            if c == "a":
                raise ValueError("no such plan")

        tuner = tuning.Tuner(tuning.ChoiceCache(enabled=False), time_candidate=fake_times({"b": 1.0})[0])
        with pytest.raises(ValueError, match="no such plan"):
            tuner.autotune("k", ["a", "b"], launch, "cpu", enabled=True, first_must_work=True)
    finally:
        monkeypatch.delenv("FUSEBENCH_COMPILE_THREADS")
        settings.refresh()


class _FakeAutotuner:
    """The parts of triton's Autotuner that compile_configs_together wraps."""

    def __init__(self, configs):
        self.configs, self.benched = configs, []
        self.fn = self

    def warmup(self, *args, grid, **kwargs):
        pass

    def prune_configs(self, kwargs):
        return self.configs

    def _bench(self, *args, config, **meta):
        self.benched.append(config)
        return [1.0, 1.0, 1.0]


def test_triton_autotune_configs_compile_together_only_when_timed(monkeypatch):
    import triton

    compiled = []
    monkeypatch.setattr(tuning, "compile_configs", lambda fn, args, meta, configs, threads, arg_names:
                        compiled.append((args, meta, list(configs))) or [])
    configs = [triton.Config({"BLOCK": b}) for b in (32, 64, 128)]
    tuner = tuning.compile_configs_together(_FakeAutotuner(configs))
    pruned = tuner.prune_configs({"N": 7})
    # a choice from Triton's disk cache: pruned, never timed, nothing compiled ahead
    assert pruned == configs and compiled == []
    pruned = tuner.prune_configs({"N": 7})
    for c in pruned:
        tuner._bench("x", "y", config=c, N=7)
    assert compiled == [(("x", "y"), {"N": 7}, configs)]  # once, all of them, before the first timing
    assert tuner.benched == configs
    # configs with a pre_hook (TMA descriptors) compile together too
    hooked = [triton.Config({"BLOCK": b}, pre_hook=lambda nargs: None) for b in (32, 64)]
    tuner = tuning.compile_configs_together(_FakeAutotuner(hooked))
    for c in tuner.prune_configs({}):
        tuner._bench(config=c)
    assert len(compiled) == 2 and compiled[1][2] == hooked


def test_kernel_settings_recorded_with_the_run(monkeypatch):
    from fusebench.env import collect

    monkeypatch.setenv("FUSEBENCH_GEMM_IMPL", "tma")
    settings.refresh()
    try:
        rec = json.loads(collect("cpu")["kernel_settings"])
    finally:
        monkeypatch.delenv("FUSEBENCH_GEMM_IMPL")
        settings.refresh()
    assert rec["gemm_impl"] == "tma" and rec["budget_ms"] == tuning.BUDGET_MS and rec["autotune"] is True


def test_compile_configs_warms_every_config_up_on_the_callers_device(monkeypatch):
    # each config is compiled (warmup: no launch) on a pool thread that selects the caller's device
    import contextlib
    import threading

    import triton

    selected = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    monkeypatch.setattr(torch.cuda, "device", lambda d: (selected.append(d), contextlib.nullcontext())[1])
    monkeypatch.setattr(tuning.dev, "is_interpreter", lambda: False)
    warmed = []

    class Jit:
        device_caches = {}

        def warmup(self, *args, grid, **kwargs):
            warmed.append((args, kwargs, threading.current_thread().name))
            if kwargs["BLOCK"] == 64:
                raise RuntimeError("PTXASError")  # left for the autotuner, which skips the config

    configs = [triton.Config({"BLOCK": b}, num_warps=4) for b in (32, 64, 128)]
    # the autotuner's meta holds the launch's grid and warmup flag, which warmup sets itself
    failed = tuning.compile_configs(Jit(), ("x",), {"N": 5, "grid": (9,), "warmup": False}, configs, threads=3)
    assert [str(e) for e in failed] == ["PTXASError"]
    assert sorted(k["BLOCK"] for _, k, _ in warmed) == [32, 64, 128] and selected == [3, 3, 3]
    assert all(a == ("x",) and k["N"] == 5 and k["num_warps"] == 4 for a, k, _ in warmed)
    assert all(t.startswith("fusebench-compile") for *_, t in warmed)
    warmed.clear()
    tuning.compile_configs(Jit(), ("x",), {"N": 5}, configs, threads=1)  # one thread: nothing ahead of timing
    assert warmed == []


def test_compile_configs_runs_each_pre_hook_on_its_own_copies(monkeypatch):
    # a pre_hook sets a TMA descriptor's block shape, part of the compiled signature: each config
    # compiles with its own copy, and the caller's descriptor is left as it was
    import contextlib

    import triton

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(tuning.dev, "is_interpreter", lambda: False)

    class Desc:
        block_shape = [1, 1]

    seen = []

    class Jit:
        device_caches = {}

        def warmup(self, desc, n, *, grid, **kwargs):
            seen.append((kwargs["BLOCK"], list(desc.block_shape), n))

    def hook(nargs):
        nargs["desc"].block_shape = [nargs["BLOCK"], 16]

    desc = Desc()
    configs = [triton.Config({"BLOCK": b}, pre_hook=hook) for b in (32, 64)]
    assert tuning.compile_configs(Jit(), (desc, 7), {}, configs, threads=2, arg_names=("desc", "n")) == []
    assert sorted(seen) == [(32, [32, 16], 7), (64, [64, 16], 7)] and desc.block_shape == [1, 1]


@gpu
def test_gpu_plans_compiled_together_compute_the_same(monkeypatch, tmp_path):
    # the compile pass launches every plan from pool threads on the caller's device and stream;
    # the chosen plan's output is right and the log says the pass ran
    log = tmp_path / "tune.log"
    monkeypatch.setenv("FUSEBENCH_AUTOTUNE_LOG", str(log))
    monkeypatch.setenv("FUSEBENCH_COMPILE_THREADS", "4")
    settings.refresh()
    try:
        monkeypatch.setattr(tuning, "TUNER", tuning.Tuner(tuning.ChoiceCache(tmp_path, enabled=False)))
        x = torch.randn(11, 3000, device="cuda") - 3  # a shape no other test tunes
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            y = kpw.pointwise_chain_impl(x)
        side.synchronize()
    finally:
        monkeypatch.delenv("FUSEBENCH_COMPILE_THREADS")
        monkeypatch.delenv("FUSEBENCH_AUTOTUNE_LOG")
        settings.refresh()
    torch.testing.assert_close(y, get_case("pointwise_chain").fn(x))
    assert "4 threads)" in log.read_text()

"""The one autotuner of fusebench's kernels: per problem key, time each candidate, keep the fastest.

Every kernel family uses it: the row-wise and element-wise kernels choose a launch plan
(`autotune`), the GEMM-like ones choose between whole implementations (`fastest`), and their
`triton.autotune` configs are timed by `bench_config`.  All three time a candidate the way the
cells are timed (fusebench.measure.timing: L2 flushed, a warm call on copies of the operands whose
outputs are then dropped from L2, a spin kernel before each start event so that the host's launch
cost stays out), not back to back as triton.testing.do_bench does: where a small kernel's GPU
time is below Python's launch cost, back-to-back timing ranks candidates by host overhead.

Compiling, not timing, is most of a first call's cost: a Triton compile takes far longer than
timing a candidate.  The compile's MLIR and LLVM passes and ptxas run without the GIL, so threads
compile candidates side by side (docs/kernels.md, 'What every kernel shares'), and before timing,
every candidate is launched once from a pool of FUSEBENCH_COMPILE_THREADS threads
(`compile_all`; for triton.autotune's configs, `compile_configs`).  That changes when a binary is
built, not which binaries exist or how they are timed, so it cannot change a choice.

Choices live in memory (TUNER's, in launch.STATE's tables, emptied by STATE.clear()) and on disk
(`ChoiceCache`), so that a second run does not tune again.  The CPU, the interpreter, CUDA-graph
capture and FUSEBENCH_AUTOTUNE=0 use the first candidate (the heuristic's), untimed and not
cached.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import hashlib
import importlib.util
import inspect
import json
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Hashable, Sequence, TypeVar

import torch
import triton

from fusebench import settings
from fusebench.kernels import device as dev
from fusebench.kernels.launch import STATE
from fusebench.util import first_line
from fusebench.measure.timing import TimeStats, TimingSettings, time_call, time_interleaved, warm_call

T = TypeVar("T")

# Separately timed medians of a few-microsecond kernel move by a few percent from one timing to the
# next (clocks, the state a flush leaves), enough to swap near-equal candidates between processes.
# The candidates within FINALIST_MARGIN of the fastest are timed once more rep by rep in turn,
# where such drift falls on all alike.
FINALIST_MARGIN = 1.05
FINALISTS = 4
# Timed runs per candidate (ms).
BUDGET_MS = 5.0
# triton.autotune's configs (bench_config): warm-up and timed runs per config (ms).
CONFIG_WARMUP_MS, CONFIG_BUDGET_MS = 5.0, 20.0


def record() -> dict:
    """What decides the kernels' choices in this process, for the run's environment: the settings
    that force or rule out a path, whether choices are timed or taken from the disk cache, and how
    candidates are timed.  (compile_threads changes only how long the first call takes.)"""
    s = settings.current()
    return dict(autotune=s.autotune, tuning_cache=s.tuning_cache, coop=s.coop, fp32_precision=s.fp32_precision,
                gemm_impl=s.gemm_impl, conv_path=s.conv_path, conv_bn=s.conv_bn, attn_impl=s.attn_impl,
                budget_ms=BUDGET_MS, finalist_margin=FINALIST_MARGIN, finalists=FINALISTS,
                config_warmup_ms=CONFIG_WARMUP_MS, config_budget_ms=CONFIG_BUDGET_MS,
                compile_threads=s.compile_threads)


# ----------------------------------------------------------------------------------------------
# the on-disk cache


# {modules: their source hash}, read once per process (until STATE.clear())
_SOURCE_HASHES = STATE.table("tuning.source_hashes")


def source_hash(*modules: str) -> str:
    """A hash of the named modules' source files: a cached choice is only reused for the code it
    was timed with."""
    found = _SOURCE_HASHES.get(modules)
    if found is None:
        h = hashlib.sha256()
        for mod in modules:
            spec = importlib.util.find_spec(mod)
            h.update(mod.encode())
            if spec is not None and spec.origin and os.path.exists(spec.origin):
                h.update(Path(spec.origin).read_bytes())
        found = _SOURCE_HASHES[modules] = h.hexdigest()[:16]
    return found


def encode(choice) -> object:
    """A candidate as JSON: a dataclass as its type name and fields, a str or number as itself."""
    if dataclasses.is_dataclass(choice):
        return {"type": type(choice).__name__, "fields": dataclasses.asdict(choice)}
    if isinstance(choice, (str, int, float, bool)) or choice is None:
        return choice
    return repr(choice)


class ChoiceCache:
    """Tuning choices on disk, one JSON file per (device name, Triton, torch, kernel source).

    A file holds {"meta": {...}, "choices": {problem key: encoded candidate}}.  A cached choice is
    used only if it equals (encoded) one of the current candidates, so a file never decides
    anything the code would not offer; a file that does not parse, or whose meta is another's, is
    ignored.  Writes go to a temporary file renamed over the old one (atomic on POSIX).

    `directory` and `enabled` not given follow the settings (tuning_dir, tuning_cache) as they are
    at each read and write."""

    def __init__(self, directory: Path | None = None, enabled: bool | None = None):
        self._directory = Path(directory) if directory is not None else None
        self._enabled = enabled

    @property
    def directory(self) -> Path:
        return self._directory if self._directory is not None else settings.current().tuning_dir

    @property
    def enabled(self) -> bool:
        return self._enabled if self._enabled is not None else settings.current().tuning_cache

    @staticmethod
    def meta(device_name: str, source: str) -> dict:
        return {"format": 1, "device": device_name, "triton": triton.__version__, "torch": torch.__version__,
                "source": source}

    def path(self, meta: dict) -> Path:
        digest = hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()[:16]
        safe = "".join(ch if ch.isalnum() else "_" for ch in meta["device"])[:40]
        return self.directory / f"{safe}-{digest}.json"

    def _read(self, meta: dict) -> dict:
        try:
            data = json.loads(self.path(meta).read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("meta") != meta or not isinstance(data.get("choices"), dict):
            return {}
        return data["choices"]

    def get(self, meta: dict, key: str, candidates: Sequence[T]) -> T | None:
        if not self.enabled:
            return None
        stored = self._read(meta).get(key)
        if stored is None:
            return None
        return next((c for c in candidates if encode(c) == stored), None)

    def put(self, meta: dict, key: str, choice) -> None:
        if not self.enabled:
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            choices = self._read(meta)
            choices[key] = encode(choice)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tuning-", suffix=".json")
            with os.fdopen(fd, "w") as f:
                json.dump({"meta": meta, "choices": choices}, f, indent=1, sort_keys=True)
            os.replace(tmp, self.path(meta))
        except OSError:
            pass  # a cache that cannot be written costs a retune next time, nothing else


# ----------------------------------------------------------------------------------------------
# the tuner


class Tuner:
    """Choices per problem key: in memory (this process), then on disk (`cache`), else timed.

    `time_candidate(launch_one, warm) -> ms` times one candidate (default: gpu_time_ms); tests
    pass their own.  `choices` and `timings` are the dicts the choices and their candidates' times
    are kept in (default: new ones)."""

    def __init__(self, cache: ChoiceCache | None = None, time_candidate: Callable | None = None,
                 choices: dict | None = None, timings: dict | None = None):
        self.cache = cache
        self.choices: dict[Hashable, object] = {} if choices is None else choices
        self.time_candidate = time_candidate
        self.timings: dict[Hashable, dict] = {} if timings is None else timings

    def _cache(self) -> ChoiceCache:
        if self.cache is None:
            self.cache = ChoiceCache()
        return self.cache

    def autotune(self, key: Hashable, candidates: Sequence[T] | Callable[[], Sequence[T]],
                 launch: Callable[..., object], device, operands: Sequence[torch.Tensor | None] = (),
                 n_outputs: int = 1, source: str = "", *, enabled: bool | None = None,
                 warm_calls: bool = True, finalists: bool = True, first_must_work: bool = False,
                 call_first: bool = False, compile_first: bool = True) -> T:
        """The candidate to use for `key` (which must name the shape, dtype, strides and device).

        `launch(c, *operands)` launches candidate c on `operands` (the call's inputs, then its
        `n_outputs` outputs, or None for an output a variant does not write).  `candidates` may be
        a function that lists them, called only when `key` has no choice in memory yet.  `source`
        names the code the choice is for (source_hash) in the disk cache.

        The first call for a key on a GPU times every candidate (timed as cells are, with the
        warm call on copies of the operands, see shadow_operands) and keeps the fastest; a
        candidate that fails to compile or launch (e.g. out of shared memory) is skipped, unless
        `first_must_work`.  Candidates within FINALIST_MARGIN of the fastest are timed again,
        interleaved (`finalist`), and the fastest of those is kept.

        Before any is timed, every candidate is launched once on `operands` by `compile_all`, so
        that their compiles overlap (`compile_first`; `launch` must then allow calls from several
        threads at once for different candidates).  Leave it off for candidates that time
        something themselves (`fastest`: whole implementations that run triton.autotune)."""
        if key in self.choices:
            return self.choices[key]  # type: ignore[return-value]
        if callable(candidates):
            candidates = candidates()
        on = autotune_enabled(device) if enabled is None else enabled
        if len(candidates) == 1 or not on:
            return candidates[0]
        meta = ChoiceCache.meta(dev.name(device) if self.time_candidate is None else "test", source)
        skey = repr(key)
        cached = self._cache().get(meta, skey, candidates)
        if cached is not None:
            self.choices[key] = cached
            return cached
        started = time.perf_counter()
        failed: dict[int, BaseException] = {}
        threads = settings.current().compile_threads
        if compile_first and threads > 1:
            failed = compile_all(candidates, launch, operands, device, threads)
            if first_must_work and 0 in failed:
                raise failed[0]
        compiled = time.perf_counter()
        shadow = shadow_operands(operands) if warm_calls else None
        best, best_ms, errors, timings = None, float("inf"), [], []
        for i, cand in enumerate(candidates):
            if i in failed:
                errors.append(f"{cand}: {type(failed[i]).__name__}: {failed[i]}")
                continue
            warm = warm_for(cand, launch, operands, shadow, n_outputs)
            try:
                if call_first:
                    launch(cand, *operands)
                ms = self._time(functools.partial(launch, cand, *operands), device, warm)
            except Exception as exc:  # noqa: BLE001 - a candidate may not fit this device
                if first_must_work and i == 0:
                    raise
                errors.append(f"{cand}: {type(exc).__name__}: {exc}")
                continue
            timings.append((cand, ms))
            if ms < best_ms:
                best, best_ms = cand, ms
        if best is None:
            raise RuntimeError("no candidate config ran: " + "; ".join(errors))
        close = [c for c, ms in sorted(timings, key=lambda t: t[1]) if ms <= best_ms * FINALIST_MARGIN][:FINALISTS]
        final = []
        if finalists and len(close) > 1 and self.time_candidate is None:
            final = finalist(close, launch, device, operands, shadow, best_ms, n_outputs=n_outputs)
            best = min(final, key=lambda t: t[1])[0]
        del shadow
        self.choices[key] = best
        self.timings[key] = {"times": timings, "final": final, "errors": errors}
        self._cache().put(meta, skey, best)
        log_path = settings.current().autotune_log
        if log_path:  # a file to append each decision to, with every candidate's time
            with open(log_path, "a") as f:
                f.write(f"{key}\n" + "".join(f"    {ms:9.4f} ms  {c}\n" for c, ms in timings) + "".join(
                    f"    failed: {e}\n" for e in errors) + "".join(
                    f"    final {ms:9.4f} ms  {c}\n" for c, ms in final) + f"    kept {best}\n"
                    f"    seconds {time.perf_counter() - started:.3f} (compiling together "
                    f"{compiled - started:.3f}, {threads if compile_first and threads > 1 else 0} threads)\n")
        return best

    def _time(self, fn, device, warm) -> float:
        if self.time_candidate is not None:
            return self.time_candidate(fn, warm)
        return gpu_time_ms(fn, device, warm=warm)


# The kernels' tuner: its choices and timings are launch.STATE's tables, so that STATE.clear()
# forgets them with the launchers built on them.
TUNER = Tuner(choices=STATE.table("tuning.choices"), timings=STATE.table("tuning.timings"))


def autotune(*args, **kwargs):
    """TUNER.autotune: the candidate for a key, tuned once per process and device/source."""
    return TUNER.autotune(*args, **kwargs)


def autotune_enabled(device) -> bool:
    return (torch.device(device).type == "cuda" and not dev.is_interpreter() and settings.current().autotune
            and not torch.cuda.is_current_stream_capturing())


def fastest(key, candidates: dict, device=None, source: str = "") -> str:
    """The name of the fastest zero-argument callable in `candidates` for `key` (whole
    implementations: pointer vs TMA vs split-K GEMM, cuDNN + epilogue vs implicit GEMM).  Each runs
    once untimed (compiling it and running its triton.autotune), then is timed.  The first is the
    default: used untimed off the GPU and during CUDA-graph capture, and it must run; another that
    fails is skipped."""
    names = list(candidates)
    gpu = (torch.cuda.is_available() and not dev.is_interpreter() and not torch.cuda.is_current_stream_capturing()
           and (device is None or torch.device(device).type == "cuda"))
    if device is None and gpu:
        device = f"cuda:{torch.cuda.current_device()}"
    return TUNER.autotune(("fastest", key), names, lambda name: candidates[name](), device or "cpu", (),
                          source=source, enabled=gpu, warm_calls=False, finalists=False, first_must_work=True,
                          call_first=True, compile_first=False)


def fastest_record(key):
    """(chosen name, {name: ms}) if `key` has been timed by `fastest` in this process, else None."""
    k = ("fastest", key)
    if k not in TUNER.choices:
        return None
    rec = TUNER.timings.get(k)
    return TUNER.choices[k], dict(rec["times"]) if rec else {}  # {}: the choice came from the disk cache


# ----------------------------------------------------------------------------------------------
# timing a candidate as the cells are timed


def gpu_time_stats(fn: Callable[[], object], device, budget_ms: float = BUDGET_MS, warmup_ms: float = 1.0,
                   max_reps: int = 100, warm: Callable[[], object] | None = None) -> TimeStats:
    """GPU time of fn, measured as fusebench measures cells (measure.timing: L2 flushed, then
    `warm` if given -- the same launch on other operands --, and a spin before each start event),
    over about budget_ms of runs (5 to max_reps).  time_call's warm-up makes the first call, which
    compiles."""
    st = TimingSettings(warmup_ms=warmup_ms, rep_ms=budget_ms, min_reps=5, max_reps=max_reps)
    return time_call(fn, timing_device(device), st, warm=warm)


def gpu_time_ms(fn: Callable[[], object], device, budget_ms: float = BUDGET_MS,
                warm: Callable[[], object] | None = None) -> float:
    return gpu_time_stats(fn, device, budget_ms, warm=warm).median_us / 1e3


def bench_config(fn, quantiles=None):
    """triton.autotune's do_bench, timing one config as the cells are timed (CONFIG_WARMUP_MS of
    warm-up, CONFIG_BUDGET_MS of runs)."""
    st = gpu_time_stats(fn, "cuda", budget_ms=CONFIG_BUDGET_MS, warmup_ms=CONFIG_WARMUP_MS, max_reps=200)
    ms = {0.5: st.median_us / 1e3, 0.2: st.q20_us / 1e3, 0.8: st.q80_us / 1e3}
    return [ms.get(q, ms[0.5]) for q in quantiles] if quantiles else ms[0.5]


def triton_autotune(configs, key, **kwargs):
    """triton.autotune whose configs are timed by bench_config, compiled together before the first
    is timed (compile_configs), and whose choices Triton keeps on disk (cache_results) unless
    FUSEBENCH_TUNING_CACHE=0, where this Triton accepts them (disk_cache_per_settings: the
    setting as it is when a key is tuned, not at import)."""
    params = inspect.signature(triton.autotune).parameters
    if "do_bench" in params:
        kwargs.setdefault("do_bench", bench_config)
    ours = "cache_results" in params and "cache_results" not in kwargs
    if ours:
        kwargs["cache_results"] = True
    decorate = triton.autotune(configs=configs, key=key, **kwargs)
    return lambda fn: compile_configs_together(disk_cache_per_settings(decorate(fn)) if ours else decorate(fn))


def disk_cache_per_settings(tuner):
    """`tuner` (a triton.autotune Autotuner made with cache_results=True) keeping its choices on
    disk only while settings.tuning_cache is on, read when it is about to tune a key: after
    pruning (Autotuner.prune_configs, as Triton 3.x names it), before it consults its disk cache.
    A Triton without that method keeps the switch it was made with."""
    prune, on = getattr(tuner, "prune_configs", None), getattr(tuner, "cache_results", None)
    if not callable(prune) or on is None:
        return tuner

    def prune_configs(*args, **kwargs):
        tuner.cache_results = on and settings.current().tuning_cache
        return prune(*args, **kwargs)

    tuner.prune_configs = prune_configs
    return tuner


# ----------------------------------------------------------------------------------------------
# compiling the candidates together


def compile_all(candidates: Sequence, launch: Callable[..., object], operands: Sequence, device,
                threads: int) -> dict[int, BaseException]:
    """Launch each candidate once on `operands`, `threads` at a time, so that their first calls'
    JIT compiles run together; {index: exception} of those that failed.  Each launch goes to the
    caller's device and current stream, where the GPU runs them one after another as it runs the
    timed ones (cooperative kernels need that); returns once they have run."""
    cuda = torch.device(device).type == "cuda" and torch.cuda.is_available()
    where = timing_device(device) if cuda else None
    stream = torch.cuda.current_stream(where) if cuda else None

    def one(cand):
        with contextlib.ExitStack() as ctx:
            if cuda:  # a new thread starts on device 0 and its default stream
                ctx.enter_context(torch.cuda.device(where))
                ctx.enter_context(torch.cuda.stream(stream))
            launch(cand, *operands)

    with ThreadPoolExecutor(min(threads, len(candidates)), thread_name_prefix="fusebench-compile") as pool:
        futures = [pool.submit(one, c) for c in candidates]
    failed = {i: f.exception() for i, f in enumerate(futures) if f.exception() is not None}
    if cuda:
        torch.cuda.synchronize(where)
    return failed


def compile_configs_together(tuner):
    """`tuner` (a triton.autotune Autotuner) compiling every config that survived pruning, on a pool
    of FUSEBENCH_COMPILE_THREADS threads, when it is about to time the first of them: not when
    its choice comes from Triton's disk cache, which Triton consults after pruning.

    Through Autotuner.prune_configs and Autotuner._bench, as Triton 3.x names them; a Triton
    without them compiles the configs one by one as they are timed.  A config's pre_hook (which
    sets TMA descriptors' block shapes) runs on copies of the arguments, one set per config."""
    prune, bench = getattr(tuner, "prune_configs", None), getattr(tuner, "_bench", None)
    fn = getattr(tuner, "fn", None)
    if not (callable(prune) and callable(bench) and hasattr(fn, "warmup")):
        return tuner
    pending: list = []

    def prune_configs(*args, **kwargs):
        configs = prune(*args, **kwargs)
        pending[:] = configs if len(configs) > 1 else []
        return configs

    def _bench(*args, config, **meta):
        if pending:
            todo = list(pending)
            pending.clear()
            started, threads = time.perf_counter(), settings.current().compile_threads
            failed = compile_configs(fn, args, meta, todo, threads, getattr(tuner, "arg_names", ()))
            log_path = settings.current().autotune_log
            if log_path:
                name = getattr(getattr(tuner, "base_fn", fn), "__name__", fn)
                with open(log_path, "a") as f:
                    f.write(f"triton.autotune {name}: {len(todo)} configs compiled together "
                            f"in {time.perf_counter() - started:.3f} s ({threads} threads)"
                            + (f"; {len(failed)} failed, first: {first_line(failed[0])}" if failed else "") + "\n")
        return bench(*args, config=config, **meta)

    tuner.prune_configs, tuner._bench = prune_configs, _bench
    return tuner


def compile_configs(fn, args: Sequence, meta: dict, configs: Sequence, threads: int,
                    arg_names: Sequence[str] = ()) -> list[BaseException]:
    """Compile `fn` (a JIT function, or heuristics over one) for each config without launching it
    (`warmup`), `threads` at a time; the exceptions of those that failed.  A config that fails to
    compile is left for the autotuner, which meets the same error when it times it and skips it.

    `meta` is what the autotuner got besides the positional arguments: the launch's own `grid` and
    `warmup` are dropped from it (warmup sets both).  A config with a pre_hook gets its own shallow
    copies of the arguments (the hook sets fields of TMA descriptors, which are part of the
    compiled signature), named by `arg_names`."""
    if threads <= 1 or dev.is_interpreter() or not torch.cuda.is_available():
        return []
    where = torch.cuda.current_device()
    jit = fn
    while not hasattr(jit, "device_caches") and hasattr(jit, "fn"):
        jit = jit.fn
    with contextlib.suppress(Exception):  # the per-device caches made here, not raced for by the threads
        jit.device_caches[where]
    meta = {k: v for k, v in meta.items() if k not in ("grid", "warmup")}

    def one(config):
        call_args, kwargs = args, {**meta, **config.all_kwargs()}
        if config.pre_hook:
            named = {**dict(zip(arg_names, args)), **kwargs}
            named.update({k: copy.copy(v) for k, v in named.items() if hasattr(v, "block_shape")})
            config.pre_hook(named)
            call_args = tuple(named[n] for n in arg_names[:len(args)])
        with torch.cuda.device(where):
            fn.warmup(*call_args, grid=(1,), **kwargs)

    with ThreadPoolExecutor(min(threads, len(configs)), thread_name_prefix="fusebench-compile") as pool:
        futures = [pool.submit(one, c) for c in configs]
    return [f.exception() for f in futures if f.exception() is not None]


def finalist(cands: Sequence[T], launch: Callable[..., object], device, operands, shadow,
             best_ms: float, kernel_ms_budget: float = 100.0, n_outputs: int = 1) -> list[tuple[T, float]]:
    """(candidate, median ms) for `cands` timed interleaved (measure.timing.time_interleaved):
    10 to 50 rounds, as many as fit about kernel_ms_budget of their run time."""
    fns = [functools.partial(launch, c, *operands) for c in cands]
    warms = [warm_for(c, launch, operands, shadow, n_outputs) for c in cands]
    rounds = max(10, min(50, int(kernel_ms_budget / (best_ms * len(cands)))))
    samples = time_interleaved(fns, timing_device(device), TimingSettings(), rounds, warms)
    return [(c, sorted(t)[len(t) // 2] / 1e3) for c, t in zip(cands, samples)]


def shadow_operands(operands: Sequence[torch.Tensor | None],
                    max_bytes: int = TimingSettings.warm_call_max_bytes) -> list | None:
    """Copies of `operands` for the warm call (measure.timing): new memory, same shapes, strides
    and alignment (so that the JIT specializes them alike), inputs' values copied.  None when they
    hold more than `max_bytes` together (as cells above it have no warm call) or there are none."""
    tensors = [t for t in operands if t is not None]
    if not tensors or sum(t.numel() * t.element_size() for t in tensors) > max_bytes:
        return None

    def copy(t):
        if t is None:
            return None
        # The elements the view spans (non-negative strides), placed at the same offset from a
        # 128-byte boundary as the original's first element.
        span = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()) if n > 0) if t.numel() else 0
        offset = t.data_ptr() % 128 // t.element_size()
        base = torch.empty(offset + span, dtype=t.dtype, device=t.device)
        return base.as_strided(t.shape, t.stride(), offset).copy_(t)

    return [copy(t) for t in operands]


def warm_for(cand, launch: Callable[..., object], operands, shadow, n_outputs: int = 1) -> Callable[[], object] | None:
    """The warm call before each timed launch of `cand`: the same launch on the shadow operands,
    whose last `n_outputs` are then dropped from L2 as a cell's warm call drops its outputs
    (measure.timing.warm_call).  None without shadow operands."""
    if shadow is None:
        return None
    outputs = tuple(shadow[len(shadow) - n_outputs:])

    def other():
        launch(cand, *shadow)
        return outputs

    return warm_call(other, operands)


def timing_device(device) -> str:
    """`device` as measure.timing takes it: a CUDA device names its index."""
    d = torch.device(device)
    if d.type == "cuda" and d.index is None:
        d = torch.device("cuda", torch.cuda.current_device())
    return str(d)


def key_of(*tensors: torch.Tensor) -> tuple:
    """The problem-key part that names the shapes, dtypes, strides and device of `tensors`."""
    return tuple((tuple(t.shape), t.dtype, t.stride(), str(t.device)) for t in tensors)

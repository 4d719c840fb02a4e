"""Running cells on a Ray cluster: the same plan and the same measurement (measure_cell), with
one long-lived Ray actor per GPU (or per CPU slot on a CPU cluster) in place of local workers.

Why actors, not tasks: an actor keeps its process, so CUDA contexts, Inductor's caches and
Triton's autotuning stay warm across the cells of a case, as they do in a local worker.  Cells
are handed out one at a time per actor, a case's cells to one actor in order.

The containment of the local scheduler holds here too:
- a cell with no result within the per-cell time limit: the actor is killed, the cell is
  `timeout`, a fresh actor takes its place;
- a cell that kills its actor (segfault, abort, os._exit): `crashed`, and a fresh actor;
- a cell whose actor was lost with its node (the node left the cluster, or stopped answering)
  was not the cell's fault: it is queued again, once (a second loss is recorded as `crashed`).
  Ray reports such a loss first as an unreachable actor; the node is declared dead only when its
  health checks fail, so the driver waits (up to VERDICT_S) for that verdict.
A cell's time limit starts when the cell is handed to a started actor: an actor's start-up (a
process, torch and fusebench imported, the plugins loaded, waiting for a free GPU) has its own
limit, start_limit_s().  An actor not started within it is dropped while others run; when none
runs, or an actor fails to start (a plugin that raises), the run stops with ActorStartError: one
line, the run stored as interrupted, its finished cells kept for --resume.
Each finished cell is stored at once by the driver (this process), with the host, device and
driver version of the actor that measured it, so one run may span hosts and GPU kinds.

Plugins travel as file contents (with their SHA-256), so hosts need not share a filesystem.
When connecting to an existing cluster, fusebench's own source travels too (Ray `py_modules`):
every host measures with the driver's code, the commit stored with each cell.
"""
from __future__ import annotations

import hashlib
import os
import re
import time
from collections import deque
from dataclasses import dataclass, field

from fusebench.runner.plan import Cell
from fusebench.runner.request import RunRequest
from fusebench.runner.scheduler import STICKY_CUDA_ERRORS, Scheduler
from fusebench.util import first_line

RAY_MISSING = '--ray needs Ray: pip install "fusebench[ray]"'
LOCAL = "local"  # --ray without an address: start a Ray instance on this machine
# Environment variables a driver passes on to its actors (their meaning must not differ by host).
PASSED_ENV = ("TRITON_INTERPRET", "FUSEBENCH_COMMIT")
# How long to wait for Ray's verdict on an actor that stopped answering: a node that leaves is
# declared dead only once its health checks have failed (about 15 s with Ray's defaults).
VERDICT_S = 60.0
# Seconds an actor may take to start (see the module docstring); FUSEBENCH_RAY_START_S overrides it.
ACTOR_START_S = 300.0


def start_limit_s() -> float:
    """The actor start-up limit: $FUSEBENCH_RAY_START_S (seconds) if set to a positive number, else
    ACTOR_START_S."""
    text = os.environ.get("FUSEBENCH_RAY_START_S", "")
    try:
        value = float(text)
    except ValueError:
        return ACTOR_START_S
    return value if value > 0 and value == value and value != float("inf") else ACTOR_START_S


class ActorStartError(RuntimeError):
    """No Ray actor could start to measure the run's cells: the run stops (and can be resumed)."""


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class RayOptions:
    address: str = LOCAL  # "local", "auto", "ray://host:10001" or "host:6379"
    gpu_kind: str | None = None  # e.g. "H100": only GPUs of that Ray accelerator type


@dataclass(frozen=True)
class Cluster:
    """What the connected cluster offers the run: the device its cells run on and the actors."""
    device: str  # cpu | cuda
    actors: int
    gpu_kind: str | None
    started_here: bool  # a local instance this process started (and shuts down)


# ---------------------------------------------------------------------------------------------
# Connecting.


def open_cluster(address: str, gpu_kind: str | None, device: str | None, gpus=None) -> Cluster:
    """fusebench.run's entry: check the request, then connect (ValueError: one line, nothing stored)."""
    if not ray_available():
        raise ValueError(RAY_MISSING)
    if gpus:
        raise ValueError("--gpus picks GPUs for local workers; with --ray, Ray gives each actor its own GPU")
    return connect(RayOptions(address, gpu_kind), device)


def connect(opts: RayOptions, device: str | None) -> Cluster:
    """Connect to (or start) Ray and decide the device and the number of actors.
    Raises ValueError with one line for a request the cluster cannot serve."""
    import ray

    started_here = False
    if not ray.is_initialized():
        kwargs = dict(log_to_driver=False)  # actors' output stays in Ray's logs, off the progress bar
        if opts.address == LOCAL:
            import torch

            kwargs.update(include_dashboard=False)
            if torch.cuda.is_available():
                kwargs.update(num_gpus=torch.cuda.device_count())
            started_here = True
        else:  # an existing cluster, maybe of several hosts: send them this fusebench
            from fusebench.runner.interpreter import package_dir

            _check_reachable(opts.address)
            kwargs.update(address=opts.address, runtime_env={"py_modules": [package_dir()]})
        try:
            ray.init(**kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ValueError(f"--ray {opts.address}: cannot connect: {first_line(exc)}") from None
    try:
        return _cluster(opts, device, started_here)
    except ValueError:
        if started_here:
            ray.shutdown()
        raise


def _check_reachable(address: str) -> None:
    """A host:port address that does not answer fails here at once (Ray itself retries for minutes)."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # "auto", or a form Ray resolves itself
    try:
        socket.create_connection((host, int(port)), timeout=10).close()
    except OSError as exc:
        raise ValueError(f"--ray {address}: cannot reach {host}:{port} ({exc.strerror or exc})") from None


def _cluster(opts: RayOptions, device: str | None, started_here: bool) -> Cluster:
    import ray

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    gpus = sum(n["Resources"].get("GPU", 0) for n in nodes)
    cpus = sum(n["Resources"].get("CPU", 0) for n in nodes)
    if device is None:
        device = "cuda" if gpus else "cpu"
    if device not in ("cpu", "cuda"):
        raise ValueError(f"--ray runs on device cpu or cuda (a GPU per actor), not {device!r}")
    if device == "cpu":
        if opts.gpu_kind:
            raise ValueError("--ray-gpu-kind needs a GPU run (--device cuda)")
        if cpus < 1:
            raise ValueError("--ray: the Ray cluster has no CPU to run cells on")
        return Cluster("cpu", int(cpus), None, started_here)
    if opts.gpu_kind:
        kinds = sorted({k.split(":", 1)[1] for n in nodes for k in n["Resources"] if k.startswith("accelerator_type:")})
        key = f"accelerator_type:{opts.gpu_kind}"
        gpus = sum(n["Resources"].get("GPU", 0) for n in nodes if key in n["Resources"])
        if not gpus:
            raise ValueError(f"--ray-gpu-kind {opts.gpu_kind}: no GPU of that kind in the Ray cluster "
                             f"(kinds there: {', '.join(kinds) or 'none'})")
    if gpus < 1:
        raise ValueError("--ray: the Ray cluster has no GPU; add --device cpu to run on its CPUs")
    return Cluster("cuda", int(gpus), opts.gpu_kind, started_here)


def disconnect(cluster: Cluster | None) -> None:
    """Shut down the Ray instance that connect() started here, if any."""
    if cluster is not None and cluster.started_here:
        import ray

        ray.shutdown()


def run_env(device: str) -> dict:
    """The run's environment: this host's, with the cluster's device when this host lacks it (each
    cell carries the host, device and driver that measured it)."""
    import torch

    from fusebench.env import collect

    if device == "cuda" and not torch.cuda.is_available():
        env = collect("cpu")
        env.update(device="cuda", device_name=None, device_count=None, driver=None)
        return env
    return collect(device)


# ---------------------------------------------------------------------------------------------
# The actor side.


def plugin_payload(paths: list[str]) -> list[tuple[str, str, str]]:
    """Each plugin file as (file name, SHA-256 of its text, text)."""
    out = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        out.append((os.path.basename(path), hashlib.sha256(text.encode()).hexdigest(), text))
    return out


def _warm_up(device: str, state) -> None:
    """Measure one throwaway cell (softmax, eager, 8x8) in a fresh actor, so that what every process
    pays before its first measurement (the modules the measurement imports, the device's context)
    is paid in the actor's start-up, under its own limit, and not in its first cell's time."""
    from fusebench.measure.timing import TimingSettings
    from fusebench.runner.cell import measure_cell

    try:
        measure_cell(Cell("softmax", "eager", (8, 8), "fp32", device),
                     TimingSettings(warmup_ms=1, rep_ms=1, min_reps=2, max_reps=2), (0,), (), None, state=state)
    except Exception:  # noqa: BLE001 - a warm-up only: the cells report their own failures
        pass
    state.data.clear()


class CellActor:
    """Measures cells on one GPU (Ray sets CUDA_VISIBLE_DEVICES to it) or one CPU slot."""

    def __init__(self, plugins: list[tuple[str, str, str]], request: RunRequest, device: str):
        import socket
        import tempfile
        import warnings

        import ray

        # Compiler advice (e.g. "online softmax disabled") is noise in a sweep's logs.
        warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\..*")
        from fusebench.cases import load_plugin
        from fusebench.env import collect
        from fusebench.runner.worker_state import WorkerState

        folder = tempfile.mkdtemp(prefix="fusebench-plugins-")
        for name, digest, text in plugins:
            if hashlib.sha256(text.encode()).hexdigest() != digest:
                raise RuntimeError(f"plugin {name} arrived damaged (SHA-256 differs)")
            path = os.path.join(folder, digest[:16], name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            load_plugin(path)
        self.request = request
        # The store's ceilings (for the roofline metric) are read where the store is: on its host.
        self.db_path = request.db if request.db and os.path.exists(request.db) else None
        env = collect(device)
        gpu_ids = ray.get_gpu_ids()
        self.where = dict(hostname=socket.gethostname(), device_name=env.get("device_name"),
                          driver=env.get("driver"), gpu_id=",".join(str(g) for g in gpu_ids) or None)
        self.node_id = ray.get_runtime_context().get_node_id()
        # An actor's process is fusebench's own: survivors of a cell are frozen.
        self.state = WorkerState(freeze=True)
        _warm_up(device, self.state)

    def ready(self) -> tuple[str, dict]:
        """The Ray node this actor runs on (its liveness tells node loss from a crashing cell), and
        the host, device and driver for the rows of cells that take the actor down with them."""
        return self.node_id, self.where

    def measure(self, cell: dict) -> dict:
        from fusebench.runner.cell import measure_cell

        row = measure_cell(Cell(**cell), self.request.timing, metrics=self.request.metrics, db_path=self.db_path,
                           state=self.state)
        row.update(self.where)
        return row


# ---------------------------------------------------------------------------------------------
# The driver side.


@dataclass
class _Slot:
    actor: object
    ready_ref: object | None  # until the actor has started
    created: float = field(default_factory=time.time)
    node_id: str | None = None
    where: dict = field(default_factory=dict)  # hostname, device_name, driver, gpu_id
    group: deque = field(default_factory=deque)  # cells of the case this actor is on
    cell: Cell | None = None
    ref: object | None = None  # the cell in flight
    since: float = 0.0


class RayScheduler(Scheduler):
    """Scheduler's recording (store, counts, progress) with Ray actors as the workers."""

    def __init__(self, store, run_id, request: RunRequest, cluster: Cluster, on_cell=None):
        super().__init__(store, run_id, request, on_cell)
        self.cluster = cluster
        self.requeued: set[tuple] = set()  # cells already queued again once after a node loss
        self._remote = None  # CellActor as a Ray actor class
        self.start_failures = 0

    def _new_actor(self, plugins) -> _Slot:
        import ray

        env_vars = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
        options: dict = dict(max_restarts=0, max_concurrency=1, runtime_env={"env_vars": env_vars} if env_vars else None)
        if self.cluster.device == "cuda":
            options.update(num_gpus=1, num_cpus=0)
            if self.cluster.gpu_kind:
                options.update(accelerator_type=self.cluster.gpu_kind)
        else:
            options.update(num_cpus=1)
        if self._remote is None:
            self._remote = ray.remote(CellActor)
        actor = self._remote.options(**options).remote(plugins, self.request, self.cluster.device)
        return _Slot(actor, actor.ready.remote())

    def run(self, cells: list[Cell]) -> None:
        import ray

        groups = self._groups(cells)
        plugins = plugin_payload(list(self.request.plugins))
        slots = [self._new_actor(plugins) for _ in range(min(self.cluster.actors, max(len(groups), 1)))]
        limit = start_limit_s()
        try:
            while True:
                for s in slots:
                    if s.ready_ref is None and s.cell is None:
                        self._dispatch(s, groups)
                if not groups and all(not s.group and s.cell is None for s in slots):
                    break  # nothing queued, nothing in flight
                self._check_starts(slots, groups, limit)
                self._wait(slots, plugins)
        finally:
            for s in slots:
                ray.kill(s.actor)

    def _check_starts(self, slots: list[_Slot], groups: deque, limit: float) -> None:
        """Drop an actor that has not started within `limit` seconds while others run (its case goes
        back to the queue); with none running, stop the run (ActorStartError)."""
        import ray

        late = [s for s in slots if s.ready_ref is not None and time.time() - s.created > limit]
        if not late:
            return
        if all(s.ready_ref is not None for s in slots):
            raise ActorStartError(f"no Ray actor started within {limit:g} s (importing torch and the plugins, or "
                                  f"waiting for a free {'GPU' if self.cluster.device == 'cuda' else 'CPU'}; "
                                  f"free in the cluster: {_free(ray.available_resources())}); "
                                  f"FUSEBENCH_RAY_START_S sets the limit")
        for s in late:
            ray.kill(s.actor)
            if s.group:
                groups.appendleft(s.group)
            slots.remove(s)

    def _dispatch(self, s: _Slot, groups: deque) -> None:
        cell = self._take(s, groups)
        if cell is not None:
            s.ref = s.actor.measure.remote(cell.as_dict())

    def _wait(self, slots: list[_Slot], plugins) -> None:
        import ray
        from ray.exceptions import RayActorError

        owner = {}
        for s in slots:
            if s.ready_ref is not None:
                owner[s.ready_ref] = s
            if s.ref is not None:
                owner[s.ref] = s
        if not owner:
            return
        timeout = self.request.cell_timeout
        deadlines = [s.since + timeout - time.time() for s in slots if s.ref is not None]
        done, rest = ray.wait(list(owner), num_returns=1, timeout=max(0.0, min([0.5, *deadlines])))
        if done and rest:  # whatever else has finished too
            done += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
        for ref in done:
            s = owner[ref]
            if ref is s.ready_ref:
                try:
                    s.node_id, s.where = ray.get(ref)
                    s.ready_ref = None
                except RayActorError as exc:
                    # A fault of its own (a plugin that fails to load) would fail every actor: stop.
                    # One lost with its node, before it started, is started again elsewhere.
                    self.start_failures += 1
                    if getattr(exc, "actor_init_failed", False) or self.start_failures > 2 * len(slots) + 2:
                        raise ActorStartError(f"Ray actor failed to start: {_last_line(exc)}") from None
                    self._replace(slots, s, plugins)
                continue
            cell, elapsed = s.cell, time.time() - s.since
            s.cell = s.ref = None
            try:
                row = ray.get(ref)
            except RayActorError as exc:
                not_the_cell = self._lost_to_cluster(s, exc)
                self._replace(slots, s, plugins)
                if not_the_cell and cell.key() not in self.requeued:
                    self.requeued.add(cell.key())
                    s.group.appendleft(cell)  # the fresh actor (elsewhere) shares the slot's queue
                    continue
                lost = ("lost twice with its Ray node (the node left or stopped answering)" if not_the_cell
                        else f"Ray actor died ({_death(exc)})")
                self._record(cell, {**self._lost_row(cell, "crashed", lost, elapsed), **s.where})
                continue
            self._record(cell, row)
            if row["status"] == "error" and any(m in (row.get("reason") or "") for m in STICKY_CUDA_ERRORS):
                self._replace(slots, s, plugins)  # that CUDA context is unusable
        for s in list(slots):
            if s.ref is not None and time.time() - s.since > timeout:
                cell, elapsed = s.cell, time.time() - s.since
                s.cell = s.ref = None
                why = f"no result within {timeout:g} s; Ray actor killed"
                self._record(cell, {**self._lost_row(cell, "timeout", why, elapsed), **s.where})
                self._replace(slots, s, plugins)

    def _replace(self, slots: list[_Slot], s: _Slot, plugins) -> None:
        """Kill the slot's actor and start a fresh one that carries on with the slot's case."""
        import ray

        ray.kill(s.actor)
        fresh = self._new_actor(plugins)
        fresh.group = s.group
        slots[slots.index(s)] = fresh

    def _lost_to_cluster(self, s: _Slot, exc: BaseException) -> bool:
        """Whether the actor was lost with its node or its connection, not killed by its cell.

        A cell that kills its process comes back as ActorDiedError while its node lives on.  A node
        that leaves comes back first as ActorUnavailableError ("may or may not have been
        executed"), while the node still counts as alive: wait for the node to be declared dead,
        or for the actor to be found dead (then its node decides) or answering again (then only
        the connection was lost)."""
        import ray
        from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError

        deadline = time.time() + VERDICT_S
        while True:
            if not self._node_alive(s.node_id):
                return True
            if not isinstance(exc, ActorUnavailableError) or time.time() > deadline:
                return False
            try:
                ray.get(s.actor.ready.remote(), timeout=2)
                return True
            except GetTimeoutError:
                pass
            except RayActorError as again:
                exc = again
                time.sleep(0.5)

    @staticmethod
    def _node_alive(node_id: str | None) -> bool:
        import ray

        return any(n["NodeID"] == node_id and n.get("Alive") for n in ray.nodes())


def _free(resources: dict) -> str:
    """Ray's free resources in a few words (CPU and GPU counts)."""
    shown = {k: v for k, v in resources.items() if k in ("CPU", "GPU")}
    return ", ".join(f"{k} {v:g}" for k, v in sorted(shown.items())) or "none"


def _last_line(exc: BaseException) -> str:
    """The last line of Ray's error text, without its colours: the error raised on the actor."""
    lines = [ln.strip() for ln in re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).splitlines() if ln.strip()]
    return lines[-1][:300] if lines else type(exc).__name__


def _death(exc: BaseException) -> str:
    """Why Ray says the actor died, in a line: its "exit detail" up to the list of common causes."""
    text = " ".join(str(exc).split())
    detail = text.partition("Worker exit detail:")[2].partition(" Some common causes")[0].strip()
    return (detail or text)[:200]


__all__ = ["ActorStartError", "RayOptions", "RayScheduler", "Cluster", "open_cluster", "connect", "disconnect",
           "ray_available", "run_env", "RAY_MISSING", "start_limit_s"]

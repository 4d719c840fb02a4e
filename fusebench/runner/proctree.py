"""Every process a worker started, found at kill time, so that none outlives it.

A worker's process group holds what its cells start, except a process that leaves it (setsid,
`start_new_session=True`) or whose parent exited (it is then re-parented away from the worker).
So each worker carries a token in its environment, which every process it starts inherits, and a
kill takes the worker's descendants (a walk of /proc by parent pid) and every process carrying its
token (a read of /proc/PID/environ), repeated until none is left.  Linux only; elsewhere the
process group kill alone applies.
"""
from __future__ import annotations

import os
import signal
import uuid

TOKEN_VAR = "FUSEBENCH_WORKER_TOKEN"
ROUNDS = 5  # a process forking while its tree is killed is caught in the next round


def new_token() -> str:
    return uuid.uuid4().hex


def _pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _parent_and_state(pid: int) -> tuple[int, str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[1]), fields[0].decode()
    except (OSError, IndexError, ValueError):
        return None


def _carries(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return marker in f.read().split(b"\0")
    except OSError:  # gone, or another user's
        return False


def tree(root: int | None, token: str | None) -> set[int]:
    """Live (not zombie) descendants of `root` and processes whose environment carries `token`,
    this process and `root` itself excepted."""
    stats = {pid: _parent_and_state(pid) for pid in _pids()}
    children: dict[int, list[int]] = {}
    for pid, st in stats.items():
        if st is not None:
            children.setdefault(st[0], []).append(pid)
    found: set[int] = set()
    todo = list(children.get(root, [])) if root else []
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += children.get(pid, [])
    if token:
        marker = f"{TOKEN_VAR}={token}".encode()
        found |= {pid for pid in stats if pid not in found and _carries(pid, marker)}
    return {pid for pid in found if pid not in (os.getpid(), root) and stats.get(pid) and stats[pid][1] != "Z"}


def kill_tree(root: int | None, token: str | None) -> None:
    """SIGKILL every process `tree(root, token)` finds, until none is found."""
    for _ in range(ROUNDS):
        found = tree(root, token)
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

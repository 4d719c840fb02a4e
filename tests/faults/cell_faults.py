"""Faults inside cells, for the containment tests.  Pids go to FB_FAULT_DIR."""
import os
import subprocess
import time

import torch

import fusebench


def x(s, dt, dev, seed):
    return (fusebench.randn(s, dt, dev, seed),)


def _note(name, text):
    with open(os.path.join(os.environ["FB_FAULT_DIR"], name), "a") as f:
        f.write(f"{text}\n")


@fusebench.case(inputs=x, shapes=[(8, 8)])
def markup_error(a):
    # rich markup and an ESC sequence: both must come out as text
    raise ValueError("bad [/x] [bold]kept[/bold] \x1b[31mred\x1b[0m end")


LEAKED = []


@fusebench.case(inputs=x, shapes=[(8, 8)])
def leaks_then_ooms(a):
    LEAKED.append(bytearray(64 << 20))  # memory this worker keeps
    raise MemoryError("out of memory (injected)")


@fusebench.case(inputs=x, shapes=[(8, 8)])
def clean_after_oom(a):
    if LEAKED:
        raise RuntimeError(f"ran in a worker holding {len(LEAKED)} leaked buffers")
    return a * 2


@fusebench.case(inputs=x, shapes=[(8, 8), (8, 16)])
def records_pid(a):
    _note("pids", os.getpid())
    return a * 2


@fusebench.case(inputs=x, shapes=[(8, 8)])
def spawns_child_and_hangs(a):
    child = subprocess.Popen(["sleep", "600"])
    _note("hang_pids", f"{os.getpid()} {child.pid}")
    time.sleep(3600)
    return a

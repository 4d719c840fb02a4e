"""Cases for the Ray backend's tests: some measure fine, one kills its process for one shape, one
hangs.  The cases' inputs append "shape pid" to $FUSEBENCH_RAY_PIDS (when set), so a test can see
which actor process measured what."""
import os
import time

import fusebench


def x(shape, dtype, device, seed):
    log = os.environ.get("FUSEBENCH_RAY_PIDS")
    if log:
        with open(log, "a") as f:
            f.write(f"{shape[0]}x{shape[1]} {os.getpid()}\n")
    return (fusebench.randn(shape, dtype, device, seed),)


@fusebench.case(inputs=x, shapes=[(8, n) for n in range(1, 5)])
def ray_fine(a):
    return a * 2


@fusebench.case(inputs=x, shapes=[(4, n) for n in range(1, 5)])
def ray_fine_too(a):
    return a + 1


@fusebench.case(inputs=x, shapes=[(8, 1), (8, 2), (8, 3)])
def ray_dies(a):
    if a.shape[1] == 2:
        os.kill(os.getpid(), 9)  # the actor's process dies mid-cell, as on a segfault
    return a - 1


@fusebench.case(inputs=x, shapes=[(8, 1)])
def ray_hangs(a):
    time.sleep(3600)

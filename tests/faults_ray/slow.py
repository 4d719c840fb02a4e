"""A case slow enough (a quarter second per input set) to kill its driver mid-run."""
import time

import fusebench


def slow_inputs(shape, dtype, device, seed):
    time.sleep(0.25)
    return (fusebench.randn(shape, dtype, device, seed),)


@fusebench.case(inputs=slow_inputs, shapes=[(8, n) for n in range(1, 9)])
def ray_slow(a):
    return a + 1

"""Slow cells: a run that is still going while a test looks at it."""
import time

import fusebench


def slow_inputs(s, dt, dev, seed):
    time.sleep(0.2)
    return (fusebench.randn(s, dt, dev, seed),)


@fusebench.case(inputs=slow_inputs, shapes=[(8, n) for n in range(1, 13)])
def slow(a):
    return a + 1

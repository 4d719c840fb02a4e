"""A case slow enough (half a second per input set) to kill its driver, or its node, mid-run.
Its inputs append "shape Ray-node-id" to $FUSEBENCH_RAY_NODES (when set), so a test can see
where a cell runs."""
import os
import time

import fusebench


def slow_inputs(shape, dtype, device, seed):
    log = os.environ.get("FUSEBENCH_RAY_NODES")
    if log:
        import ray

        with open(log, "a") as f:
            f.write(f"{shape[1]} {ray.get_runtime_context().get_node_id()}\n")
    time.sleep(0.5)
    return (fusebench.randn(shape, dtype, device, seed),)


@fusebench.case(inputs=slow_inputs, shapes=[(8, n) for n in range(1, 9)])
def ray_slow(a):
    return a + 1

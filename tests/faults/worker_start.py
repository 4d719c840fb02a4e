"""Worker start-up faults.  The main process imports this plugin cleanly; each worker that imports
it takes the next fault from FB_WORKER_FAULTS (comma-separated: hang, raise, abort, ok), counting
worker starts in FB_FAULT_DIR/starts.  After the list, every start is ok."""
import multiprocessing
import os
import time

import fusebench

if multiprocessing.parent_process() is not None:  # a worker
    state = os.path.join(os.environ["FB_FAULT_DIR"], "starts")
    with open(state, "a") as f:
        f.write("x")
    with open(state) as f:
        n = len(f.read())
    faults = os.environ.get("FB_WORKER_FAULTS", "").split(",")
    fault = faults[n - 1] if n <= len(faults) else "ok"
    if fault == "hang":
        time.sleep(3600)
    elif fault == "raise":
        raise RuntimeError("no device for this worker")
    elif fault == "abort":
        os.abort()


@fusebench.case(inputs=lambda s, dt, dev, seed: (fusebench.randn(s, dt, dev, seed),),
                shapes=[(8, n) for n in range(1, 7)])
def started(a):
    return a + 1

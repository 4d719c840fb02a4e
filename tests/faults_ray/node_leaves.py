"""Run by tests/runner/test_ray.py as `python node_leaves.py DB`: a Ray cluster of two one-CPU nodes on
this machine (ray.cluster_utils), a sweep of ray_slow on it, and the node measuring the third
cell removed mid-cell.  The test then reads the store and the log of which node ran what."""
import os
import sys
import threading
import time

import ray
from ray.cluster_utils import Cluster

import fusebench
from fusebench.measure.timing import TimingSettings

db = sys.argv[1]
log = os.environ["FUSEBENCH_RAY_NODES"] = db + ".nodes"  # set before the nodes start: their workers inherit it
open(log, "w").close()
# Declare a silent node dead after about 3 s instead of Ray's default 15 s.
health = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 1000, "health_check_timeout_ms": 2000,
          "health_check_failure_threshold": 3}
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False,
                                                       "_system_config": health})
nodes = [cluster.add_node(num_cpus=1) for _ in range(2)]
ray.init(address=cluster.address, log_to_driver=False)
cluster.wait_for_nodes()


def remove_the_node_of_the_third_cell():
    while True:
        with open(log) as f:  # a line still being written has no node id yet: skip it
            started = dict(fields for fields in (line.split() for line in f) if len(fields) == 2)
        if "3" in started:
            victim = next(n for n in nodes if n.node_id == started["3"])
            cluster.remove_node(victim, allow_graceful=False)
            print("removed", victim.node_id, flush=True)
            return
        time.sleep(0.05)


def remover():
    try:
        remove_the_node_of_the_third_cell()
    except Exception as exc:  # seen by the test on stderr, not lost with the thread
        print(f"could not remove the node: {exc!r}", file=sys.stderr, flush=True)


threading.Thread(target=remover, daemon=True).start()
try:
    fusebench.run(["ray_slow"], impls=["eager"], db=db, plugins=[os.path.join(os.path.dirname(__file__), "slow.py")],
                  device="cpu", metrics="none", ray="auto", timing=TimingSettings(warmup_ms=1, rep_ms=2, min_reps=2,
                                                                                   max_reps=5))
finally:
    ray.shutdown()
    cluster.shutdown()

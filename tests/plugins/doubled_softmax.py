"""A plugin implementation for the tests: softmax computed as written, once per call -- or twice when
FUSEBENCH_TEST_WORK is 2, a real 2x slowdown that `fusebench compare --fail-above` must catch.
Each pass also sleeps a millisecond, so that the call's time is mostly waiting: a busy host
stretches both runs' calls alike instead of hiding the slowdown in its scheduling noise."""
import os
import time

import torch

from fusebench.impls.base import Implementation, Prepared, implementation


@implementation
class DoubledSoftmax(Implementation):
    name = "test-doubled"
    description = "softmax, computed FUSEBENCH_TEST_WORK times per call (tests only)"
    default = False

    def applies(self, case):
        return case.name == "softmax"

    def prepare(self, case, shape, dtype, device):
        times = int(os.environ.get("FUSEBENCH_TEST_WORK", "1"))

        def fn(x):
            out = None
            for _ in range(times):
                out = torch.softmax(x, dim=-1)
                time.sleep(0.001)
            return out

        return Prepared(fn=fn, note=f"computed {times} time(s) per call")

"""A plugin that leaves a mark when imported (FB_FAULT_DIR/imported): to tell whether it ran."""
import os

import fusebench

if os.environ.get("FB_FAULT_DIR"):
    with open(os.path.join(os.environ["FB_FAULT_DIR"], "imported"), "a") as f:
        f.write(f"{os.getpid()}\n")


@fusebench.case(inputs=lambda s, dt, dev, seed: (fusebench.randn(s, dt, dev, seed),), shapes=[(8, 8), (8, 16)])
def marked(a):
    return a * 2

"""An implementation of softmax that starts helpers outside its worker's process group, then hangs:
one in a session of its own (start_new_session=True), and one whose parent exits at once (so it
is re-parented away from the worker).  It writes "worker helper orphan" pids to
$FB_FAULT_DIR/helper_pids."""
import os
import subprocess
import sys
import time

import fusebench

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


@fusebench.implementation("escapes-session", cases=["softmax"])
def escapes_session(x):
    helper = subprocess.Popen(SLEEPER, start_new_session=True)
    quiet = "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL"  # holds no pipe of the spawner's run
    spawn = f"import subprocess; print(subprocess.Popen({SLEEPER!r}, start_new_session=True, {quiet}).pid)"
    orphan = int(subprocess.run([sys.executable, "-c", spawn], capture_output=True, text=True).stdout)
    with open(os.path.join(os.environ["FB_FAULT_DIR"], "helper_pids"), "w") as f:
        f.write(f"{os.getpid()} {helper.pid} {orphan}\n")
    time.sleep(3600)

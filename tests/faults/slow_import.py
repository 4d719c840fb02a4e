"""A plugin that takes a minute to import, saying when it starts ($FB_FAULT_DIR/importing): to
interrupt a run before its run row exists."""
import os
import time

if os.environ.get("FB_FAULT_DIR"):
    open(os.path.join(os.environ["FB_FAULT_DIR"], "importing"), "w").close()
time.sleep(60)

"""The Python the commands in loadtest/ run (standard library only), as modules from the
repository's root: `python3 -m loadtest.lib.bench`, `python3 -m loadtest.lib.chaoslab`. What
its modules share is in `loadtest.lib.common`; the chaos sale is `chaoslab`, the saturation
rows' parts `saturation`."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The scripts the load generators run: k6's (and the modules they import), wrk's.
K6 = ROOT / "loadtest" / "k6"
WRK = ROOT / "loadtest" / "wrk"
# Where the reports, logs and k6 steps go: loadtest/results/, or SECKILL_RESULTS (a trial
# run's figures kept out of the checkout's).
RESULTS = Path(os.environ.get("SECKILL_RESULTS") or ROOT / "loadtest" / "results")

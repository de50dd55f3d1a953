"""The load and chaos tooling. Its scripts run as modules from the repository's root
(`python3 -m loadtest.bench`, `python3 -m loadtest.chaoslab`), as the bash wrappers beside
them do; what they share is in `loadtest.common`."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Where the reports, logs and k6 steps go: loadtest/results/, or SECKILL_RESULTS (a trial
# run's figures kept out of the checkout's).
RESULTS = Path(os.environ.get("SECKILL_RESULTS") or ROOT / "loadtest" / "results")

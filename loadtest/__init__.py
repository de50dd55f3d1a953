"""The load and chaos tooling. Its scripts run as modules from the repository's root
(`python3 -m loadtest.bench`, `python3 -m loadtest.chaoslab`), as the bash wrappers beside
them do; what they share is in `loadtest.common`."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "loadtest" / "results"

"""A chaos sale: faults scheduled during a real load, every answer recorded, and a checker
that proves nothing was lost, oversold or charged twice. Run it with `loadtest/chaos`
(`python3 -m loadtest.lib.chaoslab` from the repository's root)."""

from ..common.text import MAGENTA, logger

# The sale's lines go to stdout: they are its running report.
log = logger("chaos", MAGENTA, stdout=True)

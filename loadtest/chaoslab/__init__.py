"""A chaos sale: faults scheduled during a real load, every answer recorded, and a checker
that proves nothing was lost, oversold or charged twice. Run it with `loadtest/chaos`."""

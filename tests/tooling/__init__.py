"""Tests of the scripts and load-test tooling (scripts/, loadtest/): `python3 -m unittest
discover -s tests/tooling`, standard library only."""

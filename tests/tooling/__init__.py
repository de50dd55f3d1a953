"""Tests of the scripts and load-test tooling (scripts/, loadtest/): from the repository's
root, `python3 -m unittest discover -s tests/tooling -t .`, standard library only."""

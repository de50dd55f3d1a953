"""The load and chaos tooling. At this folder's top, only the commands a user types (bash:
`loadtest/bench`, `loadtest/run`, `loadtest/chaos`, …; README.md is the map); the scripts the
load generators run are in k6/ and wrk/, and the Python the commands run is the package
`loadtest.lib`, run as modules from the repository's root (`python3 -m loadtest.lib.bench`),
as the commands do."""

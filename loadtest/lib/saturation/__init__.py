"""The saturation rows' parts (loadtest/lib/saturate.py runs them): `cpu` reads what each process
of the sale spent from /proc, `load` drives the fleet with wrk and reads its /metrics, `rows`
runs a row, `profile` profiles one, `report` and `bounds` write saturation.{md,svg}."""

"""The bench prints each row's line as the row finishes (loadtest/bench.py's matrix cells,
loadtest/saturation/rows.py's saturation rows): the line carries the row's key figures and whether
its sale was exact."""

import unittest

from loadtest import bench
from loadtest.saturation import rows

CELL = {"label": "zk batched", "guard": "zk", "batch_max": 256, "instances": 3, "hot": 10,
        "steps": [], "saturation": 1234.4, "p99_at_saturation": 56.2,
        "zk_writes_per_paid": 0.0123, "exact": True, "paid_201s": 6172, "units_sold": 6172}

ROW = {"label": "zk batched", "guard": "zk", "batch_max": 256, "hot": 100, "connections": 300,
       "seconds": 10.0, "paid": 9000, "paid_per_s": 900.4, "refused": 17, "other": 0,
       "errors": 0, "requests": 9017, "p50_ms": 20.0, "p99_ms": 88.25, "zk_writes": 90,
       "zk_writes_per_paid": 0.01, "lock_cycles": 45, "orders_per_cycle": 200.0,
       "cycles_per_transaction": 2.5, "units_sold": 9000, "exact": True, "zk_jit_ms": 12.0,
       "cpu_us_per_paid": {"service": 310.04, "postgresql": 120.5}, "build": "this"}

OPEN_ROW = {"label": "zk batched, open model 5×", "guard": "zk", "hot": 1, "offered_per_s": 7500,
            "paid_per_s": 1480.2, "refused_per_s": 6001.0, "dropped": 3,
            "accepted_p99_ms": 640.4, "exact": False, "build": "baseline"}


class RowLines(unittest.TestCase):
    def test_a_matrix_cell(self):
        line = bench.cell_line(CELL, 3, 16)
        self.assertTrue(line.startswith("row 3/16 done, zk batched ×3 hot 10: "), line)
        for figure in ("saturation 1234 paid/s", "p99 there 56 ms", "ZK writes/paid 0.012",
                       "6172 201s, 6172 units sold"):
            self.assertIn(figure, line)
        self.assertTrue(line.endswith("; exact"), line)

    def test_a_pg_atomic_cell_has_no_zookeeper_figure_and_an_inexact_one_says_so(self):
        cell = dict(CELL, label="pg-atomic batched", guard="pg-atomic", exact=False,
                    units_sold=6171)
        line = bench.cell_line(cell, 16, 16)
        self.assertNotIn("ZK writes", line)
        self.assertIn("6172 201s, 6171 units sold", line)
        self.assertTrue(line.endswith("; NOT EXACT"), line)

    def test_a_saturation_row(self):
        line = rows.row_line(ROW, 4, 8)
        self.assertTrue(line.startswith("row 4/8 done, zk batched hot 100 (this): "), line)
        for figure in ("900 paid/s", "p99 88.2 ms", "CPU µs/paid service 310.0 postgresql 120.5",
                       "ZK writes/paid 0.010", "refused 17", "orders/cycle 200.0",
                       "cycles/transaction 2.50", "ZooKeeper's JIT 12 ms"):
            self.assertIn(figure, line)
        self.assertTrue(line.endswith("; exact"), line)

    def test_the_open_model_row(self):
        line = rows.row_line(OPEN_ROW, 8, 8)
        self.assertTrue(
            line.startswith("row 8/8 done, zk batched, open model 5× hot 1 (baseline): "), line)
        for figure in ("offered 7500/s → 1480 paid/s", "6001 refused/s", "3 dropped by k6",
                       "p99 of the accepted 640 ms"):
            self.assertIn(figure, line)
        self.assertTrue(line.endswith("; NOT EXACT"), line)


if __name__ == "__main__":
    unittest.main()

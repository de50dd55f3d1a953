"""The bench prints each row's line as the row finishes (loadtest/lib/bench.py's matrix
cells, loadtest/lib/saturation/rows.py's saturation rows): the line carries the row's key
figures and whether its sale was exact."""

import unittest

from loadtest.lib import bench
from loadtest.lib.saturation import report, rows

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

    def test_a_routed_row_says_where_its_orders_went_and_its_longest_handover(self):
        routed = dict(ROW, label="zk batched, routed", routed=True, longest_handover_ms=61,
                      kept_cycles=4321,
                      wrks=[{"url": "http://127.0.0.1:8091", "products": 30, "connections": 90},
                            {"url": "http://127.0.0.1:8092", "products": 70,
                             "connections": 210}])
        line = rows.row_line(routed, 9, 10)
        self.assertTrue(line.startswith("row 9/10 done, zk batched, routed hot 100 (this): "))
        for figure in ("longest handover 61 ms, kept cycles 4321",
                       "routed: 30 on :8091 (90 connections), 70 on :8092 (210 connections)"):
            self.assertIn(figure, line)
        self.assertNotIn("routed:", rows.row_line(ROW, 4, 8))


def sale_row(label, hot, paid_per_s, routed=None, connections=300, **more):
    cpu = {"service": 300.0, "postgresql": 100.0, "zookeeper": 20.0, "provider": 30.0,
           "ledger": 10.0, "generator": 5.0}
    x = {"label": label, "guard": "zk", "batch_max": 256, "hot": hot,
         "connections": connections, "seconds": 10.0, "paid": int(paid_per_s * 10),
         "paid_per_s": paid_per_s, "refused": 0, "refused_per_s": 0.0, "other": 0,
         "errors": 0, "requests": int(paid_per_s * 10), "p50_ms": 10.0, "p99_ms": 40.0,
         "zk_writes": 20, "zk_writes_per_paid": 20 / (paid_per_s * 10), "lock_cycles": 100,
         "orders_per_cycle": 20.0, "cycles_per_transaction": None,
         "cpu_us": {k: v * paid_per_s * 10 for k, v in cpu.items()}, "cpu_us_per_paid": cpu,
         "units_sold": int(paid_per_s * 10), "exact": True, "zk_jit_ms": 0.0, "build": "this",
         "accepted_p99_ms": 50.0, "peak_rss_mib": 40.0, **more}
    if routed is not None:
        x["routed"] = routed
    return x


def saturation(*rows_, floor=None):
    return {"run": "r", "quick": False, "seconds": 10, "rows": list(rows_), "lapse": {},
            "peak_rss_mib": {"this": 50.0}, "floor": floor or {}, "profile": [],
            "baseline": None, "swap": False, "machine": {"cores": 2}}


HEALTHZ = {"this": {"healthz": {"requests_per_s": 25000.0, "user_us": 5.0, "system_us": 10.0,
                                "generator_us": 2.0}}}


class RoutedReport(unittest.TestCase):
    def report(self):
        split = lambda *n: [{"url": f"http://127.0.0.1:{8091 + i}", "products": p,
                             "connections": 3 * p} for i, p in enumerate(n)]
        return report.markdown(saturation(
            sale_row("zk batched", 1, 2000.0, routed=False, longest_handover_ms=0,
                     kept_cycles=0),
            sale_row("zk batched", 10, 1400.0, routed=False),
            sale_row("zk batched", 100, 1200.0, routed=False),
            sale_row("zk batched, routed, 4,000 connections", 1, 2300.0, routed=True,
                     connections=4002, peak_rss_mib=58.5, wrks=split(1)),
            sale_row("zk batched, routed", 1, 2500.0, routed=True, longest_handover_ms=0,
                     kept_cycles=900, wrks=split(1)),
            sale_row("zk batched, routed", 10, 2600.0, routed=True, longest_handover_ms=57,
                     kept_cycles=800, wrks=split(4, 3, 3)),
            sale_row("zk batched, routed", 100, 2300.0, routed=True, longest_handover_ms=73,
                     kept_cycles=700, wrks=split(30, 44, 26)),
            floor=HEALTHZ))

    def test_many_hot_products_against_one_uniform_and_routed(self):
        text = self.report()
        for line in ("- this: 10 hot products at 0.70× one hot product's rate (uniform, zk "
                     "batched)",
                     "- this: 100 hot products at 0.60× one hot product's rate (uniform, zk "
                     "batched)",
                     "- this: 10 hot products at 1.04× one hot product's rate (routed, zk "
                     "batched)",
                     "- this: 100 hot products at 0.92× one hot product's rate (routed, zk "
                     "batched)"):
            self.assertIn(line, text)

    def test_one_hot_product_against_the_healthz_ceiling_of_the_run(self):
        text = self.report()
        self.assertIn("- this: one hot product (routed) at 0.100× the healthz ceiling of this "
                      "run (2 500 against 25 000/s: GET /healthz, same wrk, 100 connections "
                      "per instance)", text)
        self.assertIn("- this: one hot product (uniform) at 0.080× the healthz ceiling", text)

    def test_the_crowd_against_the_routed_one_hot_row_and_its_memory(self):
        text = self.report()
        self.assertIn("- this: 4 002 connections, routed, at 0.92× the routed 300-connection "
                      "rate", text)
        self.assertIn("- this: RSS with 4 002 connections open (routed: one hot product, so "
                      "one instance holds them all): 58.5 MiB at most per instance, every row "
                      "so far (within 64 MiB)", text)

    def test_the_columns_and_the_longest_handover(self):
        text = self.report()
        head = next(ln for ln in text.splitlines() if ln.startswith("| build |"))
        self.assertIn("| connections | routed |", head)
        self.assertIn("| longest handover (ms) |", head)
        cells = lambda ln: ln.split("|")[1:-1]
        lines = [ln for ln in text.splitlines() if ln.startswith("| this |")]
        self.assertTrue(all(len(cells(ln)) == len(cells(head)) for ln in lines))
        routed = next(ln for ln in lines if ln.startswith("| this | zk batched, routed | 100 |"))
        at = cells(head).index(" routed ")
        self.assertEqual(cells(routed)[at].strip(), "yes (30/44/26)")
        self.assertEqual(cells(routed)[cells(head).index(" longest handover (ms) ")].strip(),
                         "73")
        self.assertIn("- this: the longest a node waited behind a kept lock: 73 ms (zk "
                      "batched, routed, 100 hot; 2 400 lock cycles on kept nodes in all)", text)
        self.assertIn("- this: ZooKeeper writes per paid order, at most 0.002 (zk batched, 100 "
                      "hot)", text)

    def test_an_old_report_reads_as_uniform(self):
        old = saturation(sale_row("zk batched", 1, 2000.0), sale_row("zk batched", 10, 1500.0),
                         sale_row("zk batched, 3,000 connections", 1, 1800.0,
                                  connections=3000),
                         floor={"this": {"requests_per_s": 20000.0, "user_us": 5.0,
                                         "system_us": 10.0, "generator_us": 2.0}})
        text = report.markdown(old)
        self.assertIn("10 hot products at 0.75× one hot product's rate (uniform", text)
        self.assertIn("one hot product (uniform) at 0.100× the healthz ceiling", text)
        self.assertIn("- this: 3 000 connections at 0.90× the uniform 300-connection rate", text)
        self.assertNotIn("(routed", text)
        self.assertNotIn("**Routed** rows", text)
        row = next(ln for ln in text.splitlines() if ln.startswith("| this | zk batched | 10 |"))
        self.assertIn("| 300 | no |", row)


if __name__ == "__main__":
    unittest.main()

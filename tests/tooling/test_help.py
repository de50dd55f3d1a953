"""scripts/test and scripts/demo answer -h/--help with their usage and start nothing. Each runs
from a copy of scripts/ in an empty checkout, with a PATH that holds only what printing a
usage needs: starting or installing anything (cargo, PostgreSQL, ZooKeeper, apt-get, curl)
would fail, and whatever a script made would be left in the checkout."""

import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COPIED = ("test", "demo", "lib.sh")
# The shebang's env finds bash; the scripts source lib.sh through dirname; usage is awk.
TOOLS = ("bash", "dirname", "awk")
# A bound on a script that went on to start things, not a measurement.
TIMEOUT_S = 60


def run(script, *args):
    """(the finished process, every path the run left in the checkout)."""
    with tempfile.TemporaryDirectory() as tmp:
        checkout = Path(tmp, "checkout")
        (checkout / "scripts").mkdir(parents=True)
        for name in COPIED:
            shutil.copy2(ROOT / "scripts" / name, checkout / "scripts" / name)
        tools = Path(tmp, "bin")
        tools.mkdir()
        for tool in TOOLS:
            (tools / tool).symlink_to(shutil.which(tool))
        proc = subprocess.run([str(checkout / "scripts" / script), *args],
                              env={"PATH": str(tools), "HOME": tmp}, capture_output=True,
                              text=True, timeout=TIMEOUT_S)
        left = sorted(str(p.relative_to(checkout)) for p in checkout.rglob("*"))
    return proc, left


UNTOUCHED = sorted(["scripts", *(f"scripts/{name}" for name in COPIED)])


class Help(unittest.TestCase):
    def assert_usage(self, script, must_mention):
        for flag in ("--help", "-h"):
            with self.subTest(script=script, flag=flag):
                proc, left = run(script, flag)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                self.assertEqual(proc.stderr, "")
                self.assertEqual(left, UNTOUCHED)
                self.assertIn(f"scripts/{script}", proc.stdout)
                for word in must_mention:
                    self.assertIn(word, proc.stdout)
                # The header comment, as text: no comment marks, no shebang, no code.
                self.assertFalse([ln for ln in proc.stdout.splitlines() if ln.startswith("#")])
                self.assertNotIn("source ", proc.stdout)

    def test_scripts_test_prints_its_usage_and_starts_nothing(self):
        self.assert_usage("test", ["--fast", "--help", "SECKILL_PG_PORT", "SECKILL_ZK_PORT"])

    def test_scripts_demo_prints_its_usage_and_starts_nothing(self):
        self.assert_usage("demo", ["--help", "SECKILL_LISTEN", "SECKILL_STOCK_THINK_MS",
                                   "SECKILL_PAYMENT_CONCURRENCY", "SECKILL_PAYMENT_API_KEY",
                                   "SECKILL_BUYER_AUTH"])

    def test_an_unknown_option_is_an_error_with_the_usage(self):
        for script, option in (("test", "--fastest"), ("demo", "--fast")):
            with self.subTest(script=script):
                proc, left = run(script, option)
                self.assertEqual(proc.returncode, 2, proc.stderr)
                self.assertEqual(left, UNTOUCHED)
                self.assertIn(f"unknown option {option}", proc.stderr)
                self.assertIn(f"scripts/{script} [", proc.stderr)
                self.assertEqual(proc.stdout, "")


if __name__ == "__main__":
    unittest.main()

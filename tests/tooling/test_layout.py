"""The tooling is one package run as modules from the root (`python3 -m loadtest.bench`):
no script edits the import path, no wrapper (loadtest/run, loadtest/lighthouse/run, …) holds
Python of its own (a heredoc or `python3 -c`), every module a wrapper runs exists, and each
Python entry point answers --help (argparse's, before anything starts). Every script that
starts a seckill server says how it knows its buyers (`--buyer-auth`: the server refuses to
start without)."""

import importlib.util
import os
import re
import subprocess
import sys
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Not the tooling's own: npm's install, the runs' output, bytecode.
SKIPPED = {"node_modules", "results", "__pycache__"}


def wrappers(folder):
    """The bash scripts in `folder` and its subfolders (loadtest/lighthouse/run)."""
    found = []
    for path in sorted(folder.iterdir()):
        if path.is_dir() and path.name not in SKIPPED:
            found += wrappers(path)
        elif (path.is_file() and not path.suffix
              and path.read_text().startswith("#!/usr/bin/env bash")):
            found.append(path)
    return found


WRAPPERS = wrappers(ROOT / "loadtest")
SOURCES = [*WRAPPERS, *sorted((ROOT / "loadtest").rglob("*.py")),
           *(p for p in sorted((ROOT / "scripts").iterdir()) if p.is_file()),
           *(p for p in sorted((ROOT / "tests" / "tooling").glob("*.py"))
             if p != Path(__file__).resolve())]
ENTRY_POINTS = ["loadtest.bench", "loadtest.saturate", "loadtest.latency", "loadtest.recipes",
                "loadtest.chaoslab", "loadtest.lighthouse_report", "loadtest.common.cli"]
# Python handed to the interpreter in the script itself: a heredoc (`python3 - ARGS <<'PY'`)
# or a string (`python3 -c '…'`).
INLINE_PYTHON = re.compile(r"python3?\s+-(\s|c\b)")


def name(path):
    return str(path.relative_to(ROOT))


class Layout(unittest.TestCase):
    def test_the_wrappers_are_found(self):
        self.assertLessEqual({f"loadtest/{w}" for w in ("bench", "chaos", "flood", "latency",
                                                         "recipes", "run", "views",
                                                         "lighthouse/run")},
                             {name(p) for p in WRAPPERS})

    def test_nothing_edits_the_import_path(self):
        for path in SOURCES:
            with self.subTest(path=name(path)):
                text = path.read_text()
                self.assertIsNone(re.search(r"sys\.path\.(insert|append)|PYTHONPATH=", text))

    def test_no_wrapper_holds_python_of_its_own(self):
        self.assertTrue(INLINE_PYTHON.search("python3 - \"$OUT\" <<'PY'"))
        self.assertTrue(INLINE_PYTHON.search("python3 -c 'print(1)'"))
        self.assertFalse(INLINE_PYTHON.search("python3 -m loadtest.views scrape"))
        for path in WRAPPERS:
            with self.subTest(wrapper=name(path)):
                found = [line for line in path.read_text().splitlines()
                         if INLINE_PYTHON.search(line)]
                self.assertEqual(found, [], "move it into the package, run as python3 -m")

    def test_every_module_a_wrapper_runs_exists(self):
        run = {(name(path), module) for path in WRAPPERS
               for module in re.findall(r"python3 -m (loadtest[\w.]*)", path.read_text())}
        self.assertLessEqual({"loadtest.bench", "loadtest.chaoslab", "loadtest.verdict"},
                             {module for _, module in run})
        for wrapper, module in sorted(run):
            with self.subTest(wrapper=wrapper, module=module):
                self.assertIsNotNone(importlib.util.find_spec(module))

    def test_every_server_started_knows_its_buyers(self):
        # A seckill started with its flags: the admin token's (bash, Python) or the demo's.
        starts = re.compile(r'--admin-token "\$|"--admin-token",|release/seckill --')
        starters = [p for p in SOURCES if starts.search(p.read_text())]
        self.assertLessEqual({"loadtest/run", "loadtest/views", "loadtest/flood",
                              "loadtest/lighthouse/run", "loadtest/fleet.py",
                              "loadtest/chaoslab/cluster.py", "scripts/test", "scripts/demo"},
                             {name(p) for p in starters})
        for path in starters:
            with self.subTest(path=name(path)):
                self.assertIn("--buyer-auth", path.read_text())

    def test_the_entry_points_answer_help(self):
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        for module in ENTRY_POINTS:
            with self.subTest(module=module):
                proc = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, env=env,
                                      capture_output=True, text=True, timeout=60)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                self.assertTrue(proc.stdout.startswith("usage: "), proc.stdout)


if __name__ == "__main__":
    unittest.main()

"""The tooling's layout (loadtest/README.md): the top of loadtest/ holds only the commands
(bash wrappers: loadtest/run, loadtest/lighthouse/run, …), k6/ and wrk/ the load generators'
scripts, and lib/ the Python, one package run as modules from the root
(`python3 -m loadtest.lib.bench`). No script edits the import path, no wrapper holds Python
of its own (a heredoc or `python3 -c`), every module a wrapper runs exists and is an entry
point of pyproject.toml (a main that takes no argument), every k6 or wrk script named
exists, and each Python entry point answers --help (argparse's, before anything starts).
Every script that starts a seckill server says how it knows its buyers (`--buyer-auth`: the
server refuses to start without)."""

import importlib
import importlib.util
import inspect
import os
import re
import subprocess
import sys
import tomllib
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


LOADTEST = ROOT / "loadtest"
WRAPPERS = wrappers(LOADTEST)
# Beside the commands at the top of loadtest/: its map, the package's root, and a folder per
# kind (lighthouse/ is a command's, with its npm pins).
TOP = {"README.md", "__init__.py", "k6", "wrk", "lib", "lighthouse"}
# The tooling's Python (not an npm package's, were lighthouse/ installed).
PYTHON = [p for p in sorted(LOADTEST.rglob("*.py"))
          if not SKIPPED & set(p.relative_to(LOADTEST).parts)]
SOURCES = [*WRAPPERS, *PYTHON,
           *(p for p in sorted((ROOT / "scripts").iterdir()) if p.is_file()),
           *(p for p in sorted((ROOT / "tests" / "tooling").glob("*.py"))
             if p != Path(__file__).resolve())]
ENTRY_POINTS = ["loadtest.lib.bench", "loadtest.lib.saturate", "loadtest.lib.rush",
                "loadtest.lib.latency", "loadtest.lib.recipes", "loadtest.lib.chaoslab",
                "loadtest.lib.lighthouse_report", "loadtest.lib.common.cli"]
# pyproject.toml's [project.scripts]: name → "module:function".
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
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

    def test_the_top_holds_only_the_commands(self):
        for path in sorted(LOADTEST.iterdir()):
            if path.name not in TOP | SKIPPED:
                with self.subTest(path=name(path)):
                    self.assertIn(path, WRAPPERS, f"a command, or in a folder of its kind: {TOP}")
                    self.assertTrue(os.access(path, os.X_OK), "a command runs as it is")

    def test_each_kind_is_in_its_folder(self):
        self.assertEqual({p.suffix for p in (LOADTEST / "k6").iterdir()}, {".js"})
        self.assertEqual({p.suffix for p in (LOADTEST / "wrk").iterdir()}, {".lua"})
        outside = {name(p) for p in PYTHON if LOADTEST / "lib" not in p.parents}
        self.assertEqual(outside, {"loadtest/__init__.py"})
        scripts = [p for p in (LOADTEST / "lib").rglob("*") if p.suffix in (".js", ".lua")]
        self.assertEqual(scripts, [])

    def test_every_load_script_named_exists(self):
        named = set()
        for path in [*SOURCES, *(LOADTEST / "k6").iterdir()]:
            text = path.read_text()
            named |= {f"loadtest/{d}/{f}" for d, f in
                      re.findall(r"loadtest/(k6|wrk)/([\w.-]+\.(?:js|lua))\b", text)}
            named |= {f"loadtest/{d.lower()}/{f}" for d, f in
                      re.findall(r'\b(K6|WRK) / "([\w.-]+)"', text)}
        # What loadtest/run, loadtest/views and lib/ (the bench, the rush) hand k6 and wrk.
        self.assertLessEqual({"loadtest/k6/seckill.js", "loadtest/k6/views.js",
                              "loadtest/k6/bench.js", "loadtest/k6/rush.js",
                              "loadtest/wrk/orders.lua"}, named)
        for script in sorted(named):
            with self.subTest(script=script):
                self.assertTrue((ROOT / script).is_file())

    def test_each_entry_point_is_a_main_that_takes_no_argument(self):
        self.assertTrue(SCRIPTS)
        for script, target in SCRIPTS.items():
            with self.subTest(script=script, target=target):
                module, _, function = target.partition(":")
                main = getattr(importlib.import_module(module), function)
                self.assertEqual(function, "main")
                inspect.signature(main).bind()  # a console script calls it with none

    def test_every_module_a_command_runs_is_an_entry_point(self):
        run = {module for path in [*WRAPPERS, ROOT / "scripts" / "test"]
               for module in re.findall(r"python3 -m (loadtest[\w.]*)", path.read_text())}
        targets = {t.partition(":")[0].removesuffix(".__main__") for t in SCRIPTS.values()}
        self.assertLessEqual({"loadtest.lib.bench", "loadtest.lib.chaoslab"}, run)
        self.assertLessEqual(run, targets)

    def test_nothing_edits_the_import_path(self):
        for path in SOURCES:
            with self.subTest(path=name(path)):
                text = path.read_text()
                self.assertIsNone(re.search(r"sys\.path\.(insert|append)|PYTHONPATH=", text))

    def test_no_wrapper_holds_python_of_its_own(self):
        self.assertTrue(INLINE_PYTHON.search("python3 - \"$OUT\" <<'PY'"))
        self.assertTrue(INLINE_PYTHON.search("python3 -c 'print(1)'"))
        self.assertFalse(INLINE_PYTHON.search("python3 -m loadtest.lib.views scrape"))
        for path in WRAPPERS:
            with self.subTest(wrapper=name(path)):
                found = [line for line in path.read_text().splitlines()
                         if INLINE_PYTHON.search(line)]
                self.assertEqual(found, [], "move it into the package, run as python3 -m")

    def test_every_module_a_wrapper_runs_exists(self):
        run = {(name(path), module) for path in WRAPPERS
               for module in re.findall(r"python3 -m (loadtest[\w.]*)", path.read_text())}
        self.assertLessEqual({"loadtest.lib.bench", "loadtest.lib.chaoslab",
                              "loadtest.lib.verdict"}, {module for _, module in run})
        for wrapper, module in sorted(run):
            with self.subTest(wrapper=wrapper, module=module):
                self.assertIsNotNone(importlib.util.find_spec(module))

    def test_every_server_started_knows_its_buyers(self):
        # A seckill started with its flags: the admin token's (bash, Python) or the demo's.
        starts = re.compile(r'--admin-token "\$|"--admin-token",|release/seckill --')
        starters = [p for p in SOURCES if starts.search(p.read_text())]
        self.assertLessEqual({"loadtest/run", "loadtest/views", "loadtest/flood",
                              "loadtest/lighthouse/run", "loadtest/lib/fleet.py",
                              "loadtest/lib/chaoslab/cluster.py", "scripts/test", "scripts/demo"},
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

"""Every figure the README quotes (README.md and README.zh-CN.md) names, on its own line, the
file it comes from, and that file holds it.

A figure is a number with a unit — a ratio (×, 倍), a share (%), a size (KiB, MiB, GiB), a
rate (/s, orders/s, 每秒 …), a time (µs, ms, s, min, 分钟) — or a number in bold. A target
is a number written after ≥, ≤, < or >: what the project asks, not what a run measured. The
sources of a line are the files it links: results files (`loadtest/results/*.md`) and
sections of docs pages (`docs/…md#heading`: from that heading to the next one of its level
or above; the whole page without an anchor).

- A measurement of the sale — a ratio, share, size, rate, µs or ms — is in a results file
  linked on its own line: a line that quotes one links a results file, and a docs page that
  holds the figure does not stand in for it.
- A target, a time or a bold figure is in one of its line's sources (a target is set by the
  page that quotes it; a test's bound or duration may be recorded by its page alone).
- On a line with any figure or target, or with a link to a results file, every number
  (counts and plain decimals too) is in one of the line's sources.

Numbers are compared as written, thousands separators aside: `1 387`, `1,387` and `1387` are
one number, `0.70` and `0.7` are two. Code spans, link targets and URLs are not prose;
numbers glued to a letter, `/` or `.` (k6, HTTP/2, v2.41.1, p99) are names, not numbers."""

import re
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
READMES = ("README.md", "README.zh-CN.md")
RESULTS = ROOT / "loadtest" / "results"
DOCS = ROOT / "docs"

# A number: digits, maybe grouped by thousands (space, comma, no-break spaces), maybe a
# decimal part. Not when glued to a name (k6, HTTP/2, p99, v2.41.1, #38).
NUMBER = re.compile(r"(?<![A-Za-z0-9_./#\\])"
                    r"(\d{1,3}(?:[ ,\u00a0\u202f]\d{3})+(?![0-9])|\d+)(\.\d+)?"
                    r"(?![A-Za-z0-9_]|\.\d)")
# What a figure of the sale's performance is written with, after its number…
PERFORMANCE_AFTER = re.compile(r"\s*(×|倍|%|[KMG]iB\b|µs|ms\b|/s\b|(?:paid )?orders/s\b"
                               r"|(?:paid )?orders a second\b|refusals/s\b)")
# … or before it (中文: 每秒 N 个).
PERFORMANCE_BEFORE = re.compile(r"每秒[^\d]{0,6}$")
# A target: what is asked, not measured (≥ 20,000 paid orders/s, ≤ 65 µs).
TARGET_BEFORE = re.compile(r"[≥≤<>]\s*(?:每秒\s*)?$")
# Other measured figures: a time.
TIME_AFTER = re.compile(r"\s*(s\b|min\b|h\b|分钟|秒)")
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`[^`]*`")
URL = re.compile(r"\b(?:https?|ftp)://\S+")


def canonical(match):
    """A number as compared: its digits, thousands separators dropped, the decimals kept."""
    return re.sub(r"[ ,\u00a0\u202f]", "", match.group(1)) + (match.group(2) or "")


def numbers_in(text):
    """Every number written in a text, canonical."""
    return {canonical(m) for m in NUMBER.finditer(text)}


def prose_lines(text):
    """(line number, line) for every line outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading):
    """The anchor GitHub gives a heading (as tests/api/contract.rs reads it): lower case,
    punctuation dropped, spaces as hyphens."""
    kept = "".join(c for c in heading.strip().lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def section(text, anchor):
    """The text under the heading whose anchor is `anchor`, to the next heading of its level
    or above; None if no heading has that anchor."""
    lines = dict(prose_lines(text))
    all_lines = text.splitlines()
    start = level = None
    for number, line in sorted(lines.items()):
        heading = re.match(r"(#+) (.*)", line)
        if not heading:
            continue
        depth = len(heading.group(1))
        if start is None:
            if slug(heading.group(2)) == anchor:
                start, level = number, depth
        elif depth <= level:
            return "\n".join(all_lines[start - 1:number - 1])
    return None if start is None else "\n".join(all_lines[start - 1:])


def sources(targets, base):
    """(the results files' texts, the docs sections' texts, [targets that name a source and do
    not resolve]) of a line's link targets."""
    results, docs, broken = [], [], []
    for target in targets:
        if "://" in target:
            continue
        path, _, anchor = target.partition("#")
        file = (base / path).resolve() if path else None
        if file is None or file.suffix != ".md":
            continue
        if file.is_relative_to(RESULTS):
            if file.is_file():
                results.append(file.read_text())
            else:
                broken.append(target)
        elif file.is_relative_to(DOCS):
            text = file.read_text() if file.is_file() else None
            part = text if text is not None and not anchor else (
                section(text, anchor) if text is not None else None)
            if part is None:
                broken.append(target)
            else:
                docs.append(part)
    return results, docs, broken


def split(line):
    """(the line's prose, its link targets): code spans, link targets and URLs taken out."""
    targets = LINK.findall(line)
    prose = LINK.sub("]", line)
    prose = CODE_SPAN.sub(" ", prose)
    prose = URL.sub(" ", prose)
    return prose, targets


def kind(prose, match):
    """`target`, `performance`, `figure` (a time, a bold number) or None (a plain number)."""
    after, before = prose[match.end():], prose[:match.start()]
    if TARGET_BEFORE.search(before):
        return "target"
    bold = before.endswith("**") and re.match(r"\S*\*\*", after)
    after = after.lstrip("*")  # **1 387** paid orders/s
    if PERFORMANCE_AFTER.match(after) or PERFORMANCE_BEFORE.search(before):
        return "performance"
    if TIME_AFTER.match(after) or bold:
        return "figure"
    return None


def problems(text, base=ROOT):
    """What is wrong with a README's figures: one line each, `line N: …`."""
    found = []
    for number, line in prose_lines(text):
        prose, targets = split(line)
        matches = list(NUMBER.finditer(prose))
        kinds = [kind(prose, m) for m in matches]
        results, docs, broken = sources(targets, base)
        for target in broken:
            found.append(f"line {number}: {target} does not resolve")
        if not any(kinds) and not results:
            continue
        quoted = [m.group(0).strip() for m, k in zip(matches, kinds) if k]
        if "performance" in kinds and not results:
            found.append(f"line {number}: quotes {quoted} and links no file of "
                         f"loadtest/results/")
            continue
        if not results and not docs:
            found.append(f"line {number}: quotes {quoted} and links no source")
            continue
        measured = numbers_in("\n".join(results))
        anywhere = measured | numbers_in("\n".join(docs))
        for match, k in zip(matches, kinds):
            pool = measured if k == "performance" else anywhere
            if canonical(match) not in pool:
                where = "results files" if k == "performance" else "sources"
                found.append(f"line {number}: {match.group(0).strip()!r} is in none of its "
                             f"{where} {targets}")
    return found


def results_linked(text):
    """The results files a README links, by name."""
    return {Path(t.split("#")[0]).name for t in LINK.findall(text) if "loadtest/results/" in t}


class ReadmeFigures(unittest.TestCase):
    maxDiff = None

    def test_every_figure_of_each_readme_is_in_the_file_its_line_names(self):
        for readme in READMES:
            with self.subTest(readme=readme):
                self.assertEqual(problems((ROOT / readme).read_text()), [])

    def test_both_readmes_quote_the_same_results_files(self):
        en, zh = ((ROOT / readme).read_text() for readme in READMES)
        self.assertGreaterEqual(len(results_linked(en)), 5)
        self.assertEqual(results_linked(en), results_linked(zh))

    def test_a_made_up_figure_fails(self):
        readme = (ROOT / "README.md").read_text()
        self.assertIn("76.1 MiB", readme)
        found = problems(readme.replace("76.1 MiB", "61.3 MiB", 1))
        self.assertEqual(len(found), 1, found)
        self.assertIn("'61.3'", found[0])
        zh = (ROOT / "README.zh-CN.md").read_text()
        self.assertTrue(problems(zh.replace("76.1 MiB", "58.6 MiB", 1)))

    def test_a_figure_its_results_file_does_not_hold_fails(self):
        line = "- sells **9 999** paid orders/s ([`kept.md`](loadtest/results/kept.md))\n"
        self.assertEqual(len(problems(line)), 1)
        line = "- sells **4 069** paid orders/s ([`kept.md`](loadtest/results/kept.md))\n"
        self.assertEqual(problems(line), [])
        # A page that holds the figure does not stand in for the results file: the memory
        # section quotes the older 58.6 beside its run, kept.md does not hold it.
        line = ("- peaks at 58.6 MiB ([`kept.md`](loadtest/results/kept.md), "
                "[memory](docs/throughput.md#memory-with-4000-connections-open))\n")
        self.assertEqual(len(problems(line)), 1)

    def test_a_performance_figure_without_a_results_file_fails(self):
        for line in ("an instance peaks at 58.6 MiB", "**9.15×** the row lock",
                     "1 387 paid orders/s", "its p99 is 61.7 ms",
                     "每秒 **1 387** 个已支付订单",
                     "99.9 % of orders paid ([tests](docs/testing.md))",
                     "58.6 MiB ([memory](docs/throughput.md#memory-with-4000-connections-open))"):
            with self.subTest(line=line):
                self.assertTrue(problems(line + "\n"))

    def test_a_target_comes_from_the_page_that_sets_it(self):
        page = "([targets](docs/throughput.md#the-speed-targets-one-by-one))"
        self.assertEqual(problems(f"≥ 20,000 paid orders/s, ≤ 65 µs a paid order {page}\n"),
                         [])
        self.assertEqual(problems(f"每秒 ≥ 20,000 个已支付订单 {page}\n"), [])
        self.assertTrue(problems(f"≥ 30,000 paid orders/s {page}\n"))
        self.assertTrue(problems("≥ 20,000 paid orders/s\n"))

    def test_a_time_may_come_from_a_docs_section(self):
        line = "took 8 min 38 s to 12 min 26 s ([tests](docs/testing.md))\n"
        self.assertEqual(problems(line), [])
        self.assertTrue(problems("took 8 min 39 s ([tests](docs/testing.md))\n"))
        self.assertTrue(problems("took 8 min 38 s\n"))

    def test_what_is_not_a_figure(self):
        for line in ("ZooKeeper 3.8 and PostgreSQL 15 from Debian's packages",
                     "k6, HTTP/2, p99 and `--rows=1,2,3` and http://127.0.0.1:8080",
                     "Product 1 is guarded by the ZooKeeper lock, product 2 is not",
                     "```\nlatency 99.9 ms\n```"):
            with self.subTest(line=line):
                self.assertEqual(problems(line + "\n"), [])

    def test_numbers_are_read_as_written(self):
        self.assertEqual(numbers_in("1 387 and 1,387 and 4 002, 0.70× not 0.7"),
                         {"1387", "4002", "0.70", "0.7"})
        self.assertEqual(numbers_in("k6 HTTP/2 v2.41.1 p99 #38 seckill_bench_sat20261127t"),
                         set())
        self.assertEqual(numbers_in("58,746, 60,359, 60,657"), {"58746", "60359", "60657"})
        self.assertEqual(numbers_in("在 3 个实例上，4,000 个连接"), {"3", "4000"})


if __name__ == "__main__":
    unittest.main()

"""The page's shape, held: every request goes through static/js/api.js, markup is written only
by static/js/render.js (which escapes), no file in static/ is over 300 lines, no module keeps
mutable state of its own outside the store, the lists a sale redraws are never live regions,
and no client decides a retry from a status of its own (the answer's `retryable` does)."""

import re
import unittest
from html.parser import HTMLParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "static"
MODULES = sorted(STATIC.rglob("*.js"))
# The lists a sale redraws many times a second: shown, never announced.
LISTS = ("products", "queue", "log", "sem-leases", "sem-waiters", "rw-holders", "rw-waiters",
         "step-queued")
LIVE_ROLES = {"status", "alert", "log", "marquee", "timer"}


def code(path):
    """The file without its comments, so a comment naming fetch() is no call."""
    text = path.read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"(^|[^:'\"`])//.*$", r"\1", text, flags=re.M)


class Elements(HTMLParser):
    """Each element with an id: its tag and attributes, and the ids of its live ancestors."""

    def __init__(self):
        super().__init__()
        self.stack = []
        self.found = {}

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        live = (tag == "output" or attrs.get("role") in LIVE_ROLES
                or attrs.get("aria-live", "off") != "off")
        inside = any(live_ for _, live_ in self.stack)
        if "id" in attrs:
            self.found[attrs["id"]] = (tag, live, inside)
        if tag not in {"meta", "link", "input", "br", "img", "hr"}:
            self.stack.append((tag, live))

    def handle_endtag(self, tag):
        while self.stack:
            if self.stack.pop()[0] == tag:
                break


class PageLayout(unittest.TestCase):
    def test_every_request_goes_through_api_js(self):
        for path in MODULES:
            calls = re.findall(r"\bfetch\(|\bnew EventSource\(|XMLHttpRequest", code(path))
            if path.name != "api.js":
                self.assertEqual(calls, [], f"{path.relative_to(ROOT)} sends a request itself")
        self.assertTrue(re.search(r"\bfetch\(", code(STATIC / "js" / "api.js")))

    def test_only_render_js_writes_markup(self):
        for path in MODULES:
            writes = re.findall(r"innerHTML\s*=|outerHTML\s*=|insertAdjacentHTML|document\.write",
                                code(path))
            if path.name != "render.js":
                self.assertEqual(writes, [], f"{path.relative_to(ROOT)} writes markup itself")

    def test_no_file_in_static_is_over_300_lines(self):
        for path in sorted(STATIC.rglob("*")):
            if path.is_file():
                lines = len(path.read_text().splitlines())
                self.assertLessEqual(lines, 300, f"{path.relative_to(ROOT)}: {lines} lines")

    def test_modules_keep_no_mutable_state_outside_the_store(self):
        for path in MODULES:
            if path.name == "state.js":
                continue
            top = re.findall(r"^(?:let|var)\s+\w+", code(path), flags=re.M)
            self.assertEqual(top, [], f"{path.relative_to(ROOT)}: module-level {top}")

    def test_the_lists_a_sale_redraws_are_not_live_regions(self):
        page = Elements()
        page.feed((STATIC / "index.html").read_text())
        for name in LISTS:
            self.assertIn(name, page.found, f"#{name} is on the page")
            tag, live, inside = page.found[name]
            self.assertFalse(live or inside, f"#{name} ({tag}) would be announced")
        # And the verdicts still are.
        self.assertTrue(page.found["money-verdict"][1])

    def test_no_client_decides_a_retry_from_a_status_of_its_own(self):
        clients = MODULES + [ROOT / "loadtest" / "k6" / "answers.js"]
        for path in clients:
            found = re.findall(r"status\s*[!=]==?\s*(?:429|500|503)|\[(?:\s*\d{3}\s*,)+\s*\d{3}\s*\]"
                               r"\.includes\(\s*\w*\.?status", code(path))
            self.assertEqual(found, [], f"{path.relative_to(ROOT)}: {found}")


if __name__ == "__main__":
    unittest.main()

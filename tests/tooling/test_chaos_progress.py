"""The chaos sale's progress line (loadtest/lib/chaoslab/progress.py): one line per 10 s tick with
the answers so far by status, the requests left unanswered, and the nemeses striking then.
A fake clock and a fake sleep drive it: nothing here waits."""

import asyncio
import unittest

from loadtest.lib.chaoslab.nemesis import Nemesis
from loadtest.lib.chaoslab.progress import Progress


def answer(status):
    return {"op": "order", "status": status, "t0": 0.0, "t1": 0.1}


TIMEOUT = {"op": "order", "error": "timeout", "t0": 0.0, "t1": 6.0}
MARK = {"mark": "nemesis", "t": 1.0, "kind": "kill9", "target": 2}

# What each 10 s of the sale records, and what strikes at its end.
TICKS = [
    ([answer(201)] * 3 + [answer(503), TIMEOUT, MARK], []),
    ([answer(201)] * 2 + [answer(409), answer(503), answer(503)], ["kill9@i2", "provider_slow"]),
    ([], []),
]


class Stop(Exception):
    """Ends the fake sale after its last tick."""


class ProgressLines(unittest.TestCase):
    def run_sale(self, slow_line_s=0.0):
        """Runs Progress over TICKS; returns (seconds each sleep asked for, lines)."""
        now = [0.0]
        events, strikes, lines, asked = [], [], [], []
        progress = Progress(events, lambda: now[0], lambda: list(strikes), lines.append)

        async def sleep(seconds):
            if len(asked) == len(TICKS):
                raise Stop
            records, striking = TICKS[len(asked)]
            asked.append(seconds)
            now[0] += seconds
            events.extend(records)
            strikes[:] = striking

        def emit(line):
            lines.append(line)
            now[0] += slow_line_s  # a line that took time to print

        progress.emit = emit
        with self.assertRaises(Stop):
            asyncio.run(progress.run(sleep))
        return asked, lines

    def test_a_line_per_tick_with_the_figures_so_far(self):
        asked, lines = self.run_sale()
        self.assertEqual(asked, [10.0, 10.0, 10.0])
        self.assertEqual(lines, [
            "at 10 s: 4 answers (201×3 503×1), 1 unanswered; striking: none",
            "at 20 s: 9 answers (201×5 503×3 409×1), 1 unanswered; striking: kill9@i2, "
            "provider_slow",
            "at 30 s: 9 answers (201×5 503×3 409×1), 1 unanswered; striking: none",
        ])

    def test_a_slow_line_does_not_shift_the_ticks(self):
        asked, lines = self.run_sale(slow_line_s=0.5)
        self.assertEqual(asked, [10.0, 9.5, 9.5])
        self.assertEqual([line.split(":")[0] for line in lines], ["at 10 s", "at 20 s", "at 30 s"])

    def test_it_stops_when_cancelled(self):
        progress = Progress([], lambda: 0.0, lambda: [], print)

        async def sale():
            never = asyncio.Event()

            async def sleep(_):
                await never.wait()

            task = asyncio.create_task(progress.run(sleep))
            await asyncio.sleep(0)  # lets it reach its first wait
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task

        asyncio.run(sale())


class FakeHistory:
    def now(self):
        return 0.0

    def note(self, mark, **fields):
        pass


class StrikingNow(unittest.TestCase):
    def test_a_fault_is_striking_while_it_holds_and_not_after(self):
        nemesis = Nemesis(cluster=None, sale=None, history=FakeHistory(), seed=1, session_ms=4000)
        seen = {}

        async def sale():
            async def instance_fault(target):
                seen["instance"] = (target, nemesis.striking_now())

                async def shared_fault(_):
                    seen["both"] = nemesis.striking_now()

                await nemesis._strike("provider_slow", shared_fault)

            await nemesis._strike("kill9", instance_fault)

        self.assertEqual(nemesis.striking_now(), [])
        asyncio.run(sale())
        target, during = seen["instance"]
        self.assertEqual(during, [f"kill9@i{target}"])
        self.assertEqual(seen["both"], [f"kill9@i{target}", "provider_slow"])
        self.assertEqual(nemesis.striking_now(), [])
        self.assertEqual([e["kind"] for e in nemesis.timeline], ["provider_slow", "kill9"])


if __name__ == "__main__":
    unittest.main()

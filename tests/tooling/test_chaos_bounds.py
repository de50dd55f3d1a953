"""The chaos sale's waits end within their time whatever the other side does: the mass lapse's
polls of PostgreSQL (loadtest/lib/chaoslab/lapse.py) stop at their bound while PostgreSQL does not
answer, and an instance that does not exit is killed once its time is up
(loadtest/lib/chaoslab/cluster.py). The bounds are shortened to a fraction of a second here."""

import asyncio
import os
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from loadtest.lib.chaoslab import lapse
from loadtest.lib.chaoslab.cluster import Instance
from loadtest.lib.common.pg import PsqlError

# Far above the shortened bounds: a wait that does not end fails the test, not the suite.
GUARD_S = 10.0


class Notes:
    def __init__(self):
        self.marks = []

    def note(self, mark, **fields):
        self.marks.append((mark, fields))


class FakeSale:
    def __init__(self):
        self.history = Notes()


class FakeCluster:
    """Answers each poll with the next of `samples` (an exception is raised), then fails."""

    def __init__(self, samples=()):
        self.samples = list(samples)
        self.polls = 0

    def query(self, sql, timeout):
        self.polls += 1
        answer = self.samples.pop(0) if self.samples else PsqlError("psql failed: no answer")
        if isinstance(answer, Exception):
            raise answer
        return [answer]


def sample(held):
    return {"at": 100.0, "stock": 10 - held, "total": 10, "held": held, "overdue": 0}


@mock.patch.multiple(lapse, LAPSE_IN_S=0.0, BOUND_S=0.3, MARGIN_S=0.0, POLL_S=0.01)
class LapsePolls(unittest.TestCase):
    def watch(self, cluster):
        sale = FakeSale()
        asyncio.run(asyncio.wait_for(lapse.watch(sale, cluster, 7, deadline=99.0), GUARD_S))
        return sale.history.marks

    def test_they_stop_at_the_bound_while_postgresql_does_not_answer(self):
        cluster = FakeCluster()
        self.assertEqual(self.watch(cluster), [])
        self.assertGreater(cluster.polls, 2)  # tried again and again, then gave up

    def test_they_stop_once_every_reservation_is_back(self):
        cluster = FakeCluster([PsqlError("restarting"), sample(3), sample(0), sample(0)])
        marks = self.watch(cluster)
        self.assertEqual([m for m, _ in marks], ["lapse_poll", "lapse_poll", "lapse_returned"])
        self.assertEqual(marks[-1][1], {"at": 100.0, "deadline": 99.0})
        self.assertEqual(cluster.polls, 3)


class InstanceExit(unittest.TestCase):
    def instance(self, tmp, *args):
        inst = Instance(0, 0, [sys.executable, "-c", *args], Path(tmp, "instance.log"),
                        dict(os.environ))
        inst.start()
        return inst

    def test_one_that_does_not_exit_in_time_is_killed(self):
        with tempfile.TemporaryDirectory() as tmp:
            inst = self.instance(tmp, "import time; time.sleep(60)")
            asyncio.run(asyncio.wait_for(inst.wait_exit(0.3), GUARD_S))
            self.assertFalse(inst.running())
            self.assertEqual(inst.proc.returncode, -9)

    def test_one_that_exits_is_reaped_not_killed(self):
        with tempfile.TemporaryDirectory() as tmp:
            inst = self.instance(tmp, "pass")
            asyncio.run(asyncio.wait_for(inst.wait_exit(GUARD_S / 2), GUARD_S))
            self.assertEqual(inst.proc.returncode, 0)


if __name__ == "__main__":
    unittest.main()

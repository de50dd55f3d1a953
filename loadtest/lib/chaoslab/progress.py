"""The sale's progress while it runs: every 10 s a line with the time since the sale began, the
answers so far by status, the requests that got none, the buyers' sign-ins (if any: not
orders, so counted apart), and the nemeses striking now. A sale of minutes otherwise says
nothing between its start and its verdict."""

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable

from .buyers import SESSION

EVERY_S = 10.0


class Progress:
    """Counts the history's requests as they are recorded (each once) and makes the line."""

    def __init__(self, events: list[dict], clock: Callable[[], float],
                 striking: Callable[[], list[str]], emit: Callable[[str], None],
                 every: float = EVERY_S):
        self.events = events      # the history's own list, appended to as the sale goes
        self.clock = clock        # seconds since the sale began
        self.striking = striking  # the nemeses' faults holding now
        self.emit = emit
        self.every = every
        self.seen = 0             # events already counted
        self.statuses = Counter()
        self.unanswered = 0       # timeouts, refused or dropped connections
        self.sign_ins = 0         # POST /api/session, answered or not

    def _count(self) -> None:
        for event in self.events[self.seen:]:
            if "op" not in event:
                continue  # a mark (nemesis, heal, phase), not a request
            if event["op"] == SESSION:
                self.sign_ins += 1  # a buyer's sign-in: not an order
                continue
            if "status" in event:
                self.statuses[event["status"]] += 1
            else:
                self.unanswered += 1
        self.seen = len(self.events)

    def line(self) -> str:
        self._count()
        answers = sum(self.statuses.values())
        others = " ".join(f"{status}×{n}" for status, n in sorted(self.statuses.items())
                          if status not in (201, 503))
        return (f"at {self.clock():.0f} s: {answers} answers (201×{self.statuses[201]} "
                f"503×{self.statuses[503]}{' ' + others if others else ''}), "
                f"{self.unanswered} unanswered"
                f"{f', {self.sign_ins} sign-ins' if self.sign_ins else ''}; "
                f"striking: {', '.join(self.striking()) or 'none'}")

    async def run(self, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        """A line every `every` seconds of the clock, on the tick (a slow line does not shift
        the next), until cancelled."""
        tick = self.clock()
        while True:
            tick += self.every
            await sleep(max(0.0, tick - self.clock()))
            self.emit(self.line())

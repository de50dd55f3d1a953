"""Waiting for a condition to come true within a time: a server to answer, a cluster to be
ready. The clock and the sleep can be another's (the tests' fakes)."""

import asyncio
import time
from collections.abc import Awaitable, Callable


class WaitTimeout(RuntimeError):
    """A condition that did not come true in its time. A RuntimeError: the chaos sale counts
    any as a run that broke (exit 2), not as a failed invariant."""


def _pause(what: str, limit: float, every: float,
           clock: Callable[[], float]) -> Callable[[], float]:
    """The pause before the next try, from a deadline set now; raises once it has passed."""
    deadline = clock() + limit

    def pause() -> float:
        if clock() > deadline:
            raise WaitTimeout(f"{what} did not happen within {limit:.0f} s")
        return every

    return pause


def wait_for(what: str, check: Callable[[], object], limit: float = 60.0, every: float = 0.2,
             *, sleep: Callable[[float], object] = time.sleep,
             clock: Callable[[], float] = time.monotonic) -> None:
    """Calls `check` every `every` s until it returns something true; WaitTimeout (naming
    `what`) after `limit` s."""
    pause = _pause(what, limit, every, clock)
    while not check():
        sleep(pause())


async def wait_for_async(what: str, check: Callable[[], Awaitable[object]], limit: float = 60.0,
                         every: float = 0.2, *,
                         sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
                         clock: Callable[[], float] = time.monotonic) -> None:
    """`wait_for` for a coroutine `check`, sleeping without holding up the event loop."""
    pause = _pause(what, limit, every, clock)
    while not await check():
        await sleep(pause())

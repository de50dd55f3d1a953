"""What the scripts print: a coloured log line, and figures as the reports write them."""

import sys
from collections.abc import Callable

BLUE, MAGENTA = "1;34", "1;35"


def logger(tag: str, colour: str = BLUE, *, stdout: bool = False) -> Callable[[str], None]:
    """A `log(msg)` printing `[tag] msg` with the tag coloured, flushed at once (a run of
    minutes shows its progress as it goes); on stderr, or on stdout with `stdout`."""

    def log(msg: str) -> None:
        print(f"\033[{colour}m[{tag}]\033[0m {msg}", file=sys.stdout if stdout else sys.stderr,
              flush=True)

    return log


def fmt(x: float | None, digits: int = 0, group: str = " ") -> str:
    """`x` with `digits` decimals and its thousands set apart by `group` (a space, as every
    report writes them; "" for none); "–" when there is no figure."""
    return "–" if x is None else f"{x:,.{digits}f}".replace(",", group)

"""The recipes' costs, run by loadtest/recipes (which starts what it needs):
`python3 -m loadtest.lib.recipes [--seconds 5]`.

Each run of the lock bench is bounded in time (--seconds) and talks to 127.0.0.1 only.
"""

import argparse
import json
import os
import re
import subprocess
import time

from . import RESULTS
from .common.zk import zxid
from .fleet import LOCK_BENCH

# (mode, what one acquisition is, holds per acquisition)
MODES = [
    ("fair", "stock lock (fair, per product)", 1),
    ("sale", "a sale's lock cycle: terms read lock + stock lock", 1),
    ("reenter", "stock lock + 9 re-entries by its owner", 10),
    ("lease", "payment semaphore lease (N = 2)", 1),
    ("write", "terms write lock (a terms change)", 1),
]
CONTENDERS = [1, 8]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    connect = os.environ.get("SECKILL_ZK", "127.0.0.1:2181")
    run = f"/seckill-recipes/{int(time.time())}"
    rows = []
    for contenders in CONTENDERS:
        for mode, what, holds in MODES:
            before = zxid(connect)
            out = subprocess.run(
                [str(LOCK_BENCH), connect, f"{run}/{mode}-{contenders}", str(contenders),
                 str(args.seconds), mode],
                check=True, capture_output=True, text=True, timeout=args.seconds + 120,
            ).stdout
            writes = zxid(connect) - before
            n, secs = re.search(r"handoffs (\d+) seconds ([\d.]+)", out).groups()
            n, secs = int(n), float(secs)
            row = {
                "mode": mode, "what": what, "contenders": contenders,
                "acquisitions": n, "per_s": n / secs,
                # The session's own setup (root, identity) is a few writes: negligible.
                "writes_per_acquisition": writes / n if n else None,
                "writes_per_hold": writes / (n * holds) if n else None,
            }
            rows.append(row)
            print(f"{contenders:>2} × {mode:<8} {row['per_s']:>8.0f}/s  "
                  f"{row['writes_per_hold']:.2f} writes per hold", flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "recipes.json").write_text(json.dumps(rows, indent=2) + "\n")
    base = {r["contenders"]: r["per_s"] for r in rows if r["mode"] == "fair"}
    lines = [
        "# What each recipe costs (loadtest/recipes)",
        "",
        f"One product, one ZooKeeper session, {args.seconds:g} s per row, this machine's ZooKeeper.",
        "`× stock lock` is the row's rate over the stock lock's with as many contenders, in the same run.",
        "",
        "| contenders | recipe | acquisitions/s | × stock lock | ZooKeeper writes per hold |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = r["per_s"] / base[r["contenders"]] if base.get(r["contenders"]) else 0
        lines.append(
            f"| {r['contenders']} | {r['what']} | {r['per_s']:.0f} | {ratio:.2f} | "
            f"{r['writes_per_hold']:.2f} |"
        )
    (RESULTS / "recipes.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

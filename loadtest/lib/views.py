"""loadtest/views' figures: what a crowd reading a public lock view cost ZooKeeper. Run by
loadtest/views, from the repository's root:

    python3 -m loadtest.lib.views scrape URL
    python3 -m loadtest.lib.views report IDLE0 IDLE1 LOAD0 LOAD1 K6_SUMMARY SECONDS RATE OUT

`scrape` prints the instance's counters as one JSON object; `report` takes four of them
(before and after an idle stretch, before and after the crowd) and k6's summary, writes
views.md to OUT and exits non-zero if the crowd cost ZooKeeper more than a few reads a
second, a session was lost, or fewer than 99.9 % of the views answered 200.
"""

import json
import sys

from .common.web import metrics


def scrape(url: str) -> dict[str, float]:
    """Every counter the report reads: ZooKeeper requests (all operations), the lock view's
    refreshes, session state changes."""
    zk = views = sessions = 0.0
    for s in metrics(url):
        if s.name == "seckill_zk_operations_total":
            zk += s.value
        elif s.name == "seckill_view_refreshes_total" and s.labels == {"view": "lock"}:
            views += s.value
        elif s.name == "seckill_zk_session_changes_total":
            sessions += s.value
    return {"zk": zk, "views": views, "sessions": sessions}


def report(idle0: dict[str, float], idle1: dict[str, float], load0: dict[str, float],
           load1: dict[str, float], k6: dict, seconds: float, rate: int, out: str) -> str | None:
    """Writes views.md to `out` and prints it; returns what failed, or None."""
    idle_zk = (idle1["zk"] - idle0["zk"]) / seconds
    load_zk = (load1["zk"] - load0["zk"]) / seconds
    refreshes = (load1["views"] - load0["views"]) / seconds
    lost = load1["sessions"] - load0["sessions"]
    reqs = k6["http_reqs"]["values"]
    ok = k6["checks"]["values"]["rate"]
    p99 = k6["http_req_duration"]["values"].get("p(99)")
    p50 = k6["http_req_duration"]["values"]["med"]
    crowd = load_zk - idle_zk
    rows = [
        ("lock-view requests answered", f"{reqs['count']:.0f} ({reqs['rate']:.0f}/s, asked {rate}/s), {ok:.2%} 200"),
        ("latency p50 / p99", f"{p50:.2f} ms / {p99:.2f} ms"),
        ("ZooKeeper requests/s, idle", f"{idle_zk:.1f}"),
        ("ZooKeeper requests/s, under the crowd", f"{load_zk:.1f}"),
        ("of which the crowd's (difference)", f"{crowd:.1f}"),
        ("lock-view refreshes/s (`seckill_view_refreshes_total`)", f"{refreshes:.1f}"),
        ("ZooKeeper requests per lock-view answer", f"{(load1['zk'] - load0['zk']) / max(reqs['count'], 1):.4f}"),
        ("session state changes during the crowd", f"{lost:.0f}"),
    ]
    text = ["# A crowd reading a public lock view", "",
            f"`loadtest/views --rate {rate} --duration {seconds:.0f}`: one release instance, one product,",
            "k6 (open model) on the same 2-core machine, the view's snapshot refreshed every 250 ms.", "",
            "| | |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows]
    open(out, "w").write("\n".join(text) + "\n")
    print("\n".join(text))
    # A lock view refreshes 4 times a second, one multi-read each (list + data): a few reads.
    if refreshes > 5 or crowd > 10:
        return f"the crowd cost ZooKeeper {crowd:.1f} requests/s ({refreshes:.1f} refreshes/s)"
    if lost:
        return f"{lost:.0f} session state changes during the crowd"
    if ok < 0.999:
        return f"only {ok:.2%} of the views answered 200"
    return None


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["scrape"]:
        print(json.dumps(scrape(argv[1])))
    else:
        idle0, idle1, load0, load1 = (json.loads(a) for a in argv[1:5])
        k6 = json.load(open(argv[5]))["metrics"]
        sys.exit(report(idle0, idle1, load0, load1, k6, float(argv[6]), int(argv[7]), argv[8]))


if __name__ == "__main__":
    main()

"""The rush's verdict (loadtest/lib/rush.py runs it): from the buyers' records
(loadtest/k6/rush.js), the product's orders and line in PostgreSQL, the audit and the
payment provider's ledger — time to sell out, goodput, fairness (Spearman's rank correlation
of joining order and place), the admitted buyers' order p99, and the checks that must hold:
sold out, 0 oversold, the books consistent, nobody bought twice, nobody without a pass
(orders paid == passes spent), every admitted buyer answered, every paid order answered 201,
the books equal to the ledger. Then the report (markdown, and an SVG of the units sold
against time from the opening)."""

import bisect
import os
import subprocess
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

from .common.pg import PsqlError
from .common.text import fmt
from .common.web import HttpError, http_json
from .fleet import PG_PORT, Instances
from .saturation.load import fleet_sql


def rss_mib(pid: int) -> dict[str, float]:
    """A process's resident memory now (VmRSS) and at its peak (VmHWM), MiB."""
    out = {"rss": 0.0, "hwm": 0.0}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            out["rss" if line.startswith("VmRSS") else "hwm"] = int(line.split()[1]) / 1024
    return out


def ranks(xs: list[float]) -> list[float]:
    """1-based ranks, ties given their average rank."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    out = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rank correlation of two paired samples (None under 3 pairs, or no spread)."""
    if len(xs) < 3:
        return None
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx, syy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    return sxy / (sxx * syy) ** 0.5 if sxx and syy else None


def pct(values: list[float], q: float) -> float | None:
    """The q-th percentile (nearest rank), None of nothing."""
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q / 100 * len(s) + 0.5)) - 1))]


def epoch(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def sql_row(sql: str, db: str) -> list[str]:
    return fleet_sql(sql, db=db).strip().split("\t")


def books(inst: Instances, product: int, line: bool) -> dict[str, Any]:
    """The product's orders and, with a line, its passes, from PostgreSQL."""
    p = product
    paid = f"FROM orders WHERE product_id = {p} AND status = 'paid'"
    row = sql_row(
        f"SELECT (SELECT count(*) {paid}), (SELECT COALESCE(sum(quantity), 0) {paid}), "
        f"(SELECT count(*) FROM (SELECT user_id {paid} GROUP BY user_id "
        "HAVING sum(quantity) > 1) twice), "
        f"(SELECT count(*) FROM orders WHERE product_id = {p} "
        "AND status IN ('created', 'reserved', 'paying')), "
        f"(SELECT count(*) FROM orders WHERE product_id = {p})", inst.db)
    out: dict[str, Any] = {"paid": int(row[0]), "paid_units": int(row[1]),
                           "bought_twice": int(row[2]), "unsettled": int(row[3]),
                           "orders": int(row[4])}
    times = fleet_sql(f"SELECT extract(epoch FROM updated_at) {paid} ORDER BY 1", db=inst.db)
    out["paid_at"] = [float(t) for t in times.split()]
    if line:
        try:
            row = sql_row(
                f"SELECT (SELECT count(*) FROM line_places WHERE product_id = {p} "
                "AND spent_at IS NOT NULL), "
                f"(SELECT count(*) FROM orders o WHERE o.product_id = {p} AND o.status = 'paid' "
                "AND NOT EXISTS (SELECT 1 FROM line_places l WHERE l.product_id = o.product_id "
                "AND l.buyer = o.user_id AND l.spent_at IS NOT NULL)), "
                f"(SELECT count(*) FROM line_places WHERE product_id = {p})", inst.db)
            out.update(spent=int(row[0]), without_pass=int(row[1]), places=int(row[2]))
        except PsqlError as e:
            out["line_error"] = str(e)
    return out


def ledger(inst: Instances, product: int) -> dict[str, Any] | None:
    """The provider's ledger against the product's orders: every paid order has exactly one
    succeeded charge of its amount (key seckill-ORDER), no other order one. None without
    SECKILL_LEDGER_DB (the bench's ledger database, set by loadtest/bench)."""
    db = os.environ.get("SECKILL_LEDGER_DB")
    if not db:
        return None
    rows = fleet_sql(f"SELECT id, amount_cents, status = 'paid' FROM orders "
                     f"WHERE product_id = {product}", db=inst.db).split("\n")
    values = ",".join(f"('seckill-{r[0]}',{r[1]},{r[2] == 't'})"
                      for r in (x.split("\t") for x in rows if x))
    sql = ("CREATE TEMP TABLE want (key TEXT PRIMARY KEY, amount BIGINT, paid BOOLEAN);\n"
           + (f"INSERT INTO want VALUES {values};\n" if values else "")
           + "SELECT (SELECT count(*) FROM want w WHERE w.paid AND (SELECT count(*) FROM ledger l "
           "WHERE l.key = w.key AND l.status = 'succeeded' AND l.amount_cents = w.amount) <> 1), "
           "(SELECT count(*) FROM want w JOIN ledger l ON l.key = w.key "
           "AND l.status = 'succeeded' WHERE NOT w.paid), "
           "(SELECT COALESCE(sum(amount), 0) FROM want WHERE paid), "
           "(SELECT COALESCE(sum(l.amount_cents), 0) FROM want w JOIN ledger l ON l.key = w.key "
           "AND l.status = 'succeeded');\n")
    out = subprocess.run(["runuser", "-u", "postgres", "--", "psql", "-X", "-q", "-At", "-F",
                          "\t", "-v", "ON_ERROR_STOP=1", "-p", str(PG_PORT), "-d", db, "-f", "-"],
                         input=sql, capture_output=True, text=True, timeout=120)
    if out.returncode:
        return {"error": out.stderr.strip()[:300]}
    missing, stray, books_cents, charged_cents = map(int, out.stdout.split()[-4:])
    return {"paid_without_one_charge": missing, "charged_not_paid": stray,
            "paid_cents": books_cents, "charged_cents": charged_cents,
            "ok": missing == 0 and stray == 0 and books_cents == charged_cents}


def k6_figures(summary: dict[str, Any]) -> dict[str, Any]:
    m = summary.get("metrics", {})
    values = lambda name: m.get(name, {}).get("values", {})
    count = lambda name: int(values(name).get("count", 0))
    return {"requests": count("http_reqs"), "joins": count("rush_joins"),
            "looks": count("rush_looks"), "orders": count("rush_orders"),
            "failed_rate": values("http_req_failed").get("rate"),
            "order_p99_ms": values("http_req_duration{name:POST /orders}").get("p(99)"),
            "look_p99_ms": values("http_req_duration{name:GET line/me}").get("p(99)"),
            "join_p99_ms": values("http_req_duration{name:POST line}").get("p(99)")}


def settled_json(url: str, tries: int = 60) -> Any:
    """A GET's JSON once the instance answers it: right after a crowd's sale the instances may
    still be busy with its last requests and answer 503 (retryable); asked again a second
    later, `tries` times at most."""
    for attempt in range(tries):
        try:
            return http_json("GET", url)
        except HttpError as e:
            if attempt + 1 == tries or e.answer.status != 503:
                raise
        time.sleep(1.0)
    raise AssertionError("unreachable")


def judge(inst: Instances, product: int, line: bool, ran: dict[str, Any],
          units: int) -> dict[str, Any]:
    """A sale's figures and checks (`checks`: (ok, words) each, all must hold)."""
    recs = ran["records"]
    url = inst.urls[0]
    p = settled_json(f"{url}/api/products/{product}")
    audit = settled_json(f"{url}/api/products/{product}/audit")
    opens = epoch(p["opens_at"])
    db = books(inst, product, line)
    times = db.pop("paid_at")
    last = times[-1] if times else None
    sold_out = audit["stock"] == 0
    r: dict[str, Any] = {"units": units, "buyers": len(recs), "opens_at": p["opens_at"],
                         "state": p.get("state"), "audit": audit, "books": db,
                         "k6": k6_figures(ran["summary"]), "paid": len(times)}
    r["sell_out_s"] = last - opens if sold_out and last else None
    r["goodput"] = len(times) / (last - opens) if last and last > opens else None
    # Units paid against time from the opening, 100-ms steps (the chart).
    since = [t - opens for t in times]
    end = since[-1] if since else 0.0
    r["curve"] = [[round(k * end / 200, 3), bisect.bisect_right(since, k * end / 200)]
                  for k in range(201)] if since else []
    got = [x for x in recs if x.get("o") == 201]
    admitted = [x for x in recs if "a" in x]
    r["answered_201"] = len(got)
    r["requests_per_buyer"] = sum(x.get("rq", 0) for x in recs) / max(len(recs), 1)
    r["looks_max"] = max((x.get("lk", 0) for x in recs), default=0)
    r["outcomes"] = dict(Counter(f"{x['o']} {x.get('oe', '')}".strip() for x in recs if "o" in x))
    r["errors"] = dict(Counter(x["err"] for x in recs if x.get("err")).most_common(8))
    r["late_sends"] = sum(1 for x in recs if "j" in x and x["j"] - x["s"] > 250)
    r["client_lag_p99_ms"] = pct([x["j"] - x["s"] for x in recs if "j" in x], 99)
    e2e = [x["oa"] - x["os"] for x in (admitted if line else got) if "oa" in x]
    r["order_e2e_p99_ms"] = pct(e2e, 99)
    r["order_e2e_p50_ms"] = pct(e2e, 50)
    checks = [
        (sold_out and db["paid_units"] == units,
         f"sold out: {fmt(db['paid_units'])} of {fmt(units)} units paid, {audit['stock']} left"),
        (audit["oversold"] == 0 and audit["consistent"],
         f"0 oversold ({audit['oversold']}), the books consistent ({audit['consistent']})"),
        (db["bought_twice"] == 0, f"nobody bought twice: {db['bought_twice']} buyers did"),
        (len(got) == db["paid"], f"every paid order answered 201 to its buyer: {fmt(len(got))} "
                                 f"201s, {fmt(db['paid'])} paid orders"),
        (db["unsettled"] == 0, f"no order left unsettled: {db['unsettled']}"),
    ]
    money = ledger(inst, product)
    r["ledger"] = money
    if money is None:
        checks.append((True, "books = ledger: not checked (no SECKILL_LEDGER_DB)"))
    else:
        checks.append((bool(money.get("ok")), f"books = ledger: {money}"))
    if line:
        summary = http_json("GET", f"{url}/api/products/{product}/line")
        r["queue"] = summary
        early = [x for x in recs if not x.get("late") and "p" in x and "j" in x]
        late = [x for x in recs if x.get("late") and "p" in x and "j" in x]
        r["fairness_before"] = spearman([x["j"] for x in early], [x["p"] for x in early])
        r["fairness_after"] = spearman([x["j"] for x in late], [x["p"] for x in late])
        r["placed"] = {"before": len(early), "after": len(late)}
        # Where the order was lost, if it was: by the server's joined_at, and the joins' ms.
        timed = [x for x in late if "ja" in x]
        r["fairness_after_by_joined_at"] = spearman([x["ja"] for x in timed], [x["p"] for x in timed])
        r["join_ms"] = {k: {"p50": pct([x["jd"] for x in g if "jd" in x], 50),
                            "p99": pct([x["jd"] for x in g if "jd" in x], 99)}
                        for k, g in (("before", early), ("after", late))}
        r["next_look_ms"] = {"p50": pct([x["nl"] for x in recs if "nl" in x], 50),
                             "max": max((x["nl"] for x in recs if "nl" in x), default=None)}
        places = [x["p"] for x in recs if "p" in x]
        passes = {x.get("pk") for x in got}
        r["admitted"] = len(admitted)
        waits = [x["a"] / 1000 - opens for x in admitted]
        r["admitted_wait_s"] = {"p50": pct(waits, 50), "max": max(waits, default=None)}
        checks += [
            ("line_error" not in db and db.get("spent") == db["paid"] and db.get("without_pass") == 0
             and len(passes) == len(got),
             f"nobody bought without a pass: {fmt(db['paid'])} paid orders, "
             f"{db.get('spent', db.get('line_error'))} passes spent, {db.get('without_pass')} "
             f"paid buyers without one, {len(passes)} distinct passes among the 201s"),
            (all("o" in x for x in admitted),
             f"every admitted buyer got an answer: {sum('o' not in x for x in admitted)} of "
             f"{fmt(len(admitted))} did not"),
            (len(places) == len(set(places)), f"no place given twice: {len(places) - len(set(places))}"),
        ]
    else:
        arrivals = sorted(recs, key=lambda x: x.get("j", float("inf")))
        first = {x["g"] for x in arrivals[:units]}
        r["first_arrivals_served"] = sum(1 for x in got if x["g"] in first) / max(units, 1)
        r["fairness_served"] = spearman([x["j"] for x in got], [x["oa"] for x in got])
    r["checks"] = checks
    r["line_summary"] = (
        f"{'line' if line else 'no line'}: {fmt(len(times))} paid, sold out "
        f"{'in ' + fmt(r['sell_out_s'], 2) + ' s' if r['sell_out_s'] else 'NOT'}, goodput "
        f"{fmt(r['goodput'])} paid/s, {fmt(r['k6']['requests'])} requests; "
        + (f"fairness before {fmt(r['fairness_before'], 3)}, after {fmt(r['fairness_after'], 3)}; "
           if line else "") + f"order p99 (end to end) {fmt(r['order_e2e_p99_ms'])} ms; "
        + ("all checks hold" if all(ok for ok, _ in checks) else
           "FAILED: " + "; ".join(w for ok, w in checks if not ok)))
    return r


def targets(res: dict[str, Any]) -> list[tuple[bool, str]]:
    """The issue's targets for the rush, against the one-hot row of the same run."""
    one, s = res["one_hot"]["paid_per_s"], res["line"]
    bound = 1.25 * s["units"] / one if one else None
    out = [(bool(bound and s["sell_out_s"] and s["sell_out_s"] <= bound),
            f"sold out within 1.25 × ({fmt(s['units'])} ÷ one-hot {fmt(one)} paid/s) = "
            f"{fmt(bound, 2)} s: {fmt(s['sell_out_s'], 2)} s"),
           (bool(s["goodput"] and s["goodput"] >= 0.8 * one),
            f"goodput ≥ 0.8 × one-hot ({fmt(0.8 * one)} paid/s): {fmt(s['goodput'])} paid/s"),
           (s["fairness_before"] is not None and abs(s["fairness_before"]) <= 0.05,
            f"fairness, joined before the opening: |ρ| ≤ 0.05: ρ = "
            f"{fmt(s['fairness_before'], 3)} ({fmt(s['placed']['before'])} buyers)")]
    if s["placed"]["after"]:
        out.append((s["fairness_after"] is not None and s["fairness_after"] >= 0.95,
                    f"fairness, joined after: ρ ≥ 0.95: ρ = {fmt(s['fairness_after'], 3)} "
                    f"({fmt(s['placed']['after'])} buyers)"))
    return out + s["checks"]

"""The floors and bounds that follow from a saturation run's own rows: what any request and
a refusal cost, what every order and every lock cycle cost per part (1 hot product against
many), so what more hot products could reach at best."""

from collections.abc import Iterable
from typing import Any

from ..common.text import fmt
from .cpu import PARTS


def per_cycle(one: dict[str, Any],
              many: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]] | None:
    """Splits CPU per paid order into what every order costs and what every lock cycle costs,
    from two rows that differ in orders per cycle (1 hot product against many): per part,
    cost per order = a + b / (orders per cycle). Returns ({part: a}, {part: b}) or None."""
    o1, on = one["orders_per_cycle"], many["orders_per_cycle"]
    d = 1 / max(on, 1e-9) - 1 / max(o1, 1e-9)
    if d <= 0:
        return None
    c1, cn = one["cpu_us_per_paid"], many["cpu_us_per_paid"]
    b = {k: (cn[k] - c1[k]) / d for k in PARTS}
    a = {k: c1[k] - b[k] / o1 for k in PARTS}
    return a, b


def ratio(a: dict[str, float], b: dict[str, float], o1: float, on: float,
          kept: Iterable[str]) -> float:
    """The rate at `on` orders per cycle over the rate at `o1`, CPU-bound, counting only the
    per-cycle costs of the parts in `kept`."""
    cost = lambda o: sum(a.values()) + sum(b[k] for k in kept) / o
    return cost(o1) / cost(on)


def bounds(r: dict[str, Any]) -> list[str]:
    """The floors under the targets, from this run's own rows: what any request costs, and
    what a lock cycle costs per part, so what more hot products can reach at best."""
    # Reports from before the bench read orders per cycle have no bounds.
    rows = [x for x in r["rows"] if x["build"] == "this" and x["label"] == "zk batched"
            and "orders_per_cycle" in x]
    one = next((x for x in rows if x["hot"] == 1), None)
    floor = (r.get("floor") or {}).get("this")
    out = []
    if not one and not floor:
        return out
    out += ["", "## Floors and bounds (this build, from the rows above)", ""]
    # Reports from before the refusal floor held the healthz floor alone.
    floor = floor and floor.get("healthz", floor)
    if floor:
        out.append(f"- **Any request**: `GET /healthz` in the same closed loop answers "
                   f"{fmt(floor['requests_per_s'])}/s; service CPU per request "
                   f"{fmt(floor['user_us'] + floor['system_us'], 1)} µs ({fmt(floor['user_us'], 1)} "
                   f"in our code and its libraries, {fmt(floor['system_us'], 1)} in the kernel), "
                   f"wrk {fmt(floor['generator_us'], 1)} µs. A paid order is two such "
                   "exchanges for the service (the buyer's request, and its charge to the "
                   "provider) before any SQL; a refusal is one.")
    for b, f in (r.get("floor") or {}).items():
        if "refusal" in f:
            x = f["refusal"]
            out.append(f"- **A refusal** ({b}): orders for a sold-out product, answered 409 "
                       f"by the sold-out flag, {fmt(x['requests_per_s'])}/s; service CPU per "
                       f"refusal {fmt(x['user_us'] + x['system_us'], 1)} µs "
                       f"({fmt(x['user_us'], 1)} user, {fmt(x['system_us'], 1)} kernel).")
    if one:
        total = sum(one["cpu_us_per_paid"][k] for k in PARTS)
        cores = r["machine"]["cores"]
        out.append(f"- **One hot product**: {fmt(one['orders_per_cycle'], 1)} orders per lock "
                   f"cycle; {fmt(total, 1)} µs of CPU per paid order on this machine, every part "
                   f"counted (the generator and the provider too): {cores} cores give at most "
                   f"{fmt(cores * 1e6 / total)} paid orders/s at that cost.")
    refusal = floor and (r.get("floor") or {}).get("this", {}).get("refusal")
    if one and refusal:
        # Offered 5x the rate S the CPU allows (S = cores / total): x S paid and (5 - x) S
        # refused must fit in cores, so x <= (total - 5 R) / (total - R); x >= 0.9 needs
        # R <= total / 41. PostgreSQL and ZooKeeper do nothing for a flag's refusal.
        cost = refusal["user_us"] + refusal["system_us"] + refusal["generator_us"]
        share = max(0.0, (total - 5 * cost) / (total - cost))
        out.append(f"- **Goodput at 5× the offered load** (an open model, every core busy): "
                   f"a refusal costs {fmt(cost, 1)} µs all-in (service "
                   f"{fmt(refusal['user_us'] + refusal['system_us'], 1)}, wrk "
                   f"{fmt(refusal['generator_us'], 1)}) against {fmt(total, 1)} for a paid "
                   f"order, so paid orders keep at most {share:.0%} of the rate the CPU allows "
                   f"(paid share ≤ (P − 5R) / (P − R)); 90 % needs a refusal of at most "
                   f"{fmt(total / 41, 1)} µs all-in, "
                   f"{total / 41 / (floor['user_us'] + floor['system_us'] + floor['generator_us']):.0%}"
                   " of what one `GET /healthz` costs.")
    for many in (x for x in rows if one and x["hot"] > 1):
        split = per_cycle(one, many)
        if not split:
            continue
        a, b = split
        o1, on = one["orders_per_cycle"], many["orders_per_cycle"]
        zk_write = many["cpu_us"]["zookeeper"] / max(many["zk_writes"], 1)
        measured = many["paid_per_s"] / one["paid_per_s"]
        out.append(
            f"- **{many['hot']} hot products**: {fmt(on, 2)} orders per lock cycle (a closed loop "
            f"of {fmt(many['connections'] // 3)} connections per instance keeps "
            f"{fmt(many['connections'] / 3 / many['hot'], 1)} orders of a product in flight on it, "
            "on average). "
            "A lock cycle costs, in CPU µs: " + ", ".join(
                f"{PARTS[k][0]} {fmt(b[k])}" for k in PARTS) +
            f" (ZooKeeper: {fmt(zk_write)} µs per write). At {fmt(measured, 2)}× one hot "
            f"product's rate (measured; {fmt(ratio(a, b, o1, on, PARTS), 2)}× from this split). "
            "With no PostgreSQL cost per cycle at all (more than one instance-wide transaction "
            f"could save): at most {fmt(ratio(a, b, o1, on, set(PARTS) - {'postgresql'}), 2)}×; "
            f"with only ZooKeeper's own per cycle left (the lock's two writes): at most "
            f"{fmt(ratio(a, b, o1, on, {'zookeeper'}), 2)}×.")
    return out

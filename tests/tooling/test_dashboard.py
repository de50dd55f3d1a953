"""Grafana's dashboard (deploy/grafana/dashboards/seckill.json) asks only for metrics the
service or the payment provider export: every panel's query, in rows or not, and every
template variable's, is parsed as PromQL and each metric it names (less a histogram's
_bucket, _sum or _count) must be one of the names the source declares: the `pub const X: &str
= "seckill_..."` of src/telemetry/metrics.rs and the `const X: &str = "provider_..."` of
src/bin/seckill-provider/, read from the Rust, not copied here. A renamed metric, or a panel
for one nobody exports, fails here rather than showing an empty graph. The alert rules
(deploy/prometheus/alerts.yml) are held to the same names, plus Prometheus's own `up`. Each
area an operator watches during a sale has its panel, on the provisioned datasource (uid
`prometheus`)."""

import json
import re
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "seckill.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
SERVICE_METRICS = ROOT / "src" / "telemetry" / "metrics.rs"
PROVIDER = ROOT / "src" / "bin" / "seckill-provider"
DATASOURCE_UID = "prometheus"

# PromQL's functions and aggregations (Prometheus 2.x and 3.x), and its keywords: the words in
# a query that are not metrics.
FUNCTIONS = {
    "abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh",
    "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh",
    "count_over_time", "day_of_month", "day_of_week", "day_of_year", "days_in_month", "deg",
    "delta", "deriv", "double_exponential_smoothing", "exp", "floor", "histogram_avg",
    "histogram_count", "histogram_fraction", "histogram_quantile", "histogram_stddev",
    "histogram_stdvar", "histogram_sum", "holt_winters", "hour", "idelta", "increase",
    "info", "irate", "label_join", "label_replace", "last_over_time", "ln", "log10", "log2",
    "mad_over_time", "max_over_time", "min_over_time", "minute", "month", "pi",
    "predict_linear", "present_over_time", "quantile_over_time", "rad", "rate", "resets",
    "round", "scalar", "sgn", "sin", "sinh", "sort", "sort_by_label", "sort_by_label_desc",
    "sort_desc", "sqrt", "stddev_over_time", "stdvar_over_time", "sum_over_time", "tan",
    "tanh", "time", "timestamp", "vector", "year",
}
AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
                "count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
            "and", "or", "unless", "atan2", "inf", "nan", "start", "end"}
NOT_METRICS = FUNCTIONS | AGGREGATIONS | KEYWORDS
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# Each area an operator watches (issue 50, point 3): a panel whose title matches and whose
# queries name one of the metrics.
AREAS = {
    "the sale's rate": (r"sale rate", {"seckill_orders_total"}),
    "refusals by code": (r"refusals", {"seckill_orders_total", "seckill_refused_total"}),
    "order latency p50/p99": (r"latency.*p50.*p99", {"seckill_http_request_duration_seconds"}),
    "lock waits": (r"lock waits", {"seckill_lock_wait_seconds"}),
    "lock cycles": (r"lock cycles", {"seckill_lock_kept_cycles_total"}),
    "batch sizes": (r"orders per lock cycle", {"seckill_lock_cycle_orders"}),
    "stock left per product": (r"stock", {"seckill_product_stock"}),
    "payments by outcome": (r"payments by outcome", {"seckill_payment_outcomes_total"}),
    "the provider's charges": (r"payments", {"provider_charges_total"}),
    "returns": (r"returns", {"seckill_sweep_actions_total"}),
    "overdue work": (r"overdue", {"seckill_overdue"}),
    "pool use": (r"pool", {"seckill_db_pool_connections"}),
    "ZooKeeper standing": (r"zookeeper standing", {"seckill_zk_ensemble_standing"}),
    "ZooKeeper session": (r"zookeeper session", {"seckill_zk_session_state"}),
    "the audit": (r"audit", {"seckill_audit_inconsistent_products",
                             "seckill_audit_timestamp_seconds"}),
}


def declared():
    """{metric name: is it a histogram} for every name the Rust declares: the service's
    `pub const` names and the provider's `const` names; a histogram is one a `histogram!` or
    `describe_histogram!` records (only its series have _bucket, _sum and _count)."""
    const = r'const\s+(\w+)\s*:\s*&(?:\'static\s+)?str\s*=\s*"({prefix}\w+)"'
    sources = [(SERVICE_METRICS.read_text(), "pub\\s+" + const.format(prefix="seckill_")),
               *((path.read_text(), const.format(prefix="provider_"))
                 for path in sorted(PROVIDER.rglob("*.rs")))]
    names = {}
    for text, pattern in sources:
        histograms = set(re.findall(r"histogram!\(\s*(\w+)", text))
        for ident, name in re.findall(pattern, text):
            names[name] = names.get(name, False) or ident in histograms
    return names


def exported():
    """Every metric name the Rust declares."""
    return set(declared())


def histograms():
    """The declared names that are histograms."""
    return {name for name, histogram in declared().items() if histogram}


def metric_names(query):
    """The metric names one PromQL query reads (Grafana's variables allowed in it)."""
    # `{__name__="x"}` names a metric in a string: keep it before strings go.
    named = re.findall(r'__name__\s*=\s*"([a-zA-Z_:][\w:]*)"', query)
    text = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`', '""', query)
    text = re.sub(r"\{[^{}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\[\]]*\]", " ", text)  # ranges and subqueries: [5m], [$__range:1m]
    # Label lists: by (a, b), on (instance), group_left (x) ...
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", " ", text)
    text = re.sub(r"\boffset\s+-?[\w$]+", " ", text)
    text = re.sub(r"@\s*[\w.()$]+", " ", text)  # @ 1609746000, @ start()
    text = re.sub(r"\$\{[^}]*\}|\$\w+|\[\[\w+\]\]", " ", text)  # Grafana's variables
    # Numbers (0.5, 1e3, 0x1F, .5) before words, or 1e3 would leave `e3`.
    text = re.sub(r"(?<![\w:])(0x[0-9a-fA-F]+|\d*\.?\d+(?:[eE][+-]?\d+)?)", " ", text)
    words = re.findall(r"[a-zA-Z_:][\w:]*", text)
    return set(named) | {w for w in words if w.lower() not in NOT_METRICS}


def variable_query(query):
    """The PromQL inside a Grafana Prometheus variable's query: `label_values(sel, label)`
    reads `sel`, `query_result(q)` runs `q`; `label_values(label)` and `label_names()` read
    no metric."""
    query = query.strip()
    found = re.fullmatch(r"label_values\((.*),\s*\w+\s*\)", query, re.S)
    if found:
        return found.group(1)
    found = re.fullmatch(r"query_result\((.*)\)", query, re.S)
    if found:
        return found.group(1)
    if re.fullmatch(r"label_values\(\s*\w+\s*\)|label_names\(.*\)", query, re.S):
        return ""
    return query


def base(name, histograms):
    """A histogram's series (_bucket, _sum, _count) as the histogram's name."""
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in histograms:
            return name[: -len(suffix)]
    return name


def unknown(names, known, histograms):
    """The names that are not exported, a histogram's series counted as its histogram."""
    return {name for name in names if base(name, histograms) not in known}


def panels(items):
    """Every panel, rows' own panels too."""
    for panel in items:
        yield panel
        yield from panels(panel.get("panels") or [])


def queries(dashboard):
    """(where, PromQL) for every panel target and every template variable."""
    for panel in panels(dashboard.get("panels") or []):
        for target in panel.get("targets") or []:
            if target.get("expr") is not None:
                yield f"panel {panel.get('title')!r} {target.get('refId')}", target["expr"]
    for variable in (dashboard.get("templating") or {}).get("list") or []:
        if variable.get("type") != "query":
            continue
        query = variable.get("query")
        if isinstance(query, dict):
            query = query.get("query")
        for text in {query or "", variable.get("definition") or ""} - {""}:
            yield f"variable {variable.get('name')!r}", variable_query(text)


def alert_exprs(text):
    """(alert, expr) for each rule in alerts.yml: `expr:` on one line or as a `|` block
    (the file's own layout; no YAML parser in the standard library)."""
    found, alert, lines = [], None, text.splitlines()
    for i, line in enumerate(lines):
        name = re.match(r"\s*- alert:\s*(\S+)", line)
        if name:
            alert = name.group(1)
        expr = re.match(r"(\s*)expr:\s*(.*)$", line)
        if not expr:
            continue
        indent, rest = len(expr.group(1)), expr.group(2).strip()
        if rest not in ("|", "|-", ">", ">-"):
            found.append((alert, rest))
            continue
        block = []
        for following in lines[i + 1:]:
            if following.strip() and len(following) - len(following.lstrip()) <= indent:
                break
            block.append(following.strip())
        found.append((alert, " ".join(block)))
    return found


class Checker(unittest.TestCase):
    """The parts the dashboard test stands on."""

    def test_the_exported_names_are_read_from_the_source(self):
        names = exported()
        self.assertLessEqual({"seckill_orders_total", "seckill_http_request_duration_seconds",
                              "seckill_zk_ensemble_standing"}, names)
        self.assertIn("provider_charges_total", names, "the provider's names: "
                      "`const X: &str = \"provider_...\";` in src/bin/seckill-provider/")
        self.assertTrue(all(n.startswith(("seckill_", "provider_")) for n in names))
        self.assertLessEqual({"seckill_http_request_duration_seconds",
                              "seckill_lock_cycle_orders", "provider_charge_duration_seconds"},
                             histograms())
        self.assertNotIn("seckill_orders_total", histograms())

    def test_it_reads_the_metrics_of_a_query_and_nothing_else(self):
        cases = {
            'sum by (outcome) (rate(seckill_orders_total{outcome!~"paid|sum"}[$__rate_interval]))':
                {"seckill_orders_total"},
            'histogram_quantile(0.99, sum by (instance, le) (rate(a_seconds_bucket{route=~"/x/\\\\{id\\\\}"}[2m])))'
            ' > on (instance) group_left 0.5 * b_seconds':
                {"a_seconds_bucket", "b_seconds"},
            "time() - min(c_timestamp{instance=~\"$instance\"}) offset 5m > 1e3":
                {"c_timestamp"},
            "up{job=\"seckill\"} == bool 0 or ignoring (state) d_total @ start()": {"up", "d_total"},
            '{__name__="e_total", job="x"}': {"e_total"},
            "label_replace(f, \"dst\", \"rate\", \"src\", \"(.*)\")": {"f"},
            "sum(rate(g_total[${__range}])) / .5": {"g_total"},
            "max(h:recorded:rate5m) without (le)": {"h:recorded:rate5m"},
        }
        for query, names in cases.items():
            with self.subTest(query=query):
                self.assertEqual(metric_names(query), names)

    def test_it_catches_a_metric_nobody_exports(self):
        known, hist = exported(), histograms()
        made_up = 'sum(rate(seckill_orders_made_up_total{outcome="paid"}[5m]))'
        self.assertEqual(unknown(metric_names(made_up), known, hist),
                         {"seckill_orders_made_up_total"})
        # A histogram's series are known by its name; a counter has no _bucket.
        self.assertEqual(unknown({"seckill_lock_wait_seconds_bucket",
                                  "seckill_lock_wait_seconds_count",
                                  "provider_charge_duration_seconds_sum",
                                  "seckill_orders_total_bucket", "provider_charges_total"},
                                 known, hist),
                         {"seckill_orders_total_bucket"})

    def test_variable_queries(self):
        self.assertEqual(variable_query("label_values(seckill_product_stock, product)"),
                         "seckill_product_stock")
        self.assertEqual(variable_query('label_values(x{a="b"},instance)'), 'x{a="b"}')
        self.assertEqual(variable_query("query_result(sum by (p) (y))"), "sum by (p) (y)")
        self.assertEqual(variable_query("label_values(instance)"), "")

    def test_it_reads_the_alert_rules(self):
        text = ("groups:\n  - name: g\n    rules:\n      - alert: One\n        expr: up == 0\n"
                "        for: 1m\n      - alert: Two\n        expr: |\n          a\n"
                "            > b\n        for: 0s\n")
        self.assertEqual(alert_exprs(text), [("One", "up == 0"), ("Two", "a > b")])


class Dashboard(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dashboard = json.loads(DASHBOARD.read_text())
        cls.queries = list(queries(cls.dashboard))
        cls.known, cls.histograms = exported(), histograms()

    def test_it_is_one_grafana_loads(self):
        d = self.dashboard
        self.assertEqual(d.get("uid"), "seckill")
        self.assertGreaterEqual(d.get("schemaVersion", 0), 36)
        ids = [p.get("id") for p in panels(d["panels"])]
        self.assertEqual(len(ids), len(set(ids)), "panel ids are unique")
        for panel in panels(d["panels"]):
            with self.subTest(panel=panel.get("title")):
                self.assertIn(panel.get("type"), {"row", "timeseries", "stat"})
                self.assertIn("gridPos", panel)

    def test_every_query_names_only_exported_metrics(self):
        self.assertGreater(len(self.queries), 20)
        for where, query in self.queries:
            with self.subTest(where=where, query=query):
                names = metric_names(query)
                self.assertTrue(names, "a query that reads no metric")
                self.assertEqual(unknown(names, self.known, self.histograms), set(),
                                 "not exported by the service (src/telemetry/metrics.rs) or the "
                                 "provider (src/bin/seckill-provider/)")

    def test_every_area_has_a_panel(self):
        found = [(p.get("title", ""), {base(name, self.histograms)
                                       for t in p.get("targets") or []
                                       for name in metric_names(t.get("expr", ""))})
                 for p in panels(self.dashboard["panels"]) if p.get("type") != "row"]
        for area, (title, metrics) in AREAS.items():
            with self.subTest(area=area):
                self.assertTrue(any(re.search(title, t, re.I) and names & metrics
                                    for t, names in found),
                                f"no panel titled like {title!r} reading {sorted(metrics)}")

    def test_every_query_asks_the_provisioned_prometheus(self):
        # The datasource's uid is fixed in deploy/grafana/provisioning/datasources/.
        for panel in panels(self.dashboard["panels"]):
            if panel.get("type") == "row":
                continue
            with self.subTest(panel=panel.get("title")):
                self.assertEqual(panel.get("datasource", {}).get("uid"), DATASOURCE_UID)
                for target in panel.get("targets") or []:
                    self.assertEqual(target.get("datasource", {}).get("uid"), DATASOURCE_UID)
        for variable in self.dashboard["templating"]["list"]:
            with self.subTest(variable=variable.get("name")):
                self.assertEqual(variable.get("datasource", {}).get("uid"), DATASOURCE_UID)


class AlertRules(unittest.TestCase):
    def test_every_alert_names_only_exported_metrics(self):
        rules = alert_exprs(ALERTS.read_text())
        self.assertGreaterEqual(len(rules), 13)
        known = exported() | {"up"}  # Prometheus's own: whether a scrape answered
        for alert, expr in rules:
            with self.subTest(alert=alert, expr=expr):
                names = metric_names(expr)
                self.assertTrue(names)
                self.assertEqual(unknown(names, known, histograms()), set())


if __name__ == "__main__":
    unittest.main()

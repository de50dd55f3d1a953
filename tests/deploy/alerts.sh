#!/usr/bin/env bash
# Checks the monitoring configuration under deploy/ without starting anything:
#   - the alert rules parse (promtool check rules) and their unit tests pass (promtool test
#     rules deploy/prometheus/alerts.test.yml);
#   - every rule has a `for`, a severity (page or ticket), a summary, a description and the
#     runbook docs/operations.md#on-call, and at least one test that fires it (labels and
#     annotations checked) and one that keeps it quiet: a new rule without tests fails here;
#   - docs/operations.md has the "On call" section the runbooks point at, and it and the
#     中文 page name every alert;
#   - Prometheus' config is valid (promtool check config, on a copy whose rule_files names
#     the repo's alerts.yml instead of the container's /etc/prometheus/alerts.yml);
#   - Alertmanager's config is valid (amtool check-config);
#   - Grafana's provisioning points at Prometheus (uid prometheus) and at the dashboards'
#     folder.
#
#   tests/deploy/alerts.sh [-h|--help]
#
# Run from anywhere (it works in the checkout's root). Needs promtool (Debian: prometheus),
# amtool (prometheus-alertmanager) and python3-yaml: scripts/test installs them. Leaves
# nothing behind.
source "$(dirname "$0")/../../scripts/lib.sh"
set -euo pipefail

for arg in "$@"; do
  case $arg in
    -h|--help) usage; exit 0 ;;
    *) usage_error "unknown option $arg" ;;
  esac
done
cd "$ROOT"

fail() { die "tests/deploy/alerts.sh FAILED: $*"; }
step() { log "alerts: $*"; }

for tool in promtool amtool; do
  command -v "$tool" >/dev/null || fail "$tool not found (scripts/test installs it: apt-get install prometheus prometheus-alertmanager)"
done
/usr/bin/python3 -c 'import yaml' 2>/dev/null || fail "python3-yaml not found (scripts/test installs it)"

RULES=deploy/prometheus/alerts.yml
TESTS=deploy/prometheus/alerts.test.yml
CONFIG=deploy/prometheus/prometheus.yml
ALERTMANAGER=deploy/alertmanager/alertmanager.yml

step "promtool check rules $RULES"
promtool check rules "$RULES" || fail "promtool check rules $RULES"

step "promtool test rules $TESTS"
promtool test rules "$TESTS" || fail "promtool test rules $TESTS"

step "every alert has its fields, a firing and a quiet test, and an On call entry"
# shellcheck disable=SC2016 # Python, not shell, in single quotes.
/usr/bin/python3 -c '
import re, sys, yaml
rules_path, tests_path, ops_path, ops_zh_path = sys.argv[1:]
rules = [r for g in yaml.safe_load(open(rules_path))["groups"] for r in g["rules"] if "alert" in r]
tests = yaml.safe_load(open(tests_path))["tests"]
fired, quiet, problems = set(), set(), []
for test in tests:
    for case in test.get("alert_rule_test") or []:
        expected = case.get("exp_alerts") or []
        (fired if expected else quiet).add(case["alertname"])
        for alert in expected:
            if not alert.get("exp_annotations"):
                problems.append("%s: a test expects it without checking its annotations (%s)"
                                % (case["alertname"], test["name"]))
names = [r["alert"] for r in rules]
if len(set(names)) != len(names):
    problems.append("an alert name is used twice: %s" % sorted(names))
ops, ops_zh = open(ops_path).read(), open(ops_zh_path).read()
if not re.search(r"^#+ On call\s*$", ops, re.M):
    problems.append("%s has no \"On call\" heading (the runbooks point at #on-call)" % ops_path)
for rule in rules:
    name, labels, notes = rule["alert"], rule.get("labels") or {}, rule.get("annotations") or {}
    if "for" not in rule:
        problems.append("%s: no `for`" % name)
    if labels.get("severity") not in ("page", "ticket"):
        problems.append("%s: severity is %r, not page or ticket" % (name, labels.get("severity")))
    for key in ("summary", "description"):
        if not notes.get(key):
            problems.append("%s: no %s annotation" % (name, key))
    if notes.get("runbook") != "docs/operations.md#on-call":
        problems.append("%s: runbook is %r, not docs/operations.md#on-call" % (name, notes.get("runbook")))
    if name not in fired:
        problems.append("%s: no test in %s fires it" % (name, tests_path))
    if name not in quiet:
        problems.append("%s: no test in %s keeps it quiet" % (name, tests_path))
    for path, text in ((ops_path, ops), (ops_zh_path, ops_zh)):
        if not re.search(r"\b%s\b" % name, text):
            problems.append("%s: not named in %s" % (name, path))
for name in sorted((fired | quiet) - set(names)):
    problems.append("%s: tested in %s but no such alert" % (name, tests_path))
if problems:
    sys.exit("\n".join(problems))
print("%d alerts, each with a firing and a quiet test" % len(names), file=sys.stderr)
' "$RULES" "$TESTS" docs/operations.md docs/zh-CN/operations.md || fail "the alerts and their tests or docs disagree (above)"

step "promtool check config $CONFIG (rule_files pointed at the repo's $RULES)"
# The config names the rules where compose mounts them (/etc/prometheus); check a copy that
# names this checkout's file, so the rules it loads are the ones tested above.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
grep -q '^  - /etc/prometheus/alerts.yml$' "$CONFIG" \
  || fail "$CONFIG does not load /etc/prometheus/alerts.yml (where compose mounts $RULES)"
sed "s#^  - /etc/prometheus/alerts.yml\$#  - $ROOT/$RULES#" "$CONFIG" >"$tmp/prometheus.yml"
promtool check config "$tmp/prometheus.yml" || fail "promtool check config $CONFIG"

step "amtool check-config $ALERTMANAGER"
amtool check-config "$ALERTMANAGER" || fail "amtool check-config $ALERTMANAGER"

step "Grafana provisioning: the Prometheus datasource (uid prometheus) and the dashboards' folder"
/usr/bin/python3 -c '
import sys, yaml
datasources, dashboards = (yaml.safe_load(open(p)) for p in sys.argv[1:3])
problems = []
ds = datasources.get("datasources") or []
if not any(d.get("type") == "prometheus" and d.get("uid") == "prometheus"
           and d.get("url") == "http://prometheus:9090" for d in ds):
    problems.append("%s: no prometheus datasource with uid prometheus at http://prometheus:9090" % sys.argv[1])
providers = dashboards.get("providers") or []
if not any((p.get("options") or {}).get("path") == "/var/lib/grafana/dashboards" for p in providers):
    problems.append("%s: no provider reading /var/lib/grafana/dashboards" % sys.argv[2])
if problems:
    sys.exit("\n".join(problems))
' deploy/grafana/provisioning/datasources/prometheus.yml \
  deploy/grafana/provisioning/dashboards/seckill.yml \
  || fail "Grafana's provisioning (above)"

step "green: the rules, their tests, Prometheus', Alertmanager's and Grafana's config"

#!/usr/bin/env bash
# The compose deployment, checked without a Docker engine (CI has none): docker-compose.yml
# alone and with docker-compose.demo.yml parse (`docker-compose config`), with the secrets
# scripts/compose-secrets makes and refused without each of them; the resolved config gives
# every secret as a file under /run/secrets (never a value in the environment), builds the
# seckill image once, limits and restarts every service, publishes only on 127.0.0.1, and
# mounts files that exist; the instances trust nginx's address only; the demos are off
# unless the override turns them on; deploy/nginx.conf passes `nginx -t` with its TLS
# server; and the Dockerfile copies what the checkout has.
#
#   tests/deploy/compose.sh [-h|--help]
#
# Run from anywhere (it works in the checkout's root). Needs docker-compose (1.29, Debian's),
# python3-yaml, openssl and nginx: scripts/test installs them. Leaves nothing behind.
source "$(dirname "$0")/../../scripts/lib.sh"

for arg in "$@"; do
  case $arg in
    -h|--help) usage; exit 0 ;;
    *) usage_error "unknown option $arg" ;;
  esac
done
cd "$ROOT"
for tool in docker-compose nginx openssl; do
  command -v "$tool" >/dev/null || die "$tool not found (scripts/test installs it)"
done
/usr/bin/python3 -c 'import yaml' 2>/dev/null || die "python3-yaml not found (scripts/test installs it)"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
SECRETS="$TMP/secrets"
BASE=(-f docker-compose.yml)
DEMO=(-f docker-compose.yml -f docker-compose.demo.yml)

# docker-compose with no variables but the env file's: a SECKILL_* the caller's shell exports
# must not make a check pass that should fail (docker-compose reads the environment first).
compose() { # ENV_FILE ARGS...
  local env_file=$1; shift
  env -i PATH="$PATH" HOME="${HOME:-/root}" docker-compose --env-file "$env_file" "$@"
}

log "scripts/compose-secrets (into a scratch directory)"
scripts/compose-secrets --help | grep -q -- --force || die "scripts/compose-secrets --help does not say --force"
scripts/compose-secrets "$SECRETS" 2>/dev/null || die "scripts/compose-secrets $SECRETS failed"
ENV_FILE="$SECRETS/compose.env"
[ -s "$ENV_FILE" ] || die "scripts/compose-secrets wrote no compose.env"
[ "$(stat -c %a "$SECRETS")" = 700 ] || die "scripts/compose-secrets left its directory open to others"
before=$(cat "$SECRETS"/* | sha256sum)
if scripts/compose-secrets "$SECRETS" 2>/dev/null; then
  die "scripts/compose-secrets replaced existing secrets without --force"
fi
[ "$(cat "$SECRETS"/* | sha256sum)" = "$before" ] || die "scripts/compose-secrets changed secrets it refused to replace"
scripts/compose-secrets --force "$SECRETS" 2>/dev/null || die "scripts/compose-secrets --force failed"
[ "$(cat "$SECRETS"/* | sha256sum)" != "$before" ] || die "scripts/compose-secrets --force made no new secrets"

# What docker-compose.yml requires (`${NAME:?...}`) is exactly what compose.env names.
VARS=$(grep -E '^[A-Z0-9_]+=' "$ENV_FILE" | cut -d= -f1 | sort)
required=$(grep -oE '\$\{[A-Z0-9_]+:\?' docker-compose.yml | sed -E 's/^\$\{//; s/:\?$//' | sort -u)
[ "$VARS" = "$required" ] ||
  die "docker-compose.yml requires [$(echo $required)], scripts/compose-secrets names [$(echo $VARS)]"
grep -qE '\$\{[A-Z0-9_]+\?' docker-compose.yml docker-compose.demo.yml &&
  die 'a ${NAME?...} takes an empty value: use ${NAME:?...}'
while IFS= read -r var; do
  grep -q "^$var=$SECRETS/" "$ENV_FILE" || die "compose.env's $var is not a file in $SECRETS"
done <<<"$VARS"

log "docker-compose config (docker-compose.yml, and with docker-compose.demo.yml)"
compose "$ENV_FILE" "${BASE[@]}" config -q
# The teaching demos' override, as `docker compose -f docker-compose.yml -f
# docker-compose.demo.yml up` reads it.
compose "$ENV_FILE" "${DEMO[@]}" config -q

# No secret has a default: without any one of them (or with it empty), both refuse to start,
# and say which.
log "docker-compose config without each of $(echo "$VARS" | wc -l) secrets (refused)"
while IFS= read -r var; do
  grep -v "^$var=" "$ENV_FILE" >"$TMP/without.env"
  sed "s#^$var=.*#$var=#" "$ENV_FILE" >"$TMP/empty.env"
  for files in BASE DEMO; do
    declare -n args=$files
    if compose "$TMP/without.env" "${args[@]}" config -q 2>"$TMP/err"; then
      die "docker-compose ${args[*]} accepted a missing $var"
    fi
    grep -q "$var" "$TMP/err" || die "docker-compose ${args[*]} refused a missing $var without naming it: $(cat "$TMP/err")"
    unset -n args
  done
  if compose "$TMP/empty.env" "${BASE[@]}" config -q 2>/dev/null; then
    die "docker-compose.yml accepted an empty $var"
  fi
done <<<"$VARS"

compose "$ENV_FILE" "${BASE[@]}" config >"$TMP/plain.yml"
compose "$ENV_FILE" "${DEMO[@]}" config >"$TMP/demo.yml"

log "the resolved config: secrets, the one build, limits, restarts, ports, mounts"
/usr/bin/python3 - "$TMP/plain.yml" "$TMP/demo.yml" "$SECRETS" "$ROOT" <<'PY' || die "docker-compose.yml fails the checks above"
import json, os, re, sys, yaml

plain_path, demo_path, secrets_dir, root = sys.argv[1:5]
failures = []
def check(ok, message):
    if not ok:
        failures.append(message)

# Every secret value scripts/compose-secrets made (the certificate is public: not one).
values = {}
for name in os.listdir(secrets_dir):
    if name == "compose.env" or name == "tls_cert.pem":
        continue
    with open(os.path.join(secrets_dir, name)) as f:
        values[name] = f.read().strip()

# Which secret each *_FILE setting must name, per service.
EXPECTED = {
    "seckill1": {"SECKILL_ADMIN_TOKEN_FILE": "admin_token", "SECKILL_ZK_AUTH_FILE": "zk_auth",
                 "SECKILL_PAYMENT_API_KEY_FILE": "payment_api_key", "SECKILL_DB_PASSWORD_FILE": "db_password"},
    "provider": {"PROVIDER_API_KEY_FILE": "payment_api_key", "PROVIDER_DATABASE_PASSWORD_FILE": "ledger_db_password"},
    "postgres": {"POSTGRES_PASSWORD_FILE": "db_password"},
    "ledger-db": {"POSTGRES_PASSWORD_FILE": "ledger_db_password"},
    "postgres-exporter": {"DATA_SOURCE_PASS_FILE": "db_password"},
    "grafana": {"GF_SECURITY_ADMIN_PASSWORD__FILE": "grafana_admin_password"},
}
EXPECTED["seckill2"] = EXPECTED["seckill1"]
# A setting named like a secret must be its _FILE form (SECKILL_BUYER_AUTH is a mode, not one).
SECRET_NAME = re.compile(r"(PASSWORD|_PASS|TOKEN|API_KEY|SECRET|ZK_AUTH)$")
PASSWORD_IN_URL = re.compile(r"://[^/@:]+:[^/@]*@")
# The files the contract mounts: (service, target) -> source under the checkout.
MOUNTS = {
    ("nginx", "/etc/nginx/nginx.conf"): "deploy/nginx.conf",
    ("nginx", "/etc/nginx/nginx-locations.conf"): "deploy/nginx-locations.conf",
    ("prometheus", "/etc/prometheus"): "deploy/prometheus",
    ("alertmanager", "/etc/alertmanager/alertmanager.yml"): "deploy/alertmanager/alertmanager.yml",
    ("grafana", "/etc/grafana/provisioning"): "deploy/grafana/provisioning",
    ("grafana", "/var/lib/grafana/dashboards"): "deploy/grafana/dashboards",
}

def secret_sources(service):
    return {s["source"] if isinstance(s, dict) else s for s in service.get("secrets", [])}

def published(service):
    """(host_ip, published, target) of each published port, short or long syntax."""
    for port in service.get("ports", []):
        if isinstance(port, dict):
            yield str(port.get("host_ip", "")), str(port.get("published", "")), str(port["target"])
        else:
            parts = str(port).split("/")[0].split(":")
            if len(parts) == 3:
                yield parts[0], parts[1], parts[2]
            elif len(parts) == 2:
                yield "", parts[0], parts[1]
            else:
                yield "", "", parts[0]

def bind_mounts(service):
    """(source, target) of each bind mount, short (`/src:/target:ro`) or long syntax."""
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            if volume.get("type") == "bind":
                yield volume["source"], volume["target"]
        elif volume.startswith(("/", ".")):  # a named volume has no slash
            parts = volume.split(":")
            yield parts[0], parts[1]

def check_config(label, config, merged=False):
    services = config["services"]
    top_secrets = config.get("secrets", {})
    # Each secret is a file scripts/compose-secrets made, and exists.
    for name, secret in top_secrets.items():
        path = secret.get("file", "")
        check(os.path.isfile(path), f"{label}: secret {name} is {path!r}, no file")
        check(os.path.dirname(path) == secrets_dir, f"{label}: secret {name} is not from compose.env ({path})")
    # One build, its image run by name by every other seckill service, never pulled.
    built = {name: s for name, s in services.items() if "build" in s}
    check(len(built) == 1, f"{label}: {len(built)} services build an image ({sorted(built)}), not one")
    if len(built) == 1:
        image = next(iter(built.values())).get("image")
        check(bool(image), f"{label}: the service that builds names no image")
        for name in ("seckill1", "seckill2", "provider"):
            check(services[name].get("image") == image, f"{label}: {name} runs {services[name].get('image')}, not the built {image}")
        # docker-compose 1.29 drops pull_policy when it merges two files (not in its list of
        # keys to merge); it ignores the key at run time anyway. Compose v2 keeps it.
        for name, s in services.items():
            if s.get("image") == image and "build" not in s and not merged:
                check(s.get("pull_policy") == "never", f"{label}: {name} may pull {image}, which only the build makes")
    for name, s in services.items():
        # Restarted, and limited.
        check(s.get("restart") in ("always", "unless-stopped", "on-failure"), f"{label}: {name} has no restart policy")
        limits = s.get("deploy", {}).get("resources", {}).get("limits", {})
        check(bool(limits.get("memory")), f"{label}: {name} has no memory limit")
        check(bool(limits.get("cpus")), f"{label}: {name} has no CPU limit")
        # Secrets as files only.
        env = s.get("environment", {}) or {}
        if isinstance(env, list):
            env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
        sources = secret_sources(s)
        for key, value in env.items():
            value = "" if value is None else str(value)
            if SECRET_NAME.search(key):
                failures.append(f"{label}: {name} has {key} in its environment (its _FILE form, a secret)")
            if key.endswith("_FILE") and value.startswith("/run/secrets/"):
                check(value[len("/run/secrets/"):] in sources, f"{label}: {name}'s {key} names {value}, a secret it does not mount")
            check(not PASSWORD_IN_URL.search(value), f"{label}: {name}'s {key} has a password in it")
        for key, secret in EXPECTED.get(name, {}).items():
            check(env.get(key) == f"/run/secrets/{secret}", f"{label}: {name}'s {key} is {env.get(key)!r}, not /run/secrets/{secret}")
        for secret in sources:
            check(secret in top_secrets, f"{label}: {name} mounts secret {secret}, which is not defined")
        # Published on loopback only.
        for host_ip, port, target in published(s):
            check(host_ip == "127.0.0.1", f"{label}: {name} publishes {port}->{target} on {host_ip or 'every address'}")
        # Every bind mount exists.
        for source, target in bind_mounts(s):
            check(os.path.exists(source), f"{label}: {name} mounts {source}, which is missing")
    # No secret value anywhere in the resolved config (environment, command, labels...).
    text = json.dumps(config)
    for name, value in values.items():
        check(value not in text, f"{label}: the value of secret {name} is in the resolved config")
    # The TLS server's port, on loopback; its pair as secrets.
    nginx = services["nginx"]
    ports = {(host_ip, port, target) for host_ip, port, target in published(nginx)}
    check(("127.0.0.1", "8443", "8443") in ports, f"{label}: nginx does not publish 8443 on 127.0.0.1 ({ports})")
    check({"tls_cert", "tls_key"} <= secret_sources(nginx), f"{label}: nginx does not mount tls_cert and tls_key")
    # The files the contract names, where it names them.
    mounts = {(name, target): source for name, s in services.items() for source, target in bind_mounts(s)}
    for (name, target), source in MOUNTS.items():
        check(mounts.get((name, target)) == os.path.join(root, source), f"{label}: {name} does not mount {source} at {target}")
    # The instances trust the client address only from nginx's own address.
    nginx_ip = nginx["networks"]["default"]["ipv4_address"]
    for name in ("seckill1", "seckill2"):
        check(services[name]["environment"].get("SECKILL_TRUSTED_PROXY") == nginx_ip,
              f"{label}: {name} must trust nginx's fixed address {nginx_ip} (SECKILL_TRUSTED_PROXY)")
        # Both sides of the payment hold the same API key: the same secret.
        check(services[name]["environment"].get("SECKILL_PAYMENT_API_KEY_FILE")
              == services["provider"]["environment"].get("PROVIDER_API_KEY_FILE"),
              f"{label}: {name} sends another API key than the provider takes")
    # Every part reports.
    for name in ("zk1", "zk2", "zk3"):
        extra = services[name]["environment"].get("ZOO_CFG_EXTRA", "")
        check("PrometheusMetricsProvider" in extra and "metricsProvider.httpPort=7000" in extra,
              f"{label}: {name} has ZooKeeper's Prometheus metrics provider off")
    check("--nginx.scrape-uri=http://nginx:8081/stub_status" in services["nginx-exporter"].get("command", []),
          f"{label}: nginx-exporter does not read nginx's stub_status (nginx:8081)")
    check(services["postgres-exporter"]["environment"].get("DATA_SOURCE_URI", "").startswith("postgres:5432/"),
          f"{label}: postgres-exporter does not ask postgres")
    return services

with open(plain_path) as f:
    plain = check_config("docker-compose.yml", yaml.safe_load(f))
with open(demo_path) as f:
    demo = check_config("docker-compose.yml with docker-compose.demo.yml", yaml.safe_load(f), merged=True)

# The plain file is a deployment: the unsafe guard, the demo hooks, the demo products and the
# provider's test controls are off, and only the override turns them on.
def env(services, name, key):
    return str(services[name]["environment"].get(key, "false")).lower()
for name in ("seckill1", "seckill2"):
    for key in ("SECKILL_ALLOW_UNSAFE_GUARDS", "SECKILL_SEED_DEMO"):
        check(env(plain, name, key) == "false", f"docker-compose.yml: {name} has {key} on")
        check(env(demo, name, key) == "true", f"docker-compose.demo.yml: {name} has {key} off")
check(env(plain, "provider", "PROVIDER_TEST_CONTROLS") == "false", "docker-compose.yml: the provider takes test controls")
check(env(demo, "provider", "PROVIDER_TEST_CONTROLS") == "true", "docker-compose.demo.yml: the provider takes no test controls")

# Prometheus scrapes (and alerts through) services compose runs, on ports they expose.
with open(os.path.join(root, "deploy/prometheus/prometheus.yml")) as f:
    prometheus = yaml.safe_load(f)
targets = [t for job in prometheus.get("scrape_configs", []) for sc in job.get("static_configs", []) for t in sc.get("targets", [])]
targets += [t for am in prometheus.get("alerting", {}).get("alertmanagers", []) for sc in am.get("static_configs", []) for t in sc.get("targets", [])]
check(bool(targets), "deploy/prometheus/prometheus.yml names no targets")
for target in targets:
    host, _, port = target.partition(":")
    if host in ("localhost", "127.0.0.1"):
        continue  # Prometheus itself
    check(host in plain, f"deploy/prometheus/prometheus.yml scrapes {target}: no such compose service")
    if host in plain:
        exposed = {str(p).split("/")[0] for p in plain[host].get("expose", [])}
        exposed |= {t for _, _, t in published(plain[host])}
        check(port in exposed, f"deploy/prometheus/prometheus.yml scrapes {target}: {host} does not expose {port}")

for failure in failures:
    print(failure, file=sys.stderr)
sys.exit(1 if failures else 0)
PY
log "every secret a file under /run/secrets; one build; every service limited and restarted; published on 127.0.0.1 only"

# The Dockerfile builds from the checkout: what it takes must be there.
for path in Dockerfile .dockerignore; do
  [ -e "$path" ] || die "docker-compose.yml builds from the checkout, but $path is missing"
done
# https to a real gateway and sslmode=verify-full need the runtime image's CA certificates.
grep -q 'apt-get install.*ca-certificates' Dockerfile ||
  die "the Dockerfile's runtime image must install ca-certificates"
# Every path the Dockerfile COPYs from the build context (not --from a stage): it must exist
# and .dockerignore must not list it (its globs are not expanded here).
copies=$(awk 'toupper($1) == "COPY" && !/--from=/ { for (i = 2; i < NF; i++) if ($i !~ /^--/) print $i }' Dockerfile)
[ -n "$copies" ] || die "found no COPY from the checkout in the Dockerfile"
while IFS= read -r path; do
  [ -e "$path" ] || die "the Dockerfile copies $path, which is missing"
  if sed -e 's#^/##' -e 's#/$##' .dockerignore | grep -qxF -- "${path%/}"; then
    die "the Dockerfile copies $path, but .dockerignore leaves it out"
  fi
done <<<"$copies"
# The secrets never go into the build context.
grep -qxE 'deploy/?' .dockerignore || die ".dockerignore must leave deploy/ (and its secrets) out of the build context"

# deploy/nginx.conf as the image's nginx reads it, checked by Debian's: the instances' names
# pointed at loopback (nginx resolves upstream names when it reads its config), the TLS pair
# the secrets' (scripts/compose-secrets made them above), its logs and pid in a scratch prefix.
log "nginx -t (deploy/nginx.conf with deploy/nginx-locations.conf, TLS server included)"
prefix="$TMP/nginx"
mkdir -p "$prefix"
cp deploy/nginx-locations.conf "$prefix/"
/usr/bin/python3 - deploy/nginx.conf "$prefix" "$SECRETS" >"$prefix/nginx.conf" <<'PY' || die "deploy/nginx.conf changed: update the rewrite in tests/deploy/compose.sh"
import sys
conf, prefix, secrets = sys.argv[1:4]
text = open(conf).read()
for old, new in [
    ("server seckill1:8080", "server 127.0.0.1:1"),
    ("server seckill2:8080", "server 127.0.0.1:2"),
    ("/run/secrets/tls_cert", f"{secrets}/tls_cert.pem"),
    ("/run/secrets/tls_key", f"{secrets}/tls_key.pem"),
    ("/var/log/nginx/", f"{prefix}/"),
    ("/var/run/nginx.pid", f"{prefix}/nginx.pid"),
]:
    if old not in text:
        sys.exit(f"deploy/nginx.conf has no {old!r}")
    text = text.replace(old, new)
for needed in ("listen 8443 ssl", "include nginx-locations.conf;", "stub_status"):
    if needed not in text:
        sys.exit(f"deploy/nginx.conf has no {needed!r}")
print(text, end="")
PY
nginx -t -q -p "$prefix" -c "$prefix/nginx.conf" 2>"$TMP/nginx.err" ||
  die "nginx -t refuses deploy/nginx.conf: $(cat "$TMP/nginx.err")"

log "compose checks green"

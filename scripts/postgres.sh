# A throwaway PostgreSQL cluster for the `db.postgres` tests: sourced by scripts/test-all.sh,
# or by hand before `cargo test`:
#
#   source scripts/postgres.sh && postgres_start    # exports WARDEN_TEST_PG_URL
#   cargo test -p warden --test postgres
#   postgres_stop
#
# Installs Debian's PostgreSQL server when no `initdb` is found. The cluster lives in a new
# temporary folder, listens on 127.0.0.1 at a free port (and on a Unix socket in that folder),
# asks for a password (scram-sha-256), and is removed by `postgres_stop`. As root, the server
# runs as the `postgres` user the package creates (initdb refuses to run as root).

postgres_bin() {
  local found
  found="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
  if [ -n "$found" ] && [ -x "$found/initdb" ]; then
    echo "$found"
  elif command -v initdb >/dev/null 2>&1; then
    dirname "$(command -v initdb)"
  fi
}

postgres_as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

postgres_start() {
  local bin
  bin="$(postgres_bin)"
  if [ -z "$bin" ]; then
    echo "installing PostgreSQL (Debian's postgresql package)"
    if [ "$(id -u)" = 0 ]; then apt_get=(apt-get); else apt_get=(sudo apt-get); fi
    "${apt_get[@]}" update -qq
    DEBIAN_FRONTEND=noninteractive "${apt_get[@]}" install -y -qq --no-install-recommends postgresql >/dev/null
    bin="$(postgres_bin)"
  fi
  [ -n "$bin" ] || { echo "no PostgreSQL server binaries after installing" >&2; return 1; }
  WARDEN_PG_DIR="$(mktemp -d /tmp/warden-pg.XXXXXX)"
  export WARDEN_PG_DIR
  local password port
  password="pw-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  printf '%s\n' "$password" >"$WARDEN_PG_DIR/pwfile"
  if [ "$(id -u)" = 0 ]; then chown -R postgres "$WARDEN_PG_DIR"; fi
  postgres_as_owner "$bin/initdb" -D "$WARDEN_PG_DIR/data" -U warden --pwfile="$WARDEN_PG_DIR/pwfile" \
    --auth=scram-sha-256 -E UTF8 --locale=C >"$WARDEN_PG_DIR/initdb.log" 2>&1 \
    || { cat "$WARDEN_PG_DIR/initdb.log" >&2; return 1; }
  rm -f "$WARDEN_PG_DIR/pwfile"
  postgres_as_owner "$bin/pg_ctl" -D "$WARDEN_PG_DIR/data" -l "$WARDEN_PG_DIR/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $WARDEN_PG_DIR -c max_connections=200" start >/dev/null \
    || { cat "$WARDEN_PG_DIR/server.log" >&2; return 1; }
  WARDEN_PG_BIN="$bin"
  export WARDEN_PG_BIN
  export WARDEN_TEST_PG_URL="postgres://warden:$password@127.0.0.1:$port/postgres"
  echo "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port (throwaway cluster)"
}

postgres_stop() {
  if [ -n "${WARDEN_PG_DIR:-}" ] && [ -d "$WARDEN_PG_DIR/data" ]; then
    postgres_as_owner "$WARDEN_PG_BIN/pg_ctl" -D "$WARDEN_PG_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$WARDEN_PG_DIR"
  fi
}

# Sourced by .ci/run (and usable by hand): start_private_pg starts a private
# PostgreSQL cluster from the installed server binaries, with the settings a
# fresh machine of ours boots with, and exports TEST_DATABASE_URL for it;
# stop_private_pg stops and removes it.
#
# The image's PostgreSQL runs with autovacuum = off server-wide and
# max_connections = 100. A shared server that someone tuned by hand
# (autovacuum turned on, more connections) once kept CI green while `make
# test` failed for every newcomer: TestDoctorManyDatabases expected the
# doctor's table_settings check to pass, which it cannot on the image's
# server. On this cluster no tuning can hide such a test: its settings are
# checked after it starts. initdb refuses to run as root, so as root the
# cluster runs as the postgres user, as package devdb does it.
#
#   source .ci/private-pg.sh; start_private_pg; trap stop_private_pg EXIT; make test

start_private_pg() {
  pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  pg_dir=$(mktemp -d /tmp/skiplock-ci-pg.XXXXXX)
  if [ "$(id -u)" = 0 ]; then chown postgres "$pg_dir"; fi
  pg_port=55432
  _as_pg "$pg_bin/initdb" -D "$pg_dir/data" -U postgres -A trust -E UTF8 --no-instructions >/dev/null
  # A port free when probed can be taken before the server binds it (a
  # test's own cluster starting meanwhile): then the next one.
  local tries=0
  until
    while (echo >/dev/tcp/127.0.0.1/$pg_port) 2>/dev/null; do
      pg_port=$((pg_port + 1))
    done
    _as_pg "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/postgres.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $pg_port -k $pg_dir -c autovacuum=off -c max_connections=100" start >/dev/null
  do
    tries=$((tries + 1))
    if [ $tries -ge 5 ]; then
      tail -5 "$pg_dir/postgres.log" >&2
      return 1
    fi
    echo "ci: port $pg_port was taken as the server started; trying the next" >&2
    pg_port=$((pg_port + 1))
  done
  export TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$pg_port/postgres?sslmode=disable"
  local settings
  settings=$(psql "$TEST_DATABASE_URL" -XAtc "SELECT current_setting('autovacuum') || ' ' || current_setting('max_connections')")
  if [ "$settings" != "off 100" ]; then
    echo "ci: the test cluster runs with autovacuum, max_connections = $settings, not the image's off, 100" >&2
    return 1
  fi
  echo "ci: private PostgreSQL on port $pg_port (autovacuum off, max_connections 100, as the image's)"
}

stop_private_pg() {
  _as_pg "$pg_bin/pg_ctl" -D "$pg_dir/data" -m fast -w stop >/dev/null 2>&1 || true
  rm -rf "$pg_dir"
}

_as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

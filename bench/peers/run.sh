#!/usr/bin/env bash
# Head-to-head: skiplock, River and asynq through the same scenarios on this
# machine, one after the other (never two at once: they share the CPUs).
#
#   bench/peers/run.sh            # or: make bench-peers
#
# PostgreSQL: PGHOST/PGPORT/PGUSER as for psql (default 127.0.0.1:5432,
# postgres). Two databases are created if missing: skiplock_bench and
# river_bench, one per queue so neither sees the other's tables. The hot
# table of each is vacuumed before each run (on a server with autovacuum off
# dead tuples would otherwise carry from run to run). asynq runs against a
# private redis-server that bench/peers/asynq/run.sh starts and stops.
#
# About 25 minutes; River at its default FetchCooldown drains 20,000 jobs
# (about a minute) instead of 100,000. QUICK=1 divides every size by 20 (a
# smoke test of the script, not a measurement). Output: one block per run.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
export PGHOST=${PGHOST:-127.0.0.1} PGPORT=${PGPORT:-5432} PGUSER=${PGUSER:-postgres}
url() { echo "postgres://$PGUSER@$PGHOST:$PGPORT/$1?sslmode=disable"; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/skiplock-peers.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

for db in skiplock_bench river_bench; do
	psql -qtAc "select 1 from pg_database where datname = '$db'" postgres | grep -q 1 ||
		psql -qc "create database $db" postgres
done

echo "building…" >&2
(cd "$root" && go build -o "$tmp/skiplock" ./cmd/skiplock)
(cd "$root/bench/peers/river" && go build -o "$tmp/river-bench" .)
DATABASE_URL=$(url skiplock_bench) "$tmp/skiplock" migrate up >/dev/null

# n SIZE: SIZE, or SIZE/20 with QUICK=1.
n() { if [[ -n ${QUICK:-} ]]; then echo $(($1 / 20)); else echo "$1"; fi; }

sk() {
	psql -qc 'vacuum skiplock.jobs' skiplock_bench
	echo "== skiplock bench $*"
	DATABASE_URL=$(url skiplock_bench) "$tmp/skiplock" bench "$@" 2>/dev/null
}
rv() {
	psql -qc 'vacuum river_job' river_bench 2>/dev/null || true # absent before the first run
	echo "== river $*"
	DATABASE_URL=$(url river_bench) "$tmp/river-bench" "$@" 2>/dev/null
}
aq() {
	echo "== asynq (redis ${REDIS_AOF:-defaults}) $*"
	"$root/bench/peers/asynq/run.sh" "$@" 2>/dev/null
}

echo "# $(date -u '+%F %T UTC'), $(nproc) CPUs, $(psql -qtAc 'show server_version' postgres | cut -d' ' -f1)"
# The articles' harness: 32 workers, handler sleeps 2–5 ms.
sk --jobs "$(n 100000)"
rv --jobs "$(n 100000)" --fetch-cooldown 1ms
rv --jobs "$(n 20000)"
aq --jobs "$(n 100000)"
REDIS_AOF=always aq --jobs "$(n 20000)"
# No-op handler, 32 workers.
sk --jobs "$(n 50000)" --handler noop
rv --jobs "$(n 50000)" --handler noop --fetch-cooldown 1ms
aq --jobs "$(n 50000)" --handler noop
# Each at its best settings.
sk --jobs "$(n 50000)" --handler noop --workers 128 --batch 500
rv --jobs "$(n 100000)" --handler noop --workers 2000 --fetch-cooldown 1ms
aq --jobs "$(n 50000)" --handler noop --workers 128
# Idle queue: enqueue → handler start, default settings.
sk --latency --samples "$(n 1000)"
rv --latency --samples "$(n 500)"
aq --latency --samples "$(n 100)"

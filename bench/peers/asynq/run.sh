#!/usr/bin/env bash
# Runs asynq-bench against a private redis-server: started on a free port in
# a temporary directory, stopped (and the directory removed) afterwards.
#
#   ./run.sh [asynq-bench flags...]
#   REDIS_AOF=everysec ./run.sh ...   # --appendonly yes --appendfsync everysec
#   REDIS_AOF=always   ./run.sh ...   # --appendonly yes --appendfsync always
#
# Without REDIS_AOF the server runs with Redis's compiled-in defaults (no
# config file): appendonly no, RDB snapshots per the default save rules.
# REDIS_SERVER overrides the redis-server binary.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
server=${REDIS_SERVER:-redis-server}
command -v "$server" >/dev/null || { echo "run.sh: $server not found (apt-get install -y redis-server)" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/asynq-bench.XXXXXX")
pid=
cleanup() {
	if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
		kill "$pid" 2>/dev/null || true # SIGTERM: redis-server shuts down cleanly
		for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A free port: the first of a random run of candidates nothing listens on.
port=
for _ in $(seq 50); do
	p=$((20000 + RANDOM % 20000))
	if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then port=$p; break; fi
done
[[ -n $port ]] || { echo "run.sh: no free port found" >&2; exit 1; }

args=(--port "$port" --bind 127.0.0.1 --dir "$tmp" --logfile "$tmp/redis.log" --daemonize no)
case ${REDIS_AOF:-} in
"" | no) ;;
everysec | always) args+=(--appendonly yes --appendfsync "$REDIS_AOF") ;;
*) echo "run.sh: REDIS_AOF must be everysec, always or no, got '$REDIS_AOF'" >&2; exit 2 ;;
esac

(cd "$here" && go build -o "$tmp/asynq-bench" .)

"$server" "${args[@]}" &
pid=$!
for _ in $(seq 100); do
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
	kill -0 "$pid" 2>/dev/null || { cat "$tmp/redis.log" >&2; exit 1; }
	sleep 0.05
done
echo "run.sh: redis-server $("$server" --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') on 127.0.0.1:$port (pid $pid, dir $tmp${REDIS_AOF:+, appendfsync $REDIS_AOF})" >&2

"$tmp/asynq-bench" --redis-url "redis://127.0.0.1:$port/0" "$@"

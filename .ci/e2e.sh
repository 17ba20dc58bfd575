#!/usr/bin/env bash
# Dashboard end-to-end test: builds skiplock, creates a scratch database on
# 127.0.0.1:5432, migrates it, enqueues jobs (with a PII marker in every
# payload), makes a few dead letters with a failing worker, keeps a live
# workload running, starts `skiplock serve` with basic auth and
# --show-payloads on a free port (at log level info, so its audit lines are
# written), then runs test/e2e (playwright-core driving Debian's chromium,
# headless). Afterwards it checks the server logged the payload reveal (user
# and job id) and that the PII marker reached no log. A second `skiplock serve` runs over three
# databases (that one and two more scratch ones). Screenshots: docs/dashboard.png (overview),
# docs/dashboard-databases.png (the overview over three databases) and
# test/e2e/artifacts/*.png (every page). Cleans up everything it started.
# Runs as root with no terminal. Needs PostgreSQL (trust on loopback), Go,
# Node and npm; installs chromium with apt-get if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

admin_url=${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
marker="pii-e2e-$RANDOM$RANDOM"

log() { echo "e2e: $*" >&2; }

if ! command -v chromium >/dev/null 2>&1; then
  log "installing chromium"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
command -v node >/dev/null 2>&1 || { log "node is required"; exit 1; }

work=$(mktemp -d /tmp/skiplock-e2e.XXXXXX)
db="skiplock_e2e_$(date +%s)_$$"
# host:port of the server, as the dashboard names a database in its audit lines
db_hostport=$(printf '%s' "$admin_url" | sed -E 's|^[a-z]+://([^@/]*@)?([^/?]+).*|\2|')
pids=()
cleanup() {
  local rc=$?
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  for d in "$db" "${db}_b" "${db}_c"; do
    psql "$admin_url" -qAtc "DROP DATABASE IF EXISTS $d WITH (FORCE)" >/dev/null 2>&1 || true
  done
  if [ "$rc" -ne 0 ]; then
    log "failed (exit $rc); server log:"
    tail -n 40 "$work/serve.log" >&2 2>/dev/null || true
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "building"
# as the release builds it (internal/gobuild): the cache has it from make test
CGO_ENABLED=0 go build -trimpath -tags skiplock_cloud -o "$work/skiplock" ./cmd/skiplock
sk="$work/skiplock"

log "npm install (test/e2e)"
(cd test/e2e && npm ci --no-audit --no-fund --loglevel=error >/dev/null)

log "scratch database $db"
psql "$admin_url" -qAtc "CREATE DATABASE $db" >/dev/null
export DATABASE_URL="${admin_url%%\?*}"
DATABASE_URL="${DATABASE_URL%/*}/$db?sslmode=disable"
export SKIPLOCK_LOG_LEVEL=warn
"$sk" migrate up >/dev/null

log "seeding jobs"
"$sk" schedule add nightly-report --cron '0 3 * * *' --queue reports --kind report.build \
  --payload "{\"to\":\"$marker@example.com\"}" >/dev/null
node -e '
  const m = process.argv[1];
  const kinds = ["email.send", "email.send", "webhook.ping", "report.build"];
  for (let i = 0; i < 6000; i++) {
    const k = kinds[i % kinds.length];
    const job = { queue: i % 5 === 0 ? "bulk" : "default", kind: k, payload: { user: i, email: `${m}+${i}@example.com` } };
    if (job.queue === "bulk") job.tenant = `carrier-${i % 4}`;
    console.log(JSON.stringify(job));
  }
  for (let i = 0; i < 6; i++) {
    console.log(JSON.stringify({ queue: "hooks", kind: "webhook.deliver", max_attempts: 1, payload: { email: `${m}@example.com` } }));
  }' "$marker" > "$work/jobs.ndjson"
"$sk" enqueue --file "$work/jobs.ndjson" >/dev/null 2>&1

log "making dead letters"
"$sk" work --queue hooks --max-attempts 1 --lease 6s \
  --exec 'echo "POST https://hooks.example.com/$SKIPLOCK_JOB_ID: 503 Service Unavailable" >&2; exit 1' \
  >"$work/fail-worker.log" 2>&1 &
failer=$!
pids+=("$failer")
for _ in $(seq 1 300); do
  n=$(psql "$DATABASE_URL" -qAtc "SELECT count(*) FROM skiplock.jobs_dead")
  [ "$n" -ge 6 ] && break
  sleep 0.2
done
[ "$n" -ge 6 ] || { log "dead letters did not appear"; exit 1; }
kill -TERM "$failer"
wait "$failer" 2>/dev/null || true

log "starting a live workload"
"$sk" work --queue default --concurrency 6 --lease 6s --exec 'sleep 0.05' >"$work/worker.log" 2>&1 &
pids+=("$!")
"$sk" work --queue bulk --concurrency 2 --tenant-cap 2 --lease 6s --exec 'sleep 0.1' >"$work/worker2.log" 2>&1 &
pids+=("$!")

port=$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
export SKIPLOCK_DASHBOARD_USER=e2e SKIPLOCK_DASHBOARD_PASSWORD="pw-$RANDOM$RANDOM"
# Info, not warn: the audit lines (reveals, actions) are info lines, and the
# log check below must see them.
SKIPLOCK_LOG_LEVEL=info "$sk" serve --http-addr "127.0.0.1:$port" --show-payloads >"$work/serve.log" 2>&1 &
pids+=("$!")
url="http://127.0.0.1:$port/"
for _ in $(seq 1 100); do
  curl -fsS "${url}readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "${url}readyz" >/dev/null

# A second dashboard over three databases: this one and two more, seeded
# with their own jobs (no workers: they stay ready).
log "scratch databases ${db}_b and ${db}_c for the dashboard over several databases"
multi_args=(--database-url "$DATABASE_URL")
for d in "${db}_b" "${db}_c"; do
  psql "$admin_url" -qAtc "CREATE DATABASE $d" >/dev/null
  durl="${DATABASE_URL%/*}/$d?sslmode=disable"
  "$sk" migrate up --database-url "$durl" >/dev/null
  n=200; [ "$d" = "${db}_c" ] && n=400
  node -e '
    const [m, n] = [process.argv[1], Number(process.argv[2])];
    for (let i = 0; i < n; i++) console.log(JSON.stringify({ queue: "mail", kind: "email.send", payload: { email: `${m}+${i}@example.com` } }));
  ' "$marker" "$n" > "$work/jobs-$d.ndjson"
  "$sk" enqueue --database-url "$durl" --file "$work/jobs-$d.ndjson" >/dev/null 2>&1
  multi_args+=(--database-url "$durl")
done
port2=$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
SKIPLOCK_LOG_LEVEL=info "$sk" serve --http-addr "127.0.0.1:$port2" "${multi_args[@]}" >"$work/serve-multi.log" 2>&1 &
pids+=("$!")
multi_url="http://127.0.0.1:$port2/"
for _ in $(seq 1 100); do
  curl -fsS "${multi_url}readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "${multi_url}readyz" >/dev/null

log "running the browser tests against $url and $multi_url"
mkdir -p docs test/e2e/artifacts
(cd test/e2e && \
  SKIPLOCK_E2E_URL="$url" SKIPLOCK_E2E_USER="$SKIPLOCK_DASHBOARD_USER" SKIPLOCK_E2E_PASS="$SKIPLOCK_DASHBOARD_PASSWORD" \
  SKIPLOCK_E2E_MARKER="$marker" SKIPLOCK_E2E_ARTIFACTS="$root/test/e2e/artifacts" \
  SKIPLOCK_E2E_SCREENSHOT="$root/docs/dashboard.png" SKIPLOCK_E2E_REVEALED="$work/revealed" \
  SKIPLOCK_E2E_MULTI_URL="$multi_url" SKIPLOCK_E2E_MULTI_SCREENSHOT="$root/docs/dashboard-databases.png" \
  timeout 600 node --test --test-concurrency=1 dashboard.test.mjs)

# The reveal was audited: one line naming the user and the job, no payload.
revealed=$(cat "$work/revealed")
if ! grep -q "msg=\"dashboard: payload revealed\" job_id=$revealed user=$SKIPLOCK_DASHBOARD_USER\$" "$work/serve.log"; then
  log "no audit line for the reveal of job $revealed by $SKIPLOCK_DASHBOARD_USER in the serve log:"
  grep "dashboard:" "$work/serve.log" >&2 || true
  exit 1
fi
log "reveal audited: $(grep -m1 'payload revealed' "$work/serve.log")"
for line in "dashboard: queue paused" "dashboard: queue resumed" "dashboard: replay started"; do
  grep -q "msg=\"$line\".* user=$SKIPLOCK_DASHBOARD_USER" "$work/serve.log" || { log "no audit line \"$line\""; exit 1; }
done
# The dashboard over several databases audits its actions with the database.
for line in "dashboard: queue paused" "dashboard: queue resumed"; do
  grep -q "msg=\"$line\" database=${db_hostport}/${db}_b .*user=$SKIPLOCK_DASHBOARD_USER" "$work/serve-multi.log" ||
    { log "no audit line \"$line\" naming ${db}_b in the multi-database serve log"; grep "dashboard:" "$work/serve-multi.log" >&2 || true; exit 1; }
done
# No payload in any log, the info-level audit lines included.
if grep -q "$marker" "$work"/*.log; then
  log "a payload reached a log:"
  grep -h "$marker" "$work"/*.log | head -n 5 >&2
  exit 1
fi
log "ok: screenshots in docs/dashboard.png and test/e2e/artifacts/"

#!/bin/bash
# run.sh SCRIPT TABLE PIN ROTATE: 60 s of pgbench (8 clients) on ref_pgbench, with an idle
# transaction holding an xid (PIN=1) and the rotator (ROTATE=1); prints the table size every 10 s.
# e.g. ./run.sh rot_3tx_b10.sql q_rot 1 1   or   ./run.sh ../../../shared/reference/pgbench/job_3tx_b10.sql q_job 1 0
P="psql -h 127.0.0.1 -U postgres -d ref_pgbench -Atq"
script=$1; tbl=$2; pin=$3; rot=$4
$P -c "VACUUM $tbl" 
if [ "$pin" = 1 ]; then
  psql -h 127.0.0.1 -U postgres -d ref_pgbench -Atq -c "BEGIN" -c "SELECT txid_current()" -c "SELECT pg_sleep(75)" >/dev/null 2>&1 &
  pinpid=$!; sleep 1
fi
if [ "$rot" = 1 ]; then ./rotate.sh > rotate.log 2>&1 & rotpid=$!; fi
( for i in 1 2 3 4 5 6; do sleep 10; echo "size $((i*10))s $($P -c "SELECT pg_size_pretty(sum(pg_total_relation_size(c.oid))::bigint) FROM pg_class c WHERE c.relname LIKE '${tbl}%' AND c.relkind IN ('r','p')")"; done ) &
sizer=$!
pgbench -h 127.0.0.1 -U postgres -n -f $script -c 8 -j 2 -T 60 ref_pgbench 2>&1 | grep -E "^tps"
wait $sizer
[ -n "$rotpid" ] && kill $rotpid
[ -n "$pinpid" ] && kill $pinpid 2>/dev/null; psql -h 127.0.0.1 -U postgres -d ref_pgbench -Atq -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(75)%' AND pid <> pg_backend_pid()" >/dev/null
true

#!/bin/bash
# every 5 s: the next generation takes the inserts; the oldest, once empty, is truncated.
# ROT_G: the generations schema.sql made (psql -v g=...), 3 by default; ROT_EVERY: seconds
# between rotations, 5 by default.
G=${ROT_G:-3}
P="psql -h 127.0.0.1 -U postgres -d ref_pgbench -Atq"
while true; do
  sleep ${ROT_EVERY:-5}
  g=$($P -c "UPDATE rot_cur SET gen = (gen + 1) % $G RETURNING gen")
  old=$(( (g + 1) % G ))
  n=$($P -c "SELECT count(*) FROM (SELECT 1 FROM q_rot_$old LIMIT 1) x")
  if [ "$n" = "0" ]; then
    $P -c "SET lock_timeout = '200ms'; TRUNCATE q_rot_$old" >/dev/null 2>&1 && echo "$(date +%T) truncated q_rot_$old" || echo "$(date +%T) truncate of q_rot_$old failed"
  else
    echo "$(date +%T) q_rot_$old not empty"
  fi
done

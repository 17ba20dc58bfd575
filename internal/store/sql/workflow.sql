-- Workflows, their tasks' outputs, durable steps and signals (migration 007).
-- The graph itself moves forward in the database: the statement trigger
-- jobs_left (migration 011) ends the tasks of the jobs a statement removed,
-- in that statement's transaction, and enqueues the children they released. Statements a handler runs for its own job are
-- fenced by (id, lease_token, locked_by), as lease.sql's are.

-- name: workflow_create
-- A workflow and its tasks (a JSON array, see add_tasks) in one call; the
-- caller's transaction decides whether any of it exists.
--   $1 name  $2 on_failure  $3 tasks  $4 metadata  $5 batch
SELECT {{schema}}.create_workflow($1, $2, $3::jsonb, $4::jsonb, $5);

-- name: task_context
-- The workflow task a running job executes (NULL when it is a plain job).
--   $1 job id  $2 token  $3 worker id
SELECT j.task_id, t.workflow_id, t.name
FROM {{schema}}.jobs AS j
LEFT JOIN {{schema}}.workflow_tasks AS t ON t.id = j.task_id AND j.task_id > 0
WHERE j.id = $1 AND j.lease_token = $2 AND j.locked_by = $3;

-- name: task_add
-- Fan-out: a running task adds tasks to its own workflow. One row when the
-- lease is held, with how many tasks it added (names already present are
-- skipped, so a retried task adds nothing twice): a count, not the ids, so
-- that a database/sql transaction (SQLTx), which cannot scan an array, can
-- run it too.
--   $1 job id  $2 token  $3 worker id  $4 tasks
SELECT t.workflow_id, cardinality(ARRAY(SELECT {{schema}}.add_tasks(t.workflow_id, $4::jsonb)))
FROM {{schema}}.jobs AS j
JOIN {{schema}}.workflow_tasks AS t ON t.id = j.task_id
WHERE j.id = $1 AND j.lease_token = $2 AND j.locked_by = $3;

-- name: task_set_output
-- The output of the task a job executes, written by its lease holder.
--   $1 job id  $2 token  $3 worker id  $4 output
UPDATE {{schema}}.workflow_tasks AS t
SET output = $4::jsonb
FROM {{schema}}.jobs AS j
WHERE j.id = $1 AND j.lease_token = $2 AND j.locked_by = $3 AND t.id = j.task_id
RETURNING t.id;

-- name: task_output
-- A task's state and output, by workflow and name.
--   $1 workflow id  $2 task name
SELECT t.state, t.output FROM {{schema}}.workflow_tasks AS t
WHERE t.workflow_id = $1 AND t.name = $2;

-- name: step_get
-- A step's checkpoint, with the database clock (timers compare against it).
--   $1 job id  $2 step name
SELECT s.output, now() FROM {{schema}}.job_steps AS s WHERE s.job_id = $1 AND s.name = $2;

-- name: step_put
-- Records a step's checkpoint, once: the primary key refuses a second one
-- (23505), so of two runs of the same step only one can commit. A plain job
-- is marked (task_id 0) so its checkpoints are removed when it ends.
-- Returns the database clock; no row when the lease is gone.
--   $1 job id  $2 token  $3 worker id  $4 step name  $5 output
WITH held AS (
    SELECT j.id, j.task_id FROM {{schema}}.jobs AS j
    WHERE j.id = $1 AND j.lease_token = $2 AND j.locked_by = $3
), mark AS (
    UPDATE {{schema}}.jobs AS j SET task_id = 0 FROM held AS h
    WHERE j.id = $1 AND j.id = h.id AND h.task_id IS NULL -- the key on every partition (migration 016)
)
INSERT INTO {{schema}}.job_steps (job_id, name, output)
SELECT h.id, $4, $5::jsonb FROM held AS h
RETURNING now();

-- name: step_put_many
-- step_put for many runs at once (Step's group commit: the checkpoints that
-- handlers record while one write is in flight go together in the next, one
-- commit for all). For each checkpoint asked for whose lease is held, one
-- row: inserted false when the step was recorded already (step_put's 23505).
-- A checkpoint missing from the result lost its lease. The same (job, step)
-- must not appear twice.
--   $1 job ids  $2 tokens  $3 step names  $4 outputs  $5 worker id
WITH held AS (
    SELECT j.id, j.task_id, l.name, l.output
    FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[]) AS l(id, token, name, output)
    JOIN {{schema}}.jobs AS j ON j.id = ANY (ARRAY[l.id]) AND {{lease_gen}} AND j.lease_token = l.token AND j.locked_by = $5
    -- the key per lease, after write_settings: see lease.sql
), mark AS (
    UPDATE {{schema}}.jobs AS j SET task_id = 0 FROM held AS h
    WHERE j.id = ANY (ARRAY[h.id]) AND h.task_id IS NULL -- the key per row: see lease.sql
), ins AS (
    INSERT INTO {{schema}}.job_steps (job_id, name, output)
    SELECT h.id, h.name, h.output::jsonb FROM held AS h
    ON CONFLICT (job_id, name) DO NOTHING
    RETURNING job_id, name
)
SELECT h.id, h.name, i.job_id IS NOT NULL
FROM held AS h LEFT JOIN ins AS i ON i.job_id = h.id AND i.name = h.name;

-- name: timer_put
-- Records a timer step: {"wake_at": ...}, the wake time by the database
-- clock ($5 later than now, or at $6 when given). Returns the checkpoint and
-- the database clock; no row when the lease is gone. Like step_put.
--   $1 job id  $2 token  $3 worker id  $4 step name  $5 delay (microseconds)  $6 wake at (NULL: now + $5)
WITH held AS (
    SELECT j.id, j.task_id FROM {{schema}}.jobs AS j
    WHERE j.id = $1 AND j.lease_token = $2 AND j.locked_by = $3
), mark AS (
    UPDATE {{schema}}.jobs AS j SET task_id = 0 FROM held AS h
    WHERE j.id = $1 AND j.id = h.id AND h.task_id IS NULL -- the key on every partition
)
INSERT INTO {{schema}}.job_steps (job_id, name, output)
SELECT h.id, $4, jsonb_build_object('wake_at', COALESCE($6::timestamptz, now() + $5::bigint * interval '1 microsecond'))
FROM held AS h
RETURNING output, now();

-- name: wait_lock
-- First statement of a signal wait's transaction: locks the job's own row
-- (fenced), which orders the wait against signal(), and says where a
-- signal may be addressed (its workflow, if it is a task).
--   $1 job id  $2 token  $3 worker id
SELECT t.workflow_id, j.cancel_requested, now()
FROM {{schema}}.jobs AS j
LEFT JOIN {{schema}}.workflow_tasks AS t ON t.id = j.task_id AND j.task_id > 0
WHERE j.id = $1 AND j.lease_token = $2 AND j.locked_by = $3
FOR NO KEY UPDATE OF j;

-- name: signal_consume
-- Takes the oldest unconsumed signal of this name addressed to the job or
-- its workflow, for the job. Run after wait_lock, in its transaction.
--   $1 job id  $2 name  $3 workflow id (NULL: a plain job)
UPDATE {{schema}}.signals AS s
SET consumed_by = $1, consumed_at = now()
WHERE s.id = (
    SELECT x.id FROM {{schema}}.signals AS x
    WHERE x.name = $2 AND x.consumed_at IS NULL AND (x.job_id = $1 OR x.workflow_id = $3)
    ORDER BY x.id LIMIT 1
    FOR UPDATE SKIP LOCKED)
RETURNING s.payload;

-- name: wait_sleep
-- A wait with nothing to receive yet goes back to the table until its
-- deadline, without spending the attempt and without holding a worker slot.
-- Fenced, and run in wait_lock's transaction: a signal sent from now on
-- finds the job ready and makes it due (signal()).
--   $1 job id  $2 token  $3 worker id  $4 wake at
UPDATE {{schema}}.jobs AS j
SET state = 'ready', attempts = j.attempts - 1, run_at = $4::timestamptz, locked_by = NULL,
    lease_token = NULL, lease_expires_at = NULL
WHERE j.id = $1 AND j.lease_token = $2 AND j.locked_by = $3 AND NOT j.cancel_requested
RETURNING j.id;

-- name: signal_send
--   $1 name  $2 workflow id  $3 job id  $4 payload
SELECT {{schema}}.signal(name => $1, workflow_id => $2, job_id => $3, payload => $4::jsonb);

-- name: workflow_get
--   $1 id
SELECT w.id, w.name, w.state, w.on_failure, w.is_batch, w.tasks_total, w.tasks_open, w.tasks_completed,
       w.tasks_dead, w.tasks_cancelled, w.created_at, w.finished_at, w.metadata
FROM {{schema}}.workflows AS w WHERE w.id = $1;

-- name: workflow_tasks
-- A workflow's tasks in the order they were added, with their parents'
-- names; never a payload. The output only when asked for ($2).
--   $1 workflow id  $2 with outputs
SELECT t.id, t.name, t.state, t.queue, t.kind, t.job_id, t.created_at, t.enqueued_at, t.finished_at, t.error,
       CASE WHEN $2::boolean THEN t.output END,
       ARRAY(SELECT p.name FROM {{schema}}.workflow_deps AS d JOIN {{schema}}.workflow_tasks AS p ON p.id = d.parent_id
             WHERE d.task_id = t.id ORDER BY p.id)
FROM {{schema}}.workflow_tasks AS t
WHERE t.workflow_id = $1
ORDER BY t.id;

-- name: workflow_list
-- Newest first; filters are optional (NULL).
--   $1 state  $2 name  $3 ids below this one  $4 limit
SELECT w.id, w.name, w.state, w.on_failure, w.is_batch, w.tasks_total, w.tasks_open, w.tasks_completed,
       w.tasks_dead, w.tasks_cancelled, w.created_at, w.finished_at, w.metadata
FROM {{schema}}.workflows AS w
WHERE ($1::text IS NULL OR w.state = $1) AND ($2::text IS NULL OR w.name = $2)
  AND ($3::bigint IS NULL OR w.id < $3)
ORDER BY w.id DESC
LIMIT $4;

-- name: workflow_cancel
--   $1 id
SELECT {{schema}}.cancel_workflow($1);

-- name: workflow_retry
--   $1 id
SELECT {{schema}}.retry_workflow($1);

-- name: workflow_delete_named
-- Deletes every finished workflow of this name (the benchmark's cleanup).
--   $1 name
SELECT count(*) FILTER (WHERE {{schema}}.delete_workflow(w.id))
FROM {{schema}}.workflows AS w WHERE w.name = $1 AND w.state <> 'running';

-- name: workflow_purge
-- Retention: deletes up to $2 workflows (and batches) that finished more
-- than $1 microseconds ago, oldest first, each with its tasks, edges and
-- signals (delete_workflow). A workflow finishes after it was created, so
-- the range read on workflows_created bounds the scan to the workflows
-- created before the cutoff that are still kept. Another process's pass
-- skips the rows this one holds. Returns how many were deleted.
--   $1 retention (microseconds)  $2 batch size
SELECT count(*) FILTER (WHERE {{schema}}.delete_workflow(w.id))::bigint
FROM (SELECT w.id FROM {{schema}}.workflows AS w
      WHERE w.created_at < now() - $1::bigint * interval '1 microsecond'
        AND w.state <> 'running'
        AND w.finished_at < now() - $1::bigint * interval '1 microsecond'
      ORDER BY w.created_at
      LIMIT $2
      FOR UPDATE SKIP LOCKED) AS w;

-- name: workflow_waits
-- What a workflow's tasks wait for, for the dashboard: unconsumed signals
-- sent to the workflow or to one of its jobs (name and time, never the
-- payload), and the timers (sleeps and signal waits) of its enqueued tasks,
-- with their wake time.
--   $1 workflow id
SELECT 'signal' AS what, g.name, NULL::text AS task, g.created_at AS at
FROM {{schema}}.signals AS g
WHERE g.consumed_at IS NULL
  AND (g.workflow_id = $1
       OR g.job_id IN (SELECT t.job_id FROM {{schema}}.workflow_tasks AS t WHERE t.workflow_id = $1 AND t.state = 'enqueued'))
UNION ALL
SELECT CASE WHEN s.name LIKE 'wait:%' THEN 'signal wait' ELSE 'timer' END, substr(s.name, strpos(s.name, ':') + 1), t.name,
       (s.output->>'wake_at')::timestamptz
FROM {{schema}}.workflow_tasks AS t
JOIN {{schema}}.job_steps AS s ON s.job_id = t.job_id
WHERE t.workflow_id = $1 AND t.state = 'enqueued' AND (s.name LIKE 'sleep:%' OR s.name LIKE 'wait:%')
  AND NOT EXISTS (SELECT 1 FROM {{schema}}.job_steps AS r
                  WHERE r.job_id = s.job_id AND r.name = 'signal:' || substr(s.name, 6) AND s.name LIKE 'wait:%')
ORDER BY 4;

-- name: steps_of_job
-- Every checkpoint of a job, read once per run (durable.go caches them).
--   $1 job id
SELECT s.name, s.output FROM {{schema}}.job_steps AS s WHERE s.job_id = $1;

-- name: task_output_by_id
-- One task's output (NULL: none), for a reveal on the dashboard.
--   $1 workflow id  $2 task id
SELECT t.output FROM {{schema}}.workflow_tasks AS t WHERE t.workflow_id = $1 AND t.id = $2;

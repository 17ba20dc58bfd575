-- What follows jobs leaving the hot table, for the jobs with a task_id
-- (p_jobs, p_tasks: ids, task ids; p_running: whether the job was running,
-- which only its lease holder can end). The rules are 007's, set-based:
--   * every such job's checkpoints and signals go;
--   * its task ends as the row says where it went: jobs_dead (dead, or
--     cancelled when that is the reason), else completed if it was running
--     (only a lease holder deletes a running row), else cancelled (an
--     operator deleted a ready job); a job that is no longer its task's
--     current job (a retried task's old one) changes nothing;
--   * under the 'cancel' policy a dead or cancelled task cancels every
--     pending descendant; under 'continue' its children run anyway once
--     their other parents finished;
--   * each workflow's counters move once, under its row lock, and end the
--     workflow exactly once when its last open task ends;
--   * each child waits for as many parents less as ended here, and a child
--     with none left takes its job's id and becomes that job.
-- Workflows are locked in id order, so two transactions ending tasks of the
-- same workflows wait for each other instead of deadlocking.
--
-- Plans: statements here are planned once per connection, perhaps while the
-- tables were empty; with sequential scans off every statement reaches the
-- workflow tables by their keys, however the plan was made.
CREATE OR REPLACE FUNCTION {{schema}}.tasks_left(p_jobs bigint[], p_tasks bigint[], p_running boolean[])
RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
DECLARE
    v_ended bigint[];        -- the tasks that ended, their workflows and end states
    v_wfs bigint[];
    v_states text[];
    v_cancel_wfs bigint[];   -- of those workflows, the ones whose policy is 'cancel'
    v_below bigint[];        -- workflows of the descendants cancelled here, one entry each
    v_n integer;
BEGIN
    WITH s AS (DELETE FROM {{schema}}.job_steps AS s WHERE s.job_id = ANY (p_jobs))
    DELETE FROM {{schema}}.signals AS g WHERE g.job_id = ANY (p_jobs);

    WITH x AS (
        SELECT u.job, u.task,
               CASE WHEN d.reason = 'cancelled' THEN 'cancelled'
                    WHEN d.reason IS NOT NULL THEN 'dead'
                    WHEN u.running THEN 'completed'
                    ELSE 'cancelled' END AS state,
               CASE WHEN d.reason IS NOT NULL THEN left(d.last_error, 2048)
                    WHEN u.running THEN NULL
                    ELSE 'its job was deleted' END AS error
        FROM unnest(p_jobs, p_tasks, p_running) AS u(job, task, running)
        LEFT JOIN {{schema}}.jobs_dead AS d ON d.id = u.job
        WHERE u.task > 0
    ), e AS (
        UPDATE {{schema}}.workflow_tasks AS t
        SET state = x.state, finished_at = now(), error = x.error
        FROM x
        WHERE t.id = x.task AND t.job_id = x.job AND t.state = 'enqueued'
        RETURNING t.id, t.workflow_id, t.state
    )
    SELECT array_agg(e.id), array_agg(e.workflow_id), array_agg(e.state) INTO v_ended, v_wfs, v_states FROM e;
    IF v_ended IS NULL THEN
        RETURN;
    END IF;

    SELECT coalesce(array_agg(w.id) FILTER (WHERE w.on_failure = 'cancel'), '{}') INTO v_cancel_wfs
    FROM (SELECT w.id, w.on_failure FROM {{schema}}.workflows AS w
          WHERE w.id = ANY (v_wfs) ORDER BY w.id FOR NO KEY UPDATE) AS w;

    IF 'dead' = ANY (v_states) OR 'cancelled' = ANY (v_states) THEN
        WITH RECURSIVE below(id) AS (
            SELECT d.task_id
            FROM unnest(v_ended, v_wfs, v_states) AS e(id, wf, state)
            JOIN {{schema}}.workflow_deps AS d ON d.parent_id = e.id
            WHERE e.state <> 'completed' AND e.wf = ANY (v_cancel_wfs)
            UNION
            SELECT d.task_id FROM {{schema}}.workflow_deps AS d JOIN below AS b ON d.parent_id = b.id
        ), cut AS (
            UPDATE {{schema}}.workflow_tasks AS t
            SET state = 'cancelled', finished_at = now(), error = 'a task it depends on failed'
            FROM below AS b
            WHERE t.id = b.id AND t.state = 'pending'
            RETURNING t.workflow_id
        )
        SELECT coalesce(array_agg(cut.workflow_id), '{}') INTO v_below FROM cut;
    END IF;

    UPDATE {{schema}}.workflows AS x
    SET tasks_open      = x.tasks_open - a.ended - a.below,
        tasks_completed = x.tasks_completed + a.completed,
        tasks_dead      = x.tasks_dead + a.dead,
        tasks_cancelled = x.tasks_cancelled + a.cancelled + a.below,
        state = CASE
            WHEN x.state <> 'running' OR x.tasks_open - a.ended - a.below > 0 THEN x.state
            -- A batch's last task is its callback: the batch ends as it does.
            WHEN x.is_batch THEN CASE WHEN a.dead + a.cancelled = 0 THEN 'completed' ELSE 'failed' END
            WHEN x.tasks_dead + a.dead > 0 OR x.tasks_cancelled + a.cancelled + a.below > 0 THEN 'failed'
            ELSE 'completed' END,
        finished_at = CASE WHEN x.tasks_open - a.ended - a.below = 0 THEN now() ELSE x.finished_at END
    FROM (SELECT c.wf,
                 count(*) FILTER (WHERE c.state IS NOT NULL)::int   AS ended,
                 count(*) FILTER (WHERE c.state = 'completed')::int AS completed,
                 count(*) FILTER (WHERE c.state = 'dead')::int      AS dead,
                 count(*) FILTER (WHERE c.state = 'cancelled')::int AS cancelled,
                 count(*) FILTER (WHERE c.state IS NULL)::int       AS below
          FROM (SELECT e.wf, e.state FROM unnest(v_wfs, v_states) AS e(wf, state)
                UNION ALL
                SELECT b.wf, NULL FROM unnest(v_below) AS b(wf)) AS c
          GROUP BY c.wf) AS a
    WHERE x.id = a.wf;

    WITH rel AS (
        SELECT d.task_id AS child, count(*)::int AS n, count(*) FILTER (WHERE e.state <> 'completed')::int AS failed
        FROM unnest(v_ended, v_wfs, v_states) AS e(id, wf, state)
        JOIN {{schema}}.workflow_deps AS d ON d.parent_id = e.id
        WHERE e.state = 'completed' OR NOT e.wf = ANY (v_cancel_wfs)
        GROUP BY d.task_id
    ), kids AS (
        UPDATE {{schema}}.workflow_tasks AS c
        SET waiting = c.waiting - r.n,
            parents_failed = c.parents_failed + r.failed,
            state = CASE WHEN c.waiting = r.n THEN 'enqueued' ELSE c.state END,
            job_id = CASE WHEN c.waiting = r.n THEN nextval('{{schema}}.jobs_id_seq'::regclass) ELSE c.job_id END,
            enqueued_at = CASE WHEN c.waiting = r.n THEN now() ELSE c.enqueued_at END
        FROM rel AS r
        WHERE c.id = r.child AND c.state = 'pending'
        RETURNING c.*
    ), ins AS (
        INSERT INTO {{schema}}.jobs AS j (id, queue, kind, payload, priority, run_at, max_attempts, tenant, entity,
                                          metadata, task_id)
        OVERRIDING SYSTEM VALUE
        SELECT k.job_id, k.queue, k.kind, k.payload, k.priority, clock_timestamp(), coalesce(k.max_attempts, 20),
               k.tenant, k.entity, k.metadata, k.id
        FROM kids AS k WHERE k.state = 'enqueued'
        RETURNING j.queue
    )
    SELECT count(*) INTO v_n FROM (SELECT DISTINCT i.queue FROM ins AS i) AS q, pg_notify({{schema_lit}} || '.jobs', q.queue) AS n;
END
$$;

-- The data a 30-minute chaos run leaves for the workflow checker (see
-- TestWorkflowChecksScale): 250,000 plain jobs with 1.1 runs each, and 3,600
-- workflows (one per 500 ms) of a split, three leaves that nap once and a
-- join, with their runs, dependencies and effects, every invariant kept.
-- public.runs exists (the harness's setupSQL); wf_effects is created first.
-- plain jobs: 250k, every tenth runs twice
INSERT INTO public.runs (job_id, attempt, worker, lease_token, pid, started_at, outcome, finished_at, finished)
SELECT j, a, 'w', j*10+a, 1, now() - interval '30 min' + j * interval '7 ms' + a * interval '1 s', 'ok', now(), true
FROM generate_series(1, 250000) j, generate_series(1, 2) a WHERE a = 1 OR j % 10 = 0;
-- workflows
INSERT INTO skiplock.workflows (name, state, tasks_total, created_at, finished_at)
SELECT 'chaos', 'completed', 5, now() - interval '30 min' + w * interval '500 ms', now() FROM generate_series(1, 3600) w;
INSERT INTO skiplock.workflow_tasks (workflow_id, name, state, job_id, queue, kind, finished_at)
SELECT w.id, x.name, 'completed', 300000 + (w.id - 1) * 5 + x.i, 'chaos_wf', 'wfstep',
       w.created_at + x.i * interval '1 s' + interval '500 ms'
FROM skiplock.workflows w, (VALUES (0, 'split'), (1, 'leaf-0'), (2, 'leaf-1'), (3, 'leaf-2'), (4, 'join')) AS x(i, name);
INSERT INTO skiplock.workflow_deps (parent_id, task_id)
SELECT p.id, c.id FROM skiplock.workflow_tasks p JOIN skiplock.workflow_tasks c ON c.workflow_id = p.workflow_id
WHERE (p.name = 'split' AND c.name LIKE 'leaf-%') OR (p.name LIKE 'leaf-%' AND c.name = 'join');
-- a task's runs start after its parents finished: split at +0 s, leaves at +1 s (and again after the nap), join at +4 s
INSERT INTO public.runs (job_id, attempt, worker, lease_token, pid, started_at, outcome, finished_at, finished)
SELECT t.job_id, r.a, 'w', t.job_id*10+r.a, 1,
       w.created_at + (CASE WHEN t.name = 'split' THEN 0 WHEN t.name = 'join' THEN 4.6 ELSE 0.6 END) * interval '1 s' + (r.a - 1) * interval '200 ms',
       CASE WHEN r.a = 1 AND t.name LIKE 'leaf-%' THEN 'sleep' ELSE 'ok' END, now(), true
FROM skiplock.workflow_tasks t JOIN skiplock.workflows w ON w.id = t.workflow_id, generate_series(1, 2) r(a)
WHERE r.a = 1 OR t.name LIKE 'leaf-%';
INSERT INTO public.wf_effects (job_id, task_id, step, value, at)
SELECT t.job_id, t.id, s.step, CASE WHEN s.step = 'woke' THEN 100 END, w.created_at + interval '3 s'
FROM skiplock.workflow_tasks t JOIN skiplock.workflows w ON w.id = t.workflow_id,
     (VALUES ('one'), ('two'), ('done'), ('woke')) s(step)
WHERE s.step <> 'woke' OR t.name LIKE 'leaf-%';
ANALYZE;

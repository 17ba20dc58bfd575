-- Statements about the session itself.

-- name: backend_pid
-- The server process serving this statement. A direct connection always
-- gets the PID it was given at startup (BackendKeyData); a pooler hands out
-- its own key and runs statements on whichever server session is free.
SELECT pg_backend_pid();

-- name: listen
-- The notification listener's subscription: ready jobs ("<schema>.jobs",
-- store.Channel), cancellations of running jobs ("<schema>.cancel",
-- store.CancelChannel) and waiters that start listening
-- ("<schema>.waiters", store.WaitersChannel). Several statements, so it
-- runs through the simple protocol (no arguments); LISTEN takes no
-- parameters.
LISTEN "{{schema_name}}.jobs";
LISTEN "{{schema_name}}.cancel";
LISTEN "{{schema_name}}.waiters";

-- name: unlisten
-- Undoes listen on the process's LISTEN connection, which stays up for
-- Client.Wait's subscription (a stopped client whose callers still wait).
UNLISTEN "{{schema_name}}.jobs";
UNLISTEN "{{schema_name}}.cancel";
UNLISTEN "{{schema_name}}.waiters";

-- name: listen_done
-- The waiters' subscription (Client.Wait) on the process's LISTEN
-- connection: finished jobs ("<schema>.done", store.DoneChannel), whose
-- payloads are job ids (notify_done). The connection names itself
-- skiplock-wait while it carries it: that is how worker processes know a
-- waiter listens (waiters_listening), which each looks up once a second;
-- the NOTIFY on "<schema>.waiters" tells the workers listening for it at
-- once, so that a job ending a few milliseconds after its Wait began is
-- announced too.
LISTEN "{{schema_name}}.done";
SELECT set_config('application_name', 'skiplock-wait', false);
NOTIFY "{{schema_name}}.waiters";

-- name: unlisten_done
-- Undoes listen_done when nothing is awaited any more but the connection
-- stays up for the worker runtime: back to the name it connected with
-- (skiplock-listener).
UNLISTEN "{{schema_name}}.done";
RESET application_name;

-- name: waiters_listening
-- Whether a process waits for jobs of this database (a LISTEN connection
-- carrying Client.Wait's subscription names itself skiplock-wait,
-- listen_done): the completer announces
-- the ends it writes (notify_done) only then. A NOTIFY takes a lock every
-- notifying commit of the cluster queues for; a drain nobody waits for
-- must not pay for it. Read once a second by each worker process.
SELECT EXISTS (SELECT 1 FROM pg_stat_activity AS a
               WHERE a.datname = current_database() AND a.application_name = 'skiplock-wait');

-- name: notify_self_test
-- The listener's self-test: a notification to its own jobs channel, which
-- arrives on a direct session and never behind a transaction-mode pooler.
--   $1 payload (a token the listener waits for; workers skip it)
SELECT pg_notify({{schema_lit}} || '.jobs', $1);

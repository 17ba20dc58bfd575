-- Statements about the session itself.

-- name: backend_pid
-- The server process serving this statement. A direct connection always
-- gets the PID it was given at startup (BackendKeyData); a pooler hands out
-- its own key and runs statements on whichever server session is free.
SELECT pg_backend_pid();

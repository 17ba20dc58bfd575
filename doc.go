// Package skiplock is a background job queue that lives entirely inside
// PostgreSQL.
//
// One hot table holds ready and running jobs. Workers claim them in batches
// with UPDATE … WHERE id IN (SELECT … FOR NO KEY UPDATE SKIP LOCKED LIMIT n),
// so concurrent workers never block each other, and the claim's only index is
// partial on ready rows, so it stays proportional to the backlog however many
// jobs have run.
//
// # Enqueue in your transaction
//
// A job commits in the same transaction as the row that caused it:
//
//	tx, _ := pool.Begin(ctx)
//	tx.Exec(ctx, `INSERT INTO orders ...`)
//	client.EnqueueTx(ctx, tx, skiplock.EnqueueParams{Kind: "order.confirm", Payload: Confirm{OrderID: 7}})
//	tx.Commit(ctx) // the job exists if and only if this commits
//
// EnqueueTx takes a Tx: a pgx transaction as it is, or a database/sql *sql.Tx wrapped
// with SQLTx (EnqueueManyTx, CompleteTx and the workflow functions take the
// same). Any language can
// enqueue with plain SQL: SELECT skiplock.enqueue(queue => 'q', kind => 'k', payload => '{}').
//
// # Handlers
//
// Register a typed handler per kind, then Start:
//
//	skiplock.Handle(client, "order.confirm", func(ctx context.Context, j *skiplock.Job[Confirm]) error {
//		return send(ctx, j.Args.OrderID)
//	})
//	client.Start(ctx)
//	defer client.Stop(context.Background())
//
// Return nil to complete, an error to retry with capped exponential backoff
// and jitter (then the dead-letter table), or Snooze, Discard or Cancel.
// Panics are failures, not crashes.
//
// An args type can name its kind (JobArgs: a Kind() string method), so the
// producer and the handler share it at compile time instead of typing the
// string twice:
//
//	func (Confirm) Kind() string { return "order.confirm" }
//	skiplock.HandleArgs(client, func(ctx context.Context, j *skiplock.Job[Confirm]) error { ... })
//	client.Enqueue(ctx, skiplock.EnqueueParams{Payload: Confirm{OrderID: 7}})
//
// # Looking jobs up
//
// A completed job stays in the partitioned history for
// Config.CompletedRetention (24 hours by default), so JobGet answers
// whether a job ran, when, after how many attempts and with what last
// error, wherever it is: ready, scheduled, running, dead or completed.
// JobList filters by queue, kind and state; JobRetry, JobCancel and
// JobDelete act by id. Payloads are read only by JobPayload.
//
// # Least privilege and encrypted payloads
//
// RoleGrant (skiplock roles grant) gives a database role what one
// component needs: a producer enqueues and signals through the SQL
// functions and writes no table, a reader sees no payload. With
// Config.Encryption (a Keyring, skiplock keys new) a client seals every
// payload it enqueues with AES-256-GCM under its tenant's key or the
// current one, and opens it before the handler runs (its handlers' task
// outputs, step results and the signals it sends are sealed too);
// KeysRotate re-seals jobs under the current keys. See docs/security.md.
//
// # Leases
//
// Every claim sets locked_by and a fresh lease token and counts the attempt.
// The worker extends all its leases in one statement per heartbeat; the
// reaper returns jobs whose lease expired by the database clock. Every write
// after the claim — heartbeat, completion, retry, snooze — is fenced by
// (id, lease token, locked_by): a worker that lost its lease writes nothing
// and its handler's context is cancelled. CompleteTx completes a job inside
// the handler's own transaction, so its database side effects happen exactly
// once. See docs/lease-protocol.md.
//
// # Workflows, durable steps and signals
//
// EnqueueWorkflowTx enqueues a graph of tasks (jobs) in your transaction; a
// task becomes a job when every task it depends on has completed, in the
// transaction that completed the last of them, and reads their typed outputs
// with TaskOutput. EnqueueBatch runs a callback once when N jobs finished.
// Inside any handler, Step and StepTx checkpoint progress so a retry skips
// what completed, Sleep and WaitSignal put the job back in the table until a
// time or a signal (Client.SignalSend, or SELECT skiplock.signal(...) from any
// language). See docs/workflows.md.
//
// # Failover and many databases
//
// Give the pool a multi-host URL (postgres://a,b/db?target_session_attrs=read-write)
// and a started client follows the primary through a failover on its own;
// with a synchronous standby no acknowledged job is lost. After promoting an
// asynchronous standby, call LeaseTokensAdvance once. An application split by
// tenant across databases runs one Client per database and a Fleet over them
// (NewFleet), which starts and stops them together and routes enqueues made
// outside a transaction. See docs/operations.md (section 9) and docs/scaling.md.
//
// # Operations
//
// The schema ships SQL views for lag, backlog, dead letters and vacuum state;
// the skiplock binary adds stats, top, doctor, dead-letter triage and replay,
// a dashboard, Prometheus metrics and a benchmark.
package skiplock

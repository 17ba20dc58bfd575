package importer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// The worked port of docs/coming-from-river.md: a small River service (sign
// up a user and send the welcome email in the same transaction; an hourly
// digest at most once per user) written against skiplock, compiled and run
// here. TestGuidesShowThePorts checks the guide shows this code verbatim.

// docs:river-args
// WelcomeEmail was River's JobArgs: skiplock's JobArgs is the same
// one-method interface, so the type and its Kind carry over unchanged.
type WelcomeEmail struct {
	UserID int64 `json:"user_id"`
}

func (WelcomeEmail) Kind() string { return "welcome_email" }

// Digest is the hourly digest's args.
type Digest struct {
	UserID int64 `json:"user_id"`
}

func (Digest) Kind() string { return "digest" }

// docs:end

// docs:river-workers
// Mailer sends email (a fake in tests).
type Mailer interface {
	Send(ctx context.Context, userID int64, template string) error
}

// RegisterWorkers was river.AddWorker(workers, &WelcomeWorker{}) and a
// Work method per worker: a handler function per args type.
func RegisterWorkers(client *skiplock.Client, mail Mailer) error {
	err := skiplock.HandleArgs(client, func(ctx context.Context, job *skiplock.Job[WelcomeEmail]) error {
		return mail.Send(ctx, job.Args.UserID, "welcome") // an error retries, as in River
	}, skiplock.WithTimeout(30*time.Second))
	if err != nil {
		return err
	}
	return skiplock.HandleArgs(client, func(ctx context.Context, job *skiplock.Job[Digest]) error {
		if job.Attempt > 3 {
			return skiplock.Cancel(fmt.Errorf("digest for user %d: giving up", job.Args.UserID)) // river.JobCancel
		}
		return mail.Send(ctx, job.Args.UserID, "digest")
	})
}

// NewClient was river.NewClient(riverpgxv5.New(pool), &river.Config{Queues:
// map[string]river.QueueConfig{"email": {MaxWorkers: 10}}, Workers: workers}).
func NewClient(pool *pgxpool.Pool) (*skiplock.Client, error) {
	return skiplock.NewClient(pool, skiplock.Config{
		Pools: []skiplock.WorkerPool{{Queues: []string{"email"}, Concurrency: 10}},
	})
}

// docs:end

// docs:river-enqueue
// SignUp was client.InsertTx(ctx, tx, WelcomeEmail{...}, &river.InsertOpts{
// Queue: "email", MaxAttempts: 5}): the job exists if and only if the
// user's row commits.
func SignUp(ctx context.Context, pool *pgxpool.Pool, client *skiplock.Client, email string) (int64, error) {
	var id int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO users (email) VALUES ($1) RETURNING id`, email).Scan(&id); err != nil {
			return err
		}
		_, err := client.EnqueueTx(ctx, tx, skiplock.EnqueueParams{
			Queue: "email", Payload: WelcomeEmail{UserID: id}, MaxAttempts: 5,
		})
		return err
	})
	return id, err
}

// RequestDigest was client.Insert(ctx, Digest{UserID: id}, &river.InsertOpts{
// Queue: "email", Priority: 3, UniqueOpts: river.UniqueOpts{ByArgs: true,
// ByPeriod: time.Hour}}). River's priority 3 is skiplock's -2 (River: 1 is
// the highest; skiplock: larger runs earlier, 0 the default). The unique key
// names the user and the hour; it holds while the job is waiting or
// running (River's ByPeriod also held after the job finished).
func RequestDigest(ctx context.Context, client *skiplock.Client, userID int64, now time.Time) (bool, error) {
	hour := now.UTC().Truncate(time.Hour).Format(time.RFC3339)
	res, err := client.Enqueue(ctx, skiplock.EnqueueParams{
		Queue: "email", Payload: Digest{UserID: userID}, Priority: -2,
		UniqueKey: fmt.Sprintf("digest:%d:%s", userID, hour),
	})
	return res.Inserted, err
}

// docs:end

// fakeMailer records what it sent.
type fakeMailer struct {
	mu   sync.Mutex
	sent []string
	done chan struct{}
	want int
}

func (m *fakeMailer) Send(_ context.Context, userID int64, template string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sent = append(m.sent, fmt.Sprintf("%s:%d", template, userID))
	if len(m.sent) == m.want {
		close(m.done)
	}
	return nil
}

// TestRiverPort runs the ported service: sign-up and digests enqueue, the
// duplicate digest is refused while the first waits, a worker sends each.
func TestRiverPort(t *testing.T) {
	ctx := context.Background()
	db := dbtest.New(t)
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE users (id bigserial PRIMARY KEY, email text NOT NULL UNIQUE)`); err != nil {
		t.Fatal(err)
	}
	client, err := NewClient(db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	mail := &fakeMailer{done: make(chan struct{}), want: 2}
	if err := RegisterWorkers(client, mail); err != nil {
		t.Fatal(err)
	}
	id, err := SignUp(ctx, db.Pool, client, "ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if ok, err := RequestDigest(ctx, client, id, now); err != nil || !ok {
		t.Fatalf("first digest: %v, %v", ok, err)
	}
	if ok, err := RequestDigest(ctx, client, id, now); err != nil || ok {
		t.Fatalf("second digest in the same hour while the first waits: inserted %v, %v", ok, err)
	}
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Stop(ctx) }()
	select {
	case <-mail.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("sent %v, want a welcome and a digest", mail.sent)
	}
	mail.mu.Lock()
	defer mail.mu.Unlock()
	if len(mail.sent) != 2 {
		t.Fatalf("sent %v", mail.sent)
	}
}

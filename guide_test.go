package skiplock_test

import (
	"context"
	"errors"
	"log"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/metrics"
	"github.com/skiplock/skiplock/skiplocktest"
)

// The code of docs/getting-started.md, compiled and run here against real
// PostgreSQL; TestDocsCompile checks the guide shows exactly the code
// between each pair of docs: markers.

// docs:guide-handler
// KindSendWelcome names the job: producer and handler share the constant.
const KindSendWelcome = "welcome.send"

// SendWelcome is the welcome job's args, stored as its JSON payload.
type SendWelcome struct {
	UserID int64 `json:"user_id"`
}

// Mailer sends the email (a fake in tests).
type Mailer interface {
	SendWelcome(ctx context.Context, userID int64) error
}

// RegisterHandlers registers the service's handlers on a client.
func RegisterHandlers(client *skiplock.Client, mail Mailer) error {
	return skiplock.Handle(client, KindSendWelcome,
		func(ctx context.Context, job *skiplock.Job[SendWelcome]) error {
			// An error retries with backoff; after the last attempt the job
			// moves to the dead-letter table with the error as its reason.
			return mail.SendWelcome(ctx, job.Args.UserID)
		},
		skiplock.WithTimeout(30*time.Second),
		skiplock.WithMaxAttempts(10),
	)
}

// docs:end

// docs:guide-enqueue
// SignUp creates the user and the welcome job in one transaction: both
// exist, or neither does.
func SignUp(ctx context.Context, pool *pgxpool.Pool, client *skiplock.Client, email string) (int64, error) {
	var userID int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO users (email) VALUES ($1) RETURNING id`, email).Scan(&userID)
		if err != nil {
			return err
		}
		_, err = client.EnqueueTx(ctx, tx, skiplock.EnqueueParams{
			Kind:    KindSendWelcome,
			Payload: SendWelcome{UserID: userID},
		})
		return err
	})
	return userID, err
}

// docs:end

// docs:guide-test
func TestSignUpSendsWelcome(t *testing.T) {
	ctx := context.Background()
	pool := testDB(t) // your test database, with the users table
	client := skiplocktest.NewClient(t, pool, skiplock.Config{})
	mail := &fakeMailer{}
	if err := RegisterHandlers(client, mail); err != nil {
		t.Fatal(err)
	}

	userID, err := SignUp(ctx, pool, client, "ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	skiplocktest.RequireEnqueued(t, client, skiplocktest.Match{
		Kind: KindSendWelcome,
		Args: SendWelcome{UserID: userID},
	})

	// Run the due jobs here, one at a time, through the real handler.
	res := skiplocktest.Drain(t, client, skiplock.DrainOptions{})
	if res.Completed != 1 || len(mail.sent) != 1 || mail.sent[0] != userID {
		t.Fatalf("drained %+v, sent %v", res, mail.sent)
	}

	// A sign-up that fails (the email is taken) leaves no job behind.
	if _, err := SignUp(ctx, pool, client, "ann@example.com"); err == nil {
		t.Fatal("signed up twice")
	}
	skiplocktest.RequireNotEnqueued(t, client, skiplocktest.Match{Kind: KindSendWelcome})
}

type fakeMailer struct{ sent []int64 }

func (m *fakeMailer) SendWelcome(_ context.Context, userID int64) error {
	m.sent = append(m.sent, userID)
	return nil
}

// docs:end

// docs:guide-main
func runService() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()

	client, err := skiplock.NewClient(pool, skiplock.Config{
		Logger:          slog.New(slog.NewJSONHandler(os.Stderr, nil)),
		ShutdownTimeout: 25 * time.Second, // inside Kubernetes' 30 s grace period
		Pools:           []skiplock.WorkerPool{{Queues: []string{"default"}, Concurrency: 20}},
	})
	if err != nil {
		return err
	}
	if err := RegisterHandlers(client, smtpMailer{}); err != nil {
		return err
	}

	// Prometheus: the queue's health (lag, dead letters, vacuum) and this
	// process's counters and claim latency.
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler(pool, "skiplock", metrics.NewClientCollector(client)))
	srv := &http.Server{Addr: ":9090", Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("metrics server", "err", err)
		}
	}()

	if err := client.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done() // SIGTERM: stop claiming, let running jobs finish
	stop()       // a second SIGTERM now kills the process at once
	return errors.Join(
		client.Stop(context.Background()), // waits up to ShutdownTimeout, then hands jobs back
		srv.Shutdown(context.Background()),
	)
}

// docs:end

type smtpMailer struct{}

func (smtpMailer) SendWelcome(context.Context, int64) error { return nil }

// Example_gettingStarted is the guide's service (compiled, not run: it
// serves until SIGTERM).
func Example_gettingStarted() {
	if err := runService(); err != nil {
		log.Fatal(err)
	}
}

// testDB is the guide test's database: fresh, with the service's table.
func testDB(t *testing.T) *pgxpool.Pool {
	db := dbtest.New(t)
	_, err := db.Pool.Exec(context.Background(),
		`CREATE TABLE users (id bigserial PRIMARY KEY, email text NOT NULL UNIQUE)`)
	require.NoError(t, err)
	return db.Pool
}

var docsRegion = regexp.MustCompile(`(?s)// docs:([a-z-]+)\n(.*?)\n+// docs:end\n`)

// TestDocsCompile keeps the Go code of README.md and docs/getting-started.md
// the code compiled (and run) in this package: every region between docs:
// markers must appear in its document verbatim as a ```go block.
func TestDocsCompile(t *testing.T) {
	docs := map[string]string{"readme": "README.md", "guide": "docs/getting-started.md"}
	seen := map[string]int{}
	for _, src := range []string{"example_quickstart_test.go", "guide_test.go"} {
		body, err := os.ReadFile(src)
		require.NoError(t, err)
		for _, m := range docsRegion.FindAllStringSubmatch(string(body), -1) {
			doc := docs[strings.SplitN(m[1], "-", 2)[0]]
			require.NotEmpty(t, doc, "region %s names no document", m[1])
			text, err := os.ReadFile(doc)
			require.NoError(t, err)
			require.Contains(t, string(text), "```go\n"+m[2]+"\n```",
				"%s: the code of region %s (%s) is not shown verbatim", doc, m[1], src)
			seen[doc]++
		}
	}
	require.Equal(t, 1, seen["README.md"])
	require.Equal(t, 4, seen["docs/getting-started.md"])
}

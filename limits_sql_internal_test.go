package skiplock

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
)

// The SQL functions that validate every SQL entry point (validate_job,
// validate_metadata, enqueue's default) apply the Go constants: each bound is
// probed at the limit (accepted) and one past it (refused, naming the
// field), so a change on one side alone fails here.
func TestSQLLimitsEqualGo(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()

	type job struct {
		queue, kind, payload      string
		priority                  int
		runAt                     time.Time
		maxAttempts               *int
		uniqueKey, tenant, entity *string
	}
	ok := func() job {
		return job{queue: "q", kind: "k", payload: "{}", runAt: time.Now()}
	}
	validate := func(j job) error {
		_, err := db.Pool.Exec(ctx, `SELECT skiplock.validate_job($1, $2, $3::jsonb, $4, $5, $6, $7, $8, $9)`,
			j.queue, j.kind, j.payload, j.priority, j.runAt, j.maxAttempts, j.uniqueKey, j.tenant, j.entity)
		return err
	}
	refused := func(t *testing.T, field string, err error) {
		t.Helper()
		var pe *pgconn.PgError
		require.True(t, errors.As(err, &pe), "want the SQL function to refuse it, got %v", err)
		require.Equal(t, "22023", pe.Code)
		require.True(t, strings.HasPrefix(pe.Message, "skiplock: "+field+":"), pe.Message)
	}
	str := func(n int) *string { s := strings.Repeat("x", n); return &s }
	// nested(n) is n objects deep, nestedArrays(n) an object holding
	// arrays, n containers deep in all.
	nested := func(n int) string { return strings.Repeat(`{"a": `, n-1) + "{}" + strings.Repeat("}", n-1) }
	nestedArrays := func(n int) string { return `{"a": ` + strings.Repeat("[", n-1) + strings.Repeat("]", n-1) + "}" }
	num := func(n int) *int { return &n }

	cases := []struct {
		field    string
		at, past func(*job)
	}{
		{"queue", func(j *job) { j.queue = *str(MaxNameBytes) }, func(j *job) { j.queue = *str(MaxNameBytes + 1) }},
		{"kind", func(j *job) { j.kind = *str(MaxNameBytes) }, func(j *job) { j.kind = *str(MaxNameBytes + 1) }},
		{"priority", func(j *job) { j.priority = MaxPriority }, func(j *job) { j.priority = MaxPriority + 1 }},
		{"priority", func(j *job) { j.priority = MinPriority }, func(j *job) { j.priority = MinPriority - 1 }},
		{"max_attempts", func(j *job) { j.maxAttempts = num(MaxAttemptsLimit) }, func(j *job) { j.maxAttempts = num(MaxAttemptsLimit + 1) }},
		{"max_attempts", func(j *job) { j.maxAttempts = num(1) }, func(j *job) { j.maxAttempts = num(-1) }},
		{"unique_key", func(j *job) { j.uniqueKey = str(MaxUniqueKeyBytes) }, func(j *job) { j.uniqueKey = str(MaxUniqueKeyBytes + 1) }},
		{"tenant", func(j *job) { j.tenant = str(MaxKeyBytes) }, func(j *job) { j.tenant = str(MaxKeyBytes + 1) }},
		{"entity", func(j *job) { j.entity = str(MaxKeyBytes) }, func(j *job) { j.entity = str(MaxKeyBytes + 1) }},
		// jsonb prints {"a": "…"}: 9 bytes around the string.
		{"payload", func(j *job) { j.payload = `{"a": "` + *str(DefaultMaxPayloadBytes - 9) + `"}` },
			func(j *job) { j.payload = `{"a": "` + *str(DefaultMaxPayloadBytes - 8) + `"}` }},
		// Nesting (issue 38 §7: the SQL function accepted 5,000 levels).
		{"payload", func(j *job) { j.payload = nested(MaxPayloadDepth) }, func(j *job) { j.payload = nested(MaxPayloadDepth + 1) }},
		{"payload", func(j *job) { j.payload = nestedArrays(MaxPayloadDepth) }, func(j *job) { j.payload = nestedArrays(MaxPayloadDepth + 1) }},
		// The SQL bound is interval '5 years', calendar years: at most two
		// leap days past Go's 5 × 365 days.
		{"run_at", func(j *job) { j.runAt = time.Now().Add(MaxScheduleAhead - time.Minute) },
			func(j *job) { j.runAt = time.Now().Add(MaxScheduleAhead + 2*24*time.Hour + time.Minute) }},
	}
	goClient := &Client{cfg: Config{}.withDefaults()}
	goPrepare := func(j job) error {
		p := EnqueueParams{Queue: j.queue, Kind: j.kind, Payload: json.RawMessage(j.payload), Priority: j.priority,
			RunAt: j.runAt, UniqueKey: deref(j.uniqueKey), Tenant: deref(j.tenant), Entity: deref(j.entity)}
		if j.maxAttempts != nil {
			p.MaxAttempts = *j.maxAttempts
		}
		_, err := goClient.prepare(p)
		return err
	}
	for _, c := range cases {
		j := ok()
		c.at(&j)
		require.NoError(t, validate(j), "SQL: %s at the Go limit", c.field)
		require.NoError(t, goPrepare(j), "Go: %s at the limit", c.field)
		j = ok()
		c.past(&j)
		refused(t, c.field, validate(j))
		// Go refuses the same value, naming the same field.
		var fe *FieldError
		require.ErrorAs(t, goPrepare(j), &fe, c.field)
		require.Equal(t, c.field, fe.Field)
	}

	// Control characters (issue 38 §5): refused in every identifier by both
	// sides, naming the field, and, in unique key, tenant and entity, with
	// the same words (the character and its byte offset). Queue and kind
	// are refused by the name pattern. The characters just outside the
	// rule (space, U+00A0, é) are accepted by both.
	type ident struct {
		field string
		set   func(*job, string)
	}
	idents := []ident{
		{"queue", func(j *job, v string) { j.queue = v }},
		{"kind", func(j *job, v string) { j.kind = v }},
		{"unique_key", func(j *job, v string) { j.uniqueKey = &v }},
		{"tenant", func(j *job, v string) { j.tenant = &v }},
		{"entity", func(j *job, v string) { j.entity = &v }},
	}
	for _, id := range idents {
		for _, ch := range []string{"\x01", "\t", "\n", "\x1b", "\x1f", "\x7f", "\u0080", "\u0085", "\u009b", "\u009f"} {
			j := ok()
			id.set(&j, "ab"+ch+"c"+ch)
			sqlErr := validate(j)
			refused(t, id.field, sqlErr)
			var fe *FieldError
			require.ErrorAs(t, goPrepare(j), &fe, "Go accepted %q in %s", ch, id.field)
			require.Equal(t, id.field, fe.Field)
			if id.field != "queue" && id.field != "kind" {
				var pe *pgconn.PgError
				require.ErrorAs(t, sqlErr, &pe)
				require.Equal(t, "skiplock: "+fe.Error(), pe.Message, "%s with %q: SQL and Go say it differently", id.field, ch)
				require.Contains(t, pe.Message, "at byte offset 2")
			}
		}
		if id.field == "queue" || id.field == "kind" {
			continue // the name pattern allows neither space nor non-ASCII
		}
		for _, v := range []string{"a b", "a\u00a0b", "é", "\u200bzero-width"} {
			j := ok()
			id.set(&j, v)
			require.NoError(t, validate(j), "SQL: %s %q", id.field, v)
			require.NoError(t, goPrepare(j), "Go: %s %q", id.field, v)
		}
	}

	// The name pattern is the same regular expression.
	var def string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT pg_get_functiondef('skiplock.validate_job'::regproc)`).Scan(&def))
	require.Contains(t, def, "'"+nameRe.String()+"'")

	// Metadata: validate_metadata's bound.
	meta := func(n int) string { return `{"a": "` + *str(n - 9) + `"}` }
	_, err := db.Pool.Exec(ctx, `SELECT skiplock.validate_metadata($1::jsonb)`, meta(MaxMetadataBytes))
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `SELECT skiplock.validate_metadata($1::jsonb)`, meta(MaxMetadataBytes+1))
	refused(t, "metadata", err)

	// Limit weights: validate_limit_weight's bounds and Go's.
	for _, w := range []int{1, MaxLimitWeight} {
		_, err = db.Pool.Exec(ctx, `SELECT skiplock.validate_limit_weight($1)`, w)
		require.NoError(t, err)
		_, err = goClient.prepare(EnqueueParams{Kind: "k", LimitWeight: w})
		require.NoError(t, err)
	}
	for _, w := range []int{-1, MaxLimitWeight + 1} {
		_, err = db.Pool.Exec(ctx, `SELECT skiplock.validate_limit_weight($1)`, w)
		refused(t, "limit_weight", err)
		_, err = goClient.prepare(EnqueueParams{Kind: "k", LimitWeight: w})
		var fe *FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "limit_weight", fe.Field)
	}
	_, err = db.Pool.Exec(ctx, `SELECT skiplock.validate_limit_weight(0)`)
	refused(t, "limit_weight", err) // SQL has no "0 means 1": NULL does

	// The default max_attempts of a job enqueued in SQL without one.
	var id int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT skiplock.enqueue(queue => 'q', kind => 'k')`).Scan(&id))
	var ma int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT max_attempts FROM skiplock.jobs WHERE id = $1`, id).Scan(&ma))
	require.Equal(t, DefaultMaxAttempts, ma)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

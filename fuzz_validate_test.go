package skiplock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

const fuzzMaxPayload = 4096

// FuzzValidate: Validate never panics and agrees with refValidate, an
// independent statement of the rules. With TEST_FUZZ_DB set, whatever
// Validate accepts is also enqueued (in a transaction that rolls back) and
// the database must accept it too.
func FuzzValidate(f *testing.F) {
	f.Add("q", "k", []byte(`{"a":1}`), 0, int64(0), int64(0), 0, "", "", "")
	f.Add("", "k", []byte(`{"a":`), 5, int64(0), int64(0), 3, "u", "t", "e")
	f.Add("q", "k", []byte(`{"a":"\ud800"}`), 0, int64(0), int64(0), 0, "", "", "")
	f.Add("q", "k", []byte(`{"a":"\ud83d\ude00","b":"\\ud800"}`), 0, int64(0), int64(0), 0, "", "", "")
	f.Add("q", "k", []byte(`{"a":"\u0000"}`), 0, int64(0), int64(0), 0, "", "", "")
	f.Add("q", "k", []byte("{\"a\":\"\xff\"}"), 0, int64(0), int64(0), 0, "", "", "")
	f.Add("q", "k", []byte(`[1]`), 0, int64(0), int64(0), 0, "", "", "")
	f.Add("q", "k", []byte(`{} {}`), 0, int64(0), int64(0), 0, "", "", "")
	f.Add("q", "k", []byte(`{"d":`+strings.Repeat("[", 64)+strings.Repeat("]", 64)+`}`), 0, int64(0), int64(0), 0, "", "", "")
	f.Add("q", "k", []byte(`{"a":1}`), 1001, int64(-1), int64(0), -1, "", "", "")
	f.Add("q.b:c-d", "k_1", []byte(`{}`), -1000, int64(4102444800), int64(-5), 1000, "u\x00", "t\xff", strings.Repeat("e", 257))
	f.Add("a b", "k\n", []byte(" {\"a\" : [1, 2.5e3, null, true, {\"b\": \"\\\"\"}]}\n"), 0, int64(1), int64(int64(time.Hour)), 20, "", "", "")
	f.Add("q", strings.Repeat("k", 129), []byte(`{"a":1}`), 0, int64(0), int64(0), 1001, "", "", "")

	ctx := context.Background()
	var (
		pool *pgxpool.Pool
		err  error
	)
	if os.Getenv("TEST_FUZZ_DB") != "" {
		pool = dbtest.New(f).Pool
	} else {
		if pool, err = pgxpool.New(ctx, ""); err != nil { // lazy: never connects
			f.Fatal(err)
		}
		f.Cleanup(pool.Close)
	}
	c, err := skiplock.NewClient(pool, skiplock.Config{MaxPayloadBytes: fuzzMaxPayload})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, queue, kind string, payload []byte, priority int, runAtUnix, delay int64, maxAttempts int,
		uniqueKey, tenant, entity string) {
		p := skiplock.EnqueueParams{Queue: queue, Kind: kind, Payload: payload, Priority: priority,
			Delay: time.Duration(delay), MaxAttempts: maxAttempts, UniqueKey: uniqueKey, Tenant: tenant, Entity: entity}
		if runAtUnix != 0 {
			p.RunAt = time.Unix(runAtUnix, 0)
			// Too close to the 5-year bound to compare against a clock read a moment apart.
			if d := time.Until(p.RunAt) - skiplock.MaxScheduleAhead; d > -time.Minute && d < time.Minute {
				return
			}
		}
		got := c.Validate(p)
		want := refValidate(p)
		gotField := ""
		if got != nil {
			var fe *skiplock.FieldError
			if !errors.As(got, &fe) || !errors.Is(got, skiplock.ErrInvalidJob) {
				t.Fatalf("Validate returned %T %v, want a *FieldError", got, got)
			}
			gotField = fe.Field
		}
		if gotField != want {
			t.Fatalf("Validate says %q (%v), the reference says %q", gotField, got, want)
		}
		if got == nil && os.Getenv("TEST_FUZZ_DB") != "" {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if _, err := c.EnqueueTx(ctx, tx, p); err != nil {
				t.Fatalf("Validate accepted what the database refused: %v", err)
			}
		}
	})
}

var refNameRe = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.:-]*$`)

// refValidate restates the rules of PRODUCT §2 and validate.go without
// sharing code with them; it returns the first bad field or "".
func refValidate(p skiplock.EnqueueParams) string {
	name := func(v string) bool {
		return v != "" && len(v) <= 128 && utf8.ValidString(v) && refNameRe.MatchString(v)
	}
	key := func(v string, limit int) bool {
		return len(v) <= limit && utf8.ValidString(v) && !strings.ContainsFunc(v, func(r rune) bool {
			return r < 0x20 || (r >= 0x7f && r <= 0x9f) // C0, DEL, C1
		})
	}
	q := p.Queue
	if q == "" {
		q = "default"
	}
	switch {
	case !name(q):
		return "queue"
	case !name(p.Kind):
		return "kind"
	case !refPayloadOK(p.Payload.([]byte)):
		return "payload"
	case p.Priority < -1000 || p.Priority > 1000:
		return "priority"
	}
	if !p.RunAt.IsZero() {
		if p.RunAt.Unix() < 0 || time.Until(p.RunAt) > 5*365*24*time.Hour {
			return "run_at"
		}
	} else if p.Delay < 0 || p.Delay > 5*365*24*time.Hour {
		return "delay"
	}
	switch {
	case p.MaxAttempts < 0 || p.MaxAttempts > 1000:
		return "max_attempts"
	case !key(p.UniqueKey, 512):
		return "unique_key"
	case !key(p.Tenant, 256):
		return "tenant"
	case !key(p.Entity, 256):
		return "entity"
	}
	return ""
}

var refEscapeRe = regexp.MustCompile(`\\(u[0-9a-fA-F]{4}|.)`)

// refPayloadOK: what jsonb stores and skiplock allows — within the size
// limit, UTF-8, no NUL (raw or escaped), one JSON object, at most 64 levels,
// no unpaired UTF-16 surrogate escape.
func refPayloadOK(raw []byte) bool {
	if len(raw) > fuzzMaxPayload || !utf8.Valid(raw) || bytes.IndexByte(raw, 0) >= 0 || !json.Valid(raw) {
		return false
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return false
	}
	if _, ok := v.(map[string]any); !ok {
		return false
	}
	// Depth: brackets outside strings.
	depth, maxDepth, inStr := 0, 0, false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case inStr && c == '\\':
			i++
		case c == '"':
			inStr = !inStr
		case !inStr && (c == '{' || c == '['):
			depth++
			maxDepth = max(maxDepth, depth)
		case !inStr && (c == '}' || c == ']'):
			depth--
		}
	}
	if maxDepth > 64 {
		return false
	}
	// Escapes, left to right (so \\ is consumed as a pair).
	var prevHigh []int
	for _, m := range refEscapeRe.FindAllIndex(raw, -1) {
		esc := string(raw[m[0]:m[1]])
		low := len(esc) == 6 && strings.ContainsAny(esc[2:3], "dD") && strings.ContainsAny(esc[3:4], "cdefCDEF")
		high := len(esc) == 6 && strings.ContainsAny(esc[2:3], "dD") && strings.ContainsAny(esc[3:4], "89abAB")
		if prevHigh != nil {
			if !low || m[0] != prevHigh[1] {
				return false
			}
			prevHigh = nil
			continue
		}
		switch {
		case esc == `\u0000`:
			return false
		case low:
			return false
		case high:
			prevHigh = m
		}
	}
	return prevHigh == nil
}

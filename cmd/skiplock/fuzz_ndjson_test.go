package main

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/skiplock/skiplock"
)

// FuzzParseNDJSONLine: a line of a bulk file either parses into a job that
// passes the library's own validation rules for the fields it sets, or is
// refused with an error that never echoes a value from the line (the line
// may hold personal data; keys are echoed only when short and known-safe).
func FuzzParseNDJSONLine(f *testing.F) {
	for _, s := range []string{
		`{"kind":"email.send","payload":{"to":"ada@example.com"}}`,
		`{"queue":"mail","kind":"k","priority":-5,"max_attempts":3,"run_at":"2026-11-22T10:00:00Z","unique_key":"u","tenant":"t","entity":"e"}`,
		`{"kind":"k","kind":"k"}`,
		`{"kind":"k","payload":{"a":}`,
		`{"kind":"k","extra":1}`,
		`{"kind":null}`,
		`{"queue":"","kind":"k"}`,
		`{"kind":"k","max_attempts":0}`,
		`{"kind":"k","priority":1e400}`,
		`{"kind":"k","run_at":"yesterday"}`,
		`[{"kind":"k"}]`,
		`{"kind":"k"} {"kind":"k"}`,
		"{\"kind\":\"\xff\"}",
		`{"kind":"k","payload":"SECRET-VALUE"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		p, err := parseNDJSONLine(line)
		if err != nil {
			msg := err.Error()
			if !utf8.ValidString(msg) {
				t.Fatalf("error is not valid UTF-8: %q", msg)
			}
			// Values are never quoted back: the only quoted text an error
			// may hold is an unknown key, at most 40 bytes.
			if i := strings.IndexByte(msg, '"'); i >= 0 && !strings.HasPrefix(msg, "unknown key ") {
				t.Fatalf("error quotes input: %q", msg)
			}
			if len(msg) > 200 {
				t.Fatalf("error too long (%d bytes): may echo input", len(msg))
			}
			return
		}
		if p.Kind == "" {
			t.Fatalf("accepted a line without a kind: %q", line)
		}
		if p.Priority < skiplock.MinPriority || p.Priority > skiplock.MaxPriority {
			t.Fatalf("accepted priority %d", p.Priority)
		}
		if p.MaxAttempts < 0 || p.MaxAttempts > skiplock.MaxAttemptsLimit {
			t.Fatalf("accepted max_attempts %d", p.MaxAttempts)
		}
	})
}

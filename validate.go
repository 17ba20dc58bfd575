package skiplock

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"time"
	"unicode"
	"unicode/utf8"
)

// Validation limits, stated here once: the Go API checks them before it
// sends anything, the CLI reads them (flag checks and help), and the SQL
// functions validate_job, validate_metadata, validate_limit_weight and
// enqueue_job (sql/functions) apply the same numbers to every SQL entry point.
// TestSQLLimitsEqualGo probes those functions at each bound, so the two
// cannot drift apart.
const (
	// DefaultMaxAttempts is max_attempts when a job does not set it.
	DefaultMaxAttempts = 20
	// DefaultMaxPayloadBytes is the default payload size limit (1 MiB).
	DefaultMaxPayloadBytes = 1 << 20
	// MaxNameBytes bounds queue and kind names.
	MaxNameBytes = 128
	// MaxUniqueKeyBytes bounds unique keys.
	MaxUniqueKeyBytes = 512
	// MaxKeyBytes bounds tenant and entity keys.
	MaxKeyBytes = 256
	// MinPriority and MaxPriority bound priorities (larger runs earlier).
	MinPriority, MaxPriority = -1000, 1000
	// MaxAttemptsLimit bounds max_attempts.
	MaxAttemptsLimit = 1000
	// MaxScheduleAhead bounds how far in the future run_at may be. The SQL
	// function's bound is interval '5 years' (calendar years, so a day or two
	// more than this with the leap days): Go's is the stricter.
	MaxScheduleAhead = 5 * 365 * 24 * time.Hour
	// MaxLimitWeight bounds a job's weight in rate limits
	// (EnqueueParams.LimitWeight): the largest rate a Limit may allow, so
	// any weight fits some limit.
	MaxLimitWeight = MaxLimitConcurrency
	// MaxPayloadDepth bounds how deeply a payload's objects and arrays nest
	// (the payload object itself is level 1).
	MaxPayloadDepth = 64
)

var nameRe = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.:-]*$`)

func validateName(field, v string) error {
	switch {
	case v == "":
		return invalidJob(field, "must not be empty")
	case len(v) > MaxNameBytes:
		return invalidJob(field, "longer than %d bytes", MaxNameBytes)
	case !utf8.ValidString(v):
		return invalidJob(field, "not valid UTF-8")
	case !nameRe.MatchString(v):
		return invalidJob(field, "must match %s", nameRe)
	}
	return nil
}

func validateKey(field, v string, max int) error {
	switch {
	case len(v) > max:
		return invalidJob(field, "longer than %d bytes", max)
	case !utf8.ValidString(v):
		return invalidJob(field, "not valid UTF-8")
	case bytes.IndexByte([]byte(v), 0) >= 0:
		return invalidJob(field, "contains a NUL byte")
	}
	if off, r := controlChar(v); off >= 0 {
		return invalidJob(field, "contains the control character %U at byte offset %d "+
			"(an identifier is printed by the CLI and the dashboard: no control characters)", r, off)
	}
	return nil
}

// controlChar returns the byte offset and value of the first control
// character in v (C0, DEL or C1: what a terminal may act on), or -1.
// Queue and kind names cannot hold one (nameRe); tenant, entity and unique
// key are refused with one, since they are identifiers shown to operators.
func controlChar(v string) (int, rune) {
	for i, r := range v {
		if unicode.IsControl(r) {
			return i, r
		}
	}
	return -1, 0
}

// ValidatePayload checks raw JSON the way PostgreSQL's jsonb and skiplock's
// rules need it: valid UTF-8, valid JSON, an object, within the size limit,
// no NUL character (jsonb cannot store \u0000), nesting at most MaxPayloadDepth deep.
// The error names the problem and an offset, never the content.
func ValidatePayload(raw []byte, maxBytes int) error {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxPayloadBytes
	}
	if len(raw) > maxBytes {
		return invalidJob("payload", "%d bytes exceeds the limit of %d bytes", len(raw), maxBytes)
	}
	if !utf8.Valid(raw) {
		off := 0
		for off < len(raw) {
			r, size := utf8.DecodeRune(raw[off:])
			if r == utf8.RuneError && size <= 1 {
				break
			}
			off += size
		}
		return invalidJob("payload", "invalid UTF-8 at byte offset %d", off)
	}
	if bytes.IndexByte(raw, 0) >= 0 {
		return invalidJob("payload", "contains a raw NUL byte")
	}
	trimmed := bytes.TrimLeft(raw, " \t\r\n")
	if len(trimmed) == 0 {
		return invalidJob("payload", "is empty; use {} for no arguments")
	}
	if trimmed[0] != '{' {
		if !json.Valid(raw) {
			return invalidJob("payload", "not valid JSON")
		}
		return invalidJob("payload", "must be a JSON object, got %s", jsonType(trimmed[0]))
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	depth := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			var se *json.SyntaxError
			if errors.As(err, &se) {
				return invalidJob("payload", "not valid JSON at byte offset %d", se.Offset)
			}
			return invalidJob("payload", "not valid JSON at byte offset %d", dec.InputOffset())
		}
		switch t := tok.(type) {
		case json.Delim:
			if t == '{' || t == '[' {
				depth++
				if depth > MaxPayloadDepth {
					return invalidJob("payload", "nesting deeper than %d levels", MaxPayloadDepth)
				}
			} else {
				depth--
			}
		case string:
			if bytes.IndexByte([]byte(t), 0) >= 0 {
				return invalidJob("payload", "contains a NUL character (\\u0000) near byte offset %d, which PostgreSQL cannot store", dec.InputOffset())
			}
		}
		if depth == 0 && dec.More() {
			return invalidJob("payload", "has data after the JSON object")
		}
	}
	// The tokenizer reports a clean io.EOF when the input stops between
	// tokens, so `{"a":` would otherwise pass: an object still open at the
	// end is truncated JSON.
	if depth != 0 {
		return invalidJob("payload", "not valid JSON: unexpected end at byte offset %d", len(raw))
	}
	if off := unpairedSurrogate(raw); off >= 0 {
		return invalidJob("payload", "has an unpaired UTF-16 surrogate escape at byte offset %d, which PostgreSQL cannot store", off)
	}
	return nil
}

// unpairedSurrogate returns the offset of the first \uD800-\uDFFF escape in
// raw (valid JSON) that is not a high surrogate followed by a low one, or -1.
// encoding/json turns such an escape into U+FFFD; PostgreSQL's jsonb rejects
// it.
func unpairedSurrogate(raw []byte) int {
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
			return 0, false
		}
		var r rune
		for _, c := range raw[i+2 : i+6] {
			switch {
			case c >= '0' && c <= '9':
				r = r<<4 | rune(c-'0')
			case c >= 'a' && c <= 'f':
				r = r<<4 | rune(c-'a'+10)
			case c >= 'A' && c <= 'F':
				r = r<<4 | rune(c-'A'+10)
			default:
				return 0, false
			}
		}
		return r, true
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		r, ok := hex4(i)
		if !ok {
			i++ // a two-byte escape such as \\ or \"
			continue
		}
		switch {
		case r >= 0xD800 && r <= 0xDBFF:
			if lo, ok := hex4(i + 6); !ok || lo < 0xDC00 || lo > 0xDFFF {
				return i
			}
			i += 11
		case r >= 0xDC00 && r <= 0xDFFF:
			return i
		default:
			i += 5
		}
	}
	return -1
}

func jsonType(c byte) string {
	switch {
	case c == '[':
		return "array"
	case c == '"':
		return "string"
	case c == 't' || c == 'f':
		return "boolean"
	case c == 'n':
		return "null"
	default:
		return "number"
	}
}

// Package errtext makes a job's error text storable and bounded: the one
// home of that rule, used by the runtime (a handler's error) and by the CLI's
// --exec worker (the tail of a child's stderr). It imports nothing of
// skiplock's.
package errtext

import (
	"strings"
	"unicode/utf8"
)

// MaxBytes bounds a job's error text as stored (last_error, the
// dead-letter error) and logged: at most this many bytes, the cut mark
// included.
const MaxBytes = 4096

// CutMark ends an error text that was cut to MaxBytes.
const CutMark = "…"

// Text makes s storable as a job's error text, whatever bytes a
// handler put in it: invalid UTF-8 sequences and NUL bytes (which
// PostgreSQL's text refuses) become U+FFFD, and text longer than
// MaxBytes is cut on a character boundary and marked with "…".
// It is idempotent.
func Text(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	if len(s) <= MaxBytes {
		return s
	}
	cut := MaxBytes - len(CutMark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + CutMark
}

// Tail returns the last max bytes of b (all of b if shorter) as error
// text: starting on a character boundary, then made storable by Text.
// It is for output whose end says most, such as a child process's stderr.
func Tail(b []byte, max int) string {
	if max < 0 {
		max = 0
	}
	if len(b) > max {
		b = b[len(b)-max:]
		// Skip the rest of a character cut in the middle: at most
		// UTFMax-1 continuation bytes (more are invalid anyway).
		for i := 0; i < utf8.UTFMax-1 && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
			b = b[1:]
		}
	}
	return Text(string(b))
}

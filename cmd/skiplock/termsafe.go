package main

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// termSafe is text from the database or from a handler (identifiers,
// error text, names) made safe to print to a terminal: every character a
// terminal could act on is shown as an escape instead of being written.
// C0 controls, DEL and invalid UTF-8 bytes become \xNN (ESC is \x1b), C1
// controls and the bidirectional-text controls that reorder what is shown
// (U+202A-U+202E, U+2066-U+2069) become \uNNNN. Everything else, backslashes
// included, is left as it is. Every text-mode printer of the CLI passes
// such text through it; --json output is left to the JSON encoder.
func termSafe(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x80 && unicode.IsControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r) || isBidiControl(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func needsEscape(s string) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size <= 1) || unicode.IsControl(r) || isBidiControl(r) {
			return true
		}
		i += size
	}
	return false
}

// isBidiControl reports the embedding, override and isolate controls,
// which make a terminal show text in another order than it is ("Trojan
// Source").
func isBidiControl(r rune) bool {
	return (r >= 0x202A && r <= 0x202E) || (r >= 0x2066 && r <= 0x2069)
}

// oneLine keeps a multi-line error on one table row, terminal-safe: line
// breaks are shown as ⏎ and every other control character escaped.
func oneLine(s string) string {
	s = strings.ReplaceAll(strings.TrimSpace(s), "\r\n", "\n")
	return termSafe(strings.ReplaceAll(s, "\n", " ⏎ "))
}

// termSafeLines is termSafe for text whose line breaks are its own (an
// error message of several lines): each line is made safe, the breaks kept.
func termSafeLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = termSafe(l)
	}
	return strings.Join(lines, "\n")
}

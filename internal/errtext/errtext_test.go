package errtext

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestText(t *testing.T) {
	cases := []struct{ in, want string }{
		{"", ""},
		{"plain", "plain"},
		{"nul\x00byte", "nul\uFFFDbyte"},
		{"bad \xff\xfe bytes", "bad \uFFFD bytes"},
		{"surrogate \xed\xa0\x80", "surrogate \uFFFD"},
		{"overlong \xc0\xaf", "overlong \uFFFD"},
		{"cut \xe2\x82", "cut \uFFFD"},
		{strings.Repeat("a", MaxBytes), strings.Repeat("a", MaxBytes)},
		{strings.Repeat("a", MaxBytes+1), strings.Repeat("a", MaxBytes-len(CutMark)) + CutMark},
		// A 4-byte character straddling the cut is dropped whole.
		{strings.Repeat("a", MaxBytes-len(CutMark)-2) + "😀" + strings.Repeat("b", 10),
			strings.Repeat("a", MaxBytes-len(CutMark)-2) + CutMark},
	}
	for _, tc := range cases {
		got := Text(tc.in)
		require.Equal(t, tc.want, got, "Text(%q)", tc.in)
		require.Equal(t, got, Text(got), "not idempotent on %q", tc.in)
	}
}

func TestTail(t *testing.T) {
	require.Equal(t, "short", Tail([]byte("short"), 10))
	require.Equal(t, "6789", Tail([]byte("0123456789"), 4))
	// The cut falls inside "é" (2 bytes): the rest of it is skipped.
	require.Equal(t, "xyz", Tail([]byte("é"+"xyz"), 4))
	// ... inside "😀" (4 bytes), with 3 of its bytes kept.
	require.Equal(t, "z", Tail([]byte("😀z"), 4))
	// Garbage continuation bytes beyond one character's worth are replaced.
	require.Equal(t, "\uFFFDz", Tail([]byte("\x80\x80\x80\x80\x80z"), 5))
	require.Equal(t, "a\uFFFDb", Tail([]byte("0123a\x00b"), 3))
}

// Whatever the bytes, the text is storable and bounded.
func FuzzText(f *testing.F) {
	f.Add([]byte("crash\x00dump \xff\xfe end"), 2048)
	f.Add([]byte(strings.Repeat("é", 3000)), 2047)
	f.Add([]byte{0xe2, 0x82, 0xac, 0xf0}, 1)
	f.Fuzz(func(t *testing.T, b []byte, max int) {
		for _, s := range []string{Text(string(b)), Tail(b, max%(2*MaxBytes)+1)} {
			if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 || len(s) > MaxBytes {
				t.Fatalf("not storable or too long (%d bytes): %q", len(s), s)
			}
			if Text(s) != s {
				t.Fatalf("not idempotent: %q", s)
			}
		}
		if utf8.Valid(b) && !strings.Contains(string(b), "\x00") && len(b) <= MaxBytes && Text(string(b)) != string(b) {
			t.Fatalf("changed storable text %q", b)
		}
	})
}

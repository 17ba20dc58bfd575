package worker

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestErrorText(t *testing.T) {
	cases := []struct{ in, want string }{
		{"", ""},
		{"plain", "plain"},
		{"nul\x00byte", "nul\uFFFDbyte"},
		{"bad \xff\xfe bytes", "bad \uFFFD bytes"},
		{"surrogate \xed\xa0\x80", "surrogate \uFFFD"},
		{"overlong \xc0\xaf", "overlong \uFFFD"},
		{"cut \xe2\x82", "cut \uFFFD"},
		{strings.Repeat("a", MaxErrorBytes), strings.Repeat("a", MaxErrorBytes)},
		{strings.Repeat("a", MaxErrorBytes+1), strings.Repeat("a", MaxErrorBytes-len(cutMark)) + cutMark},
		// A 4-byte character straddling the cut is dropped whole.
		{strings.Repeat("a", MaxErrorBytes-len(cutMark)-2) + "😀" + strings.Repeat("b", 10),
			strings.Repeat("a", MaxErrorBytes-len(cutMark)-2) + cutMark},
	}
	for _, tc := range cases {
		got := ErrorText(tc.in)
		require.Equal(t, tc.want, got, "ErrorText(%q)", tc.in)
		require.Equal(t, got, ErrorText(got), "not idempotent on %q", tc.in)
	}
}

func TestErrorTail(t *testing.T) {
	require.Equal(t, "short", ErrorTail([]byte("short"), 10))
	require.Equal(t, "6789", ErrorTail([]byte("0123456789"), 4))
	// The cut falls inside "é" (2 bytes): the rest of it is skipped.
	require.Equal(t, "xyz", ErrorTail([]byte("é"+"xyz"), 4))
	// ... inside "😀" (4 bytes), with 3 of its bytes kept.
	require.Equal(t, "z", ErrorTail([]byte("😀z"), 4))
	// Garbage continuation bytes beyond one character's worth are replaced.
	require.Equal(t, "\uFFFDz", ErrorTail([]byte("\x80\x80\x80\x80\x80z"), 5))
	require.Equal(t, "a\uFFFDb", ErrorTail([]byte("0123a\x00b"), 3))
}

// Whatever the bytes, the text is storable and bounded.
func FuzzErrorText(f *testing.F) {
	f.Add([]byte("crash\x00dump \xff\xfe end"), 2048)
	f.Add([]byte(strings.Repeat("é", 3000)), 2047)
	f.Add([]byte{0xe2, 0x82, 0xac, 0xf0}, 1)
	f.Fuzz(func(t *testing.T, b []byte, max int) {
		for _, s := range []string{ErrorText(string(b)), ErrorTail(b, max%(2*MaxErrorBytes)+1)} {
			if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 || len(s) > MaxErrorBytes {
				t.Fatalf("not storable or too long (%d bytes): %q", len(s), s)
			}
			if ErrorText(s) != s {
				t.Fatalf("not idempotent: %q", s)
			}
		}
		if utf8.Valid(b) && !strings.Contains(string(b), "\x00") && len(b) <= MaxErrorBytes && ErrorText(string(b)) != string(b) {
			t.Fatalf("changed storable text %q", b)
		}
	})
}

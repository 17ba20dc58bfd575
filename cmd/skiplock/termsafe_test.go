package main

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

func TestTermSafe(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain text, ünïcode ✓ and a \\ backslash": "plain text, ünïcode ✓ and a \\ backslash",
		"ten\x1b[31mRED":                      `ten\x1b[31mRED`,
		"boom \x1b]0;PWNED-TITLE\x07 \x1b[2J": `boom \x1b]0;PWNED-TITLE\x07 \x1b[2J`,
		"tab\tnul\x00del\x7f":                 `tab\x09nul\x00del\x7f`,
		"c1 \u009b31m csi":                    `c1 \u009b31m csi`,
		"bad \xff\xfe utf8":                   `bad \xff\xfe utf8`,
		"rlo \u202eevil\u202c":                `rlo \u202eevil\u202c`,
	} {
		require.Equal(t, want, termSafe(in), "%q", in)
	}
	require.Equal(t, `line one ⏎ line \x1b[2J two`, oneLine("line one\r\nline \x1b[2J two\n"))
	require.Equal(t, "a\n"+`b\x1b`, termSafeLines("a\nb\x1b"))
}

// The review's F4, made a test: control characters are refused in tenant,
// entity and unique key at enqueue (the error names the field), and an
// ANSI escape in a stored error (an --exec child's stderr, a handler's
// error) or in a tenant written by SQL reaches `job get`, `job list` and
// `dlq list` escaped, never as a raw ESC. Before the fix the tenant was
// accepted and all three printed ESC as it was.
func TestCLIEscapesControlCharacters(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	url := []string{"--database-url", db.URL}
	cli := func(args ...string) (int, string, string) { return runCLI(t, append(args, url...)...) }

	for _, flag := range []string{"--tenant", "--entity", "--unique-key"} {
		code, _, stderr := cli("enqueue", "--kind", "k", flag, "ten\x1b[31mRED")
		require.Equal(t, 2, code, "%s: %s", flag, stderr)
		require.Contains(t, stderr, flag+":", "the error names the flag")
		require.Contains(t, stderr, "control character U+001B")
		require.NotContains(t, stderr, "\x1b", "the refusal itself is printed safely")
	}
	c, err := skiplock.NewClient(db.Pool, skiplock.Config{Schema: db.Schema})
	require.NoError(t, err)
	_, err = c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "k", Tenant: "t\u009b2J"})
	var fe *skiplock.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "tenant", fe.Field)

	// The SQL function refuses them too, naming the field.
	_, err = db.Pool.Exec(ctx, `SELECT skiplock.enqueue('esc', 'esc', max_attempts => 1, tenant => E'ten\x1b[31mRED')`)
	require.ErrorContains(t, err, "skiplock: tenant: contains the control character U+001B")
	// A row the table holds from before the rule (or written by its owner
	// past the functions) is escaped on output.
	var id int64
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO skiplock.jobs (queue, kind, max_attempts, tenant)
		VALUES ('esc', 'esc', 1, E'ten\x1b[31mRED') RETURNING id`).Scan(&id))
	require.NoError(t, skiplock.Handle(c, "esc", func(context.Context, *skiplock.Job[map[string]any]) error {
		return errors.New("boom \x1b]0;PWNED-TITLE\x07 \x1b[2J")
	}))
	res, err := c.Drain(ctx, skiplock.DrainOptions{Queues: []string{"esc"}})
	require.NoError(t, err)
	require.Equal(t, 1, res.DeadLettered)

	for _, args := range [][]string{
		{"job", "get", strconv.FormatInt(id, 10)},
		{"job", "list", "--queue", "esc"},
		{"dlq", "list"},
	} {
		code, out, stderr := cli(args...)
		require.Equal(t, 0, code, "%v: %s", args, stderr)
		require.NotContains(t, out, "\x1b", "%v printed a raw ESC:\n%s", args, out)
		require.NotContains(t, out, "\x07", "%v printed a raw BEL", args)
		// dlq list shows the error's signature: numbers become <n>.
		require.Regexp(t, `boom \\x1b\]0;PWNED-TITLE\\x07 \\x1b\[2J|boom \\x1b\]<n>;PWNED-TITLE\\x07 \\x1b\[<n>J`, out,
			"%v shows the error, escaped", args)
	}
	_, out, _ := cli("job", "get", strconv.FormatInt(id, 10))
	require.Contains(t, out, `ten\x1b[31mRED`)
}

// Package store holds all of skiplock's hot-path SQL. Each concern lives in
// one .sql file under sql/, split into named statements ("-- name: x"), and
// is rendered once per schema; the Go here is one small wrapper per query.
package store

import (
	"bufio"
	"context"
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

//go:embed sql/*.sql
var files embed.FS

var raw = mustParse()

// mustParse reads the statements ("-- name: x" sections) and expands in them
// the fragments ("-- fragment: y" sections, written {{y}} where they are
// used): a condition several statements must share word for word, such as
// what makes a job claimable, is written once.
func mustParse() map[string]string {
	out := map[string]string{}
	frags := map[string]string{}
	err := fs.WalkDir(files, "sql", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := files.ReadFile(path)
		if err != nil {
			return err
		}
		var name string
		var into map[string]string
		var b strings.Builder
		flush := func() {
			if name != "" {
				into[name] = strings.TrimSpace(b.String())
			}
			b.Reset()
		}
		sc := bufio.NewScanner(strings.NewReader(string(body)))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			n, stmt := strings.CutPrefix(line, "-- name: ")
			f, frag := strings.CutPrefix(line, "-- fragment: ")
			if stmt || frag {
				flush()
				name, into = strings.TrimSpace(n), out
				if frag {
					name, into = strings.TrimSpace(f), frags
				}
				if _, dup := into[name]; dup {
					return fmt.Errorf("store: duplicate section %q in %s", name, path)
				}
				continue
			}
			b.WriteString(line)
			b.WriteByte('\n')
		}
		flush()
		return sc.Err()
	})
	if err != nil {
		panic(err)
	}
	for name, frag := range frags {
		// Comments would swallow what follows them on the line of use.
		var lines []string
		for _, l := range strings.Split(frag, "\n") {
			if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "--") {
				lines = append(lines, l)
			}
		}
		expanded := "(" + strings.Join(lines, "\n") + ")"
		used := false
		for k, v := range out {
			if strings.Contains(v, "{{"+name+"}}") {
				out[k], used = strings.ReplaceAll(v, "{{"+name+"}}", expanded), true
			}
		}
		if !used {
			panic(fmt.Sprintf("store: fragment %q is used by no statement", name))
		}
	}
	return out
}

// DBTX is what a query runs on: a pool, a connection or a transaction.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store is the query set rendered for one schema.
type Store struct {
	Schema string
	q      map[string]string
}

// seedBug is set only in a build with the skiplock_seedbug tag (seedbug.go),
// which the fault suite uses to prove its checker fails when the lease
// fence is gone. No other build can set it.
var seedBug bool

// leaseFence is the condition every lease holder's write carries (lease.sql).
// The token alone implies state = 'running' (jobs_lease_check).
var leaseFence = regexp.MustCompile(`AND j\.lease_token = (l\.token|\$\d+) AND j\.locked_by = (\$\d+)`)

// noFence is what the seeded bug puts in the fence's place: the same
// parameters (so the statement's arguments still match), no condition.
const noFence = "AND (j.lease_token = ${1} OR j.locked_by = ${2} OR true)"

// New renders every query for schema (already validated by the caller).
func New(schema string) *Store {
	r := strings.NewReplacer(
		"{{schema}}", pgx.Identifier{schema}.Sanitize(),
		"{{schema_lit}}", "'"+schema+"'",
	)
	q := make(map[string]string, len(raw))
	for k, v := range raw {
		if seedBug {
			v = leaseFence.ReplaceAllString(v, noFence)
		}
		q[k] = r.Replace(v)
	}
	return &Store{Schema: schema, q: q}
}

// SQL returns a rendered statement by name; it panics on an unknown name,
// which is a programming error caught by any test that runs the query.
func (s *Store) SQL(name string) string {
	v, ok := s.q[name]
	if !ok {
		panic("store: no query named " + name)
	}
	return v
}

// Table returns the quoted, schema-qualified name of one of skiplock's tables.
func (s *Store) Table(name string) string { return pgx.Identifier{s.Schema, name}.Sanitize() }

// Channel is the NOTIFY channel for ready jobs of this installation.
func (s *Store) Channel() string { return s.Schema + ".jobs" }

// CancelChannel is the NOTIFY channel for cancellations of running jobs.
func (s *Store) CancelChannel() string { return s.Schema + ".cancel" }

// Micros converts a duration for the "* interval '1 microsecond'" idiom.
func Micros(d time.Duration) int64 { return d.Microseconds() }

// DirectSession reports whether conn reaches one server session directly:
// the backend serving a statement is the one the connection was given at
// startup. Through a pooler (PgBouncer and the like) it is not, and
// session state (LISTEN, session advisory locks) cannot be relied on.
func (s *Store) DirectSession(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var pid uint32
	// The simple protocol leaves no prepared statement behind on whichever
	// server session a pooler lent.
	if err := conn.QueryRow(ctx, s.SQL("backend_pid"), pgx.QueryExecModeSimpleProtocol).Scan(&pid); err != nil {
		return false, err
	}
	return pid == conn.PgConn().PID(), nil
}

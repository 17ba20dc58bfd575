package devdb

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// StandbyOptions configures a streaming standby made by StartStandby.
type StandbyOptions struct {
	// Name is the standby's application_name on the primary (as shown in
	// pg_stat_replication and matched by synchronous_standby_names) and the
	// name of its replication slot: lower-case letters, digits and
	// underscores. Default "standby".
	Name string
	// Synchronous makes the primary wait for this standby on every commit
	// (synchronous_standby_names names it): a commit the primary
	// acknowledged is on the standby, so promoting it loses no acknowledged
	// transaction. It needs synchronous_commit on (so not Options.Fast).
	Synchronous bool
	// Port to listen on (127.0.0.1); 0 picks a free one.
	Port int
}

var slotName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// StartStandby makes a streaming standby of the running cluster c and
// starts it: pg_basebackup -R into a temporary directory, with a physical
// replication slot (so c keeps the WAL the standby has not received yet),
// started with c's Options. It returns once c sees the standby streaming
// (and, with Synchronous, as its synchronous standby). The standby is a
// Cluster like any other: Promote turns it into a primary, Remove deletes
// it.
func (c *Cluster) StartStandby(ctx context.Context, so StandbyOptions) (*Cluster, error) {
	if so.Name == "" {
		so.Name = "standby"
	}
	if !slotName.MatchString(so.Name) {
		return nil, fmt.Errorf("devdb: StandbyOptions.Name %q: use 1 to 63 lower-case letters, digits and underscores", so.Name)
	}
	s, err := prepare(Options{Port: so.Port, Fast: c.opts.Fast, Settings: c.opts.Settings, Logger: c.opts.Logger})
	if err != nil {
		return nil, err
	}
	// A copy of c: the same roles, so the same password.
	s.password = c.password
	if s.password != "" {
		if err := s.savePassword(); err != nil {
			s.removeTemp()
			return nil, err
		}
	}
	// The password goes in PGPASSWORD (run sets it), not on a command line
	// other users can read; -R writes it into the standby's
	// primary_conninfo, inside its 0700 data directory.
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=%s", c.port, so.Name)
	c.logf("devdb: pg_basebackup", "standby", so.Name, "dir", s.dir)
	if out, err := s.run(ctx, "pg_basebackup", "-d", conninfo, "-D", s.dir, "-X", "stream", "-R",
		"-C", "-S", so.Name, "--checkpoint=fast"); err != nil {
		s.removeTemp()
		return nil, fmt.Errorf("devdb: pg_basebackup: %w: %s", err, out)
	}
	// The copy carries the primary's postgresql.auto.conf: a standby
	// promoted with the primary's synchronous_standby_names would wait for a
	// standby of its own that does not exist, and every commit would hang.
	if err := appendConf(filepath.Join(s.dir, "postgresql.auto.conf"), "synchronous_standby_names = ''"); err != nil {
		s.removeTemp()
		return nil, err
	}
	if err := s.start(ctx); err != nil {
		s.removeTemp()
		return nil, err
	}
	if so.Synchronous {
		if err := c.exec(ctx, fmt.Sprintf(`ALTER SYSTEM SET synchronous_standby_names = '"%s"'`, so.Name),
			"SELECT pg_reload_conf()"); err != nil {
			_ = s.Remove()
			return nil, err
		}
	}
	want := "async"
	if so.Synchronous {
		want = "sync"
	}
	if err := c.waitStreaming(ctx, so.Name, want); err != nil {
		_ = s.Remove()
		return nil, err
	}
	return s, nil
}

func appendConf(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("devdb: %w", err)
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		f.Close()
		return fmt.Errorf("devdb: %w", err)
	}
	return f.Close()
}

// exec runs statements on c's postgres database, one connection.
func (c *Cluster) exec(ctx context.Context, stmts ...string) error {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("devdb: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, q := range stmts {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("devdb: %s: %w", q, err)
		}
	}
	return nil
}

// waitStreaming waits (30 s at most) until the primary c reports the
// standby name streaming with sync_state want.
func (c *Cluster) waitStreaming(ctx context.Context, name, want string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("devdb: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for {
		var state, sync string
		err := conn.QueryRow(ctx, `SELECT state, sync_state FROM pg_stat_replication WHERE application_name = $1`, name).Scan(&state, &sync)
		if err == nil && state == "streaming" && sync == want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("devdb: standby %s not streaming (%s) after 30s: state %q, sync_state %q", name, want, state, sync)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Promote turns a standby into a primary (pg_ctl promote) and returns once
// it accepts writes.
func (c *Cluster) Promote(ctx context.Context) error {
	c.logf("devdb: promoting", "port", c.port)
	if out, err := c.run(ctx, "pg_ctl", "-D", c.dir, "-w", "-t", "60", "promote"); err != nil {
		return fmt.Errorf("devdb: pg_ctl promote: %w: %s", err, out)
	}
	return nil
}

// MultiHostURL returns a connection URL for database db that lists every
// cluster's host (in order) with target_session_attrs=read-write: a client
// tries each and keeps the one that accepts writes, so after a failover a
// new connection finds the promoted standby.
func MultiHostURL(db string, clusters ...*Cluster) string {
	hosts := make([]string, len(clusters))
	for i, c := range clusters {
		hosts[i] = fmt.Sprintf("127.0.0.1:%d", c.port)
	}
	user := "postgres"
	if len(clusters) > 0 {
		user = clusters[0].userinfo() // standbys are copies: one password
	}
	return fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable&target_session_attrs=read-write", user, strings.Join(hosts, ","), db)
}

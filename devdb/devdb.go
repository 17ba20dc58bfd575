// Package devdb starts a throwaway PostgreSQL cluster from the server
// binaries installed on the machine: for `skiplock dev`, for tests where no
// server answers, and for fault-injection tests that crash and restart the
// database.
//
// A cluster trusts nobody: its superuser postgres has a password generated
// when the cluster is created (scram-sha-256, kept in a file readable by
// its owner only, next to the data directory), every connection, TCP on
// 127.0.0.1 or the Unix socket in a 0700 directory, must give it, and URL
// carries it. Another local user cannot connect (with trust, any local user
// was a superuser, and COPY ... TO PROGRAM ran commands as the cluster's
// OS user).
package devdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Options configures a cluster.
type Options struct {
	// Dir is the data directory; "" creates a temporary one (removed by Remove).
	Dir string
	// Port to listen on (127.0.0.1); 0 picks a free one.
	Port int
	// Fast turns off fsync, synchronous_commit and full_page_writes: for
	// tests only, never for data you want to keep.
	Fast bool
	// Settings are extra server settings (name → value), passed to the
	// server as -c options after Fast's, so they win over it. Tests that
	// start several clusters use them to stay small (shared_buffers) or to
	// turn fsync off while keeping synchronous_commit on (a streaming
	// standby's synchronous replication needs it on).
	Settings map[string]string
	// Logger receives progress lines; nil discards them.
	Logger *slog.Logger
}

// Cluster is a running (or stopped) local PostgreSQL cluster.
type Cluster struct {
	dir, sockDir, bin, logFile string
	port                       int
	tempDir                    bool
	opts                       Options
	cred                       *syscall.Credential
	// password is the postgres role's, generated at initdb and kept in
	// the file passwordFile names.
	password string
}

// ErrNoServer reports that no PostgreSQL server binaries are installed.
var ErrNoServer = errors.New("devdb: no PostgreSQL server binaries found (install the postgresql package)")

// BinDir finds the directory holding initdb and pg_ctl.
func BinDir() (string, error) {
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		d := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(matches) == 0 {
		return "", ErrNoServer
	}
	sort.Slice(matches, func(i, j int) bool { return versionOf(matches[i]) > versionOf(matches[j]) })
	return filepath.Dir(matches[0]), nil
}

func versionOf(p string) int {
	parts := strings.Split(p, "/")
	for _, s := range parts {
		if v, err := strconv.Atoi(s); err == nil {
			return v
		}
	}
	return 0
}

// Start initialises (if needed) and starts a cluster.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	c, err := prepare(opts)
	if err != nil {
		return nil, err
	}
	legacy := false // a cluster made with trust, before passwords
	if _, err := os.Stat(filepath.Join(c.dir, "PG_VERSION")); err != nil {
		if err := c.newPassword(); err != nil {
			c.removeTemp()
			return nil, err
		}
		c.logf("devdb: initdb", "dir", c.dir)
		if out, err := c.run(ctx, "initdb", "-D", c.dir, "-U", "postgres", "-A", "scram-sha-256",
			"--pwfile", c.passwordFile(), "-E", "UTF8", "--no-instructions"); err != nil {
			c.removeTemp()
			return nil, fmt.Errorf("devdb: initdb: %w: %s", err, out)
		}
	} else if b, err := os.ReadFile(c.passwordFile()); err == nil {
		c.password = strings.TrimSpace(string(b))
	} else {
		legacy = true
	}
	if !legacy {
		if err := c.writeHBA(); err != nil {
			c.removeTemp()
			return nil, err
		}
	}
	if port, ok := c.runningPort(); ok {
		// Already running (a cluster a previous process left up): use it.
		c.port = port
	} else if err := c.start(ctx); err != nil {
		c.removeTemp()
		return nil, err
	}
	if legacy {
		if err := c.closeTrust(ctx); err != nil {
			_ = c.Stop(ctx)
			return nil, err
		}
	}
	return c, nil
}

// runningPort reports whether the cluster's server is running, and its
// port: postmaster.pid names a live process and the port (its fourth line).
func (c *Cluster) runningPort() (int, bool) {
	b, err := os.ReadFile(filepath.Join(c.dir, "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 4 {
		return 0, false
	}
	pid, err1 := strconv.Atoi(strings.TrimSpace(lines[0]))
	port, err2 := strconv.Atoi(strings.TrimSpace(lines[3]))
	if err1 != nil || err2 != nil || pid <= 0 || syscall.Kill(pid, 0) == syscall.ESRCH {
		return 0, false
	}
	return port, true
}

// passwordFile holds the postgres role's password, beside the data
// directory (not in it: pg_basebackup would copy it).
func (c *Cluster) passwordFile() string { return filepath.Join(filepath.Dir(c.dir), "password") }

// newPassword generates the cluster's password and writes it where initdb
// (run as the cluster's OS user) reads it and only that user can.
func (c *Cluster) newPassword() error {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return fmt.Errorf("devdb: %w", err)
	}
	c.password = hex.EncodeToString(b)
	return c.savePassword()
}

func (c *Cluster) savePassword() error {
	if err := os.WriteFile(c.passwordFile(), []byte(c.password+"\n"), 0o600); err != nil {
		return fmt.Errorf("devdb: %w", err)
	}
	return c.chown(c.passwordFile())
}

// hba is the cluster's whole pg_hba.conf: a password for every
// connection, over the socket and loopback TCP, replication included.
const hba = `# Written by skiplock's devdb: every connection gives the postgres role's password.
local all         all                scram-sha-256
host  all         all  127.0.0.1/32  scram-sha-256
host  all         all  ::1/128       scram-sha-256
local replication all                scram-sha-256
host  replication all  127.0.0.1/32  scram-sha-256
host  replication all  ::1/128       scram-sha-256
`

func (c *Cluster) writeHBA() error {
	p := filepath.Join(c.dir, "pg_hba.conf")
	if err := os.WriteFile(p, []byte(hba), 0o600); err != nil {
		return fmt.Errorf("devdb: %w", err)
	}
	return c.chown(p)
}

// closeTrust turns a running cluster made by an older devdb, which trusted
// every local user, into one that asks for a password: it sets one, writes
// pg_hba.conf and reloads.
func (c *Cluster) closeTrust(ctx context.Context) error {
	c.logf("devdb: the cluster trusted every local user; setting a password", "dir", c.dir)
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return fmt.Errorf("devdb: %w", err)
	}
	pw := hex.EncodeToString(b)
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("devdb: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "SET password_encryption = 'scram-sha-256'"); err != nil {
		return fmt.Errorf("devdb: %w", err)
	}
	if _, err := conn.Exec(ctx, "ALTER ROLE postgres PASSWORD '"+pw+"'"); err != nil {
		return fmt.Errorf("devdb: setting the password: %w", err)
	}
	c.password = pw
	if err := c.savePassword(); err != nil {
		return err
	}
	if err := c.writeHBA(); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("devdb: reload: %w", err)
	}
	return nil
}

// prepare finds the binaries, the OS user, the directories and the port of
// a cluster about to be created or started.
func prepare(opts Options) (*Cluster, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	c := &Cluster{bin: bin, opts: opts, port: opts.Port, dir: opts.Dir}
	if os.Getuid() == 0 {
		// initdb refuses to run as root: run the server as the postgres user.
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("devdb: running as root needs a 'postgres' OS user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	if c.dir == "" {
		base, err := os.MkdirTemp("", "skiplock-devdb-")
		if err != nil {
			return nil, err
		}
		c.tempDir = true
		c.dir = filepath.Join(base, "data")
	}
	c.sockDir = filepath.Join(filepath.Dir(c.dir), "sock")
	c.logFile = filepath.Join(filepath.Dir(c.dir), "postgres.log")
	for _, d := range []string{filepath.Dir(c.dir), c.sockDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			c.removeTemp()
			return nil, err
		}
		if err := c.chown(d); err != nil {
			c.removeTemp()
			return nil, err
		}
	}
	if c.port == 0 {
		if c.port, err = FreePort(); err != nil {
			c.removeTemp()
			return nil, err
		}
	}
	return c, nil
}

// removeTemp deletes a temporary directory of a cluster that never started.
func (c *Cluster) removeTemp() {
	if c.tempDir {
		_ = os.RemoveAll(filepath.Dir(c.dir))
	}
}

func (c *Cluster) chown(p string) error {
	if c.cred == nil {
		return nil
	}
	return os.Chown(p, int(c.cred.Uid), int(c.cred.Gid))
}

func (c *Cluster) logf(msg string, args ...any) {
	if c.opts.Logger != nil {
		c.opts.Logger.Info(msg, args...)
	}
}

func (c *Cluster) run(ctx context.Context, tool string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, tool), args...)
	cmd.Dir = filepath.Dir(c.dir)
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8")
	if c.password != "" {
		cmd.Env = append(cmd.Env, "PGPASSWORD="+c.password)
	}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func (c *Cluster) start(ctx context.Context) error {
	o := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c max_connections=200", c.port, c.sockDir)
	if c.opts.Fast {
		o += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
	}
	names := make([]string, 0, len(c.opts.Settings))
	for name := range c.opts.Settings {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		// pg_ctl runs the server through the shell: quote the value.
		o += fmt.Sprintf(" -c %s='%s'", name, strings.ReplaceAll(c.opts.Settings[name], "'", `'\''`))
	}
	c.logf("devdb: starting PostgreSQL", "port", c.port)
	if out, err := c.run(ctx, "pg_ctl", "-D", c.dir, "-l", c.logFile, "-w", "-t", "60", "-o", o, "start"); err != nil {
		return fmt.Errorf("devdb: pg_ctl start: %w: %s (log: %s)", err, out, c.logFile)
	}
	return nil
}

// URL returns a connection URL for database db as user postgres, with its
// password.
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", c.userinfo(), c.port, db)
}

// userinfo is the URL's user and password (hex: nothing to escape).
func (c *Cluster) userinfo() string {
	if c.password == "" {
		return "postgres"
	}
	return "postgres:" + c.password
}

// SocketDir returns the directory of the cluster's Unix socket (mode 0700).
func (c *Cluster) SocketDir() string { return c.sockDir }

// Port returns the TCP port.
func (c *Cluster) Port() int { return c.port }

// Dir returns the data directory.
func (c *Cluster) Dir() string { return c.dir }

// Stop shuts the server down cleanly (pg_ctl stop -m fast).
func (c *Cluster) Stop(ctx context.Context) error { return c.stop(ctx, "fast") }

// Crash stops the server the way a power cut would (pg_ctl stop -m
// immediate): no checkpoint, recovery on the next start. For fault tests.
func (c *Cluster) Crash(ctx context.Context) error { return c.stop(ctx, "immediate") }

func (c *Cluster) stop(ctx context.Context, mode string) error {
	if out, err := c.run(ctx, "pg_ctl", "-D", c.dir, "-m", mode, "-w", "stop"); err != nil {
		return fmt.Errorf("devdb: pg_ctl stop: %w: %s", err, out)
	}
	return nil
}

// Restart starts a stopped (or crashed) cluster again on the same port.
func (c *Cluster) Restart(ctx context.Context) error { return c.start(ctx) }

// Remove stops the server if it runs and deletes a temporary data directory.
func (c *Cluster) Remove() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = c.run(ctx, "pg_ctl", "-D", c.dir, "-m", "fast", "-w", "stop")
	if c.tempDir {
		return os.RemoveAll(filepath.Dir(c.dir))
	}
	return nil
}

// FreePort returns a TCP port on 127.0.0.1 that nothing listens on at the
// moment of the call.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Package pgbouncertest starts a real PgBouncer in transaction pool mode in
// front of the test server, for tests that must prove skiplock works through
// a pooler with the connection string users already have.
//
// Each Start runs a private pgbouncer process (a generated ini, a free port
// on 127.0.0.1, trust auth through an auth_file) that forwards every
// database name to dbtest's server, and stops it when the test ends. Without the pgbouncer binary the test is skipped, except in CI
// (CI=true), where it fails: CI installs pgbouncer.
package pgbouncertest

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/dbtest"
)

// Bouncer is a running pgbouncer.
type Bouncer struct {
	// Port is where it listens, on 127.0.0.1.
	Port int
	dir  string
	log  string
}

// binary finds pgbouncer on PATH or where Debian installs it.
func binary() string {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer", "/usr/local/bin/pgbouncer"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// Start runs a transaction-mode pgbouncer in front of the test server (the
// one dbtest uses) and stops it when t ends.
func Start(t testing.TB) *Bouncer {
	t.Helper()
	bin := binary()
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("pgbouncertest: the pgbouncer binary is not installed (.ci/run installs Debian's pgbouncer)")
		}
		t.Skip("pgbouncertest: pgbouncer is not installed (apt-get install pgbouncer); skipping the pooler test")
	}
	dir, err := os.MkdirTemp("", "skiplock-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	server, err := pgx.ParseConfig(dbtest.AdminURL(t))
	if err != nil {
		t.Fatal(err)
	}
	// A server that asks for a password (devdb's fallback cluster does) gets
	// it from the database line; clients of the bouncer are trusted.
	target := fmt.Sprintf("host=%s port=%d", server.Host, server.Port)
	if server.Password != "" {
		target += " password=" + server.Password
	}
	ini := fmt.Sprintf("[databases]\n* = %s\n", target) + fmt.Sprintf(`
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
pool_mode = transaction
auth_type = trust
auth_file = %s
logfile = %s
pidfile = %s
max_client_conn = 500
default_pool_size = 20
ignore_startup_parameters = extra_float_digits
server_check_delay = 0
`, port, filepath.Join(dir, "users.txt"), filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
	b := &Bouncer{Port: port, dir: dir, log: filepath.Join(dir, "pgbouncer.log")}
	if err := os.WriteFile(filepath.Join(dir, "users.txt"), []byte(fmt.Sprintf("%q \"\"\n", server.User)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pgbouncer.ini"), []byte(ini), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// pgbouncer refuses to run as root: drop to the postgres user (or
	// nobody) and hand it the directory.
	if os.Geteuid() == 0 {
		uid, gid, err := unprivileged()
		if err != nil {
			t.Fatal(err)
		}
		if err := chownAll(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("pgbouncertest: start pgbouncer: %v", err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		})
	}
	t.Cleanup(stop)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
		if err == nil {
			_ = c.Close()
			return b
		}
		select {
		case <-exited:
			t.Fatalf("pgbouncertest: pgbouncer exited at start (%v): %s\n%s", waitErr, out.String(), b.Log())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("pgbouncertest: pgbouncer did not listen on port %d within 10s: %s\n%s", port, out.String(), b.Log())
		}
	}
}

// URL returns serverURL with its host and port replaced by the bouncer's:
// the same database, user and parameters, reached through the pooler.
func (b *Bouncer) URL(t testing.TB, serverURL string) string {
	t.Helper()
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatalf("pgbouncertest: parse %q: %v", serverURL, err)
	}
	u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(b.Port))
	return u.String()
}

// Log returns pgbouncer's log so far (for failure messages).
func (b *Bouncer) Log() string {
	data, _ := os.ReadFile(b.log)
	return string(data)
}

func unprivileged() (int, int, error) {
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.Atoi(u.Uid)
		gid, err2 := strconv.Atoi(u.Gid)
		if err1 == nil && err2 == nil {
			return uid, gid, nil
		}
	}
	return 0, 0, fmt.Errorf("pgbouncertest: running as root and no postgres or nobody user to run pgbouncer as")
}

func chownAll(dir string, uid, gid int) error {
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(p, uid, gid)
	})
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

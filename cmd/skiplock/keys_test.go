package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
)

// keys new makes a keyring; enqueue --encryption-keys seals the payload
// (the table and job get hold the envelope); work with the keyring in
// SKIPLOCK_ENCRYPTION_KEYS hands the handler the plaintext; after keys new
// adds a current key, keys rotate re-seals the ready job; a roles grant
// prints the SQL it ran.
func TestKeysEnqueueWorkRotate(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.json")

	code, first, stderr := runCLI(t, "keys", "new", "--file", keys)
	require.Equal(t, 0, code, stderr)
	first = strings.TrimSpace(first)
	st, err := os.Stat(keys)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	code, out, stderr := runCLI(t, "enqueue", "--database-url", db.URL, "--encryption-keys", keys,
		"--queue", "default", "--kind", "k", "--payload", `{"secret": "PII-4242"}`)
	require.Equal(t, 0, code, stderr)
	id := strings.TrimSpace(out)
	var stored string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT skiplock.envelope(payload, sealed)::text FROM skiplock.jobs WHERE id = $1`, id).Scan(&stored))
	require.NotContains(t, stored, "PII-4242")
	require.Contains(t, stored, "v1."+first+".")
	code, out, stderr = runCLI(t, "job", "get", "--database-url", db.URL, id, "--payload")
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, out, "PII-4242")
	require.Contains(t, out, "skiplock_encrypted")
	code, out, stderr = runCLI(t, "job", "get", "--database-url", db.URL, id, "--payload", "--encryption-keys", keys)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "PII-4242", "revealed on request, with the keyring")

	// A second, scheduled job, then a new current key and a rotation.
	code, out, stderr = runCLIEnv(t, map[string]string{"SKIPLOCK_ENCRYPTION_KEYS": keys}, "enqueue", "--database-url", db.URL,
		"--queue", "default", "--kind", "k", "--payload", `{"secret": "PII-later"}`, "--delay", "1h")
	require.Equal(t, 0, code, stderr)
	later := strings.TrimSpace(out)
	code, second, stderr := runCLI(t, "keys", "new", "--file", keys)
	require.Equal(t, 0, code, stderr)
	second = strings.TrimSpace(second)
	code, out, stderr = runCLI(t, "keys", "rotate", "--database-url", db.URL, "--encryption-keys", keys)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "re-sealed 2 jobs (current key "+second+")")
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT skiplock.envelope(payload, sealed)::text FROM skiplock.jobs WHERE id = $1`, later).Scan(&stored))
	require.Contains(t, stored, "v1."+second+".")

	// work: the handler reads the plaintext on stdin.
	seen := filepath.Join(dir, "seen")
	bg := startCLIEnv(ctx, t, map[string]string{"SKIPLOCK_ENCRYPTION_KEYS": keys}, "work", "--database-url", db.URL,
		"--exec", "cat >> "+seen+"; echo >> "+seen, "--poll-interval", "100ms")
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(seen)
		return strings.Contains(string(b), `"secret": "PII-4242"`)
	}, 20*time.Second, 50*time.Millisecond)
	bg.terminate(t)
	require.Equal(t, 0, <-bg.done)

	// A keyring other users may read is refused.
	require.NoError(t, os.Chmod(keys, 0o644))
	code, _, stderr = runCLI(t, "keys", "rotate", "--database-url", db.URL, "--encryption-keys", keys)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "chmod 600")
}

// roles grant prints the statements it ran; an unknown kind is a usage
// error (exit 2).
func TestRolesGrant(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	role := "t_cli_producer_" + hex.EncodeToString(b)
	_, err := db.Pool.Exec(ctx, "CREATE ROLE "+role)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = db.Pool.Exec(context.Background(), "DROP OWNED BY "+role)
		_, _ = db.Pool.Exec(context.Background(), "DROP ROLE "+role)
	})
	code, out, stderr := runCLI(t, "roles", "grant", "producer", role, "--database-url", db.URL)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "GRANT EXECUTE ON FUNCTION skiplock.enqueue, skiplock.enqueue_job, skiplock.enqueue_one, skiplock.signal TO "+role+";")
	code, _, stderr = runCLI(t, "roles", "grant", "owner", role, "--database-url", db.URL)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "must be producer, worker, reader or admin")
}

// signal send --encryption-keys seals the signal's payload; workflow get
// --outputs shows a sealed task output as stored (its key id only), and
// opened with --encryption-keys.
func TestKeysSignalAndOutputs(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	keys := filepath.Join(t.TempDir(), "keys.json")
	code, key, stderr := runCLI(t, "keys", "new", "--file", keys)
	require.Equal(t, 0, code, stderr)
	key = strings.TrimSpace(key)
	var wf int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT skiplock.create_workflow('w', 'cancel',
		'[{"name": "a", "queue": "default", "kind": "k"}]'::jsonb)`).Scan(&wf))
	wfArg := strconv.FormatInt(wf, 10)

	code, out, stderr := runCLI(t, "signal", "send", "go", "--database-url", db.URL, "--workflow", wfArg,
		"--payload", `{"secret": "PII-signal"}`, "--encryption-keys", keys)
	require.Equal(t, 0, code, stderr)
	var stored string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT payload::text FROM skiplock.signals WHERE id = $1`,
		strings.TrimSpace(out)).Scan(&stored))
	require.NotContains(t, stored, "PII-signal")
	require.Contains(t, stored, "v1."+key+".")

	// A sealed output, as a worker with the keyring stores it: the
	// signal's envelope will do (the same key, the same sealing).
	_, err := db.Pool.Exec(ctx, `UPDATE skiplock.workflow_tasks SET output = $2::jsonb WHERE workflow_id = $1`, wf, stored)
	require.NoError(t, err)
	code, out, stderr = runCLI(t, "workflow", "get", wfArg, "--database-url", db.URL, "--outputs")
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, out, "PII-signal")
	require.Contains(t, out, "skiplock_encrypted")
	code, out, stderr = runCLI(t, "workflow", "get", wfArg, "--database-url", db.URL, "--outputs", "--encryption-keys", keys)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "PII-signal", "revealed on request, with the keyring")
}

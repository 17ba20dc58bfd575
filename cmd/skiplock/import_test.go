package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/importer"
)

// The import commands' usage errors exit 2 and name the flag; none needs a
// database or a Redis.
func TestImportUsage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"import", "asynq"}, "--redis-url: required"},
		{[]string{"import", "asynq", "--redis-url", "http://nope"}, "--redis-url: cannot parse"},
		{[]string{"import", "river", "--batch", "0"}, "--batch: must be between 1 and 100000"},
		{[]string{"import", "asynq", "--redis-url", "redis://127.0.0.1:1", "--batch", "100001"}, "--batch"},
		{[]string{"import", "bogus"}, `unknown command "bogus" for "skiplock import"`},
	} {
		code, out, stderr := runCLI(t, c.args...)
		require.Equal(t, 2, code, "%v: %s", c.args, stderr)
		require.Empty(t, out, c.args)
		require.Contains(t, stderr, c.want, c.args)
		requireOnePrefix(t, stderr)
	}
}

// Without River's tables the import says which table it could not read.
func TestImportRiverWithoutRiver(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	code, _, stderr := runCLI(t, "import", "river", "--dry-run", "--database-url", db.URL, "--schema", db.Schema)
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "river_job")
}

// `import asynq` end to end through the CLI: a dry run counts by state and
// type on stdout and moves nothing; the import moves everything, prints the
// summary (text, then --json), and a second run moves nothing.
func TestImportAsynqCLI(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed (.ci/install-redis.sh)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	l.Close()
	port := addr[strings.LastIndex(addr, ":")+1:]
	srv := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	require.NoError(t, srv.Start())
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	require.Eventually(t, func() bool { return rdb.Ping(context.Background()).Err() == nil }, 5*time.Second, 50*time.Millisecond)

	ac := asynq.NewClient(asynq.RedisClientOpt{Addr: addr})
	defer ac.Close()
	for i := range 5 {
		_, err := ac.Enqueue(asynq.NewTask("email:send", []byte(fmt.Sprintf(`{"i": %d}`, i))))
		require.NoError(t, err)
	}
	_, err = ac.Enqueue(asynq.NewTask("report:build", nil), asynq.ProcessIn(time.Hour), asynq.Queue("reports"))
	require.NoError(t, err)

	db := dbtest.New(t)
	base := []string{"import", "asynq", "--redis-url", "redis://" + addr, "--database-url", db.URL, "--schema", db.Schema}
	code, out, stderr := runCLI(t, append(base, "--dry-run")...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "would move 6 jobs from asynq")
	require.Regexp(t, `pending\s+email:send\s+5`, out)
	require.Regexp(t, `scheduled\s+report:build\s+1`, out)
	require.Equal(t, int64(5), rdb.LLen(context.Background(), "asynq:{default}:pending").Val(), "a dry run moves nothing")

	code, out, stderr = runCLI(t, append(base, "--queue", "default")...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "moved 5 jobs from asynq in")

	code, out, stderr = runCLI(t, append(base, "--json")...)
	require.Equal(t, 0, code, stderr)
	var sum importer.Summary
	require.NoError(t, json.Unmarshal([]byte(out), &sum))
	require.Equal(t, int64(1), sum.MovedTotal, out)
	require.Equal(t, int64(1), sum.Moved["scheduled"]["report:build"], out)

	code, out, stderr = runCLI(t, append(base, "--json")...)
	require.Equal(t, 0, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(out), &sum))
	require.Zero(t, sum.MovedTotal, out)
}

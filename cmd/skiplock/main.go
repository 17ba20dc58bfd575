// Command skiplock is the CLI, polyglot worker, dashboard and benchmark of
// the skiplock job queue. Data goes to stdout, logs and progress to stderr.
// Exit codes: 0 ok, 1 runtime error, 2 usage error, 3 check failed.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the CLI and maps errors to exit codes.
func run(ctx context.Context, args []string, stdout, stderr *os.File) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(stderr, "skiplock:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "skiplock:", err)
	if isUsage(err) {
		return 2
	}
	return 1
}

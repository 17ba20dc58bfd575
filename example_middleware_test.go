package skiplock_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/skiplock/skiplock"
)

// Middleware carries a request's user from the code that enqueues into the
// handler: the enqueue middleware copies it from the context into the
// job's metadata, the work middleware puts it back into the handler's
// context (and could add it to every log line, time the run, or report
// panics). Metadata set by the caller travels alongside.
func ExampleEnqueueMiddleware() {
	type userKey struct{}
	stampUser := func(ctx context.Context, jobs []*skiplock.EnqueueParams, next func(context.Context) error) error {
		user, ok := ctx.Value(userKey{}).(string)
		if !ok {
			return errors.New("enqueue outside a request")
		}
		for _, j := range jobs {
			j.Metadata = j.Metadata.Clone() // never write to the caller's map
			j.Metadata.Set("user", user)
		}
		return next(ctx)
	}
	restoreUser := func(ctx context.Context, job *skiplock.JobInfo, next func(context.Context) error) error {
		err := next(context.WithValue(ctx, userKey{}, job.Metadata.Get("user")))
		fmt.Printf("job %s attempt %d: %s\n", job.Kind, job.Attempt, skiplock.AttemptOutcome(ctx, err))
		return err
	}
	c, done := exampleClient(skiplock.Config{
		EnqueueMiddleware: []skiplock.EnqueueMiddleware{stampUser},
		WorkMiddleware:    []skiplock.WorkMiddleware{restoreUser},
	})
	defer done()
	ctx := context.Background()

	err := skiplock.Handle(c, "invoice.send", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		fmt.Printf("sending as %s, request %s\n", ctx.Value(userKey{}), j.Metadata.Get("request_id"))
		return nil
	})
	if err != nil {
		panic(err)
	}
	_, err = c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "invoice.send"})
	fmt.Println("without a user:", err)

	reqCtx := context.WithValue(ctx, userKey{}, "alice")
	if _, err := c.Enqueue(reqCtx, skiplock.EnqueueParams{Kind: "invoice.send",
		Metadata: skiplock.Metadata{"request_id": "req-42"}}); err != nil {
		panic(err)
	}
	if _, err := c.Drain(ctx, skiplock.DrainOptions{}); err != nil {
		panic(err)
	}
	// Output:
	// without a user: enqueue outside a request
	// sending as alice, request req-42
	// job invoice.send attempt 1: completed
}

// A per-handler middleware turns a panic into a clean failure with a log
// line of its own; the job is retried like any failed attempt.
func ExampleWithMiddleware() {
	c, done := exampleClient(skiplock.Config{Logger: quietLogger()})
	defer done()
	ctx := context.Background()
	reportPanics := skiplock.WithMiddleware(func(ctx context.Context, job *skiplock.JobInfo, next func(context.Context) error) error {
		err := next(ctx)
		var pe *skiplock.PanicError
		if errors.As(err, &pe) {
			fmt.Printf("job %d panicked: %v\n", job.ID, pe.Value)
		}
		return err
	})
	err := skiplock.Handle(c, "fragile", func(ctx context.Context, j *skiplock.Job[struct{}]) error {
		panic("nil map")
	}, reportPanics)
	if err != nil {
		panic(err)
	}
	r, err := c.Enqueue(ctx, skiplock.EnqueueParams{Kind: "fragile", MaxAttempts: 1})
	if err != nil {
		panic(err)
	}
	res, err := c.Drain(ctx, skiplock.DrainOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Jobs[0].ID == r.ID, res.Jobs[0].Outcome, res.Jobs[0].Reason)
	// Output:
	// job 1 panicked: nil map
	// true dead_lettered panic
}

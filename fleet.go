package skiplock

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Fleet is one process's workers over several databases: an application
// split by tenant across databases runs one skiplock schema in each, with
// one Client per database (each on its own pool, with its own handlers,
// worker pools, LISTEN connection, reaper and scheduler), and the Fleet
// starts and stops them together and routes enqueues made outside a
// transaction. Each client claims only from its own database with its own
// slots, so a backlog in one database never takes another's.
//
// Enqueue inside a transaction with the Client of the database the
// transaction belongs to (EnqueueTx): the job commits with the rows that
// caused it. `skiplock work --database-url A --database-url B` runs a
// Fleet. See docs/scaling.md.
type Fleet struct {
	clients []*Client
	route   RouteFunc
}

// RouteFunc picks the database for an enqueue made outside a transaction:
// the index, in the Fleet's clients, of the database that holds the job's
// tenant (from p.Tenant, its queue, its payload: whatever the application
// shards by). It must be deterministic for a given job, or unique keys
// cannot deduplicate across retries.
type RouteFunc func(p EnqueueParams) int

// ErrNoRoute is returned (wrapped) by Fleet.Enqueue when the fleet has no
// RouteFunc or it returned an index out of range.
var ErrNoRoute = errors.New("skiplock: no database for this job")

// NewFleet returns a fleet over clients, in the order RouteFunc indexes
// them. route may be nil when the fleet has one client or never enqueues
// (a pure worker process).
func NewFleet(clients []*Client, route RouteFunc) (*Fleet, error) {
	if len(clients) == 0 {
		return nil, &FieldError{Field: "clients", Message: "a fleet needs at least one client", base: ErrInvalidConfig}
	}
	for i, c := range clients {
		if c == nil {
			return nil, &FieldError{Field: fmt.Sprintf("clients[%d]", i), Message: "must not be nil", base: ErrInvalidConfig}
		}
	}
	return &Fleet{clients: append([]*Client(nil), clients...), route: route}, nil
}

// Clients returns the fleet's clients, in order.
func (f *Fleet) Clients() []*Client { return append([]*Client(nil), f.clients...) }

// FleetEnqueueResult is an enqueue's result and the database it went to.
type FleetEnqueueResult struct {
	// Database is the index of the client (database) that holds the job;
	// job ids are per database.
	Database int
	EnqueueResult
}

// Enqueue enqueues p into the database RouteFunc picks (the only one when
// the fleet has one client and no RouteFunc).
func (f *Fleet) Enqueue(ctx context.Context, p EnqueueParams) (FleetEnqueueResult, error) {
	i := 0
	switch {
	case f.route != nil:
		i = f.route(p)
	case len(f.clients) > 1:
		return FleetEnqueueResult{}, fmt.Errorf("%w: the fleet has %d databases and no RouteFunc", ErrNoRoute, len(f.clients))
	}
	if i < 0 || i >= len(f.clients) {
		return FleetEnqueueResult{}, fmt.Errorf("%w: RouteFunc returned %d, the fleet has %d databases", ErrNoRoute, i, len(f.clients))
	}
	r, err := f.clients[i].Enqueue(ctx, p)
	return FleetEnqueueResult{Database: i, EnqueueResult: r}, err
}

// Start starts every client. If one fails, the ones already started are
// stopped (without waiting for running jobs) and its error is returned.
func (f *Fleet) Start(ctx context.Context) error {
	for i, c := range f.clients {
		if err := c.Start(ctx); err != nil {
			for _, s := range f.clients[:i] {
				_ = s.StopAndCancel(ctx)
			}
			return fmt.Errorf("skiplock: fleet: database %d: %w", i, err)
		}
	}
	return nil
}

// Stop drains every client at once (see Client.Stop): the databases drain
// together, not one after another. It returns their errors joined.
func (f *Fleet) Stop(ctx context.Context) error {
	return f.each(func(c *Client) error { return c.Stop(ctx) })
}

// StopAndCancel stops every client at once without waiting for running
// jobs (see Client.StopAndCancel).
func (f *Fleet) StopAndCancel(ctx context.Context) error {
	return f.each(func(c *Client) error { return c.StopAndCancel(ctx) })
}

func (f *Fleet) each(fn func(*Client) error) error {
	errs := make([]error, len(f.clients))
	var wg sync.WaitGroup
	for i, c := range f.clients {
		wg.Go(func() {
			if err := fn(c); err != nil {
				errs[i] = fmt.Errorf("database %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

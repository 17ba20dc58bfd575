package skiplock

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/skiplock/skiplock/internal/store"
)

// ErrInvalidLimit is the sentinel behind every validation failure of a
// Limit; the concrete error is a *FieldError naming the field.
var ErrInvalidLimit = errors.New("skiplock: invalid limit")

// MaxLimitConcurrency is the largest concurrency a Limit may allow.
const MaxLimitConcurrency = 1_000_000

// Limit caps the jobs of a queue or of a kind across every process that
// uses the database, in total or per partition value: at most Concurrency
// running at once (a concurrency limit), or at most Rate started within any
// window of Per (a rate limit: a sliding window over the recorded starts).
// "5 send-email jobs at once cluster-wide" is {Name: "email", Kind:
// "send-email", Concurrency: 5}; "1 per customer" is {Name: "per-customer",
// Kind: "sync", Partition: "arg:customer_id", Concurrency: 1}; "100 calls a
// minute to the partner API" is {Name: "partner", Kind: "partner-call",
// Rate: 100, Per: time.Minute}.
//
// Limits are stored in the database (LimitSet, `skiplock limit set`) and
// enforced by the claim itself, exactly: a claimer of work a limit covers
// takes the limit's lock for the instant of its claim, and the running
// count comes from the jobs table, so a worker that crashes gives its slots
// back when the reaper takes its leases. Workers read the limits covering
// their queues every 2 seconds: a limit set or removed is obeyed from then.
// A job over its limit stays ready; it is claimed when a slot frees (a
// completion in this process wakes its claimers at once, other processes
// within their poll interval) or, under a rate limit, when the window's
// oldest start leaves it (the pool sleeps until then instead of polling).
// While the limits have room for a whole batch the claim costs little more
// than an unlimited one. Under a rate limit a job counts its
// EnqueueParams.LimitWeight (1 by default); a concurrency limit counts
// every running job as one. A worker pool with a TenantCap that a limit
// covers obeys the limit and sets its cap aside (a limit is a guarantee,
// the cap a preference), and logs so once.
type Limit struct {
	// Name identifies the limit: letters, digits and _ . : - (64 at most,
	// starting with a letter or digit).
	Name string
	// Queue or Kind (exactly one) is what the limit covers: every job of
	// the queue, or every job of the kind in any queue.
	Queue string
	Kind  string
	// Partition counts separately per value: "" (one count for all),
	// "tenant", "entity", or "arg:FIELD" (the payload's top-level FIELD, as
	// text). Jobs without a value are not limited by a partitioned limit.
	Partition string
	// Concurrency is the most running jobs allowed (per partition value),
	// 1 to MaxLimitConcurrency. Set it, or Rate and Per.
	Concurrency int
	// Rate is the most job starts allowed within any window of Per (per
	// partition value), 1 to MaxLimitConcurrency; Per is 1 s to 24 h. A
	// start counts when the job is claimed, retries included, as the job's
	// LimitWeight starts.
	Rate int
	Per  time.Duration
}

// LimitStatus is a limit with its use now.
type LimitStatus struct {
	Limit
	// Used is what the limit counts over all its partition values: running
	// jobs (a concurrency limit) or starts within the window (a rate
	// limit); MaxUsed the same for its fullest partition value (of all,
	// when it has no partition); FullValues how many values are at the
	// limit.
	Used, MaxUsed, FullValues int64
	// Ready is how many ready jobs (due or not) the limit covers, and
	// OldestDue how long the oldest due one has waited.
	Ready     int64
	OldestDue time.Duration
	UpdatedAt time.Time
	// TooHeavy is how many of those ready jobs have a LimitWeight above
	// the limit's Rate: they can never start while the limit stays so
	// (raise the rate, or delete them and enqueue them lighter). Always 0
	// for a concurrency limit.
	TooHeavy int64
}

var (
	limitNameRe  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$`)
	limitFieldRe = regexp.MustCompile(`^arg:[A-Za-z_][A-Za-z0-9_]{0,62}$`)
)

func invalidLimit(field, format string, args ...any) error {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...), base: ErrInvalidLimit}
}

// Validate reports the first invalid field of l as a *FieldError matching
// ErrInvalidLimit.
func (l Limit) Validate() error {
	switch {
	case !limitNameRe.MatchString(l.Name):
		return invalidLimit("name", "must be 1 to 64 letters, digits or _ . : - starting with a letter or digit")
	case (l.Queue == "") == (l.Kind == ""):
		return invalidLimit("queue", "exactly one of queue and kind must be set")
	case l.Queue != "" && validateName("queue", l.Queue) != nil:
		return invalidLimit("queue", "%s", validateName("queue", l.Queue).(*FieldError).Message)
	case l.Kind != "" && validateName("kind", l.Kind) != nil:
		return invalidLimit("kind", "%s", validateName("kind", l.Kind).(*FieldError).Message)
	case l.Partition != "" && l.Partition != "tenant" && l.Partition != "entity" && !limitFieldRe.MatchString(l.Partition):
		return invalidLimit("partition", `must be "", "tenant", "entity" or "arg:FIELD" (FIELD: a letter or _, then letters, digits or _; 63 at most)`)
	case l.Concurrency != 0 && (l.Rate != 0 || l.Per != 0):
		return invalidLimit("concurrency", "a limit caps either concurrency or a rate (rate and per), not both")
	case l.Rate == 0 && l.Per == 0 && (l.Concurrency < 1 || l.Concurrency > MaxLimitConcurrency):
		return invalidLimit("concurrency", "must be between 1 and %d (or set rate and per)", MaxLimitConcurrency)
	case l.Concurrency == 0 && (l.Rate < 1 || l.Rate > MaxLimitConcurrency):
		return invalidLimit("rate", "must be between 1 and %d", MaxLimitConcurrency)
	case l.Concurrency == 0 && (l.Per < time.Second || l.Per > 24*time.Hour):
		return invalidLimit("per", "must be between 1s and 24h")
	}
	return nil
}

// LimitSet creates the limit l, or replaces the limit of that name. An
// invalid l is refused with a *FieldError and nothing changes.
func (c *Client) LimitSet(ctx context.Context, l Limit) error {
	if err := l.Validate(); err != nil {
		return err
	}
	err := c.store.SetLimit(ctx, c.pool, store.Limit{Name: l.Name, Queue: l.Queue, Kind: l.Kind,
		Partition: l.Partition, Concurrency: l.Concurrency, Rate: l.Rate, Per: l.Per})
	if err != nil {
		return fmt.Errorf("skiplock: set limit %s: %w", l.Name, err)
	}
	return nil
}

// ErrLimitNotFound is returned by LimitRemove for a name no limit has.
var ErrLimitNotFound = errors.New("skiplock: limit not found")

// LimitRemove removes the limit named name (ErrLimitNotFound if none).
// Jobs it held back are claimed from the workers' next claim on (within 2
// seconds).
func (c *Client) LimitRemove(ctx context.Context, name string) error {
	found, err := c.store.RemoveLimit(ctx, c.pool, name)
	if err != nil {
		return fmt.Errorf("skiplock: remove limit %s: %w", name, err)
	}
	if !found {
		return ErrLimitNotFound
	}
	return nil
}

// LimitList returns every limit with its use now.
func (c *Client) LimitList(ctx context.Context) ([]LimitStatus, error) {
	rows, err := c.store.ListLimits(ctx, c.pool, true)
	if err != nil {
		return nil, fmt.Errorf("skiplock: limits: %w", err)
	}
	out := make([]LimitStatus, len(rows))
	for i, r := range rows {
		out[i] = LimitStatus{
			Limit: Limit{Name: r.Name, Queue: r.Queue, Kind: r.Kind, Partition: r.Partition, Concurrency: r.Concurrency,
				Rate: r.Rate, Per: r.Per},
			Used: r.Used, MaxUsed: r.MaxUsed, FullValues: r.FullValues, Ready: r.Ready,
			OldestDue: time.Duration(r.OldestDue * float64(time.Second)), UpdatedAt: r.UpdatedAt,
			TooHeavy: r.TooHeavy,
		}
	}
	return out, nil
}

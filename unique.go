package skiplock

import (
	"time"

	"github.com/skiplock/skiplock/internal/store"
)

// Bounds of the uniqueness and mode options. enqueue_unique
// (internal/migrations/sql/functions/enqueue_unique.sql) applies the same
// numbers to every SQL entry point.
const (
	// MinUniquePeriod and MaxUniquePeriod bound UniqueOpts.Period.
	MinUniquePeriod, MaxUniquePeriod = time.Second, 366 * 24 * time.Hour
	// MinModeWindow and MaxModeWindow bound the windows of Debounce and
	// Throttle.
	MinModeWindow, MaxModeWindow = time.Millisecond, 366 * 24 * time.Hour
)

// UniqueOpts widens what makes an enqueue unique beyond a caller's
// UniqueKey (River's UniqueOpts). The decision is made in the database
// (the SQL function enqueue_unique), so Go, the CLI and plain SQL share it,
// and concurrent enqueues of one key leave one job.
type UniqueOpts struct {
	// ByArgs derives the key from the job's kind and payload instead of
	// EnqueueParams.UniqueKey (which must then be empty): two enqueues of
	// the same kind with equal payloads (as JSON objects: the order of
	// fields does not matter) are one job.
	ByArgs bool
	// ArgsFields, with ByArgs, makes the key of these top-level payload
	// fields only (a missing field counts as absent).
	ArgsFields []string
	// Period holds the key for the whole period bucket the enqueue falls
	// in, whether its job is in flight or finished: "at most one an hour".
	// Buckets are aligned on the Unix epoch, so an hour is a clock hour
	// (UTC). A second enqueue in the bucket returns the first one's id
	// (Inserted false). MinUniquePeriod to MaxUniquePeriod; 0: the key is
	// held while its job is in flight only (ready or running).
	Period time.Duration
}

func (u UniqueOpts) isZero() bool { return !u.ByArgs && len(u.ArgsFields) == 0 && u.Period == 0 }

// EnqueueOpts are the enqueue defaults an args type carries (River's
// InsertOpts): an EnqueueParams field left at its zero value takes the
// value here. Uniqueness is taken as a whole: when the call sets neither
// UniqueKey nor Unique, the args type's Unique applies.
type EnqueueOpts struct {
	Queue       string
	Priority    int
	MaxAttempts int
	Unique      UniqueOpts
	Tenant      string
	Entity      string
}

// JobArgsWithOpts is a JobArgs that carries its enqueue defaults, so call
// sites need not repeat them:
//
//	type ReportArgs struct{ Customer int64 `json:"customer"` }
//	func (ReportArgs) Kind() string { return "report" }
//	func (ReportArgs) EnqueueOpts() skiplock.EnqueueOpts {
//		return skiplock.EnqueueOpts{Queue: "reports", Priority: 5,
//			Unique: skiplock.UniqueOpts{ByArgs: true, Period: time.Hour}}
//	}
type JobArgsWithOpts interface {
	JobArgs
	EnqueueOpts() EnqueueOpts
}

// withArgsDefaults fills p's zero fields from its payload's EnqueueOpts.
func withArgsDefaults(p EnqueueParams) EnqueueParams {
	args, ok := p.Payload.(JobArgsWithOpts)
	if !ok {
		return p
	}
	o := args.EnqueueOpts()
	if p.Queue == "" {
		p.Queue = o.Queue
	}
	if p.Priority == 0 {
		p.Priority = o.Priority
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = o.MaxAttempts
	}
	if p.UniqueKey == "" && p.Unique.isZero() {
		p.Unique = o.Unique
	}
	if p.Tenant == "" {
		p.Tenant = o.Tenant
	}
	if p.Entity == "" {
		p.Entity = o.Entity
	}
	return p
}

// prepareUnique checks p's uniqueness and mode options (as enqueue_unique
// does, so a bad call fails before it is sent) and sets them on a.
func prepareUnique(p EnqueueParams, a *store.EnqueueArgs) error {
	u := p.Unique
	if u.ByArgs && p.UniqueKey != "" {
		return invalidJob("unique_key", "must be empty with unique_by args")
	}
	if len(u.ArgsFields) > 0 && !u.ByArgs {
		return invalidJob("unique_fields", "needs unique_by args")
	}
	for _, f := range u.ArgsFields {
		if err := validateKey("unique_fields", f, MaxKeyBytes); err != nil {
			return err
		}
	}
	if u.Period != 0 && (u.Period < MinUniquePeriod || u.Period > MaxUniquePeriod) {
		return invalidJob("unique_period", "must be between %s and %s, got %s", MinUniquePeriod, MaxUniquePeriod, u.Period)
	}
	modes := 0
	var mode string
	var window time.Duration
	if p.Supersede {
		modes, mode = modes+1, "supersede"
	}
	if p.Debounce != 0 {
		modes, mode, window = modes+1, "debounce", p.Debounce
	}
	if p.Throttle != 0 {
		modes, mode, window = modes+1, "throttle", p.Throttle
	}
	if modes > 1 {
		return invalidJob("mode", "at most one of supersede, debounce and throttle")
	}
	if mode != "" && mode != "supersede" && (window < MinModeWindow || window > MaxModeWindow) {
		return invalidJob(mode, "the window must be between %s and %s, got %s", MinModeWindow, MaxModeWindow, window)
	}
	if (mode != "" || u.Period != 0) && p.UniqueKey == "" && !u.ByArgs {
		return invalidJob("unique_key", "must be set (or unique_by args) for a unique period or an enqueue mode")
	}
	if mode != "" && (u.Period != 0 || p.BumpSchedule) {
		return invalidJob(mode, "cannot be combined with unique_period or bump")
	}
	if u.ByArgs {
		by := "args"
		a.UniqueBy = &by
		a.UniqueFields = u.ArgsFields
	}
	a.UniquePeriod = u.Period
	if mode != "" {
		a.Mode = &mode
		a.ModeWindow = window
	}
	return nil
}

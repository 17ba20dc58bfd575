package skiplock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/dbtest"
)

// The bounds of the uniqueness and mode options are stated once in Go
// (unique.go) and applied by enqueue_unique: the SQL function accepts each
// bound and refuses one microsecond past it, naming the field, as Go does.
func TestSQLUniqueBoundsEqualGo(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c, err := NewClient(db.Pool, Config{})
	require.NoError(t, err)
	n := 0
	call := func(arg string, d time.Duration) error {
		n++
		_, err := db.Pool.Exec(ctx, fmt.Sprintf(`SELECT skiplock.enqueue('q', 'k', unique_key => 'u%d', %s => $1::bigint * interval '1 microsecond')`,
			n, arg), d.Microseconds())
		return err
	}
	for _, b := range []struct {
		arg, field string
		at, past   time.Duration
		params     func(time.Duration) EnqueueParams
	}{
		{"unique_period", "unique_period", MinUniquePeriod, MinUniquePeriod - time.Microsecond,
			func(d time.Duration) EnqueueParams {
				return EnqueueParams{Kind: "k", UniqueKey: "u", Unique: UniqueOpts{Period: d}}
			}},
		{"unique_period", "unique_period", MaxUniquePeriod, MaxUniquePeriod + time.Microsecond,
			func(d time.Duration) EnqueueParams {
				return EnqueueParams{Kind: "k", UniqueKey: "u", Unique: UniqueOpts{Period: d}}
			}},
		{"debounce", "debounce", MinModeWindow, MinModeWindow - time.Microsecond,
			func(d time.Duration) EnqueueParams { return EnqueueParams{Kind: "k", UniqueKey: "u", Debounce: d} }},
		{"throttle", "throttle", MaxModeWindow, MaxModeWindow + time.Microsecond,
			func(d time.Duration) EnqueueParams { return EnqueueParams{Kind: "k", UniqueKey: "u", Throttle: d} }},
	} {
		require.NoError(t, call(b.arg, b.at), "%s at %s", b.arg, b.at)
		require.NoError(t, c.Validate(b.params(b.at)), "Go: %s at %s", b.arg, b.at)
		err := call(b.arg, b.past)
		var pe *pgconn.PgError
		require.True(t, errors.As(err, &pe), "%s past the bound: %v", b.arg, err)
		require.Equal(t, "22023", pe.Code)
		require.True(t, strings.HasPrefix(pe.Message, "skiplock: "+b.field+":"), pe.Message)
		var fe *FieldError
		require.True(t, errors.As(c.Validate(b.params(b.past)), &fe), "Go: %s past the bound", b.arg)
		require.Equal(t, b.field, fe.Field)
	}
}

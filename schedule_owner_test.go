package skiplock_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

type invoiceArgs struct {
	Customer string `json:"customer"`
}

func (invoiceArgs) Kind() string { return "invoice.send" }

// Schedules belong to the code that declares them: ScheduleSync stores an
// owner's whole set, adopts a schedule of the same name added one by one,
// prunes what the owner no longer declares and leaves everyone else's, and
// refuses another owner's schedule. A Schedule takes its kind from typed
// args as EnqueueParams does.
func TestScheduleSyncOwnsAndPrunes(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, skiplock.Config{})
	list := func() map[string]skiplock.ScheduleInfo {
		t.Helper()
		all, err := c.ScheduleList(ctx)
		require.NoError(t, err)
		out := map[string]skiplock.ScheduleInfo{}
		for _, s := range all {
			out[s.Name] = s
		}
		return out
	}
	// Added one by one (the CLI, another service): never pruned by a sync.
	require.NoError(t, c.ScheduleAdd(ctx, skiplock.Schedule{Name: "cli-made", Every: 60e9, Kind: "ping"}))
	require.NoError(t, c.ScheduleAdd(ctx, skiplock.Schedule{Name: "invoices", Every: 3600e9, Kind: "invoice.send"}))

	pruned, err := c.ScheduleSync(ctx, "billing",
		skiplock.Schedule{Name: "invoices", Every: 3600e9, Payload: invoiceArgs{Customer: "all"}},
		skiplock.Schedule{Name: "dunning", Cron: "0 9 * * *", Payload: invoiceArgs{}})
	require.NoError(t, err)
	require.Empty(t, pruned)
	got := list()
	require.Equal(t, "billing", got["invoices"].Owner, "adopted")
	require.Equal(t, "billing", got["dunning"].Owner)
	require.Equal(t, "invoice.send", got["dunning"].Kind, "the kind of the typed args")
	require.JSONEq(t, `{"customer":"all"}`, string(got["invoices"].Payload))
	require.Equal(t, "", got["cli-made"].Owner)

	// The next deploy no longer declares dunning: the sync deletes it, and
	// only it. Declaring again changes nothing.
	for range 2 {
		pruned, err = c.ScheduleSync(ctx, "billing", skiplock.Schedule{Name: "invoices", Every: 3600e9, Payload: invoiceArgs{Customer: "all"}})
		require.NoError(t, err)
	}
	got = list()
	require.Len(t, got, 2)
	require.Contains(t, got, "invoices")
	require.Contains(t, got, "cli-made")
	require.Empty(t, pruned, "the second sync had nothing left to prune")

	// Another owner may not take billing's schedule; its own set is its own.
	_, err = c.ScheduleSync(ctx, "reports", skiplock.Schedule{Name: "invoices", Every: 60e9, Kind: "x"})
	require.ErrorIs(t, err, skiplock.ErrScheduleOwned)
	require.Contains(t, err.Error(), `"billing"`)
	_, err = c.ScheduleSync(ctx, "reports", skiplock.Schedule{Name: "weekly", Cron: "@weekly", Kind: "report"})
	require.NoError(t, err)
	pruned, err = c.ScheduleSync(ctx, "billing")
	require.NoError(t, err)
	require.Equal(t, []string{"invoices"}, pruned, "an empty set removes all of the owner's")
	got = list()
	require.Contains(t, got, "weekly")
	require.Contains(t, got, "cli-made")
	require.NotContains(t, got, "invoices")

	// Typed args and a different Kind disagree; one set may not name a schedule twice.
	err = c.ValidateSchedule(skiplock.Schedule{Name: "x", Every: 60e9, Kind: "other", Payload: invoiceArgs{}})
	requireScheduleField(t, err, "kind")
	_, err = c.ScheduleSync(ctx, "billing", skiplock.Schedule{Name: "a", Every: 60e9, Kind: "k"},
		skiplock.Schedule{Name: "a", Every: 120e9, Kind: "k"})
	requireScheduleField(t, err, "schedules[1].name")
	_, err = c.ScheduleSync(ctx, "", skiplock.Schedule{Name: "a", Every: 60e9, Kind: "k"})
	requireScheduleField(t, err, "owner")
}

func requireScheduleField(t *testing.T, err error, field string) {
	t.Helper()
	require.ErrorIs(t, err, skiplock.ErrInvalidSchedule)
	var fe *skiplock.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, field, fe.Field)
}

package cron

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const layout = "2006-01-02 15:04:05 MST"

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err)
	return v
}

// fires returns the next n fire times after from, formatted in the
// schedule's zone.
func fires(t *testing.T, s *Schedule, from time.Time, n int) []string {
	t.Helper()
	out := make([]string, 0, n)
	for range n {
		next := s.Next(from)
		require.False(t, next.IsZero(), "Next(%s) returned zero", from)
		require.True(t, next.After(from), "Next(%s) = %s is not after", from, next)
		require.Equal(t, time.UTC, next.Location(), "Next must return UTC")
		out = append(out, next.In(s.loc).Format(layout))
		from = next
	}
	return out
}

type nextCase struct {
	name string
	expr string
	tz   string
	from string // RFC 3339
	want []string
}

func runNextCases(t *testing.T, cases []nextCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(tc.expr, tc.tz)
			require.NoError(t, err)
			require.Equal(t, tc.want, fires(t, s, mustTime(t, tc.from), len(tc.want)))
		})
	}
}

func TestNextStandard(t *testing.T) {
	// 2026-01-01 is a Thursday.
	runNextCases(t, []nextCase{
		{"every minute", "* * * * *", "", "2026-01-01T00:00:00Z",
			[]string{"2026-01-01 00:01:00 UTC", "2026-01-01 00:02:00 UTC", "2026-01-01 00:03:00 UTC"}},
		{"strictly after, fractional input", "* * * * *", "", "2026-01-01T00:00:59.999Z",
			[]string{"2026-01-01 00:01:00 UTC", "2026-01-01 00:02:00 UTC"}},
		{"every 15 minutes", "*/15 * * * *", "", "2026-01-01T00:00:00Z",
			[]string{"2026-01-01 00:15:00 UTC", "2026-01-01 00:30:00 UTC", "2026-01-01 00:45:00 UTC", "2026-01-01 01:00:00 UTC"}},
		{"range with step", "5-10/5 * * * *", "", "2026-01-01T00:00:00Z",
			[]string{"2026-01-01 00:05:00 UTC", "2026-01-01 00:10:00 UTC", "2026-01-01 01:05:00 UTC"}},
		{"value with step means value-max", "50/5 * * * *", "", "2026-01-01T00:00:00Z",
			[]string{"2026-01-01 00:50:00 UTC", "2026-01-01 00:55:00 UTC", "2026-01-01 01:50:00 UTC"}},
		{"weekdays at 09:00", "0 9 * * 1-5", "", "2026-01-01T00:00:00Z",
			[]string{"2026-01-01 09:00:00 UTC", "2026-01-02 09:00:00 UTC", "2026-01-05 09:00:00 UTC"}},
		{"weekday names", "0 9 * * mon-FRI", "", "2026-01-02T10:00:00Z",
			[]string{"2026-01-05 09:00:00 UTC", "2026-01-06 09:00:00 UTC"}},
		{"list of days of month", "0 0 1,15 * *", "", "2026-01-01T00:00:00Z",
			[]string{"2026-01-15 00:00:00 UTC", "2026-02-01 00:00:00 UTC", "2026-02-15 00:00:00 UTC"}},
		{"month names with step", "0 12 1 jan-mar/2 *", "", "2026-01-01T00:00:00Z",
			[]string{"2026-01-01 12:00:00 UTC", "2026-03-01 12:00:00 UTC", "2027-01-01 12:00:00 UTC"}},
		{"sunday as 7", "0 0 * * 7", "", "2026-01-01T00:00:00Z",
			[]string{"2026-01-04 00:00:00 UTC", "2026-01-11 00:00:00 UTC"}},
		{"sunday as 0", "0 0 * * 0", "", "2026-01-01T00:00:00Z",
			[]string{"2026-01-04 00:00:00 UTC", "2026-01-11 00:00:00 UTC"}},
		{"question mark", "0 12 ? * ?", "", "2026-01-01T00:00:00Z",
			[]string{"2026-01-01 12:00:00 UTC", "2026-01-02 12:00:00 UTC"}},
		// crontab(5): both day fields restricted => either matches.
		{"dom OR dow", "30 4 1 * mon", "", "2026-01-01T00:00:00Z",
			[]string{"2026-01-01 04:30:00 UTC", "2026-01-05 04:30:00 UTC", "2026-01-12 04:30:00 UTC", "2026-01-19 04:30:00 UTC", "2026-01-26 04:30:00 UTC", "2026-02-01 04:30:00 UTC"}},
		{"dom star AND dow", "0 0 * * 5", "", "2026-02-01T00:00:00Z",
			[]string{"2026-02-06 00:00:00 UTC", "2026-02-13 00:00:00 UTC"}},
		{"31st skips short months", "0 0 31 * *", "", "2026-08-31T00:00:00Z",
			[]string{"2026-10-31 00:00:00 UTC", "2026-12-31 00:00:00 UTC", "2027-01-31 00:00:00 UTC"}},
		{"29 February", "0 0 29 2 *", "", "2026-03-01T00:00:00Z",
			[]string{"2028-02-29 00:00:00 UTC", "2032-02-29 00:00:00 UTC"}},
		{"29 February across 2100", "0 0 29 2 *", "", "2097-01-01T00:00:00Z",
			[]string{"2104-02-29 00:00:00 UTC"}},
		{"time zone without DST", "0 9 * * *", "Asia/Kolkata", "2026-01-01T00:00:00Z",
			[]string{"2026-01-01 09:00:00 IST", "2026-01-02 09:00:00 IST"}},
		{"explicit UTC", "0 9 * * *", "UTC", "2026-01-01T00:00:00Z",
			[]string{"2026-01-01 09:00:00 UTC"}},
		{"year end rollover", "59 23 31 12 *", "", "2026-12-31T23:59:00Z",
			[]string{"2027-12-31 23:59:00 UTC"}},
	})
}

func TestNextSeconds(t *testing.T) {
	runNextCases(t, []nextCase{
		{"every 20 seconds", "*/20 * * * * *", "", "2026-01-01T00:00:00Z",
			[]string{"2026-01-01 00:00:20 UTC", "2026-01-01 00:00:40 UTC", "2026-01-01 00:01:00 UTC"}},
		{"every second", "* * * * * *", "", "2026-01-01T00:00:00.5Z",
			[]string{"2026-01-01 00:00:01 UTC", "2026-01-01 00:00:02 UTC"}},
		{"second 30 of midnight", "30 0 0 * * *", "", "2026-01-01T00:00:00Z",
			[]string{"2026-01-01 00:00:30 UTC", "2026-01-02 00:00:30 UTC"}},
		{"seconds range in minute 5", "0-59/30 5 * * * *", "", "2026-01-01T00:00:00Z",
			[]string{"2026-01-01 00:05:00 UTC", "2026-01-01 00:05:30 UTC", "2026-01-01 01:05:00 UTC"}},
		{"six fields with names", "0 0 0 * * sun", "", "2026-01-01T00:00:00Z",
			[]string{"2026-01-04 00:00:00 UTC", "2026-01-11 00:00:00 UTC"}},
	})
}

func TestNextDescriptors(t *testing.T) {
	from := "2026-01-01T00:00:00Z" // Thursday
	runNextCases(t, []nextCase{
		{"hourly", "@hourly", "", from, []string{"2026-01-01 01:00:00 UTC", "2026-01-01 02:00:00 UTC"}},
		{"daily", "@daily", "", from, []string{"2026-01-02 00:00:00 UTC", "2026-01-03 00:00:00 UTC"}},
		{"midnight", "@midnight", "", from, []string{"2026-01-02 00:00:00 UTC", "2026-01-03 00:00:00 UTC"}},
		{"weekly is Sunday midnight", "@weekly", "", from, []string{"2026-01-04 00:00:00 UTC", "2026-01-11 00:00:00 UTC"}},
		{"monthly", "@monthly", "", from, []string{"2026-02-01 00:00:00 UTC", "2026-03-01 00:00:00 UTC"}},
		{"yearly", "@yearly", "", from, []string{"2027-01-01 00:00:00 UTC", "2028-01-01 00:00:00 UTC"}},
		{"annually", "@annually", "", from, []string{"2027-01-01 00:00:00 UTC"}},
		{"case and spaces", "  @DAILY ", "", from, []string{"2026-01-02 00:00:00 UTC"}},
		{"daily in a zone", "@daily", "Europe/Berlin", from, []string{"2026-01-02 00:00:00 CET", "2026-01-03 00:00:00 CET"}},
	})
}

func TestEvery(t *testing.T) {
	runNextCases(t, []nextCase{
		// Fire times are multiples of the interval since the Unix epoch.
		{"90 minutes", "@every 90m", "", "2026-03-01T00:10:00Z",
			[]string{"2026-03-01 01:30:00 UTC", "2026-03-01 03:00:00 UTC", "2026-03-01 04:30:00 UTC"}},
		{"1 second", "@every 1s", "", "2026-03-01T00:00:00.25Z",
			[]string{"2026-03-01 00:00:01 UTC", "2026-03-01 00:00:02 UTC"}},
		{"compound duration", "@every 1h30m", "", "2026-03-01T00:00:00Z",
			[]string{"2026-03-01 01:30:00 UTC"}},
		// @every is real time: the zone and DST do not matter.
		{"hourly across fall-back", "@every 1h", "America/New_York", "2026-11-01T04:30:00Z",
			[]string{"2026-11-01 01:00:00 EDT", "2026-11-01 01:00:00 EST", "2026-11-01 02:00:00 EST"}},
	})

	s, err := Parse("@every 7s", "")
	require.NoError(t, err)
	require.Equal(t, 7*time.Second, s.Every())
	for _, from := range []time.Time{
		time.Date(2026, 5, 5, 5, 5, 5, 5, time.UTC),
		time.Date(1960, 1, 1, 0, 0, 1, 0, time.UTC), // before the epoch
		time.Unix(7*1000, 0),
	} {
		next := s.Next(from)
		require.True(t, next.After(from))
		require.LessOrEqual(t, next.Sub(from), 7*time.Second)
		require.Zero(t, next.Unix()%7, "aligned to the epoch: %s", next)
		require.Zero(t, next.Nanosecond())
	}

	cron, err := Parse("* * * * *", "")
	require.NoError(t, err)
	require.Zero(t, cron.Every())
}

func TestString(t *testing.T) {
	for _, expr := range []string{"*/5 * * * *", " 0 0 * * * ", "@every 1h", "@weekly"} {
		s, err := Parse(expr, "Europe/Berlin")
		require.NoError(t, err)
		require.Equal(t, expr, s.String())
		again, err := Parse(s.String(), "Europe/Berlin")
		require.NoError(t, err)
		from := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)
		require.Equal(t, s.Next(from), again.Next(from))
	}
}

func TestDST(t *testing.T) {
	runNextCases(t, []nextCase{
		// America/New_York: 2026-03-08 02:00 EST -> 03:00 EDT.
		{"NY spring-forward: skipped time fires shifted, once", "30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z",
			[]string{"2026-03-08 03:30:00 EDT", "2026-03-09 02:30:00 EDT", "2026-03-10 02:30:00 EDT"}},
		{"NY spring-forward: 02:00 shifts to 03:00", "0 2 * * *", "America/New_York", "2026-03-07T12:00:00Z",
			[]string{"2026-03-08 03:00:00 EDT", "2026-03-09 02:00:00 EDT"}},
		{"NY spring-forward: fixed list", "0,30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z",
			[]string{"2026-03-08 03:00:00 EDT", "2026-03-08 03:30:00 EDT", "2026-03-09 02:00:00 EDT"}},
		{"NY spring-forward: shifted time equal to a real one fires once", "30 2,3 * * *", "America/New_York", "2026-03-07T12:00:00Z",
			[]string{"2026-03-08 03:30:00 EDT", "2026-03-09 02:30:00 EDT", "2026-03-09 03:30:00 EDT"}},
		{"NY spring-forward: hourly has 23 fires", "0 * * * *", "America/New_York", "2026-03-08T05:30:00Z",
			[]string{"2026-03-08 01:00:00 EST", "2026-03-08 03:00:00 EDT", "2026-03-08 04:00:00 EDT"}},
		{"NY spring-forward: wildcard minute in missing hour does not fire", "*/30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z",
			[]string{"2026-03-09 02:00:00 EDT", "2026-03-09 02:30:00 EDT"}},

		// America/New_York: 2026-11-01 02:00 EDT -> 01:00 EST.
		{"NY fall-back: repeated time fires once", "30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z",
			[]string{"2026-11-01 01:30:00 EDT", "2026-11-02 01:30:00 EST", "2026-11-03 01:30:00 EST"}},
		{"NY fall-back: seconds field, same policy", "0 30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z",
			[]string{"2026-11-01 01:30:00 EDT", "2026-11-02 01:30:00 EST"}},
		{"NY fall-back: asking from inside the repeat does not refire", "30 1 * * *", "America/New_York", "2026-11-01T06:10:00Z",
			[]string{"2026-11-02 01:30:00 EST"}},
		{"NY fall-back: fixed list fires once each", "0,30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z",
			[]string{"2026-11-01 01:00:00 EDT", "2026-11-01 01:30:00 EDT", "2026-11-02 01:00:00 EST"}},
		{"NY fall-back: hourly fires in both passes", "0 * * * *", "America/New_York", "2026-11-01T03:30:00Z",
			[]string{"2026-11-01 00:00:00 EDT", "2026-11-01 01:00:00 EDT", "2026-11-01 01:00:00 EST", "2026-11-01 02:00:00 EST"}},
		{"NY fall-back: @hourly fires in both passes", "@hourly", "America/New_York", "2026-11-01T04:30:00Z",
			[]string{"2026-11-01 01:00:00 EDT", "2026-11-01 01:00:00 EST", "2026-11-01 02:00:00 EST"}},
		{"NY fall-back: hour range 0-23 counts as hourly", "0 0-23 * * *", "America/New_York", "2026-11-01T04:30:00Z",
			[]string{"2026-11-01 01:00:00 EDT", "2026-11-01 01:00:00 EST", "2026-11-01 02:00:00 EST"}},
		{"NY fall-back: every 15 minutes keeps its beat", "*/15 * * * *", "America/New_York", "2026-11-01T05:40:00Z",
			[]string{"2026-11-01 01:45:00 EDT", "2026-11-01 01:00:00 EST", "2026-11-01 01:15:00 EST", "2026-11-01 01:30:00 EST", "2026-11-01 01:45:00 EST", "2026-11-01 02:00:00 EST"}},
		{"NY fall-back: wildcard minute in the repeated hour", "*/30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z",
			[]string{"2026-11-01 01:00:00 EDT", "2026-11-01 01:30:00 EDT", "2026-11-01 01:00:00 EST", "2026-11-01 01:30:00 EST", "2026-11-02 01:00:00 EST"}},
		{"NY fall-back: daily midnight unaffected", "@daily", "America/New_York", "2026-10-31T12:00:00Z",
			[]string{"2026-11-01 00:00:00 EDT", "2026-11-02 00:00:00 EST"}},

		// Europe/Berlin: 2026-03-29 02:00 CET -> 03:00 CEST; 2026-10-25 03:00 CEST -> 02:00 CET.
		{"Berlin spring-forward", "30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z",
			[]string{"2026-03-29 03:30:00 CEST", "2026-03-30 02:30:00 CEST"}},
		{"Berlin fall-back", "30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z",
			[]string{"2026-10-25 02:30:00 CEST", "2026-10-26 02:30:00 CET"}},
		{"Berlin fall-back: hourly", "0 * * * *", "Europe/Berlin", "2026-10-24T23:30:00Z",
			[]string{"2026-10-25 02:00:00 CEST", "2026-10-25 02:00:00 CET", "2026-10-25 03:00:00 CET"}},
		{"Berlin fall-back: weekly Sunday 02:45", "45 2 * * 0", "Europe/Berlin", "2026-10-24T12:00:00Z",
			[]string{"2026-10-25 02:45:00 CEST", "2026-11-01 02:45:00 CET"}},

		// Australia/Lord_Howe: 30-minute DST. 2026-04-05 02:00 -> 01:30; 2026-10-04 02:00 -> 02:30.
		{"Lord Howe spring-forward shifts by 30 minutes", "15 2 * * *", "Australia/Lord_Howe", "2026-10-03T00:00:00Z",
			[]string{"2026-10-04 02:45:00 +11", "2026-10-05 02:15:00 +11"}},
		{"Lord Howe fall-back fires once", "45 1 * * *", "Australia/Lord_Howe", "2026-04-04T00:00:00Z",
			[]string{"2026-04-05 01:45:00 +11", "2026-04-06 01:45:00 +1030"}},
		{"Lord Howe fall-back: every 15 minutes", "*/15 * * * *", "Australia/Lord_Howe", "2026-04-04T14:20:00Z",
			[]string{"2026-04-05 01:30:00 +11", "2026-04-05 01:45:00 +11", "2026-04-05 01:30:00 +1030", "2026-04-05 01:45:00 +1030", "2026-04-05 02:00:00 +1030"}},
		{"Lord Howe spring-forward: wildcard is not shifted off-grid", "*/20 * * * *", "Australia/Lord_Howe", "2026-10-03T15:00:00Z",
			[]string{"2026-10-04 01:40:00 +1030", "2026-10-04 02:40:00 +11", "2026-10-04 03:00:00 +11"}},

		// Beyond the explicit tzdata transitions (rule extension).
		{"NY spring-forward in 2050", "30 2 * * *", "America/New_York", "2050-03-12T12:00:00Z",
			[]string{"2050-03-13 03:30:00 EDT", "2050-03-14 02:30:00 EDT"}},
		// golang/go#81583: ZoneBounds ends leap years a day early in that era.
		{"end of a leap year in the rule era", "0 0 1 1 0", "Europe/Berlin", "2096-03-01T00:00:00Z",
			[]string{"2097-01-01 00:00:00 CET", "2097-01-06 00:00:00 CET"}},
		{"31 December of a leap year in the rule era", "30 2 * * *", "America/New_York", "2040-12-30T12:00:00Z",
			[]string{"2040-12-31 02:30:00 EST", "2041-01-01 02:30:00 EST"}},
	})
}

// TestDSTFiresOnce counts fires per local day around the transitions.
func TestDSTFiresOnce(t *testing.T) {
	cases := []struct {
		expr, tz, day string
		want          int
	}{
		{"30 2 * * *", "America/New_York", "2026-03-08", 1},
		{"30 1 * * *", "America/New_York", "2026-11-01", 1},
		{"30 2 * * *", "Europe/Berlin", "2026-03-29", 1},
		{"30 2 * * *", "Europe/Berlin", "2026-10-25", 1},
		{"0 * * * *", "America/New_York", "2026-03-08", 23},
		{"0 * * * *", "America/New_York", "2026-11-01", 25},
		{"*/15 * * * *", "Europe/Berlin", "2026-10-25", 100},
		{"*/15 * * * *", "Europe/Berlin", "2026-03-29", 92},
		{"0,30 1 * * *", "America/New_York", "2026-11-01", 2},
	}
	for _, tc := range cases {
		t.Run(tc.expr+" "+tc.tz+" "+tc.day, func(t *testing.T) {
			s, err := Parse(tc.expr, tc.tz)
			require.NoError(t, err)
			day, err := time.ParseInLocation("2006-01-02", tc.day, s.loc)
			require.NoError(t, err)
			dayEnd := day.AddDate(0, 0, 1)
			n := 0
			seen := map[time.Time]bool{}
			for f := s.Next(day.Add(-time.Nanosecond)); f.Before(dayEnd); f = s.Next(f) {
				require.False(t, seen[f], "duplicate UTC instant %s", f)
				seen[f] = true
				n++
			}
			require.Equal(t, tc.want, n)
		})
	}
}

func TestMissed(t *testing.T) {
	hourly, err := Parse("0 * * * *", "")
	require.NoError(t, err)
	last := mustTime(t, "2026-05-01T10:00:00Z")
	now := mustTime(t, "2026-05-01T14:30:00Z")
	h := func(hh int) time.Time { return time.Date(2026, 5, 1, hh, 0, 0, 0, time.UTC) }

	cases := []struct {
		name      string
		s         *Schedule
		last, now time.Time
		catchUp   int
		want      []time.Time
	}{
		{"catchUp 0 skips", hourly, last, now, 0, nil},
		{"negative catchUp skips", hourly, last, now, -1, nil},
		{"catchUp 1 is the most recent", hourly, last, now, 1, []time.Time{h(14)}},
		{"catchUp 3 is the 3 most recent, oldest first", hourly, last, now, 3, []time.Time{h(12), h(13), h(14)}},
		{"catchUp larger than the window", hourly, last, now, 10, []time.Time{h(11), h(12), h(13), h(14)}},
		{"now is inclusive, last exclusive", hourly, last, h(14), 10, []time.Time{h(11), h(12), h(13), h(14)}},
		{"nothing missed", hourly, h(14), now, 3, nil},
		{"now before last", hourly, now, last, 3, nil},
		{"now equal to last", hourly, now, now, 3, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, Missed(tc.s, tc.last, tc.now, tc.catchUp))
		})
	}

	t.Run("fall-back fires once", func(t *testing.T) {
		s, err := Parse("30 1 * * *", "America/New_York")
		require.NoError(t, err)
		got := Missed(s, mustTime(t, "2026-10-31T06:00:00Z"), mustTime(t, "2026-11-02T12:00:00Z"), 5)
		require.Equal(t, []time.Time{mustTime(t, "2026-11-01T05:30:00Z"), mustTime(t, "2026-11-02T06:30:00Z")}, got)
	})
	t.Run("spring-forward shifted fire", func(t *testing.T) {
		s, err := Parse("30 2 * * *", "America/New_York")
		require.NoError(t, err)
		got := Missed(s, mustTime(t, "2026-03-08T00:00:00Z"), mustTime(t, "2026-03-08T12:00:00Z"), 5)
		require.Equal(t, []time.Time{mustTime(t, "2026-03-08T07:30:00Z")}, got)
	})
	t.Run("every", func(t *testing.T) {
		s, err := Parse("@every 1h", "")
		require.NoError(t, err)
		got := Missed(s, mustTime(t, "2026-05-01T00:30:00Z"), mustTime(t, "2026-05-01T03:00:00Z"), 3)
		require.Equal(t, []time.Time{h(1), h(2), h(3)}, got)
	})
	t.Run("long downtime is cheap", func(t *testing.T) {
		s, err := Parse("* * * * * *", "Europe/Berlin")
		require.NoError(t, err)
		start := time.Now()
		got := Missed(s, mustTime(t, "2020-01-01T00:00:00Z"), mustTime(t, "2026-05-01T12:00:00.7Z"), 3)
		require.Less(t, time.Since(start), time.Second)
		require.Equal(t, []time.Time{
			mustTime(t, "2026-05-01T11:59:58Z"), mustTime(t, "2026-05-01T11:59:59Z"), mustTime(t, "2026-05-01T12:00:00Z"),
		}, got)
	})
	t.Run("matches forward enumeration", func(t *testing.T) {
		for _, c := range []struct{ expr, tz, last, now string }{
			{"*/15 * * * *", "America/New_York", "2026-11-01T04:50:00Z", "2026-11-01T07:10:00Z"},
			{"*/15 * * * *", "America/New_York", "2026-03-08T06:10:00Z", "2026-03-08T08:10:00Z"},
			{"15,45 1-3 * * *", "America/New_York", "2026-10-31T00:00:00Z", "2026-11-02T12:00:00Z"},
			{"30 2 * * *", "Europe/Berlin", "2026-03-20T00:00:00Z", "2026-04-02T00:00:00Z"},
			{"0 0 29 2 *", "", "2019-01-01T00:00:00Z", "2029-01-01T00:00:00Z"},
			{"@every 45m", "", "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"},
		} {
			s, err := Parse(c.expr, c.tz)
			require.NoError(t, err)
			last, now := mustTime(t, c.last), mustTime(t, c.now)
			var want []time.Time
			for f := s.Next(last); !f.After(now); f = s.Next(f) {
				want = append(want, f)
			}
			require.NotEmpty(t, want)
			require.Equal(t, want, Missed(s, last, now, len(want)+5), c.expr)
			require.Equal(t, want[len(want)-2:], Missed(s, last, now, 2), c.expr)
		}
	})
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name, expr, tz string
		wantMsg        []string
	}{
		{"empty", "", "", []string{`expression ""`, "empty expression"}},
		{"blank", "   ", "", []string{"empty expression"}},
		{"TZ= alone", "TZ=", "", []string{`time-zone prefix "TZ="`, "tz argument"}},
		{"TZ= with fields", "TZ=UTC * * * * *", "", []string{`time-zone prefix "TZ="`}},
		{"CRON_TZ=", "CRON_TZ=UTC * * * * *", "", []string{`time-zone prefix "CRON_TZ="`, "tz argument"}},
		{"lower-case tz prefix", "tz=UTC 0 * * * *", "", []string{`time-zone prefix "tz="`}},
		{"step zero", "*/0 * * * *", "", []string{`expression "*/0 * * * *"`, `minute field "*/0"`, "step must be at least 1"}},
		{"step zero in seconds", "15/0 * * * * *", "", []string{`second field "15/0"`, "step must be at least 1"}},
		{"step 60 for minutes", "*/60 * * * *", "", []string{`minute field "*/60"`, "step 60 is too large for range 0-59"}},
		{"step 24 for hours", "0 */24 * * *", "", []string{`hour field "*/24"`, "step 24 is too large"}},
		{"step not a number", "*/x * * * *", "", []string{`minute field "*/x"`, `step "x" is not a number`}},
		{"two steps", "*/2/3 * * * *", "", []string{`too many '/'`}},
		{"30 February", "0 0 30 2 *", "", []string{"never fires within 5 years"}},
		{"31st of 30-day months", "0 0 31 4,6,9,11 *", "", []string{"never fires within 5 years"}},
		{"minute 61", "61 * * * *", "", []string{`minute field "61"`, "value 61 out of range 0-59"}},
		{"hour 24", "0 24 * * *", "", []string{`hour field "24"`, "value 24 out of range 0-23"}},
		{"day 0", "0 0 0 * *", "", []string{`day-of-month field "0"`, "value 0 out of range 1-31"}},
		{"month 13", "0 0 * 13 *", "", []string{`month field "13"`, "out of range 1-12"}},
		{"weekday 8", "0 0 * * 8", "", []string{`day-of-week field "8"`, "out of range 0-7"}},
		{"second 60", "60 * * * * *", "", []string{`second field "60"`, "out of range 0-59"}},
		{"bad month name", "0 0 * foo *", "", []string{`month field "foo"`, `invalid value "foo"`}},
		{"garbage", "garbage", "", []string{"expected 5 fields", "got 1"}},
		{"four fields", "* * * *", "", []string{"got 4"}},
		{"seven fields", "0 0 0 1 1 * 2030", "", []string{"got 7"}},
		{"empty list item", "1,,2 * * * *", "", []string{`minute field "1,,2"`, "empty list item"}},
		{"trailing comma", "0 1, * * *", "", []string{`hour field "1,"`, "empty list item"}},
		{"negative", "-5 * * * *", "", []string{`minute field "-5"`, "incomplete range"}},
		{"open range", "5- * * * *", "", []string{"incomplete range"}},
		{"reversed range", "5-1 * * * *", "", []string{"range 5-1: start is after end"}},
		{"double range", "1-2-3 * * * *", "", []string{`invalid value "2-3"`}},
		{"plus sign", "+5 * * * *", "", []string{`invalid value "+5"`}},
		{"question mark in minutes", "? * * * *", "", []string{`minute field "?"`, `"?" is only allowed`}},
		{"quartz L", "0 0 L * *", "", []string{`day-of-month field "L"`, `invalid value "L"`}},
		{"quartz #", "0 0 * * MON#2", "", []string{`day-of-week field "MON#2"`}},
		{"jenkins H", "H * * * *", "", []string{`minute field "H"`}},
		{"huge number", strings.Repeat("9", 40) + " * * * *", "", []string{"out of range 0-59"}},
		{"NUL byte", "\x00 * * * *", "", []string{"minute field", "invalid value"}},
		{"very long", strings.Repeat("* ", 600), "", []string{"expression too long (1200 bytes, at most 1024)"}},
		{"@every without duration", "@every", "", []string{"@every needs exactly one duration"}},
		{"@every zero", "@every 0s", "", []string{"must be at least 1s"}},
		{"@every sub-second", "@every 500ms", "", []string{"must be at least 1s"}},
		{"@every fractional", "@every 1.5s", "", []string{"whole number of seconds"}},
		{"@every negative", "@every -1m", "", []string{"must be at least 1s"}},
		{"@every too long", "@every 100000h", "", []string{"must be at most 43800h"}},
		{"@every garbage", "@every banana", "", []string{`invalid duration "banana"`}},
		{"@every two args", "@every 1m 2m", "", []string{"exactly one duration"}},
		{"descriptor with args", "@daily 5", "", []string{"@daily takes no arguments"}},
		{"unknown descriptor", "@reboot", "", []string{`unknown descriptor "@reboot"`}},
		{"unknown tz", "* * * * *", "Mars/Olympus", []string{`timezone "Mars/Olympus": unknown time zone`}},
		{"tz Local", "* * * * *", "Local", []string{`timezone "Local"`, "IANA name"}},
		{"tz path traversal", "* * * * *", "../../etc/passwd", []string{"unknown time zone"}},
		{"tz with spaces", "* * * * *", " UTC", []string{"unknown time zone"}},
		{"tz too long", "* * * * *", strings.Repeat("A", 100), []string{"name too long"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			s, err := Parse(tc.expr, tc.tz)
			require.Less(t, time.Since(start), 100*time.Millisecond)
			require.Nil(t, s)
			require.ErrorIs(t, err, ErrInvalidCron)
			msg := err.Error()
			require.True(t, strings.HasPrefix(msg, "cron: invalid schedule: "), msg)
			for _, want := range tc.wantMsg {
				require.Contains(t, msg, want)
			}
			require.Less(t, len(msg), 400, "messages quote at most a prefix of the input")
		})
	}
}

func TestParseIsFast(t *testing.T) {
	for _, expr := range []string{
		"0 0 29 2 *", "0 0 30 2 *", "* * * * * *", "59 59 23 31 12 *",
		"0 0 31 2,4,6,9,11 *", "0 0 29 2 1", strings.Repeat("1,", 300) + "2 * * * *",
	} {
		for _, tz := range []string{"", "America/New_York", "Australia/Lord_Howe"} {
			start := time.Now()
			_, _ = Parse(expr, tz)
			require.Less(t, time.Since(start), 100*time.Millisecond, "%q in %q", expr, tz)
		}
	}
}

func TestZeroAndNil(t *testing.T) {
	var zero Schedule
	require.True(t, zero.Next(time.Now()).IsZero())
	var nilSched *Schedule
	require.True(t, nilSched.Next(time.Now()).IsZero())
	require.Nil(t, Missed(nil, time.Time{}, time.Now(), 1))

	s, err := Parse("* * * * *", "")
	require.NoError(t, err)
	require.True(t, s.Next(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero())
}

func TestConcurrentUse(t *testing.T) {
	s, err := Parse("*/5 * * * *", "Europe/Berlin")
	require.NoError(t, err)
	from := time.Date(2026, 10, 24, 0, 0, 0, 0, time.UTC)
	want := s.Next(from)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if got := s.Next(from); !got.Equal(want) {
					t.Errorf("got %s, want %s", got, want)
				}
				_ = Missed(s, from, from.Add(time.Hour), 3)
			}
		})
	}
	wg.Wait()
}

func TestErrorsIsNotConfusedWithOtherErrors(t *testing.T) {
	_, err := Parse("61 * * * *", "")
	require.False(t, errors.Is(err, errors.New("cron: invalid schedule")))
	require.ErrorIs(t, fmt.Errorf("outer: %w", err), ErrInvalidCron)
}

func ExampleParse() {
	s, err := Parse("30 1 * * *", "America/New_York")
	if err != nil {
		panic(err)
	}
	ny, _ := time.LoadLocation("America/New_York")
	t := time.Date(2026, 10, 31, 12, 0, 0, 0, time.UTC)
	for range 3 {
		t = s.Next(t)
		fmt.Println(t.Format(time.RFC3339), t.In(ny).Format("15:04 MST"))
	}
	// Output:
	// 2026-11-01T05:30:00Z 01:30 EDT
	// 2026-11-02T06:30:00Z 01:30 EST
	// 2026-11-03T06:30:00Z 01:30 EST
}

func ExampleMissed() {
	s, err := Parse("0 * * * *", "")
	if err != nil {
		panic(err)
	}
	last := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	now := time.Date(2026, 5, 1, 14, 30, 0, 0, time.UTC)
	fmt.Println(Missed(s, last, now, 0))
	fmt.Println(Missed(s, last, now, 1))
	fmt.Println(s.Next(now))
	// Output:
	// []
	// [2026-05-01 14:00:00 +0000 UTC]
	// 2026-05-01 15:00:00 +0000 UTC
}

// TestParseFiveYearWindow pins that "fires within 5 years" is measured
// from the time of parsing.
func TestParseFiveYearWindow(t *testing.T) {
	defer func(old func() time.Time) { nowFunc = old }(nowFunc)

	nowFunc = func() time.Time { return time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC) }
	_, err := Parse("0 0 29 2 *", "")
	require.NoError(t, err, "next 29 February is 2028")

	nowFunc = func() time.Time { return time.Date(2097, 3, 1, 0, 0, 0, 0, time.UTC) }
	_, err = Parse("0 0 29 2 *", "")
	require.ErrorIs(t, err, ErrInvalidCron, "next 29 February is 2104")
	require.Contains(t, err.Error(), "never fires within 5 years")
}

func BenchmarkParse(b *testing.B) {
	for b.Loop() {
		if _, err := Parse("*/15 9-17 * * mon-fri", "America/New_York"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkNext(b *testing.B) {
	s, err := Parse("30 2 * * *", "America/New_York")
	if err != nil {
		b.Fatal(err)
	}
	at := time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC)
	for b.Loop() {
		at = s.Next(at)
	}
}

func BenchmarkMissedEverySecondLongDowntime(b *testing.B) {
	s, err := Parse("* * * * * *", "Europe/Berlin")
	if err != nil {
		b.Fatal(err)
	}
	last := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for b.Loop() {
		_ = Missed(s, last, now, 1)
	}
}

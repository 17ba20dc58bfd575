package cron

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// bruteFires computes the fire times of a minute-granularity schedule in
// [from, to) straight from the policy in the package doc, by stepping
// through every UTC minute. It shares only the field bit sets with the code
// under test. The window must contain at most one UTC-offset transition and
// start well before it.
func bruteFires(s *Schedule, from, to time.Time) []time.Time {
	matches := func(w time.Time) bool {
		return has(s.month, int(w.Month())) && s.dayMatches(w) &&
			has(s.hour, w.Hour()) && has(s.minute, w.Minute()) && has(s.second, w.Second())
	}
	_, offBefore := from.In(s.loc).Zone()

	set := map[time.Time]bool{}
	seenWalls := map[time.Time]bool{}
	var firstWall, lastWall time.Time
	for u := from; u.Before(to); u = u.Add(time.Minute) {
		lu := u.In(s.loc)
		w := time.Date(lu.Year(), lu.Month(), lu.Day(), lu.Hour(), lu.Minute(), lu.Second(), 0, time.UTC)
		if firstWall.IsZero() {
			firstWall = w
		}
		lastWall = w
		repeated := seenWalls[w]
		seenWalls[w] = true
		if !matches(w) {
			continue
		}
		if s.realTime || !repeated {
			set[u] = true
		}
	}
	if !s.realTime {
		// Wall-clock times that never happened fire shifted: interpreted
		// with the offset in effect before the transition.
		for w := firstWall; w.Before(lastWall); w = w.Add(time.Minute) {
			if !seenWalls[w] && matches(w) {
				set[w.Add(-time.Duration(offBefore)*time.Second)] = true
			}
		}
	}
	out := make([]time.Time, 0, len(set))
	for u := range set {
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

// TestNextMatchesBruteForce checks Next and the backward search against the
// brute-force oracle around real transitions in zones with 1-hour, 30-minute,
// midnight and whole-day changes.
func TestNextMatchesBruteForce(t *testing.T) {
	windows := []struct {
		tz  string
		day string // local date of the transition
	}{
		{"America/New_York", "2026-03-08"},
		{"America/New_York", "2026-11-01"},
		{"Europe/Berlin", "2026-03-29"},
		{"Europe/Berlin", "2026-10-25"},
		{"Australia/Lord_Howe", "2026-04-05"}, // 02:00 -> 01:30
		{"Australia/Lord_Howe", "2026-10-04"}, // 02:00 -> 02:30
		{"America/Santiago", "2026-04-04"},    // 24:00 -> 23:00
		{"America/Santiago", "2026-09-06"},    // 00:00 -> 01:00
		{"America/Havana", "2026-03-08"},      // 00:00 -> 01:00
		{"Pacific/Apia", "2011-12-30"},        // the whole day was skipped
		{"Asia/Kolkata", "2026-06-01"},        // no transition
		{"UTC", "2026-06-01"},
		{"America/New_York", "2050-11-06"}, // beyond the explicit table
		{"Europe/Berlin", "2040-12-31"},    // golang/go#81583 (leap year, rule era)
		{"Australia/Sydney", "2096-12-31"}, // same, DST in effect over New Year
	}
	exprs := []string{
		"30 2 * * *", "30 1 * * *", "0 2 * * *", "59 1 * * *", "0 0 * * *",
		"30 23 * * *", "30 0 * * *", "15,45 1-3 * * *", "0 0,12 * * *", "45 0 * * 6,0",
		"0 9 30 12 *", "*/15 * * * *", "0 * * * *", "*/7 * * * *", "* 2 * * *",
		"*/20 0-3 * * *", "0 0-23 * * *", "10 */2 * * *", "@hourly", "@daily",
	}
	nonEmpty := 0
	defer func() { require.Greater(t, nonEmpty, len(windows)*(len(exprs)-1)-1) }()
	for _, win := range windows {
		for _, expr := range exprs {
			t.Run(win.tz+" "+win.day+" "+expr, func(t *testing.T) {
				s, err := Parse(expr, win.tz)
				require.NoError(t, err)
				day, err := time.ParseInLocation("2006-01-02", win.day, s.loc)
				require.NoError(t, err)
				from, to := day.Add(-36*time.Hour).UTC(), day.Add(60*time.Hour).UTC()
				want := bruteFires(s, from, to)
				// Compare away from the window's edges.
				lo, hi := from.Add(12*time.Hour), to.Add(-12*time.Hour)
				want = slices.DeleteFunc(want, func(u time.Time) bool { return !u.After(lo) || u.After(hi) })

				got := []time.Time{}
				for u := s.Next(lo); !u.After(hi); u = s.Next(u) {
					require.False(t, u.IsZero())
					got = append(got, u)
				}
				require.Equal(t, want, got, "forward")
				if len(want) > 0 {
					nonEmpty++
				}

				back := []time.Time{}
				for u := s.prevAtOrBefore(hi); u.After(lo); u = s.prevAtOrBefore(u.Add(-time.Second)) {
					back = append(back, u)
				}
				slices.Reverse(back)
				require.Equal(t, want, back, "backward")
			})
		}
	}
}

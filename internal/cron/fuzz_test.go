package cron

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// fuzzSeeds are taken from the other tests. The same inputs are in
// testdata/fuzz/FuzzParse so that the corpus survives without this list.
var fuzzSeeds = []struct{ expr, tz string }{
	{"* * * * *", ""},
	{"*/15 * * * *", "America/New_York"},
	{"0 * * * *", "Europe/Berlin"},
	{"30 2 * * *", "America/New_York"},
	{"30 1 * * *", "America/New_York"},
	{"30 2 * * *", "Europe/Berlin"},
	{"15 2 * * *", "Australia/Lord_Howe"},
	{"0 9 * * mon-FRI", "Asia/Kolkata"},
	{"30 4 1 * mon", ""},
	{"0 12 1 jan-mar/2 *", ""},
	{"0 12 ? * ?", ""},
	{"5-10/5 * * * *", ""},
	{"0 0 31 * *", ""},
	{"0 0 29 2 *", ""},
	{"*/20 * * * * *", ""},
	{"0-59/30 5 * * * *", "UTC"},
	{"0 0 0 * * 7", ""},
	{"@hourly", "America/New_York"},
	{"@daily", "America/Santiago"},
	{"@weekly", ""},
	{"@monthly", ""},
	{"@yearly", ""},
	{"@every 90m", ""},
	{"@every 1s", "Europe/Berlin"},
	{"", ""},
	{"TZ=", ""},
	{"TZ= ", ""},
	{"CRON_TZ=UTC * * * * *", ""},
	{"*/0 * * * *", ""},
	{"15/0 * * * * *", ""},
	{"*/60 * * * *", ""},
	{"0 0 30 2 *", ""},
	{"0 0 31 4,6,9,11 *", ""},
	{"61 * * * *", ""},
	{"garbage", ""},
	{"1,,2 * * * *", ""},
	{"-5 * * * *", ""},
	{"5-1 * * * *", ""},
	{"0 0 L * *", ""},
	{"H * * * *", ""},
	{"@every 500ms", ""},
	{"@every 100000h", ""},
	{"@reboot", ""},
	{strings.Repeat("9", 40) + " * * * *", ""},
	{strings.Repeat("* ", 600), ""},
	{"* * * * *", "Mars/Olympus"},
	{"* * * * *", "Local"},
	{"* * * * *", "../../etc/passwd"},
}

// fuzzSamples are the times Next is checked at for accepted schedules.
var fuzzSamples = []time.Time{
	time.Date(2026, 3, 8, 6, 59, 59, 0, time.UTC),           // NY spring-forward
	time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC),           // NY fall-back, first pass
	time.Date(2026, 11, 1, 6, 10, 0, 0, time.UTC),           // NY fall-back, second pass
	time.Date(2026, 10, 25, 0, 59, 59, 0, time.UTC),         // Berlin fall-back
	time.Date(2026, 6, 15, 12, 34, 56, 789000000, time.UTC), // fractional second
	time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC),
	time.Date(2096, 3, 1, 0, 0, 0, 0, time.UTC), // next 29 February is in 2104
	time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC),
}

func FuzzParse(f *testing.F) {
	for _, seed := range fuzzSeeds {
		f.Add(seed.expr, seed.tz)
	}
	f.Fuzz(func(t *testing.T, expr, tz string) {
		type result struct {
			s        *Schedule
			err      error
			panicked any
		}
		done := make(chan result, 1)
		go func() {
			defer func() {
				if r := recover(); r != nil {
					done <- result{panicked: r}
				}
			}()
			s, err := Parse(expr, tz)
			if err == nil {
				// Next must be quick too.
				for _, at := range fuzzSamples {
					_ = s.Next(at)
				}
			}
			done <- result{s: s, err: err}
		}()
		var r result
		select {
		case r = <-done:
		case <-time.After(time.Second):
			t.Fatalf("Parse(%q, %q) did not finish within 1s", expr, tz)
		}
		if r.panicked != nil {
			t.Fatalf("Parse(%q, %q) panicked: %v", expr, tz, r.panicked)
		}
		if r.err != nil {
			if !errors.Is(r.err, ErrInvalidCron) {
				t.Fatalf("Parse(%q, %q) error does not wrap ErrInvalidCron: %v", expr, tz, r.err)
			}
			if r.s != nil {
				t.Fatalf("Parse(%q, %q) returned a schedule and an error", expr, tz)
			}
			return
		}
		s := r.s
		if s.String() != expr {
			t.Fatalf("String() = %q, want %q", s.String(), expr)
		}
		for _, at := range fuzzSamples {
			next := s.Next(at)
			if !next.After(at) {
				t.Fatalf("Parse(%q, %q).Next(%s) = %s, not after", expr, tz, at, next)
			}
			// next is the first fire after at: nothing lies in between, and
			// the backward search agrees.
			if p := s.prevAtOrBefore(next.Add(-time.Second)); !p.IsZero() && p.After(at) {
				t.Fatalf("Parse(%q, %q): fire %s lies between %s and Next = %s", expr, tz, p, at, next)
			}
			if m := Missed(s, at, next, 1); len(m) != 1 || !m[0].Equal(next) {
				t.Fatalf("Parse(%q, %q): Missed(%s, %s, 1) = %v, want [%s]", expr, tz, at, next, m, next)
			}
		}
	})
}

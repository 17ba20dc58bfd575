package cron

import (
	"math/bits"
	"slices"
	"time"
)

const (
	// searchYears bounds how far Next and the backward search look. It is
	// larger than the 8-year gap between some 29 February dates (2096 → 2104).
	searchYears = 10
	// maxPeriods and maxSteps are safety nets on top of the time bounds.
	maxPeriods = 4 * 12 * searchYears
	maxSteps   = 1 << 20
	// minYear and maxYear bound the inputs for which Next computes anything;
	// outside them it returns the zero Time.
	minYear = 1
	maxYear = 9999
)

// Next returns the first fire time strictly after after, in UTC. See the
// package documentation for the DST policy.
//
// Next returns the zero Time if the schedule does not fire within 10 years
// after after (possible only for 29 February schedules near the year 2100),
// if after is outside the years 1-9999, or if s was not built by Parse.
func (s *Schedule) Next(after time.Time) time.Time {
	if s == nil || !inRange(after) {
		return time.Time{}
	}
	return s.nextAtOrAfter(after.UTC().Truncate(time.Second).Add(time.Second))
}

// Missed returns the fire times of s in the window (last, now], oldest first,
// in UTC, keeping only the catchUp most recent ones. A scheduler calls it
// after downtime to decide what to enqueue before resuming with s.Next(now).
//
// If catchUp is 0 (or negative), Missed returns nil: missed fires are skipped
// and the caller resumes at the next future fire. Callers use 1 by default:
// one catch-up run, then resume. The search runs backward from now, so its
// cost depends on catchUp, not on how long the downtime was. It looks back at
// most 10 years.
func Missed(s *Schedule, last, now time.Time, catchUp int) []time.Time {
	if s == nil || catchUp <= 0 || !now.After(last) || !inRange(now) {
		return nil
	}
	var out []time.Time
	t := s.prevAtOrBefore(now.UTC().Truncate(time.Second))
	for !t.IsZero() && t.After(last) && len(out) < catchUp {
		out = append(out, t)
		t = s.prevAtOrBefore(t.Add(-time.Second))
	}
	slices.Reverse(out)
	return out
}

func inRange(t time.Time) bool {
	y := t.UTC().Year()
	return y >= minYear && y <= maxYear
}

// nextAtOrAfter returns the first fire time u with u >= t (t a whole UTC
// second), or the zero Time.
//
// It walks the zone's periods of constant UTC offset, starting with the one
// containing t. Inside a period, local wall-clock time is UTC plus a constant,
// so the search runs on "naive" wall-clock times (time.Time values in UTC
// whose fields are the local wall clock) with no DST in the way. The DST
// policy is applied at period starts:
//   - fall-back (the previous offset is larger): a fixed-time schedule skips
//     wall-clock times already seen in the previous period;
//   - spring-forward (the previous offset is smaller): a fixed-time schedule
//     also fires for wall-clock times in the gap, at wall time minus the
//     previous offset (shifted forward by the gap).
func (s *Schedule) nextAtOrAfter(t time.Time) time.Time {
	if s.every > 0 {
		return s.everyAtOrAfter(t)
	}
	if s.second == 0 || s.loc == nil {
		return time.Time{}
	}
	limit := t.AddDate(searchYears, 0, 0)
	for range maxPeriods {
		if t.After(limit) {
			break
		}
		off, start, end := zoneAt(t, s.loc)
		wallLimit := naive(limit, off)
		if !end.IsZero() {
			if e := naive(end, off).Add(-time.Second); e.Before(wallLimit) {
				wallLimit = e
			}
		}
		prevOff, hasPrev := s.previousOffset(start)

		var best time.Time
		from := naive(t, off)
		if !s.realTime && hasPrev && prevOff > off {
			// Fall-back: wall times before repeatEnd were already seen.
			if repeatEnd := naive(start, prevOff); from.Before(repeatEnd) {
				from = repeatEnd
			}
		}
		if w, ok := s.nextWall(from, wallLimit); ok {
			best = instant(w, off)
		}
		if !s.realTime && hasPrev && prevOff < off {
			// Spring-forward: wall times [start+prevOff, start+off) never
			// happened; they fire at w - prevOff, in [start, start+gap).
			gapLast := naive(start, off).Add(-time.Second)
			if w, ok := s.nextWall(naive(t, prevOff), gapLast); ok {
				if u := instant(w, prevOff); best.IsZero() || u.Before(best) {
					best = u
				}
			}
		}
		if !best.IsZero() {
			return best
		}
		if end.IsZero() || !end.After(t) {
			break
		}
		t = ceilSecond(end)
	}
	return time.Time{}
}

// prevAtOrBefore returns the last fire time u with u <= t (t a whole UTC
// second), or the zero Time. It mirrors nextAtOrAfter.
func (s *Schedule) prevAtOrBefore(t time.Time) time.Time {
	if s.every > 0 {
		return s.everyAtOrBefore(t)
	}
	if s.second == 0 || s.loc == nil {
		return time.Time{}
	}
	limit := t.AddDate(-searchYears, 0, 0)
	for range maxPeriods {
		if t.Before(limit) {
			break
		}
		off, start, _ := zoneAt(t, s.loc)
		wallLow := naive(limit, off)
		if !start.IsZero() {
			if s0 := naive(start, off); s0.After(wallLow) {
				wallLow = s0
			}
		}
		prevOff, hasPrev := s.previousOffset(start)
		if !s.realTime && hasPrev && prevOff > off {
			// Fall-back: wall times before repeatEnd belong to the
			// previous period (their first occurrence).
			if repeatEnd := naive(start, prevOff); repeatEnd.After(wallLow) {
				wallLow = repeatEnd
			}
		}

		var best time.Time
		if w, ok := s.prevWall(naive(t, off), wallLow); ok {
			best = instant(w, off)
		}
		if !s.realTime && hasPrev && prevOff < off {
			// Spring-forward gap, fired shifted (see nextAtOrAfter).
			high := naive(t, prevOff)
			if gapLast := naive(start, off).Add(-time.Second); gapLast.Before(high) {
				high = gapLast
			}
			if w, ok := s.prevWall(high, naive(start, prevOff)); ok {
				if u := instant(w, prevOff); best.IsZero() || u.After(best) {
					best = u
				}
			}
		}
		if !best.IsZero() {
			return best
		}
		if start.IsZero() || !start.Before(t.Add(time.Second)) {
			break
		}
		t = start.Add(-time.Nanosecond).Truncate(time.Second)
	}
	return time.Time{}
}

// previousOffset returns the UTC offset in effect just before start, the
// beginning of a zone period; ok is false if the period has no beginning.
func (s *Schedule) previousOffset(start time.Time) (off int, ok bool) {
	if start.IsZero() {
		return 0, false
	}
	off, _, _ = zoneAt(start.Add(-time.Nanosecond), s.loc)
	return off, true
}

// everyAtOrAfter returns the first multiple of s.every since the Unix epoch
// at or after t.
func (s *Schedule) everyAtOrAfter(t time.Time) time.Time {
	d := int64(s.every / time.Second)
	sec := t.Unix()
	q := sec / d
	if sec%d != 0 && sec > 0 {
		q++
	}
	return time.Unix(q*d, 0).UTC()
}

// everyAtOrBefore returns the last multiple of s.every since the Unix epoch
// at or before t.
func (s *Schedule) everyAtOrBefore(t time.Time) time.Time {
	d := int64(s.every / time.Second)
	sec := t.Unix()
	q := sec / d
	if sec%d != 0 && sec < 0 {
		q--
	}
	return time.Unix(q*d, 0).UTC()
}

// zoneAt returns the UTC offset (seconds) in effect at u in loc, and the
// bounds of that zone period (zero Times if unbounded).
//
// It works around golang/go#81583: for years served by the TZif footer rule
// (after the last explicit transition, 2037 in the bundled tzdata),
// ZoneBounds ends every period that reaches the end of a leap year at 00:00
// UTC on 31 December, up to a day before u. The offset really stays the same
// until the next UTC year starts, where Go reports an artificial boundary
// with the same offset on both sides.
func zoneAt(u time.Time, loc *time.Location) (off int, start, end time.Time) {
	lu := u.In(loc)
	_, off = lu.Zone()
	start, end = lu.ZoneBounds()
	if !end.IsZero() && !end.After(u) {
		end = time.Date(u.UTC().Year()+1, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return off, start, end
}

// naive returns the local wall clock of instant u at offset off, as a UTC
// time.Time.
func naive(u time.Time, off int) time.Time {
	return u.UTC().Add(time.Duration(off) * time.Second)
}

// instant is the inverse of naive.
func instant(w time.Time, off int) time.Time {
	return w.Add(-time.Duration(off) * time.Second)
}

func ceilSecond(t time.Time) time.Time {
	if r := t.Truncate(time.Second); !r.Equal(t) {
		return r.Add(time.Second)
	}
	return t
}

// nextWall returns the first naive wall-clock time w with from <= w <= limit
// that matches the cron fields.
func (s *Schedule) nextWall(t, limit time.Time) (time.Time, bool) {
	for range maxSteps {
		if t.After(limit) {
			return time.Time{}, false
		}
		y, mo, d := t.Date()
		h, mi, se := t.Clock()
		switch {
		case !has(s.month, int(mo)):
			if m, ok := nextBit(s.month, int(mo)+1, 12); ok {
				t = wall(y, m, 1, 0, 0, 0)
			} else {
				t = wall(y+1, 1, 1, 0, 0, 0)
			}
		case !s.dayMatches(t):
			t = wall(y, int(mo), d+1, 0, 0, 0)
		case !has(s.hour, h):
			if n, ok := nextBit(s.hour, h+1, 23); ok {
				t = wall(y, int(mo), d, n, 0, 0)
			} else {
				t = wall(y, int(mo), d+1, 0, 0, 0)
			}
		case !has(s.minute, mi):
			if n, ok := nextBit(s.minute, mi+1, 59); ok {
				t = wall(y, int(mo), d, h, n, 0)
			} else {
				t = wall(y, int(mo), d, h+1, 0, 0)
			}
		case !has(s.second, se):
			if n, ok := nextBit(s.second, se+1, 59); ok {
				t = wall(y, int(mo), d, h, mi, n)
			} else {
				t = wall(y, int(mo), d, h, mi+1, 0)
			}
		default:
			return t, true
		}
	}
	return time.Time{}, false
}

// prevWall returns the last naive wall-clock time w with limit <= w <= from
// that matches the cron fields.
func (s *Schedule) prevWall(t, limit time.Time) (time.Time, bool) {
	for range maxSteps {
		if t.Before(limit) {
			return time.Time{}, false
		}
		y, mo, d := t.Date()
		h, mi, se := t.Clock()
		switch {
		case !has(s.month, int(mo)):
			if m, ok := prevBit(s.month, int(mo)-1, 1); ok {
				t = wall(y, m+1, 1, 0, 0, 0).Add(-time.Second)
			} else {
				t = wall(y-1, 12, 31, 23, 59, 59)
			}
		case !s.dayMatches(t):
			t = wall(y, int(mo), d, 0, 0, 0).Add(-time.Second)
		case !has(s.hour, h):
			if n, ok := prevBit(s.hour, h-1, 0); ok {
				t = wall(y, int(mo), d, n, 59, 59)
			} else {
				t = wall(y, int(mo), d, 0, 0, 0).Add(-time.Second)
			}
		case !has(s.minute, mi):
			if n, ok := prevBit(s.minute, mi-1, 0); ok {
				t = wall(y, int(mo), d, h, n, 59)
			} else {
				t = wall(y, int(mo), d, h, 0, 0).Add(-time.Second)
			}
		case !has(s.second, se):
			if n, ok := prevBit(s.second, se-1, 0); ok {
				t = wall(y, int(mo), d, h, mi, n)
			} else {
				t = wall(y, int(mo), d, h, mi, 0).Add(-time.Second)
			}
		default:
			return t, true
		}
	}
	return time.Time{}, false
}

// dayMatches applies crontab(5) day matching: if day-of-month or day-of-week
// is "*", both must match; if both are restricted, either may match.
func (s *Schedule) dayMatches(t time.Time) bool {
	domOK := has(s.dom, t.Day())
	dowOK := has(s.dow, int(t.Weekday()))
	if s.domStar || s.dowStar {
		return domOK && dowOK
	}
	return domOK || dowOK
}

func wall(y, mo, d, h, mi, se int) time.Time {
	return time.Date(y, time.Month(mo), d, h, mi, se, 0, time.UTC)
}

func has(set uint64, v int) bool { return set&(uint64(1)<<uint(v)) != 0 }

// nextBit returns the smallest set bit n with from <= n <= hi.
func nextBit(set uint64, from, hi int) (int, bool) {
	if from > hi || from > 63 {
		return 0, false
	}
	rest := set >> uint(from)
	if rest == 0 {
		return 0, false
	}
	n := from + bits.TrailingZeros64(rest)
	return n, n <= hi
}

// prevBit returns the largest set bit n with lo <= n <= from.
func prevBit(set uint64, from, lo int) (int, bool) {
	if from < lo || from < 0 {
		return 0, false
	}
	if from < 63 {
		set &= uint64(1)<<uint(from+1) - 1
	}
	if set == 0 {
		return 0, false
	}
	n := 63 - bits.LeadingZeros64(set)
	return n, n >= lo
}

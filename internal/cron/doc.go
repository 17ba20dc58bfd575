// Package cron parses cron expressions for skiplock's recurring jobs and
// computes their fire times in a named IANA time zone, with a daylight-saving
// (DST) policy that this package owns.
//
// # Syntax
//
// [Parse] accepts:
//
//   - five fields: minute hour day-of-month month day-of-week;
//   - six fields: a leading seconds field, then the five above;
//   - descriptors: @yearly (alias @annually), @monthly, @weekly, @daily
//     (alias @midnight) and @hourly;
//   - "@every DURATION": a fixed interval in Go duration syntax ("@every 90s",
//     "@every 1h30m"), a whole number of seconds between 1s and 43800h.
//
// A field is a comma-separated list of items. An item is "*", a value, or a
// range "a-b", optionally followed by "/step"; "a/step" means "a-max/step".
// Months accept jan-dec and days of week accept sun-sat (case-insensitive);
// day of week 7 is Sunday, like 0. "?" is accepted as "*" in the
// day-of-month and day-of-week fields. Ranges must not wrap around
// ("22-2" is rejected); a step must be at least 1 and smaller than the number
// of values in its range. When both day-of-month and day-of-week are
// restricted, a day matches if either matches (crontab(5) semantics); when
// either is "*", both must match.
//
// Bits are computed by github.com/netresearch/go-cron (pinned); this package
// validates the text first so that errors name the offending field, and it
// computes fire times itself. Time-zone prefixes ("TZ=", "CRON_TZ=") are
// rejected: pass the zone as Parse's tz argument instead. Every error from
// Parse wraps [ErrInvalidCron].
//
// # Time zones and DST
//
// Cron fields are matched against the wall clock of the schedule's zone.
// Where the wall clock is ambiguous, the schedule's kind decides:
//
// A fixed-time schedule is one whose seconds, minute and hour fields are all
// written without a leading "*" and whose hour field does not cover all 24
// hours: "30 2 * * *", "0 9 * * 1-5", "0,30 1 * * *", @daily, @weekly,
// @monthly, @yearly. It fires once for each wall-clock time it names:
//
//   - Spring forward: a wall-clock time skipped by the transition fires once,
//     shifted forward by the length of the gap. "30 2 * * *" in
//     America/New_York on 2026-03-08 fires at 03:30 EDT (07:30 UTC). If the
//     shifted instant is also a regular fire time, it fires once.
//   - Fall back: a wall-clock time that happens twice fires only at its first
//     occurrence. "30 1 * * *" in America/New_York on 2026-11-01 fires at
//     01:30 EDT (05:30 UTC) and not again at 01:30 EST. This is the rule "skip
//     a fire whose local wall-clock time equals the previous fire's", computed
//     without state, so Next gives the same answer wherever it starts.
//
// A wildcard schedule is any other schedule: its seconds, minute or hour field
// starts with "*" ("*/15 * * * *", "0 * * * *", "*/5 1 * * *", "0 */2 * * *"),
// or its hour field covers all 24 hours ("0 0-23 * * *", @hourly). It follows
// real time. It fires at every instant whose local wall clock matches, so
// during fall-back both passes through the repeated hour fire ("0 * * * *"
// fires at 01:00 EDT and again at 01:00 EST, one hour later, keeping an hourly
// beat). Wall-clock times skipped by spring-forward do not fire, so
// "0 * * * *" fires 23 times on a 23-hour day. Nothing is shifted, so no
// off-grid instants appear in zones with 30-minute transitions such as
// Australia/Lord_Howe.
//
// These rules follow ISC/Vixie cron: fixed-time jobs are adjusted, and
// wildcard jobs run on the new time. Whatever the kind, a UTC instant is
// never returned twice: Next is strictly increasing.
//
// "@every" schedules are fixed intervals of real time. They fire at the UTC
// instants that are whole multiples of the interval since the Unix epoch
// ("@every 1h" fires on the hour in UTC, "@every 90m" at 00:00, 01:30,
// 03:00 UTC and so on). The time zone and DST do not affect them. The fire
// times do not depend on when Next is called, so leaders that compute them
// independently agree.
//
// # Use by the scheduler
//
// Every schedule is a fixed set of UTC instants. [Schedule.Next] returns the
// first one strictly after a time, and [Missed] returns the most recent ones
// in a window. A leader can therefore enqueue each fire under the unique key
// (schedule name, fire time in UTC): after a failover, the new leader
// computes the same instants.
package cron

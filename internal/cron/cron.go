package cron

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	// Embed the IANA time-zone database so that Parse can load zones in
	// minimal containers that lack /usr/share/zoneinfo.
	_ "time/tzdata"

	nrcron "github.com/netresearch/go-cron"
)

// ErrInvalidCron is wrapped by every error [Parse] returns. Test for it with
// errors.Is. The wrapping error's message names the expression or time zone
// and the problem, for example:
//
//	cron: invalid schedule: expression "*/0 * * * *": minute field "*/0": step must be at least 1
//	cron: invalid schedule: timezone "Mars/Olympus": unknown time zone
var ErrInvalidCron = errors.New("cron: invalid schedule")

const (
	// maxExprLen bounds the accepted expression length (the same limit
	// netresearch/go-cron applies).
	maxExprLen = 1024
	// maxTZLen bounds the accepted time-zone name length; IANA names are
	// far shorter.
	maxTZLen = 64
	// maxEvery is the longest accepted @every interval (5 × 365 days).
	maxEvery = 5 * 365 * 24 * time.Hour
	// mustFireWithinYears is how far ahead Parse searches for a first fire
	// time; schedules that do not fire in that window are rejected.
	mustFireWithinYears = 5
	// quoteLimit bounds how much of a rejected expression is quoted in an
	// error message.
	quoteLimit = 80
)

// starBit is the bit netresearch/go-cron (spec.go) sets on a field written
// as "*" or "?". Only the day-of-month and day-of-week flags are used, to
// choose between AND and OR matching (crontab(5) semantics). The tests
// pin the behaviour.
const starBit = uint64(1) << 63

// Field masks: the valid bit positions of each field.
const (
	mask60    = uint64(1)<<60 - 1        // seconds, minutes: 0-59
	mask24    = uint64(1)<<24 - 1        // hours: 0-23
	maskDom   = (uint64(1)<<32 - 1) &^ 1 // days of month: 1-31
	maskMonth = (uint64(1)<<13 - 1) &^ 1 // months: 1-12
	maskDow   = uint64(1)<<7 - 1         // days of week: 0-6 (7 is folded into 0)
)

// nowFunc is the clock used by Parse for the "fires within 5 years" check.
var nowFunc = time.Now

// specParser builds the bit sets. The field count is always six here:
// Parse validates the text and adds a seconds field when it is missing.
// DowOrDom selects crontab(5) OR-matching of day-of-month and day-of-week.
var specParser = nrcron.MustNewParser(
	nrcron.Second | nrcron.Minute | nrcron.Hour | nrcron.Dom | nrcron.Month | nrcron.Dow | nrcron.DowOrDom,
)

// Schedule is a parsed cron expression or @every interval bound to a time
// zone. Build one with [Parse]. A Schedule is immutable and safe for
// concurrent use. See the package documentation for how it treats DST.
type Schedule struct {
	expr string
	loc  *time.Location

	// every is the @every interval, or zero for a cron expression.
	every time.Duration

	// Bit sets for cron expressions (bit n set = value n allowed).
	second, minute, hour, dom, month, dow uint64
	// domStar/dowStar: the field was "*" or "?" (selects AND vs OR).
	domStar, dowStar bool
	// realTime marks a wildcard schedule (see the package doc); when
	// false the schedule is fixed-time and gets the wall-clock DST policy.
	realTime bool
}

// fieldDef describes one cron field for validation.
type fieldDef struct {
	name     string
	min, max int
	names    map[string]int
	question bool // "?" allowed (as "*")
}

var (
	secondField = fieldDef{name: "second", min: 0, max: 59}
	minuteField = fieldDef{name: "minute", min: 0, max: 59}
	hourField   = fieldDef{name: "hour", min: 0, max: 23}
	domField    = fieldDef{name: "day-of-month", min: 1, max: 31, question: true}
	monthField  = fieldDef{name: "month", min: 1, max: 12, names: map[string]int{
		"jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6,
		"jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12,
	}}
	dowField = fieldDef{name: "day-of-week", min: 0, max: 7, question: true, names: map[string]int{
		"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6,
	}}
	sixFields = [6]fieldDef{secondField, minuteField, hourField, domField, monthField, dowField}
)

// descriptors maps the @-descriptors (except @every) to six-field
// expressions.
var descriptors = map[string]string{
	"@yearly":   "0 0 0 1 1 *",
	"@annually": "0 0 0 1 1 *",
	"@monthly":  "0 0 0 1 * *",
	"@weekly":   "0 0 0 * * 0",
	"@daily":    "0 0 0 * * *",
	"@midnight": "0 0 0 * * *",
	"@hourly":   "0 0 * * * *",
}

// Parse parses a cron expression and binds it to the IANA time zone tz (""
// means UTC).
//
// expr is five fields (minute hour day-of-month month day-of-week), six fields
// (a leading seconds field), a descriptor (@yearly, @annually, @monthly,
// @weekly, @daily, @midnight, @hourly) or "@every DURATION" with a duration of
// whole seconds between 1s and 43800h. Leading and trailing white space is
// ignored. The zone must be given in tz; a "TZ=" or "CRON_TZ=" prefix in expr
// is rejected, and so is tz "Local", which depends on the machine.
//
// Parse rejects an expression that would not fire within 5 years of now, such
// as "0 0 30 2 *". Its search is bounded, so it returns quickly for any input.
// Every error wraps [ErrInvalidCron].
func Parse(expr string, tz string) (s *Schedule, err error) {
	defer func() {
		// The validation below should make a panic in the dependency
		// impossible, but robfig-family parsers have panicked on odd input
		// before; never let that escape.
		if r := recover(); r != nil {
			s = nil
			err = exprError(expr, fmt.Sprintf("internal parser error: %v", r))
		}
	}()

	loc, err := loadZone(tz)
	if err != nil {
		return nil, err
	}

	if len(expr) > maxExprLen {
		return nil, exprError(expr, fmt.Sprintf("expression too long (%d bytes, at most %d)", len(expr), maxExprLen))
	}
	text := strings.TrimSpace(expr)
	if text == "" {
		return nil, exprError(expr, "empty expression")
	}
	upper := strings.ToUpper(text)
	for _, prefix := range []string{"TZ=", "CRON_TZ="} {
		if strings.HasPrefix(upper, prefix) {
			return nil, exprError(expr, fmt.Sprintf(
				"time-zone prefix %q is not supported in the expression; pass the zone as Parse's tz argument",
				text[:len(prefix)]))
		}
	}

	s = &Schedule{expr: expr, loc: loc}
	if strings.HasPrefix(text, "@") {
		fields := strings.Fields(text)
		name := strings.ToLower(fields[0])
		if name == "@every" {
			if len(fields) != 2 {
				return nil, exprError(expr, `@every needs exactly one duration, e.g. "@every 5m"`)
			}
			d, err := parseEvery(fields[1])
			if err != nil {
				return nil, exprError(expr, err.Error())
			}
			s.every = d
			return s, nil
		}
		six, ok := descriptors[name]
		if !ok {
			return nil, exprError(expr, fmt.Sprintf(
				"unknown descriptor %q (want @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every)", fields[0]))
		}
		if len(fields) != 1 {
			return nil, exprError(expr, fmt.Sprintf("descriptor %s takes no arguments", fields[0]))
		}
		text = six
	}

	fields := strings.Fields(text)
	switch len(fields) {
	case 5:
		fields = append([]string{"0"}, fields...)
	case 6:
	default:
		return nil, exprError(expr, fmt.Sprintf(
			"expected 5 fields (minute hour day-of-month month day-of-week) or 6 (with leading seconds), got %d", len(fields)))
	}
	for i, def := range sixFields {
		if err := validateField(def, fields[i]); err != nil {
			return nil, exprError(expr, fmt.Sprintf("%s field %q: %v", def.name, fields[i], err))
		}
	}

	if err := s.setBits(fields); err != nil {
		return nil, exprError(expr, err.Error())
	}

	now := nowFunc().UTC()
	first := s.nextAtOrAfter(now.Truncate(time.Second).Add(time.Second))
	if first.IsZero() || first.After(now.AddDate(mustFireWithinYears, 0, 0)) {
		return nil, exprError(expr, fmt.Sprintf(
			"never fires within %d years (impossible day-of-month/month combination?)", mustFireWithinYears))
	}
	return s, nil
}

// setBits builds the bit sets from six validated fields with
// netresearch/go-cron and decides whether the schedule is a wildcard one.
func (s *Schedule) setBits(fields []string) error {
	parsed, err := specParser.Parse(strings.Join(fields, " "))
	if err != nil {
		return fmt.Errorf("rejected by parser: %v", err)
	}
	spec, ok := parsed.(*nrcron.SpecSchedule)
	if !ok {
		return fmt.Errorf("unexpected schedule type %T", parsed)
	}
	if len(spec.DomConstraints) > 0 || len(spec.DowConstraints) > 0 || spec.Year != nil {
		return errors.New("unsupported extended syntax")
	}
	s.second = spec.Second & mask60
	s.minute = spec.Minute & mask60
	s.hour = spec.Hour & mask24
	s.dom = spec.Dom & maskDom
	s.month = spec.Month & maskMonth
	dow := spec.Dow
	if dow&(1<<7) != 0 { // Sunday written as 7; netresearch already folds it
		dow |= 1
	}
	s.dow = dow & maskDow
	s.domStar = spec.Dom&starBit != 0
	s.dowStar = spec.Dow&starBit != 0
	if s.second == 0 || s.minute == 0 || s.hour == 0 || s.dom == 0 || s.month == 0 || s.dow == 0 {
		return errors.New("a field matches no values")
	}
	s.realTime = s.hour == mask24 ||
		strings.HasPrefix(fields[0], "*") ||
		strings.HasPrefix(fields[1], "*") ||
		strings.HasPrefix(fields[2], "*")
	return nil
}

// loadZone resolves tz ("" = UTC) to a location.
func loadZone(tz string) (*time.Location, error) {
	if tz == "" {
		return time.UTC, nil
	}
	if len(tz) > maxTZLen {
		return nil, fmt.Errorf("%w: timezone %q: name too long (at most %d bytes)", ErrInvalidCron, quote(tz), maxTZLen)
	}
	if tz == "Local" {
		return nil, fmt.Errorf("%w: timezone %q: the machine's local zone is not allowed; use an IANA name such as \"Europe/Berlin\"", ErrInvalidCron, tz)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("%w: timezone %q: unknown time zone", ErrInvalidCron, tz)
	}
	return loc, nil
}

// parseEvery parses the DURATION of "@every DURATION".
func parseEvery(text string) (time.Duration, error) {
	d, err := time.ParseDuration(text)
	if err != nil {
		return 0, fmt.Errorf("@every: invalid duration %q (want Go syntax such as 90s, 15m or 1h30m)", quote(text))
	}
	switch {
	case d < time.Second:
		return 0, fmt.Errorf("@every: duration %s must be at least 1s", d)
	case d%time.Second != 0:
		return 0, fmt.Errorf("@every: duration %s must be a whole number of seconds", d)
	case d > maxEvery:
		return 0, fmt.Errorf("@every: duration %s must be at most %s", d, maxEvery)
	}
	return d, nil
}

// validateField checks one field's syntax and ranges so that errors can name
// the field and the problem precisely. It is stricter than netresearch/go-cron
// (no empty list items, no wrap-around ranges, no signs).
func validateField(def fieldDef, field string) error {
	for _, item := range strings.Split(field, ",") {
		if item == "" {
			return errors.New("empty list item")
		}
		if err := validateItem(def, item); err != nil {
			return err
		}
	}
	return nil
}

func validateItem(def fieldDef, item string) error {
	rng, stepText, hasStep := strings.Cut(item, "/")
	if strings.Contains(stepText, "/") {
		return fmt.Errorf("too many '/' in %q", item)
	}
	step := 1
	if hasStep {
		n, err := parseNumber(stepText)
		if err != nil {
			return fmt.Errorf("step %q is not a number", quote(stepText))
		}
		if n < 1 {
			return errors.New("step must be at least 1")
		}
		step = n
	}

	var lo, hi int
	switch {
	case rng == "*":
		lo, hi = def.min, def.max
	case rng == "?":
		if !def.question {
			return errors.New(`"?" is only allowed in the day-of-month and day-of-week fields`)
		}
		if hasStep {
			return errors.New(`"?" cannot take a step`)
		}
		lo, hi = def.min, def.max
	default:
		loText, hiText, isRange := strings.Cut(rng, "-")
		if loText == "" || (isRange && hiText == "") {
			return fmt.Errorf("incomplete range %q", quote(rng))
		}
		var err error
		if lo, err = parseValue(def, loText); err != nil {
			return err
		}
		hi = lo
		if isRange {
			if hi, err = parseValue(def, hiText); err != nil {
				return err
			}
			if lo > hi {
				return fmt.Errorf("range %s: start is after end (wrap-around ranges are not supported)", rng)
			}
		} else if hasStep {
			hi = def.max // "a/step" means "a-max/step"
		}
	}
	if size := hi - lo + 1; step > 1 && step >= size {
		return fmt.Errorf("step %d is too large for range %d-%d (at most %d)", step, lo, hi, max(size-1, 1))
	}
	return nil
}

// parseValue parses a number or name in the field's range.
func parseValue(def fieldDef, text string) (int, error) {
	if text == "" {
		return 0, errors.New("missing value")
	}
	if v, ok := def.names[strings.ToLower(text)]; ok {
		return v, nil
	}
	n, err := parseNumber(text)
	if err != nil {
		if def.names != nil {
			return 0, fmt.Errorf("invalid value %q (want %d-%d or a name)", quote(text), def.min, def.max)
		}
		return 0, fmt.Errorf("invalid value %q (want %d-%d)", quote(text), def.min, def.max)
	}
	if n < def.min || n > def.max {
		return 0, fmt.Errorf("value %d out of range %d-%d", n, def.min, def.max)
	}
	return n, nil
}

// parseNumber parses an unsigned decimal number; very long numbers are
// reported as out of range by the caller via a large value.
func parseNumber(text string) (int, error) {
	if text == "" {
		return 0, errors.New("empty")
	}
	for _, c := range []byte(text) {
		if c < '0' || c > '9' {
			return 0, errors.New("not a number")
		}
	}
	if len(text) > 9 {
		return 1 << 30, nil // out of range for every field
	}
	return strconv.Atoi(text)
}

// exprError builds an ErrInvalidCron error about expr.
func exprError(expr, problem string) error {
	return fmt.Errorf("%w: expression %q: %s", ErrInvalidCron, quote(expr), problem)
}

// quote shortens s for error messages.
func quote(s string) string {
	if len(s) <= quoteLimit {
		return s
	}
	return s[:quoteLimit] + "..."
}

// Every returns the interval of an "@every" schedule, or 0 for a cron
// expression.
func (s *Schedule) Every() time.Duration { return s.every }

// String returns the expression exactly as it was passed to [Parse], so that
// Parse(s.String(), tz) with the same tz yields an equivalent schedule. The
// zone is not included.
func (s *Schedule) String() string { return s.expr }

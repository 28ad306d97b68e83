package schedule

import (
	"strconv"
	"strings"
	"time"
	// IANA zones compiled in: a binary in a minimal container (no
	// /usr/share/zoneinfo) still knows Europe/Berlin
	_ "time/tzdata"

	"github.com/robfig/cron/v3"

	"github.com/delayq/delayq/internal/task"
)

// parser reads 5 or 6 fields (leading seconds optional) and descriptors.
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// MinEvery is the shortest @every interval.
const MinEvery = time.Second

// Compiled is a validated spec ready for tick computation.
//
// Tick rules (docs/design.md, "Periodic tasks"):
//   - Cron ticks are whole seconds of wall-clock time in the spec's zone.
//   - A wall-clock time that does not exist (the hour skipped when DST
//     starts) is skipped, not moved.
//   - A wall-clock time that occurs twice (the hour repeated when DST ends)
//     fires once, at its first occurrence, unless the hour field is "*":
//     such a spec (every second, every 5 minutes, hourly, ...) follows
//     elapsed time and fires in both occurrences, as an interval should.
//   - @every d ticks at anchor + k*d on the real clock, unaffected by DST;
//     the anchor is StartAt, or else the unix epoch, so that every
//     scheduler (and every restart) computes the same ticks.
type Compiled struct {
	spec      Spec
	loc       *time.Location
	cron      *cron.SpecSchedule // nil for @every
	everyMS   int64
	anchorMS  int64
	everyHour bool
	tmpl      *task.Task
}

// Compile validates s and prepares its tick computation.
func Compile(s Spec) (*Compiled, error) {
	c := &Compiled{spec: s, loc: time.UTC}
	if s.Timezone != "" {
		if strings.EqualFold(s.Timezone, "local") {
			return nil, invalid("timezone", "%q: name an IANA zone (e.g. Europe/Berlin); the server's local zone is not allowed", s.Timezone)
		}
		loc, err := time.LoadLocation(s.Timezone)
		if err != nil {
			return nil, invalid("timezone", "%q is not an IANA time zone (e.g. Europe/Berlin, America/New_York, UTC)", s.Timezone)
		}
		c.loc = loc
	}
	expr := strings.TrimSpace(s.Cron)
	switch {
	case expr == "":
		return nil, invalid("cron", "is required (e.g. \"*/5 * * * *\", \"0 30 9 * * MON-FRI\", \"@every 10s\", \"@daily\")")
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		return nil, invalid("cron", "set the time zone in the timezone field, not in the expression")
	case strings.HasPrefix(expr, "@every"):
		d, err := time.ParseDuration(strings.TrimSpace(strings.TrimPrefix(expr, "@every")))
		if err != nil {
			return nil, invalid("cron", "%q: @every takes a Go duration (e.g. @every 10s, @every 1h30m)", s.Cron)
		}
		if d < MinEvery || d%time.Millisecond != 0 {
			return nil, invalid("cron", "%q: the interval must be at least %s and whole milliseconds", s.Cron, MinEvery)
		}
		c.everyMS = d.Milliseconds()
		if s.StartAt != nil {
			c.anchorMS = s.StartAt.UnixMilli()
		}
	default:
		sched, err := parser.Parse(expr)
		if err != nil {
			return nil, invalid("cron", "%q: %v", s.Cron, err)
		}
		spec, ok := sched.(*cron.SpecSchedule)
		if !ok {
			return nil, invalid("cron", "%q: not a cron expression", s.Cron)
		}
		cp := *spec
		cp.Location = c.loc
		c.cron = &cp
		c.everyHour = cp.Hour&allHours == allHours
		if _, ok := c.Next(time.Now()); !ok && s.EndAt == nil {
			return nil, invalid("cron", "%q never fires (e.g. a day that no month has)", s.Cron)
		}
	}
	switch s.Catchup {
	case "", CatchupNone, CatchupLast, CatchupAll:
	default:
		return nil, invalid("catchup", "%q: one of none, last (the default), all", s.Catchup)
	}
	if err := checkTime("start_at", s.StartAt); err != nil {
		return nil, err
	}
	if err := checkTime("end_at", s.EndAt); err != nil {
		return nil, err
	}
	if s.StartAt != nil && s.EndAt != nil && !s.EndAt.After(*s.StartAt) {
		return nil, invalid("end_at", "must be after start_at")
	}
	tk, err := s.Task.buildTask()
	if err != nil {
		return nil, err
	}
	c.tmpl = tk
	return c, nil
}

// checkTime checks a bound of the spec: within the times a task may be
// due at, with an offset JSON writes back as it is (whole minutes, less
// than 24 hours: encoding/json refuses +24:00 and drops seconds).
func checkTime(field string, t *time.Time) error {
	if t == nil {
		return nil
	}
	if t.Before(time.Unix(0, 0)) || t.UnixMilli() > task.MaxDueMillis {
		return invalid(field, "out of range (1970-01-01T00:00:00Z to %s)", task.MaxDueText)
	}
	if _, off := t.Zone(); off <= -24*60*60 || off >= 24*60*60 || off%60 != 0 {
		return invalid(field, "offset %+ds from UTC: must be whole minutes within -23:59 to +23:59", off)
	}
	return nil
}

// allHours is the hour field of "*".
const allHours = 1<<24 - 1

// Spec is the compiled spec.
func (c *Compiled) Spec() Spec { return c.spec }

// Location is the zone the cron fields are read in.
func (c *Compiled) Location() *time.Location { return c.loc }

// Next is the first tick strictly after after; false when there is none
// (after EndAt, or a cron expression with no time in the next five years).
func (c *Compiled) Next(after time.Time) (time.Time, bool) {
	if s := c.spec.StartAt; s != nil && after.Before(*s) {
		// ticks at StartAt itself count
		after = s.Add(-time.Millisecond)
	}
	var n time.Time
	if c.cron == nil {
		a := after.UnixMilli()
		k := floorDiv(a-c.anchorMS, c.everyMS) + 1
		n = time.UnixMilli(c.anchorMS + k*c.everyMS)
	} else {
		var ok bool
		if n, ok = c.nextCron(after); !ok {
			return time.Time{}, false
		}
	}
	if e := c.spec.EndAt; e != nil && n.After(*e) {
		return time.Time{}, false
	}
	return n.UTC(), true
}

// nextCron is robfig/cron's Next with the repeated-hour rule.
func (c *Compiled) nextCron(after time.Time) (time.Time, bool) {
	t := after
	for range 10000 {
		n := c.cron.Next(t)
		if n.IsZero() {
			return time.Time{}, false
		}
		if !n.After(t) { // never go backwards (ambiguous wall times)
			t = t.Add(time.Second)
			continue
		}
		if !c.everyHour && repeated(n.In(c.loc)) {
			t = n
			continue
		}
		return n, true
	}
	return time.Time{}, false
}

// repeated reports whether wall-clock time n already occurred earlier
// (n is in the second pass of an hour repeated when DST ended). Zones
// shift by 30 minutes, 1 hour or 2 hours.
func repeated(n time.Time) bool {
	for _, d := range [...]time.Duration{30 * time.Minute, time.Hour, 2 * time.Hour} {
		if sameWall(n.Add(-d).In(n.Location()), n) {
			return true
		}
	}
	return false
}

func sameWall(a, b time.Time) bool {
	ay, am, ad := a.Date()
	by, bm, bd := b.Date()
	return ay == by && am == bm && ad == bd && a.Hour() == b.Hour() && a.Minute() == b.Minute() && a.Second() == b.Second()
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// NextN is the next n ticks after after (fewer when the schedule ends).
func (c *Compiled) NextN(after time.Time, n int) []time.Time {
	out := make([]time.Time, 0, n)
	for len(out) < n {
		t, ok := c.Next(after)
		if !ok {
			break
		}
		out = append(out, t)
		after = t
	}
	return out
}

// Between is the ticks in (after, through], at most limit of them (the
// earliest); more reports that there were more.
func (c *Compiled) Between(after, through time.Time, limit int) (ticks []time.Time, more bool) {
	for {
		t, ok := c.Next(after)
		if !ok || t.After(through) {
			return ticks, false
		}
		if len(ticks) == limit {
			return ticks, true
		}
		ticks = append(ticks, t)
		after = t
	}
}

// Last is the latest tick in (after, through].
func (c *Compiled) Last(after, through time.Time) (time.Time, bool) {
	if !through.After(after) {
		return time.Time{}, false
	}
	if c.cron == nil {
		from := after
		if s := c.spec.StartAt; s != nil && from.Before(*s) {
			from = s.Add(-time.Millisecond)
		}
		to := through
		if e := c.spec.EndAt; e != nil && to.After(*e) {
			to = *e
		}
		k := floorDiv(to.UnixMilli()-c.anchorMS, c.everyMS)
		t := time.UnixMilli(c.anchorMS + k*c.everyMS).UTC()
		if !t.After(from) {
			return time.Time{}, false
		}
		return t, true
	}
	// cron has no "previous": look back in growing windows, so that a dense
	// schedule (every second) is not walked from a long-past after
	for _, w := range [...]time.Duration{time.Hour, 48 * time.Hour, 40 * 24 * time.Hour, 400 * 24 * time.Hour, 0} {
		from := after
		if w > 0 && through.Add(-w).After(after) {
			from = through.Add(-w)
		} else {
			w = 0
		}
		var last time.Time
		ok := false
		for t := from; ; {
			n, more := c.Next(t)
			if !more || n.After(through) {
				break
			}
			last, ok, t = n, true, n
		}
		if ok || w == 0 {
			return last, ok
		}
	}
	return time.Time{}, false
}

// Task is the task of the tick at tick: id TaskID(scheduleID, tick), due
// at the tick, the rest from the template.
func (c *Compiled) Task(scheduleID string, tick time.Time) *task.Task {
	t := *c.tmpl
	t.ID = TaskID(scheduleID, tick)
	t.DueAt = tick.UTC()
	if t.Headers != nil {
		h := make(map[string]string, len(t.Headers))
		for k, v := range t.Headers {
			h[k] = v
		}
		t.Headers = h
	}
	return &t
}

// TaskID is the id of the task of a schedule's tick: "<id>@<unix ms>". Two
// schedulers that materialize the same tick write the same task, which the
// store deduplicates by id.
func TaskID(scheduleID string, tick time.Time) string {
	return scheduleID + "@" + strconv.FormatInt(tick.UnixMilli(), 10)
}

// ParseTaskID splits a tick's task id; ok is false for any other id.
func ParseTaskID(id string) (scheduleID string, tick time.Time, ok bool) {
	i := strings.LastIndexByte(id, '@')
	if i < 0 {
		return "", time.Time{}, false
	}
	ms, err := strconv.ParseInt(id[i+1:], 10, 64)
	if err != nil || ms < 0 || ValidateID(id[:i]) != nil {
		return "", time.Time{}, false
	}
	return id[:i], time.UnixMilli(ms).UTC(), true
}

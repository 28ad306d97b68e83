package integration

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/schedule"
	"github.com/delayq/delayq/internal/testenv"
)

// TestScheduleFailover is issue #21's "done when" for schedules, with the
// real binaries: a schedule that ticks every second over two event
// processes; after about 5 s the one leading the scheduler is killed with
// SIGKILL. The scheduler's lookahead (1.5 s) is shorter than the failover
// (the 4 s session TTL), so ticks are really missed, and each catch-up
// policy decides what happens to them. An independent consumer of the
// topic checks: every tick at most once by id (exactly once for the ticks
// the policy keeps), none before its tick time, and the missing ticks
// exactly what the policy allows, cross-checked with the survivor's
// delayq_schedule_ticks_total.
func TestScheduleFailover(t *testing.T) {
	t.Parallel()
	for _, policy := range []schedule.Catchup{schedule.CatchupNone, schedule.CatchupLast, schedule.CatchupAll} {
		t.Run(string(policy), func(t *testing.T) {
			t.Parallel()
			scheduleFailover(t, policy)
		})
	}
}

// tickCounts are one process' delayq_schedule_ticks_total by outcome.
type tickCounts struct{ materialized, caughtUp, skipped int }

func scrapeTicks(t *testing.T, url string) tickCounts {
	t.Helper()
	var out tickCounts
	for outcome, p := range map[string]*int{"materialized": &out.materialized, "caught_up": &out.caughtUp, "skipped": &out.skipped} {
		v, ok := metric(hc, url, `delayq_schedule_ticks_total{outcome="`+outcome+`"}`)
		if !ok {
			t.Fatalf("%s: no delayq_schedule_ticks_total{outcome=%q}", url, outcome)
		}
		*p = int(v)
	}
	return out
}

// untilHalfSecond waits for the middle of the next second: ticks fire at
// whole seconds, so a schedule change or a kill then is not mixed up with
// a tick's firing (a kill between a produce and its ack would fire the
// tick again: firing is at least once).
func untilHalfSecond() {
	now := time.Now()
	next := now.Truncate(time.Second).Add(500 * time.Millisecond)
	if !next.After(now.Add(50 * time.Millisecond)) {
		next = next.Add(time.Second)
	}
	time.Sleep(time.Until(next)) // alignment with the wall clock, not a wait for a condition
}

func scheduleFailover(t *testing.T, policy schedule.Catchup) {
	c := localProvisioner{}.Start(t, Spec{Events: 2, Env: map[string]string{
		"DQ_SESSION_TTL":         "4s",
		"DQ_SCHEDULER_LOOKAHEAD": "1500ms",
		"DQ_SCHEDULER_INTERVAL":  "200ms",
		"DQ_LEASE":               "6s",
	}}).(*localCluster)
	url := func(i int) string { return c.AdminURL(Event, i) }
	leader := func() (int, string) {
		lead, why := -1, ""
		for i := range 2 {
			v, ok := metric(hc, url(i), "delayq_scheduler_leader")
			why += fmt.Sprintf("event %d: %v (%v); ", i, v, ok)
			if ok && v == 1 {
				if lead >= 0 {
					return -2, why
				}
				lead = i
			}
		}
		return lead, why
	}
	waitFor(t, 30*time.Second, "one event process leads the scheduler", func() (bool, string) {
		l, why := leader()
		return l >= 0, why
	})
	col := c.kafka.Collect(t, "dq.tasks")

	const id = "every-sec"
	untilHalfSecond()
	sch, _, err := schedule.NewStore(c.etcd.Client(t), c.ns).Put(t.Context(), id, schedule.Spec{
		Cron:    "*/1 * * * * *",
		Task:    schedule.Template{Type: "it.schedule", Payload: json.RawMessage(`{"policy":"` + string(policy) + `"}`)},
		Catchup: policy,
	})
	if err != nil {
		t.Fatal(err)
	}
	first := sch.UpdatedAt.Truncate(time.Second).Add(time.Second)

	// fired: the records of the schedule's ticks, by tick.
	fired := func() map[time.Time][]time.Time {
		out := map[time.Time][]time.Time{}
		for rid, recs := range col.ByID() {
			sid, tick, ok := schedule.ParseTaskID(rid)
			if !ok || sid != id {
				continue
			}
			for _, r := range recs {
				out[tick] = append(out[tick], r.Timestamp)
			}
		}
		return out
	}
	waitFor(t, 30*time.Second, "5 ticks fired before the kill", func() (bool, string) {
		n := len(fired())
		return n >= 5, fmt.Sprintf("%d ticks fired", n)
	})

	untilHalfSecond()
	lead, why := leader()
	if lead < 0 {
		t.Fatalf("no single scheduler leader before the kill: %s", why)
	}
	survivor := 1 - lead
	oldCounts := scrapeTicks(t, url(lead))
	survBefore := scrapeTicks(t, url(survivor))
	c.Kill(t, Event, lead)
	killed := time.Now()
	waitFor(t, 30*time.Second, "the survivor leads the scheduler", func() (bool, string) {
		v, ok := metric(hc, url(survivor), "delayq_scheduler_leader")
		return ok && v == 1, fmt.Sprintf("delayq_scheduler_leader %v (%v)", v, ok)
	})
	tookOver := time.Since(killed)

	// About 10 s after the kill (at least 3 s after the takeover), every
	// tick up to then has fired or is one the policy dropped.
	last := killed.Add(max(10*time.Second, tookOver+3*time.Second)).Truncate(time.Second)
	var survAfter tickCounts
	var missing []time.Time
	waitFor(t, 60*time.Second, "every tick up to "+last.Format(time.TimeOnly)+" fired or skipped", func() (bool, string) {
		if time.Now().Before(last) {
			return false, "ticks still to come"
		}
		survAfter = scrapeTicks(t, url(survivor))
		f := fired()
		missing = missing[:0]
		for tick := first; !tick.After(last); tick = tick.Add(time.Second) {
			if len(f[tick]) == 0 {
				missing = append(missing, tick)
			}
		}
		skipped := oldCounts.skipped + survAfter.skipped - survBefore.skipped
		return len(missing) <= skipped, fmt.Sprintf("%d ticks missing, %d skipped", len(missing), skipped)
	})

	f := fired()
	caught := survAfter.caughtUp - survBefore.caughtUp
	skipped := survAfter.skipped - survBefore.skipped
	t.Logf("%s: ticks %s..%s, scheduler leader killed at %s, survivor led after %v; survivor counted caught_up %d, skipped %d; "+
		"the killed leader had counted %+v; missing %v", policy, first.Format(time.TimeOnly), last.Format(time.TimeOnly),
		killed.Format("15:04:05.000"), tookOver.Round(time.Millisecond), caught, skipped, oldCounts, fmtTicks(missing))

	// At most once by id, never before the tick.
	for tick, ts := range f {
		if len(ts) > 1 {
			t.Errorf("tick %s fired %d times", tick.Format(time.TimeOnly), len(ts))
		}
		for _, at := range ts {
			if at.Before(tick) {
				t.Errorf("tick %s fired early, at %s", tick.Format(time.TimeOnly), at.Format("15:04:05.000"))
			}
		}
	}
	// The missing ticks are the ones the schedulers counted as skipped.
	if len(missing) != oldCounts.skipped+skipped {
		t.Errorf("%d ticks missing %v, the schedulers skipped %d (killed leader %d, survivor %d)",
			len(missing), fmtTicks(missing), oldCounts.skipped+skipped, oldCounts.skipped, skipped)
	}
	// The failover outlasted the lookahead: ticks were really missed.
	if skipped+caught < 1 {
		t.Errorf("the survivor found no missed tick (caught_up %d, skipped %d): the failover did not outlast the lookahead", caught, skipped)
	}
	var gap []time.Time // missing after the kill
	for _, tick := range missing {
		if tick.After(killed) {
			gap = append(gap, tick)
		}
	}
	if !contiguous(gap) {
		t.Errorf("the ticks missing after the kill are not one gap: %v", fmtTicks(gap))
	}
	switch policy {
	case schedule.CatchupNone:
		if caught != 0 || len(gap) < 1 {
			t.Errorf("none: caught_up %d (want 0), gap %v (want at least one tick)", caught, fmtTicks(gap))
		}
	case schedule.CatchupLast:
		if caught != 1 {
			t.Errorf("last: caught_up %d, want 1", caught)
		}
		if len(gap) > 0 {
			// the tick after the gap is the latest missed one: present
			next := gap[len(gap)-1].Add(time.Second)
			if len(f[next]) != 1 {
				t.Errorf("last: the latest missed tick %s fired %d times, want once", next.Format(time.TimeOnly), len(f[next]))
			}
		}
	case schedule.CatchupAll:
		if len(gap) != 0 || caught < 1 || skipped != 0 {
			t.Errorf("all: gap %v, caught_up %d, skipped %d: want no gap, at least one caught up, none skipped", fmtTicks(gap), caught, skipped)
		}
	}
	// Every record is a task of the schedule with the template's payload.
	for _, r := range col.All() {
		rid, _ := testenv.Header(r, record.HeaderID)
		if !strings.HasPrefix(rid, id+"@") {
			continue
		}
		if typ, _ := testenv.Header(r, record.HeaderType); typ != "it.schedule" || !strings.Contains(string(r.Value), string(policy)) {
			t.Errorf("record %s: type %q value %s", rid, typ, r.Value)
		}
	}
}

func contiguous(ticks []time.Time) bool {
	for i := 1; i < len(ticks); i++ {
		if ticks[i].Sub(ticks[i-1]) != time.Second {
			return false
		}
	}
	return true
}

func fmtTicks(ticks []time.Time) []string {
	out := make([]string, len(ticks))
	for i, t := range ticks {
		out[i] = t.Format(time.TimeOnly)
	}
	return slices.Clip(out)
}

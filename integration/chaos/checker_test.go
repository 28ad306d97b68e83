package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// checkOptions tune the checker to the run.
type checkOptions struct {
	// handled: work processes ran, so every task that must fire must also
	// reach the webhook.
	handled bool
	// faultsEnd (unix ms): tasks whose due time is before it count toward
	// the firing lag during faults, the others toward the lag after.
	faultsEnd int64
}

// verdict is what the checker found. The slices hold one line per
// violation; the counts are figures for the summary.
type verdict struct {
	tasks, accepted, journaled, refused, unknownSchedules int
	rescheduled, cancelled, opsUnknown, opsRefused        int
	mustFire, fired, handledTasks                         int
	records, deadRecords, unseen                          int

	lost           []string
	earlyFired     []string // by dq-fired-at
	earlySeen      []string // by the observer's clock
	earlyHandled   []string // by the webhook's clock
	cancelledFired []string
	unexpected     []string
	stale          []string
	dupRecords     int
	dupHandled     int
	lagDuring      []int64 // ms, first fire minus its due time
	lagAfter       []int64
}

// early is the number of records (and deliveries) seen or fired early.
func (v *verdict) early() int { return len(v.earlyFired) + len(v.earlySeen) + len(v.earlyHandled) }

// violations is every line that makes the run fail.
func (v *verdict) violations() []string {
	var out []string
	for _, g := range []struct {
		name  string
		lines []string
	}{
		{"lost", v.lost}, {"early (dq-fired-at)", v.earlyFired}, {"early (seen by the consumer)", v.earlySeen},
		{"early (handled)", v.earlyHandled}, {"fired after a successful cancel", v.cancelledFired},
		{"unexpected", v.unexpected}, {"stale-leader write", v.stale},
	} {
		for _, l := range g.lines {
			out = append(out, g.name+": "+l)
		}
	}
	return out
}

// check compares the client history with every record in Kafka and every
// webhook delivery.
func check(tasks []taskHist, recs []record, handled map[string][]int64, o checkOptions) *verdict {
	v := &verdict{tasks: len(tasks)}
	byID := map[string][]record{}
	for _, r := range recs {
		if r.topic == deadTopic {
			v.deadRecords++
		} else {
			v.records++
			byID[r.id] = append(byID[r.id], r)
		}
		if r.observed == 0 {
			v.unseen++
		}
	}
	hist := map[string]*taskHist{}
	for i := range tasks {
		t := &tasks[i]
		hist[t.id] = t
		s := t.ops[0]
		switch s.out {
		case ok:
			v.accepted++
			if s.journal {
				v.journaled++
			}
		case refused:
			v.refused++
		default:
			v.unknownSchedules++
		}
		for _, o := range t.ops[1:] {
			switch {
			case o.out == ok && o.kind == opReschedule:
				v.rescheduled++
			case o.out == ok && o.kind == opCancel:
				v.cancelled++
			case o.out == refused:
				v.opsRefused++
			default:
				v.opsUnknown++
			}
		}

		rs := byID[t.id]
		if len(rs) > 0 {
			v.fired++
			v.dupRecords += len(rs) - 1
		}
		hs := handled[t.id]
		if len(hs) > 0 {
			v.handledTasks++
			v.dupHandled += len(hs) - 1
		}
		if t.mustFire() {
			v.mustFire++
			switch {
			case len(rs) == 0:
				v.lost = append(v.lost, fmt.Sprintf("%s never fired; history %s", t.id, t.describe()))
			case o.handled && len(hs) == 0:
				v.lost = append(v.lost, fmt.Sprintf("%s fired (%d records) but never handled; history %s", t.id, len(rs), t.describe()))
			}
		}
		if len(rs) > 0 && s.out == refused {
			v.unexpected = append(v.unexpected, fmt.Sprintf("%s fired although its schedule was refused: %s; first record %s", t.id, s.detail, rs[0]))
		}
		for _, r := range rs {
			if d := t.dueInForce(r.firedAt); r.firedAt < d {
				v.earlyFired = append(v.earlyFired, fmt.Sprintf("%s fired %dms before %s; history %s", r, d-r.firedAt, msClock(d), t.describe()))
			}
			if r.observed > 0 {
				if d := t.earliestDue(r.observed); r.observed < d {
					v.earlySeen = append(v.earlySeen, fmt.Sprintf("%s seen at %s, %dms before the earliest due time %s; history %s",
						r, msClock(r.observed), d-r.observed, msClock(d), t.describe()))
				}
			}
		}
		for _, at := range hs {
			if d := t.earliestDue(at); at < d {
				v.earlyHandled = append(v.earlyHandled, fmt.Sprintf("%s handled at %s, %dms before the earliest due time %s; history %s",
					t.id, msClock(at), d-at, msClock(d), t.describe()))
			}
		}
		if done, at := t.cancelled(); done {
			for _, r := range rs {
				if r.firedAt > at {
					v.cancelledFired = append(v.cancelledFired, fmt.Sprintf("%s fired after the cancel answered at %s; history %s", r, msClock(at), t.describe()))
				}
			}
		}
		if t.mustFire() && len(rs) > 0 {
			first := rs[0]
			for _, r := range rs[1:] {
				if r.firedAt < first.firedAt {
					first = r
				}
			}
			lag := max(first.firedAt-first.dueAt, 0)
			if first.dueAt < o.faultsEnd {
				v.lagDuring = append(v.lagDuring, lag)
			} else {
				v.lagAfter = append(v.lagAfter, lag)
			}
		}
	}
	for id, rs := range byID {
		if hist[id] == nil {
			v.unexpected = append(v.unexpected, fmt.Sprintf("record of an id the workload never used: %s", rs[0]))
		}
	}
	v.stale = staleWrites(recs)
	return v
}

// staleWrites finds, per shard, records whose fencing token is lower than
// a token the shard had already fired with at an earlier dq-fired-at: a
// leader that wrote after its successor took over.
func staleWrites(recs []record) []string {
	byShard := map[int][]record{}
	for _, r := range recs {
		if r.shard >= 0 {
			byShard[r.shard] = append(byShard[r.shard], r)
		}
	}
	var out []string
	for _, shard := range slices.Sorted(func(yield func(int) bool) {
		for s := range byShard {
			if !yield(s) {
				return
			}
		}
	}) {
		rs := byShard[shard]
		sort.SliceStable(rs, func(i, j int) bool { return rs[i].firedAt < rs[j].firedAt })
		var maxTok int64
		var maxRec record
		for i := 0; i < len(rs); {
			j := i
			for j < len(rs) && rs[j].firedAt == rs[i].firedAt {
				j++
			}
			// records fired in the same millisecond are not ordered
			for _, r := range rs[i:j] {
				if r.token < maxTok {
					out = append(out, fmt.Sprintf("%s (token %d) after %s (token %d)", r, r.token, maxRec, maxTok))
				}
			}
			for _, r := range rs[i:j] {
				if r.token > maxTok {
					maxTok, maxRec = r.token, r
				}
			}
			i = j
		}
	}
	return out
}

// describe renders a task's history for a violation report.
func (t *taskHist) describe() string {
	parts := make([]string, 0, len(t.ops))
	for _, o := range t.ops {
		s := fmt.Sprintf("%s@%s", o.kind, msClock(o.invoke))
		if o.kind != opCancel {
			s += " due " + msClock(o.due)
		}
		s += " -> " + o.out.String()
		if o.complete > 0 {
			s += "@" + msClock(o.complete)
		}
		if o.journal {
			s += " (202 journaled)"
		}
		if o.out != ok && o.detail != "" {
			s += " (" + o.detail + ")"
		}
		parts = append(parts, s)
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

// percentile of ms values (p in 0..100); 0 for none.
func percentile(xs []int64, p float64) int64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p / 100)
	return s[i]
}

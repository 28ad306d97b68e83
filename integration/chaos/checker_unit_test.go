package chaos

import (
	"testing"
)

// TestChecker feeds the checker hand-written histories: each rule must
// flag its violation and must not flag the legitimate histories that
// resemble it (duplicates, a fire before a reschedule, unknown outcomes).
func TestChecker(t *testing.T) {
	sched := func(due, invoke, complete int64, out outcome) op {
		return op{kind: opSchedule, due: due, invoke: invoke, complete: complete, out: out}
	}
	resched := func(due, invoke, complete int64, out outcome) op {
		return op{kind: opReschedule, due: due, invoke: invoke, complete: complete, out: out}
	}
	cancel := func(invoke, complete int64, out outcome) op {
		return op{kind: opCancel, invoke: invoke, complete: complete, out: out}
	}
	rec := func(id string, shard int, token, firedAt, dueAt, observed int64) record {
		return record{topic: tasksTopic, id: id, shard: shard, token: token, firedAt: firedAt, dueAt: dueAt, observed: observed}
	}
	type counts struct{ lost, earlyFired, earlySeen, earlyHandled, cancelled, unexpected, stale, dups int }
	cases := []struct {
		name    string
		ops     []op
		recs    []record
		handled []int64
		want    counts
	}{
		{"fired and handled in time", []op{sched(1000, 0, 10, ok)}, []record{rec("a", 0, 5, 1000, 1000, 1010)}, []int64{1020}, counts{}},
		{"never fired", []op{sched(1000, 0, 10, ok)}, nil, nil, counts{lost: 1}},
		{"fired, never handled", []op{sched(1000, 0, 10, ok)}, []record{rec("a", 0, 5, 1000, 1000, 1010)}, nil, counts{lost: 1}},
		{"cancelled, not fired", []op{sched(1000, 0, 10, ok), cancel(500, 510, ok)}, nil, nil, counts{}},
		{"cancel outcome unknown, not fired", []op{sched(1000, 0, 10, ok), cancel(500, 0, unknown)}, nil, nil, counts{}},
		{"cancel refused, not fired", []op{sched(1000, 0, 10, ok), cancel(500, 510, refused)}, nil, nil, counts{lost: 1}},
		{"schedule refused, not fired", []op{sched(1000, 0, 10, refused)}, nil, nil, counts{}},
		{"schedule refused, fired", []op{sched(1000, 0, 10, refused)}, []record{rec("a", 0, 5, 1000, 1000, 1010)}, []int64{1020}, counts{unexpected: 1}},
		{"fired before due", []op{sched(1000, 0, 10, ok)}, []record{rec("a", 0, 5, 990, 1000, 1010)}, []int64{1020}, counts{earlyFired: 1}},
		{"seen before due (header lies)", []op{sched(1000, 0, 10, ok)}, []record{rec("a", 0, 5, 1000, 1000, 700)}, []int64{1020}, counts{earlySeen: 1}},
		{"handled before due", []op{sched(1000, 0, 10, ok)}, []record{rec("a", 0, 5, 1000, 1000, 1010)}, []int64{800}, counts{earlyHandled: 1}},
		{"fired at the old due after an accepted reschedule",
			[]op{sched(1000, 0, 10, ok), resched(3000, 400, 410, ok)}, []record{rec("a", 0, 5, 1000, 1000, 1010)}, []int64{1020}, counts{earlyFired: 1}},
		{"fired at the new due after an accepted reschedule",
			[]op{sched(1000, 0, 10, ok), resched(3000, 400, 410, ok)}, []record{rec("a", 0, 5, 3000, 3000, 3010)}, []int64{3020}, counts{}},
		{"fired at the old due, then rescheduled (a duplicate of a released fire)",
			[]op{sched(1000, 0, 10, ok), resched(3000, 1200, 1210, ok)},
			[]record{rec("a", 0, 5, 1000, 1000, 1010), rec("a", 0, 5, 3000, 3000, 3010)}, []int64{3020}, counts{dups: 1}},
		{"fired while a reschedule was in flight",
			[]op{sched(1000, 0, 10, ok), resched(3000, 990, 1500, ok)}, []record{rec("a", 0, 5, 1000, 1000, 1010)}, []int64{1020}, counts{}},
		{"fired at the due of a reschedule whose outcome is unknown",
			[]op{sched(3000, 0, 10, ok), resched(1000, 400, 0, unknown)}, []record{rec("a", 0, 5, 1000, 1000, 1010)}, []int64{1020}, counts{}},
		{"fired after a successful cancel",
			[]op{sched(1000, 0, 10, ok), cancel(500, 510, ok)}, []record{rec("a", 0, 5, 1000, 1000, 1010)}, nil, counts{cancelled: 1}},
		{"fired before a cancel that answered ok (cancel raced a released fire)",
			[]op{sched(1000, 0, 10, ok), cancel(1200, 1210, ok)}, []record{rec("a", 0, 5, 1000, 1000, 1010)}, nil, counts{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := []taskHist{{id: "a", ops: tc.ops}}
			handled := map[string][]int64{}
			if tc.handled != nil {
				handled["a"] = tc.handled
			}
			v := check(h, tc.recs, handled, checkOptions{handled: true})
			got := counts{len(v.lost), len(v.earlyFired), len(v.earlySeen), len(v.earlyHandled), len(v.cancelledFired), len(v.unexpected), len(v.stale), v.dupRecords}
			if got != tc.want {
				t.Errorf("got %+v, want %+v\n%v", got, tc.want, v.violations())
			}
		})
	}
}

func TestStaleWrites(t *testing.T) {
	r := func(shard int, token, firedAt int64) record {
		return record{topic: tasksTopic, id: "x", shard: shard, token: token, firedAt: firedAt}
	}
	cases := []struct {
		name string
		recs []record
		want int
	}{
		{"tokens rise", []record{r(1, 5, 100), r(1, 7, 200), r(1, 7, 300)}, 0},
		{"old leader after the new one", []record{r(1, 5, 100), r(1, 7, 200), r(1, 5, 300), r(1, 5, 301)}, 2},
		{"same millisecond is not ordered", []record{r(1, 7, 200), r(1, 5, 200)}, 0},
		{"other shards do not count", []record{r(1, 9, 100), r(2, 5, 300)}, 0},
		{"written late, fired early (a produce that outlived its leadership)", []record{r(1, 7, 200), r(1, 5, 150)}, 0},
	}
	for _, tc := range cases {
		if got := len(staleWrites(tc.recs)); got != tc.want {
			t.Errorf("%s: %d stale writes, want %d", tc.name, got, tc.want)
		}
	}
}

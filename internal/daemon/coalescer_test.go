package daemon

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/testenv"
)

// Concurrent single schedules that arrive while the store calls in flight
// wait on Redis go together as one group (one store call), each answered
// on its own; delayq_schedule_group_size counts the groups and their
// tasks. Redis holds every write for 500 ms (CLIENT PAUSE WRITE), so at
// most coalesceInflight groups are in flight and the other callers must
// queue behind them.
func TestCoalescerGroupsWaitingSchedules(t *testing.T) {
	const callers = 32
	app, wait := pausedCallers(t, callers)
	wait()
	count, sum := groupSizes(t, app)
	if sum != callers {
		t.Fatalf("group sizes sum to %v, want %d (one per single schedule)", sum, callers)
	}
	if count < 1 || count > callers-2 {
		t.Fatalf("%d groups for %d callers of which at most %d could be in flight while Redis paused: nothing was grouped", count, callers, coalesceInflight)
	}
	t.Logf("%d single schedules in %d groups", callers, count)
}

// pausedCallers starts a daemon on a Redis that holds every write for
// 500 ms (CLIENT PAUSE WRITE) and n callers of single schedules; wait
// waits for them and fails the test unless each got its own task created
// in Redis (not journaled, not refused).
func pausedCallers(t *testing.T, n int) (app *testApp, wait func()) {
	t.Helper()
	r := startRedis(t)
	app = startApp(t, testConfig(t, r.Addr))
	// App.Run starts the coalescer in a goroutine of its own; a caller
	// before it runs is served alone (as at a daemon's start), outside
	// the groups these tests count (a loaded CI machine saw 16 of 32)
	testenv.WaitFor(t, 5*time.Second, "the coalescer running", func() bool {
		c := app.core.coalesce
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.running
	})
	if err := r.Client(t).Do(t.Context(), "CLIENT", "PAUSE", 500, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	res := make([]wire.Scheduled, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			body := fmt.Sprintf(`{"id":"co-%d","type":"it.co","payload":{"n":%d},"delay":"1h"}`, i, i)
			res[i] = app.ScheduleTask(t.Context(), []byte(body))
		})
	}
	return app, func() {
		t.Helper()
		wg.Wait()
		for i, s := range res {
			if s.Err != nil || s.Outcome != wire.OutcomeCreated || s.ID != fmt.Sprintf("co-%d", i) {
				t.Fatalf("caller %d: %+v, want its own task created in Redis", i, s)
			}
		}
	}
}

// groupSizes reads delayq_schedule_group_size's count and sum.
func groupSizes(t *testing.T, app *testApp) (count uint64, sum float64) {
	t.Helper()
	mfs, err := app.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "delayq_schedule_group_size" {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	t.Fatal("no delayq_schedule_group_size metric")
	return 0, 0
}

// TestCoalescerServesQueuedCallersAtShutdown: callers queued behind the
// store calls in flight when the daemon stops are still served by the
// coalescer (their groups go to Redis before Run returns and the Redis
// client closes), not sent alone against a closing daemon.
func TestCoalescerServesQueuedCallersAtShutdown(t *testing.T) {
	const callers = 32
	app, wait := pausedCallers(t, callers)
	// every caller is in a store call or queued behind one
	deadline := time.Now().Add(5 * time.Second)
	for {
		c := app.core.coalesce
		c.mu.Lock()
		queued, inflight := len(c.queue), c.inflight
		c.mu.Unlock()
		if queued == callers-inflight && inflight == coalesceInflight {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d queued and %d in flight, want %d and %d", queued, inflight, callers-coalesceInflight, coalesceInflight)
		}
		time.Sleep(time.Millisecond)
	}
	app.stop() // Redis resumes within 500 ms
	wait()
	if _, sum := groupSizes(t, app); sum != callers {
		t.Fatalf("group sizes sum to %v, want %d: every caller went through the coalescer", sum, callers)
	}
}

package event

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// TestFencingPausedLeaderIsRefusedAfterItsSessionWasRevoked: leader A is
// paused between Kafka's answer and its ack; its etcd lease is revoked
// from outside and B takes the shard with a higher revision. When A wakes
// up, its ack is refused (ErrFenced), it never takes from the shard again
// with its old token, and the tasks were fired by B.
func TestFencingPausedLeaderIsRefusedAfterItsSessionWasRevoked(t *testing.T) {
	t.Parallel() // runs alongside the other parallel scenarios, after the sequential ones
	const n = 50
	w := newWorld(t, 2)
	recs := w.collect(task.DefaultTopic)

	var (
		mu      sync.Mutex
		takes   = map[[2]int64]int{} // (shard, token) -> takes by A
		pausedT int64
		once    sync.Once
	)
	paused, resume := make(chan []*task.Task, 1), make(chan struct{})
	hooksA := &pollerHooks{
		BeforeTake: func(shard int, token int64) {
			mu.Lock()
			takes[[2]int64{int64(shard), token}]++
			mu.Unlock()
		},
		BeforeAck: func(_ context.Context, shard int, token int64, ts []*task.Task) {
			if shard != 0 {
				return
			}
			once.Do(func() {
				mu.Lock()
				pausedT = token
				mu.Unlock()
				paused <- ts
				<-resume // a paused process: it notices nothing
			})
		},
	}
	a := w.startApp("fence-a", withPollerHooks(hooksA))
	w.waitBalanced(10*time.Second, a)

	var tasks []*task.Task
	for i := 0; len(tasks) < n; i++ {
		id := fmt.Sprintf("fence-%04d", i)
		if w.store.Shard(id) == 0 {
			tasks = append(tasks, &task.Task{ID: id, Type: "fence", Payload: []byte("p"), DueAt: time.Now().Truncate(time.Millisecond)})
		}
	}
	w.schedule(tasks)
	var claimed []*task.Task
	select {
	case claimed = <-paused:
	case <-time.After(15 * time.Second):
		t.Fatal("leader A never reached its ack")
	}
	mu.Lock()
	tokenA := pausedT
	mu.Unlock()

	// A's session is revoked from outside; B wins the shard with a higher
	// revision and adopts it.
	if _, err := w.ec.Revoke(t.Context(), a.Lease()); err != nil {
		t.Fatal(err)
	}
	b := w.startApp("fence-b")
	testenv.WaitFor(t, 15*time.Second, "B fires every task again (records with B's higher token)", func() bool {
		snap := recs.ByID()
		for _, tk := range tasks {
			ok := false
			for _, r := range snap[tk.ID] {
				ok = ok || hdrInt(r, record.HeaderToken) > tokenA
			}
			if !ok {
				return false
			}
		}
		return true
	})
	l := w.leaders()
	say(t, "A (token %d) paused with %d claims; B leads shard 0 now: %v", tokenA, len(claimed), l[0] == "fence-b")

	// The store refuses A's token from now on.
	if _, err := w.store.Take(t.Context(), 0, tokenA, 10, time.Second); !errors.Is(err, redisstore.ErrFenced) {
		t.Errorf("take with A's token: %v, want ErrFenced", err)
	}
	mu.Lock()
	takesBefore := takes[[2]int64{0, tokenA}]
	mu.Unlock()

	// A wakes up: its ack is refused and its poller stops.
	close(resume)
	testenv.WaitFor(t, 10*time.Second, "A's ack refused (fenced_total 1)", func() bool {
		return metric(t, a.Addr(), "delayq_fenced_total") >= 1
	})
	testenv.WaitFor(t, 15*time.Second, "A back with a new session", func() bool { return a.Lease() != 0 })
	mu.Lock()
	takesAfter := takes[[2]int64{0, tokenA}]
	mu.Unlock()
	if takesAfter != takesBefore {
		t.Errorf("A took %d more times from shard 0 with its old token after being fenced", takesAfter-takesBefore)
	}
	for _, tk := range tasks {
		st, err := w.store.Get(t.Context(), tk.ID)
		// no work process declared the topic: B's settle ended them delivered
		if err != nil || st.State != task.StateDelivered || st.Gen != 0 || st.Receipt == nil || st.Receipt.Token <= tokenA {
			t.Errorf("%s: %v %v, want delivered by B (generation 0: firing again keeps the generation)", tk.ID, st, err)
		}
	}
	if ss, err := w.store.Stats(t.Context()); err != nil || ss[0].Firing != 0 {
		t.Errorf("shard 0 still has takes in flight after B settled: %+v %v", ss, err)
	}
	snap := recs.ByID()
	r := check(tasks, snap)
	r.fail(t)
	say(t, "fencing: %d tasks, %d records (%d duplicates from the paused leader's produce), A's ack refused, fenced_total(A)=%v",
		r.tasks, r.records, r.dups, metric(t, a.Addr(), "delayq_fenced_total"))
	w.waitBalanced(15*time.Second, a, b)
}

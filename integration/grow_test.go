package integration

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/shardmap"
)

// The elastic-shards scenarios (issue #17): a namespace of 16 shards and 2
// event processes grows to 64 shards through PUT /v1/shards while tasks
// fall due, while every 10th task is cancelled and every 10th+1 moved 5 s
// later, and (in the second, process tier only) while an event process
// that leads old shards is killed with SIGKILL halfway through the move.

// growTasks is how many tasks fall due over the scenario's 20 s; the
// container tier runs a fifth of them (the Docker engine shares the box).
func growTasks(p Provisioner) int {
	if p.Name() == "local" {
		return 20000
	}
	return 4000
}

func scenarioGrow(t *testing.T, p Provisioner) { growScenario(t, p, false) }

func scenarioGrowKill(t *testing.T, p Provisioner) { growScenario(t, p, true) }

func growScenario(t *testing.T, p Provisioner, kill bool) {
	rec := newRecorder(nil)
	// Batches of 1,000 (the default limit) with a 5 s Redis timeout: the
	// set-up schedules 40,000 tasks while CI runs every package at once,
	// and a batch whose Redis call times out is journaled (202), not
	// refused - right, but not the "scheduled" this set-up checks for.
	c := p.Start(t, Spec{Daemons: 1, Events: 2, Workers: 2, Webhook: rec, Env: map[string]string{
		"DQ_SHARDS": "16", "DQ_REDIS_TIMEOUT": "5s",
	}})
	api := newAPI(c, 0)
	ctx := t.Context()
	kl := watchKafka(t, c, "dq.tasks")

	// a backlog due in an hour, so that the move has work while tasks fall
	// due, then n tasks due over 20 s from 10 s on: the first due time is
	// set after the backlog is in, and leaves the 20 batches of the due
	// tasks time to go in under CI load, so that the growth (2 s after the
	// first due time) meets most of them still waiting
	n := growTasks(p)
	backlog := spread("grow-later", "it.grow", n, time.Now().Add(time.Hour), time.Millisecond)
	for i := 0; i < n; i += 1000 {
		scheduleBatch(t, api, backlog[i:min(i+1000, n)])
	}
	start := time.Now().Add(10 * time.Second)
	step := 20 * time.Second / time.Duration(n)
	tasks := spread("grow", "it.grow", n, start, step)
	want := map[string]expected{}
	for i := 0; i < n; i += 1000 {
		for id, e := range scheduleBatch(t, api, tasks[i:min(i+1000, n)]) {
			want[id] = e
		}
	}
	if m, err := api.Shards(ctx); err != nil || m.Count != 16 || m.State != "stable" {
		t.Fatalf("shard map before: %+v, %v", m, err)
	}

	// 5 s in: grow to 64
	time.Sleep(time.Until(start.Add(2 * time.Second)))
	var apiErr *client.APIError
	if _, err := api.GrowShards(ctx, 40); !errors.As(err, &apiErr) || apiErr.Status != 422 || apiErr.Code != "invalid_shard_count" {
		t.Fatalf("growing 16 to 40 (not a multiple): %v, want 422 invalid_shard_count", err)
	}
	grown, err := api.GrowShards(ctx, 64)
	if err != nil || grown.Count != 64 || grown.Previous != 16 || grown.State != "migrating" {
		t.Fatalf("grow to 64: %+v, %v", grown, err)
	}
	if _, err := api.GrowShards(ctx, 128); !errors.Is(err, client.ErrConflict) {
		t.Errorf("a second growth while migrating: %v, want 409", err)
	}
	grewAt := time.Now()

	var killedAt time.Time
	if kill {
		// halfway: some tasks moved, the map still migrating
		waitFor(t, 30*time.Second, "the move under way", func() (bool, string) {
			m, err := api.Shards(ctx)
			if err != nil {
				return false, err.Error()
			}
			return m.Moved > 0 || m.State == "stable", fmt.Sprintf("%+v", *m)
		})
		c.Kill(t, Event, 0)
		killedAt = time.Now()
	}

	// during the migration: cancel every 10th, move every 10th+1 by 5 s;
	// latest due first, so that most are still waiting when their turn comes
	var mu sync.Mutex
	cancelled := map[string]time.Time{} // id -> when the daemon answered its cancel
	moved := map[string]time.Time{}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := n - 10 - 10*w; i >= 0; i -= 40 {
				id := tasks[i].ID
				if err := api.Cancel(ctx, id); err == nil {
					mu.Lock()
					cancelled[id] = time.Now()
					mu.Unlock()
				} else if !errors.Is(err, client.ErrConflict) {
					t.Errorf("cancel %s: %v", id, err)
				}
				id = tasks[i+1].ID
				due, err := api.Reschedule(ctx, id, want[id].due.Add(5*time.Second))
				if err == nil {
					mu.Lock()
					moved[id] = due
					mu.Unlock()
				} else if !errors.Is(err, client.ErrConflict) {
					t.Errorf("reschedule %s: %v", id, err)
				}
			}
		})
	}
	wg.Wait()
	opsDone := time.Now()
	if kill {
		c.Start(t, Event, 0)
	}

	var final *client.ShardMap
	waitFor(t, 60*time.Second, "the shard map stable at 64", func() (bool, string) {
		m, err := api.Shards(ctx)
		if err != nil {
			return false, err.Error()
		}
		final = m
		return m.State == "stable" && m.Count == 64, fmt.Sprintf("%+v", *m)
	})
	settled := time.Now()

	// tasks scheduled now go to the new shards
	after := spread("grow-after", "it.grow", 100, time.Now().Add(500*time.Millisecond), time.Millisecond)
	afterWant := scheduleBatch(t, api, after)
	high := 0
	for _, tk := range after {
		ti, err := api.Get(ctx, tk.ID)
		if err != nil {
			t.Fatalf("get %s: %v", tk.ID, err)
		}
		if ti.Shard != shardmap.ShardOf(tk.ID, 64) {
			t.Errorf("%s on shard %d, want %d under 64 shards", tk.ID, ti.Shard, shardmap.ShardOf(tk.ID, 64))
		}
		if ti.Shard >= 16 {
			high++
		}
	}
	if high == 0 {
		t.Errorf("none of 100 tasks scheduled after the growth landed on shards >= 16")
	}

	// every task fired: the cancelled ones never, the moved ones at their new time
	var live []string
	for id := range want {
		if _, c := cancelled[id]; !c {
			live = append(live, id)
		}
	}
	for id := range afterWant {
		live = append(live, id)
	}
	rec.waitDone(t, live, 90*time.Second)
	kl.waitRecords(t, live, 20*time.Second)
	checkNeverEarly(t, rec)
	done := rec.done()
	// a cancelled task: no copy fired after the cancel was answered, and
	// no run. A copy fired before it is allowed (the promise in
	// docs/reliability.md, checked the same way by the chaos suite): a
	// produce whose answer was lost is released to fire again, so the
	// task is waiting, and cancellable, while Kafka may hold that copy.
	for id, at := range cancelled {
		recs := kl.records(id)
		var after []*kgo.Record
		for _, r := range recs {
			if ms, err := strconv.ParseInt(header(r, "dq-fired-at"), 10, 64); err != nil || time.UnixMilli(ms).After(at) {
				after = append(after, r)
			}
		}
		if len(after) > 0 || len(done[id]) > 0 {
			// what the next look at such a failure needs: when each copy
			// was fired and by which shard and leader, and whether a
			// worker ran it
			t.Errorf("cancelled task %s fired: cancel answered at %s (%d ms), due %s; Kafka copies %s, %d of them fired after the cancel; %d webhook deliveries",
				id, at.UTC().Format("15:04:05.000"), at.UnixMilli(), want[id].due.UTC().Format("15:04:05.000"), describeCopies(kl, id), len(after), len(done[id]))
		}
	}
	for id, due := range moved {
		ds := done[id]
		if len(ds) == 0 {
			t.Errorf("moved task %s never delivered", id)
			continue
		}
		if ds[0].At.Before(due.Add(-time.Millisecond)) {
			t.Errorf("moved task %s delivered at %s, before its new due time %s", id, ds[0].At.Format(time.RFC3339Nano), due.Format(time.RFC3339Nano))
		}
	}
	kd, wd := duplicates(kl, rec, live)
	if !kill {
		checkDuplicates(t, c, 2, kl, live, "without any crash")
	}
	lags := lagStats(checkRecordsLive(t, kl, live))
	t.Logf("grow 16->64 shards (%s): %d tasks due over 20 s + %d backlog, %d cancelled, %d moved; "+
		"grown %v in, settled %v after the PUT (ops took %v%s); moved %d, remaining %d; "+
		"%d of 100 new tasks on shards >= 16; duplicates: %d Kafka, %d webhook; %s",
		p.Name(), n, n, len(cancelled), len(moved), grewAt.Sub(start).Round(time.Millisecond),
		settled.Sub(grewAt).Round(time.Millisecond), opsDone.Sub(grewAt).Round(time.Millisecond),
		killNote(kill, killedAt, grewAt), final.Moved, final.Remaining, high, kd, wd, lags)
}

func killNote(kill bool, at, grew time.Time) string {
	if !kill {
		return ""
	}
	return fmt.Sprintf("; event 0 SIGKILLed %v after the PUT", at.Sub(grew).Round(time.Millisecond))
}

// checkRecordsLive returns the Kafka records of ids (each must have one).
func checkRecordsLive(t *testing.T, kl *kafkaLog, ids []string) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	for _, id := range ids {
		rs := kl.records(id)
		if len(rs) == 0 {
			t.Errorf("task %s: no Kafka record", id)
		}
		out = append(out, rs...)
	}
	return out
}

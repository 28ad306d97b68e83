package daemon

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// With DQ_REDIS_REPLICA_ACKS=1, a change the replica does not confirm in
// time is never answered 2xx: a schedule is journaled (202) and replayed
// once the replica confirms, a reschedule, cancel or redrive answers 503
// outcome_unknown, and /readyz says why. Sending the change again once the
// replica is back succeeds.
func TestReplicaAcksAnswers(t *testing.T) {
	primary, replica := testenv.StartRedis(t), testenv.StartRedis(t)
	testenv.ReplicaOf(t, replica, primary)
	rc := replica.Client(t)
	cfg := testConfig(t, primary.Addr)
	cfg.RedisReplicaAcks, cfg.RedisAckTimeout = 1, 100*time.Millisecond
	app := startApp(t, cfg)
	for _, id := range []string{"ra-1", "ra-2"} {
		if rp := app.do("POST", "/v1/tasks", `{"id":"`+id+`","type":"x","delay":"1h"}`); rp.Status != 201 {
			t.Fatalf("schedule %s with the replica up: %d %s", id, rp.Status, rp.Raw)
		}
	}

	resume := testenv.PauseReplication(t, replica, primary)
	rp := app.do("POST", "/v1/tasks", `{"id":"ra-3","type":"x","payload":{"v":3},"delay":"1h"}`)
	if rp.Status != 202 || rp.str("state") != "journaled" {
		t.Fatalf("schedule with the replica stalled: %d %s; want 202 journaled", rp.Status, rp.Raw)
	}
	if rp := app.do("PATCH", "/v1/tasks/ra-1", `{"delay":"2h"}`); rp.Status != 503 || rp.errCode() != wire.CodeOutcomeUnknown {
		t.Fatalf("reschedule with the replica stalled: %d %s; want 503 outcome_unknown", rp.Status, rp.Raw)
	}
	if rp := app.do("DELETE", "/v1/tasks/ra-2", ""); rp.Status != 503 || rp.errCode() != wire.CodeOutcomeUnknown {
		t.Fatalf("cancel with the replica stalled: %d %s; want 503 outcome_unknown", rp.Status, rp.Raw)
	}
	if rp := app.do("GET", "/readyz", ""); !strings.Contains(string(rp.Raw), "replicas did not confirm") {
		t.Errorf("/readyz while the replica does not confirm: %d %s", rp.Status, rp.Raw)
	}
	resume()

	// the replica confirms again: the journal drains, and the same
	// changes sent again succeed
	testenv.WaitFor(t, 20*time.Second, "journal drained", func() bool { return app.JournalDepth() == 0 })
	if rp := app.do("PATCH", "/v1/tasks/ra-1", `{"delay":"2h"}`); rp.Status != 200 {
		t.Fatalf("reschedule sent again: %d %s", rp.Status, rp.Raw)
	}
	if rp := app.do("DELETE", "/v1/tasks/ra-2", ""); rp.Status != 200 && rp.Status != 409 {
		t.Fatalf("cancel sent again: %d %s", rp.Status, rp.Raw)
	}
	for id, want := range map[string]string{"ra-1": "scheduled", "ra-2": "cancelled", "ra-3": "scheduled"} {
		if rp := app.do("GET", "/v1/tasks/"+id, ""); rp.Status != 200 || rp.str("state") != want {
			t.Errorf("%s: %d %s; want %s", id, rp.Status, rp.Raw, want)
		}
	}
	// and the replica holds what the primary holds (the last writes waited for it)
	if p, r := keyCount(t, primary.Client(t), cfg.Namespace), keyCount(t, rc, cfg.Namespace); p != r || p == 0 {
		t.Errorf("namespace keys: primary %d, replica %d", p, r)
	}
}

// A written journal entry (the primary applied the schedule, its replicas
// did not confirm it) is confirmed by the replay, not written again: a
// reschedule acknowledged meanwhile, e.g. by another daemon, is never set
// back to the journaled version (found by the chaos suite's failover
// nemesis: the task fired at its first due time with dq-gen 2), and a
// task a failover dropped is created again.
func TestWrittenEntryReplayNeverUndoesALaterChange(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	app, err := New(t.Context(), cfg, nil) // not running yet: nothing replays
	if err != nil {
		t.Fatal(err)
	}
	st := openStore(t, r.Client(t), cfg)
	due := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	kept := &task.Task{ID: "w-kept", Type: "x", Payload: []byte(`"v1"`), PayloadJSON: true, DueAt: due}
	lost := &task.Task{ID: "w-lost", Type: "x", Payload: []byte(`"v1"`), PayloadJSON: true, DueAt: due}
	// w-kept was written (and then rescheduled by someone else); w-lost's
	// write was lost by a failover: both are written entries
	if _, err := st.Schedule(t.Context(), []redisstore.Submit{{Task: kept}}); err != nil {
		t.Fatal(err)
	}
	subs := []redisstore.Submit{{Task: kept}, {Task: lost}}
	app.core.appendJournal(t.Context(), subs, []int{0, 1}, []uint8{whyUnconfirmed, whyUnconfirmed}, make([]wire.Scheduled, 2), false)
	later := due.Add(30 * time.Minute)
	if _, err := st.Reschedule(t.Context(), "w-kept", later, 0, false); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	testenv.WaitFor(t, 10*time.Second, "journal drained", func() bool { return app.JournalDepth() == 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if tk, err := st.Get(t.Context(), "w-kept"); err != nil || !tk.DueAt.Equal(later) {
		t.Fatalf("w-kept: %+v %v; want the reschedule's due time %v kept", tk, err, later)
	}
	if tk, err := st.Get(t.Context(), "w-lost"); err != nil || !tk.DueAt.Equal(due) || string(tk.Payload) != `"v1"` {
		t.Fatalf("w-lost: %+v %v; want it created again", tk, err)
	}
}

// An unwritten entry (journaled while Redis was out of reach) whose replay
// reached Redis but was not confirmed becomes a written one: later passes
// confirm it and never write it again over a change made meanwhile (the
// chaos suite's 10-minute failover run: early records with dq-gen 2 after
// the first fix).
func TestReplayedEntryBecomesWritten(t *testing.T) {
	primary, replica := testenv.StartRedis(t), testenv.StartRedis(t)
	testenv.ReplicaOf(t, replica, primary)
	cfg := testConfig(t, primary.Addr)
	cfg.RedisReplicaAcks, cfg.RedisAckTimeout = 1, 100*time.Millisecond
	app, err := New(t.Context(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	tk := &task.Task{ID: "r-1", Type: "x", Payload: []byte(`"v1"`), PayloadJSON: true, DueAt: due}
	app.journal(t.Context(), []redisstore.Submit{{Task: tk}}, []int{0}, make([]wire.Scheduled, 1))

	resume := testenv.PauseReplication(t, replica, primary)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	st := openStore(t, primary.Client(t), cfg) // no acks: another daemon's change
	testenv.WaitFor(t, 10*time.Second, "the entry replayed into Redis", func() bool {
		got, err := st.Get(t.Context(), "r-1")
		return err == nil && got.DueAt.Equal(due)
	})
	testenv.WaitFor(t, 10*time.Second, "the entry marked written", func() bool {
		e, ok, err := app.core.jr.Lookup(t.Context(), "r-1")
		return err == nil && ok && len(e.Data) > 0 && e.Data[0] == journalVersionWritten
	})
	later := due.Add(30 * time.Minute)
	stNoAcks, err := redisstore.New(t.Context(), primary.Client(t), redisstore.Options{Namespace: cfg.Namespace, Shards: cfg.Shards})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stNoAcks.Reschedule(t.Context(), "r-1", later, 0, false); err != nil {
		t.Fatal(err)
	}
	resume() // the pass that drains the entry must only confirm it
	testenv.WaitFor(t, 20*time.Second, "journal drained", func() bool { return app.JournalDepth() == 0 })
	if got, err := st.Get(t.Context(), "r-1"); err != nil || !got.DueAt.Equal(later) {
		t.Fatalf("r-1: %+v %v; want the reschedule's due time %v kept", got, err, later)
	}
}

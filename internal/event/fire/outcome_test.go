package fire

import (
	"context"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/outcome"
	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// A task made dead at fire time (its topic is missing past the poison
// grace) gets one "dead" outcome record on the outcomes topic, after its
// dead state is stored, naming why; the ordinary task beside it gets none.
func TestPollerPublishesDeadOutcomeOfPoison(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	const topic = "fire.outcomes"
	f.kafka.CreateTopic(t, topic, 2)
	recs := f.kafka.Collect(t, topic)
	pub, err := outcome.New(t.Context(), outcome.Config{Brokers: f.kafka.Brokers, Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 5*time.Second)
		defer cancel()
		_ = pub.Close(ctx)
	})
	cfg := f.config(0, 1)
	cfg.PoisonGrace, cfg.Outcomes = 500*time.Millisecond, pub
	runPoller(t, NewPoller(cfg))
	poison := &task.Task{ID: "poison-outcome", Type: "report.send", Topic: "no.such.topic", MaxAttempts: 4,
		Headers: map[string]string{"tenant": "acme"}}
	schedule(t, f.store, 0, poison, &task.Task{ID: "fine-1", Type: "x"})
	testenv.WaitFor(t, 20*time.Second, "poison task dead", func() bool {
		st, err := f.store.Get(t.Context(), poison.ID)
		return err == nil && st.State == task.StateDead
	})
	testenv.WaitFor(t, 10*time.Second, "its outcome record", func() bool { return recs.Total() >= 1 })
	st, err := f.store.Get(t.Context(), poison.ID)
	if err != nil {
		t.Fatal(err)
	}
	r := recs.All()[0]
	o := testenv.ParseOutcome(t, r)
	if o.ID != poison.ID || o.Outcome != record.OutcomeDead || o.Type != "report.send" || o.Error != st.LastError ||
		o.Attempt != 1 || o.MaxAttempts != 4 || o.Shard != 0 || o.Headers["tenant"] != "acme" || o.Duration != 0 ||
		o.DueAt.IsZero() || o.FinishedAt.Before(o.DueAt) {
		t.Errorf("outcome %+v; stored %+v", o, st)
	}
	// fine-1 fired long ago; the only record is the poison's
	if n := recs.Total(); n != 1 {
		t.Errorf("%d outcome records, want 1", n)
	}
}

package worker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
	"github.com/delayq/delayq/worker"
)

// A consumed topic that does not exist yet: the worker waits for it
// without a consumer-group Reader (whose generation switches race in
// kafka-go), Ready names it, and once it exists the worker consumes.
func TestWaitsForAMissingTopic(t *testing.T) {
	e := newEnv(t)
	k := worktest.StrictKafka(t, "dq.dead")
	cfg, _ := e.config(t, "w1")
	cfg.Brokers, cfg.Topics = k.Brokers, []string{"late.tasks"}
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.HandleDefault(func(_ context.Context, _ *worker.Task) error { return nil })
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	testenv.WaitFor(t, 10*time.Second, "Ready naming the missing topic", func() bool {
		err := w.Ready(t.Context())
		return err != nil && strings.Contains(err.Error(), "late.tasks")
	})
	k.CreateTopic(t, "late.tasks", 2)
	testenv.WaitFor(t, 15*time.Second, "ready once the topic exists", func() bool { return w.Ready(t.Context()) == nil })
}

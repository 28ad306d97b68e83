package worker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
	"github.com/delayq/delayq/worker"
)

// Config.MaxHeld bounds the records a worker holds (fetched, not yet
// finished): with its handlers blocked, it holds exactly MaxHeld records
// and fetches no more; once they return, every task succeeds.
func TestMaxHeldBoundsHeldRecords(t *testing.T) {
	e := newEnv(t)
	cfg, reg := e.config(t, "w1")
	cfg.Concurrency, cfg.MaxHeld = 2, 5
	unblock := startBlocked(t, cfg, reg)
	defer unblock()
	e.Firer.Start(t)
	ids := scheduleHeld(t, e, "held", nil)
	held := func() float64 { return metricSum(t, reg, "delayq_work_running", nil) }
	testenv.WaitFor(t, 15*time.Second, "MaxHeld records held", func() bool { return held() == float64(cfg.MaxHeld) })
	// the fetch loop waits for a slot: no more is held for a while
	for range 20 {
		if h := held(); h > float64(cfg.MaxHeld) {
			t.Fatalf("%v records held, MaxHeld %d", h, cfg.MaxHeld)
		}
		time.Sleep(10 * time.Millisecond) // sampling the gauge
	}
	unblock()
	e.WaitState(t, 30*time.Second, task.StateSucceeded, ids...)
}

// MaxHeld below Concurrency could never keep every handler busy: New
// refuses it, naming both.
func TestMaxHeldBelowConcurrencyRefused(t *testing.T) {
	e := newEnv(t)
	cfg, _ := e.config(t, "w1")
	cfg.Concurrency, cfg.MaxHeld = 8, 4
	_, err := worker.New(cfg)
	if err == nil || !strings.Contains(err.Error(), "MaxHeld 4") || !strings.Contains(err.Error(), "concurrency 8") {
		t.Fatalf("New: %v, want an error naming MaxHeld and concurrency", err)
	}
}

// Config.MaxHeldBytes bounds the bytes of the records held: with records
// of about 1.3 KB, a 4 KB bound holds a few records, far fewer than
// MaxHeld; the fetch resumes as records end, and the held bytes return
// to 0.
func TestMaxHeldBytesBoundsHeldRecords(t *testing.T) {
	e := newEnv(t)
	cfg, reg := e.config(t, "w1")
	const bound, payload = 4000, 1000
	cfg.Concurrency, cfg.MaxHeld, cfg.MaxHeldBytes = 2, 100, bound
	unblock := startBlocked(t, cfg, reg)
	defer unblock()
	e.Firer.Start(t)
	ids := scheduleHeld(t, e, "bytes", []byte(`"`+strings.Repeat("x", payload-2)+`"`))
	held := func() float64 { return metricSum(t, reg, "delayq_work_running", nil) }
	heldBytes := func() float64 { return metricSum(t, reg, "delayq_work_held_bytes", nil) }
	testenv.WaitFor(t, 15*time.Second, "the byte bound reached", func() bool { return heldBytes() >= bound })
	for range 20 {
		// at most the bound plus the one record that crossed it
		if h, b := held(), heldBytes(); b > bound+2*payload || h > 5 || h < float64(cfg.Concurrency) {
			t.Fatalf("%v records, %v bytes held (bound %d bytes, records of ~%d)", h, b, bound, payload)
		}
		time.Sleep(10 * time.Millisecond) // sampling the gauges
	}
	unblock()
	e.WaitState(t, 30*time.Second, task.StateSucceeded, ids...)
	testenv.WaitFor(t, 5*time.Second, "no bytes held", func() bool { return heldBytes() == 0 })
}

// startBlocked starts a worker whose handlers block until unblock is
// called (or their context ends).
func startBlocked(t *testing.T, cfg worker.Config, reg *prometheus.Registry) (unblock func()) {
	t.Helper()
	release := make(chan struct{})
	var once sync.Once
	start(t, cfg, reg, func(w *worker.Worker) {
		w.HandleDefault(func(ctx context.Context, _ *worker.Task) error {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		})
	})
	return func() { once.Do(func() { close(release) }) }
}

// scheduleHeld schedules 30 tasks of type "held" due now, ids prefix-0..29,
// with payload when not nil, and returns their ids.
func scheduleHeld(t *testing.T, e *env, prefix string, payload []byte) []string {
	ids := make([]string, 30)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
		tk := newTask(ids[i], "held")
		if payload != nil {
			tk.Payload = payload
		}
		worktest.Schedule(t, e.Store, tk)
	}
	return ids
}

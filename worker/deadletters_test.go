package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
	"github.com/delayq/delayq/worker"
)

// Redis is the record of truth for dead tasks: with the dead topic
// missing, a task that fails permanently and one whose attempts ran out are
// dead in Redis (Get, the dead listing) within a second of their last
// attempt, their records are committed, the failed dead-letter writes are
// counted, and shutdown does not wait on them for long.
func TestDeadWithoutDeadTopic(t *testing.T) {
	e := newEnvTopics(t, task.DefaultTopic) // no dq.dead
	final := make(chan string, 2)           // the ids whose last attempt returned
	cfg, reg := e.config(t, "w1")
	logs := &logCounter{}
	cfg.Logger = slog.New(logs)
	r := start(t, cfg, reg, func(w *worker.Worker) {
		w.HandleDefault(func(ctx context.Context, tk *worker.Task) error {
			if tk.ID == "perm" {
				defer func() { final <- tk.ID }()
				return worker.Permanent(errors.New("400 bad request"))
			}
			if tk.LastAttempt() {
				defer func() { final <- tk.ID }()
			}
			return errBoom
		})
	})
	perm, exhausted := newTask("perm", "x"), newTask("exhausted", "x")
	exhausted.MaxAttempts = 2
	ctx, cancel := context.WithCancel(t.Context())
	var fg sync.WaitGroup
	fg.Go(func() { _ = e.Firer.Run(ctx) }) // fires the retry of "exhausted" too
	defer func() { cancel(); fg.Wait() }()
	worktest.Schedule(t, e.Store, perm, exhausted)

	for range 2 {
		var id string
		select {
		case id = <-final:
		case <-time.After(15 * time.Second):
			t.Fatal("no last attempt returned")
		}
		last := time.Now()
		// the bound of the issue: dead within a second of the last attempt
		testenv.WaitFor(t, time.Second, id+" dead in Redis", func() bool {
			tk, err := e.Store.Get(t.Context(), id)
			return err == nil && tk.State == task.StateDead
		})
		t.Logf("%s dead %v after its last attempt", id, time.Since(last))
	}
	dead, err := e.Store.ListDead(t.Context(), 10)
	if err != nil || len(dead) != 2 {
		t.Fatalf("dead listing: %d tasks, %v", len(dead), err)
	}
	for _, d := range dead {
		if d.Task.LastError == "" {
			t.Errorf("%s: dead without its error", d.Task.ID)
		}
	}
	// three records (perm, exhausted twice) committed although no dead
	// letter could be written
	testenv.WaitFor(t, 5*time.Second, "records committed", func() bool { return e.committedTotal(t) == 3 })
	testenv.WaitFor(t, 10*time.Second, "failed dead-letter writes counted", func() bool {
		return metricSum(t, reg, "delayq_work_dead_letter_publish_errors_total", map[string]string{"reason": "unknown_topic"}) > 0
	})
	if n := r.handled(t, "dead"); n != 2 {
		t.Errorf("handled dead %v", n)
	}
	begin := time.Now()
	r.stop()
	// the drain of queued dead letters is bounded (3s) however the broker answers
	if d := time.Since(begin); d > 8*time.Second {
		t.Errorf("shutdown took %v", d)
	}
	if n := metricSum(t, reg, "delayq_work_dead_letters_dropped_total", nil); n != 2 {
		t.Errorf("dropped %v dead letters at shutdown, want 2", n)
	}
	failed := metricSum(t, reg, "delayq_work_dead_letter_publish_errors_total", nil)
	if n := logs.count(slog.LevelWarn, "dead topic does not exist"); n != 1 || failed < 2 {
		t.Errorf("%d WARN lines about the missing dead topic for %v failed writes; want 1 a minute", n, failed)
	}
}

// logCounter is a slog.Handler that counts records by level and message.
type logCounter struct {
	mu   sync.Mutex
	msgs []slog.Record
}

func (l *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCounter) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logCounter) WithGroup(string) slog.Handler            { return l }
func (l *logCounter) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r)
	return nil
}

func (l *logCounter) count(level slog.Level, prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.msgs {
		if r.Level == level && strings.HasPrefix(r.Message, prefix) {
			n++
		}
	}
	return n
}

// With the dead topic there, the dead letter of a dead task still arrives
// (after the dead state is stored), with the task's error and attempt.
func TestDeadLetterIsPublished(t *testing.T) {
	e := newEnv(t)
	cfg, reg := e.config(t, "w1")
	start(t, cfg, reg, func(w *worker.Worker) {
		w.HandleDefault(func(ctx context.Context, tk *worker.Task) error {
			return worker.Permanent(errors.New("400 bad request"))
		})
	})
	worktest.Fire(t, e.Firer, newTask("perm", "x"))
	e.WaitState(t, 10*time.Second, task.StateDead, "perm")
	recs := worktest.ReadTopic(t, e.Kafka, "dq.dead", 1, 10*time.Second)
	if id, _ := testenv.Header(recs[0], "dq-id"); id != "perm" {
		t.Fatalf("dead letter of %q", id)
	}
	if why, _ := testenv.Header(recs[0], "dq-error"); why != "400 bad request" {
		t.Errorf("dq-error %q", why)
	}
	if att, _ := testenv.Header(recs[0], "dq-attempt"); att != "1" {
		t.Errorf("dq-attempt %q", att)
	}
	testenv.WaitFor(t, 5*time.Second, "dead letter counted", func() bool {
		return metricSum(t, reg, "delayq_work_dead_total", nil) == 1
	})
}

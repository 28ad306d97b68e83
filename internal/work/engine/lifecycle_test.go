package engine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
)

// fakeStore is the engine's Store in memory: claims answer with the code
// the test set per task id (default Claimed), finishes and parks are
// recorded.
type fakeStore struct {
	mu       sync.Mutex
	tasks    map[string]*task.Task
	codes    map[string]redisstore.ClaimCode
	finishes []redisstore.Finish
	parks    []redisstore.Park
}

func (s *fakeStore) ClaimMany(_ context.Context, cs []redisstore.Claim) ([]redisstore.ClaimResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	res := make([]redisstore.ClaimResult, len(cs))
	for i, c := range cs {
		res[i].Code = s.codes[c.ID]
		if res[i].Code == redisstore.Claimed {
			res[i].Task = s.tasks[c.ID]
		}
	}
	return res, nil
}

func (s *fakeStore) ExtendClaim(context.Context, redisstore.Claim) (bool, error)  { return true, nil }
func (s *fakeStore) ReleaseClaim(context.Context, redisstore.Claim) (bool, error) { return true, nil }
func (s *fakeStore) ReleaseMany(_ context.Context, cs []redisstore.Claim) (int, error) {
	return len(cs), nil
}

func (s *fakeStore) FinishMany(_ context.Context, fs []redisstore.Finish) ([]redisstore.FinishResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finishes = append(s.finishes, fs...)
	return make([]redisstore.FinishResult, len(fs)), nil
}

func (s *fakeStore) ParkMany(_ context.Context, ps []redisstore.Park) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.parks = append(s.parks, ps...)
	return len(ps), nil
}

func (s *fakeStore) Unpark(context.Context, string) (int, error) { return 0, nil }
func (s *fakeStore) ParkedTypes(context.Context) (map[string]int64, error) {
	return map[string]int64{}, nil
}

func (s *fakeStore) finished() map[string]redisstore.Kind {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]redisstore.Kind{}
	for _, f := range s.finishes {
		out[f.ID] = f.Kind
	}
	return out
}

// fakeReader hands out its records, then blocks; commits are recorded.
type fakeReader struct {
	msgs chan kafka.Message
	mu   sync.Mutex
	next map[int]int64 // partition -> committed offset + 1
}

func (r *fakeReader) FetchMessage(ctx context.Context) (kafka.Message, error) {
	select {
	case m := <-r.msgs:
		return m, nil
	case <-ctx.Done():
		return kafka.Message{}, ctx.Err()
	}
}

func (r *fakeReader) CommitMessages(_ context.Context, msgs ...kafka.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		r.next[m.Partition] = max(r.next[m.Partition], m.Offset+1)
	}
	return nil
}

func (r *fakeReader) committed(partition int) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.next[partition]
}

func (r *fakeReader) Stats() kafka.ReaderStats { return kafka.ReaderStats{} }
func (r *fakeReader) Close() error             { return nil }

type discardWriter struct {
	mu      sync.Mutex
	written []kafka.Message
}

func (w *discardWriter) WriteMessages(_ context.Context, msgs ...kafka.Message) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.written = append(w.written, msgs...)
	return nil
}

func (w *discardWriter) Close() error { return nil }

type pausedTypes []string

func (p pausedTypes) Paused(typ string) bool { return slices.Contains(p, typ) }
func (p pausedTypes) Synced() bool           { return false }

// The engine behind its seams (a Store, a Kafka reader and writer in
// memory): each record ends in the state its lifecycle decides, and every
// one is committed once it ended.
func TestLifecycleBehindFakeSeams(t *testing.T) {
	store := &fakeStore{tasks: map[string]*task.Task{}, codes: map[string]redisstore.ClaimCode{}}
	r := &fakeReader{msgs: make(chan kafka.Message, 16), next: map[int]int64{}}
	dw := &discardWriter{}
	fire := func(tk *task.Task, code redisstore.ClaimCode) {
		tk.Gen, tk.Attempt, tk.DueAt = 1, 1, time.Now()
		store.tasks[tk.ID], store.codes[tk.ID] = tk, code
		m := record.Encode(tk, "dq.tasks", time.Now())
		m.Partition, m.Offset = 0, int64(len(r.msgs))
		r.msgs <- m
	}
	fire(&task.Task{ID: "ok", Type: "t"}, redisstore.Claimed)
	fire(&task.Task{ID: "fails", Type: "t"}, redisstore.Claimed)
	fire(&task.Task{ID: "stale", Type: "t"}, redisstore.ClaimStale)
	fire(&task.Task{ID: "paused", Type: "p"}, redisstore.Claimed)
	fire(&task.Task{ID: "dies", Type: "t", MaxAttempts: 1}, redisstore.Claimed)
	r.msgs <- kafka.Message{Partition: 0, Offset: int64(len(r.msgs)), Value: []byte("no headers")}
	total := int64(len(r.msgs))

	var mu sync.Mutex
	ran := map[string]int{}
	var outcomes []OutcomeKind
	handler := HandlerFunc(func(_ context.Context, x *Execution) error {
		mu.Lock()
		defer mu.Unlock()
		ran[x.ID]++
		if x.ID == "ok" {
			return nil
		}
		return errors.New("boom")
	})
	e, err := New(Config{Concurrency: 2, MaxHeld: 8, MaxHeldBytes: 1 << 20, MaxPayload: 1 << 20,
		DefaultTimeout: time.Second, ClaimMargin: time.Second, CommitInterval: 10 * time.Millisecond,
		ShutdownTimeout: time.Second, PauseReconcile: time.Hour, Retention: time.Hour, Instance: "w",
		DeadTopic: "dq.dead", DeadLetterQueue: 10, DeadLetterMaxAge: time.Minute,
		Logger: slog.New(slog.DiscardHandler), MetricsMaxTypes: 10,
		Handler: func(string) HandlerFunc { return handler }, Backoff: func(int) time.Duration { return time.Minute },
		Pause: pausedTypes{"p"},
		OnOutcome: func(o Outcome) {
			mu.Lock()
			defer mu.Unlock()
			outcomes = append(outcomes, o.Kind)
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx, store, r, dw) }()
	deadline := time.Now().Add(10 * time.Second)
	for r.committed(0) < total {
		if time.Now().After(deadline) {
			t.Fatalf("committed up to %d of %d", r.committed(0), total)
		}
		time.Sleep(5 * time.Millisecond) // polling the fake reader's commits
	}
	stop()
	if err := <-done; err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}

	want := map[string]redisstore.Kind{"ok": redisstore.Succeeded, "fails": redisstore.Retry, "dies": redisstore.Dead}
	if got := store.finished(); len(got) != len(want) || got["ok"] != want["ok"] || got["fails"] != want["fails"] || got["dies"] != want["dies"] {
		t.Fatalf("finished %v, want %v", got, want)
	}
	if len(store.parks) != 1 || store.parks[0].ID != "paused" {
		t.Fatalf("parked %+v, want the paused type's task", store.parks)
	}
	if ran["stale"] != 0 || ran["paused"] != 0 || ran["ok"] != 1 || ran["fails"] != 1 || ran["dies"] != 1 {
		t.Fatalf("handlers ran %v", ran)
	}
	if slices.Sort(outcomes); !slices.Equal(outcomes, []OutcomeKind{OutcomeDead, OutcomeFailed, OutcomeSucceeded}) {
		t.Fatalf("outcomes %v", outcomes)
	}
	if len(dw.written) != 2 { // the dead task's dead letter and the hostile record
		t.Fatalf("%d dead letters, want 2", len(dw.written))
	}
}

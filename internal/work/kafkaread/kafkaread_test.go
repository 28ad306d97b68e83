package kafkaread

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/retry"
)

// script is a Reader whose fetches answer from a list, then block until
// ctx ends.
type script struct {
	mu      sync.Mutex
	answers []error // nil: a record
	fetches int
	commit  func(ctx context.Context) error
}

func (s *script) FetchMessage(ctx context.Context) (kafka.Message, error) {
	s.mu.Lock()
	if len(s.answers) == 0 {
		s.mu.Unlock()
		<-ctx.Done()
		return kafka.Message{}, ctx.Err()
	}
	err := s.answers[0]
	s.answers = s.answers[1:]
	s.fetches++
	n := s.fetches
	s.mu.Unlock()
	if err != nil {
		return kafka.Message{}, err
	}
	return kafka.Message{Offset: int64(n)}, nil
}

func (s *script) CommitMessages(ctx context.Context, _ ...kafka.Message) error { return s.commit(ctx) }
func (s *script) Stats() kafka.ReaderStats                                     { return kafka.ReaderStats{} }
func (s *script) Close() error                                                 { return nil }

type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *logBuf) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// TestFetcherOutlastsFailures: a failed fetch is warned about and tried
// again after a backoff that doubles and starts over after a success.
func TestFetcherOutlastsFailures(t *testing.T) {
	broker := errors.New("broker down")
	r := &script{answers: []error{broker, broker, nil, broker, nil}}
	var log logBuf
	f := Fetcher{R: r, Log: slog.New(slog.NewTextHandler(&log, nil)), Name: "worker",
		bo: retry.Backoff{Min: time.Millisecond, Max: 10 * time.Millisecond, NoJitter: true}}
	for want := int64(3); want <= 5; want += 2 {
		m, ok, err := f.Next(t.Context())
		if !ok || err != nil || m.Offset != want {
			t.Fatalf("Next: %v %v %v, want the record of fetch %d", m.Offset, ok, err, want)
		}
	}
	got := log.String()
	if n := strings.Count(got, `msg="worker: fetch" err="broker down"`); n != 3 {
		t.Errorf("%d warnings for 3 failed fetches:\n%s", n, got)
	}
	// 1 ms, 2 ms, then 1 ms again: the success reset the backoff
	if i, j, k := strings.Index(got, "retry_in=1ms"), strings.Index(got, "retry_in=2ms"), strings.LastIndex(got, "retry_in=1ms"); i < 0 || j < i || k < j {
		t.Errorf("backoff not 1, 2, then 1 ms:\n%s", got)
	}
}

// TestFetcherStops: a closed reader ends the loop with an error naming
// the consumer; an ended context ends it without one, even mid-backoff.
func TestFetcherStops(t *testing.T) {
	f := Fetcher{R: &script{answers: []error{io.EOF}}, Log: slog.New(slog.DiscardHandler), Name: "hooks"}
	if _, ok, err := f.Next(t.Context()); ok || err == nil || err.Error() != "hooks: kafka reader closed" {
		t.Fatalf("closed reader: ok %v, err %v", ok, err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	f = Fetcher{R: &script{answers: []error{errors.New("broker down")}}, Log: slog.New(slog.DiscardHandler), Name: "hooks",
		bo: retry.Backoff{Min: time.Hour, Max: time.Hour, NoJitter: true}}
	done := make(chan error, 1)
	go func() {
		_, ok, err := f.Next(ctx)
		if ok {
			err = errors.New("ok after cancel")
		}
		done <- err
	}()
	time.Sleep(20 * time.Millisecond) // in its hour of backoff
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("stopped mid-backoff: %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Next did not return after its context ended")
	}
}

// TestCommitEvery: commits run at the interval under a deadline; a
// failure is warned about while running, not once the loop is stopping.
func TestCommitEvery(t *testing.T) {
	var log logBuf
	ctx, cancel := context.WithCancel(t.Context())
	var mu sync.Mutex
	calls := 0
	commit := func(cctx context.Context) error {
		if _, ok := cctx.Deadline(); !ok {
			t.Error("commit without a deadline")
		}
		mu.Lock()
		defer mu.Unlock()
		calls++
		switch calls {
		case 2:
			return errors.New("coordinator moved")
		case 4:
			cancel() // a stop during this commit: its error is not warned about
			return cctx.Err()
		}
		return nil
	}
	done := make(chan struct{})
	go func() {
		CommitEvery(ctx, time.Millisecond, slog.New(slog.NewTextHandler(&log, nil)), "hooks", commit)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("CommitEvery did not return after its context ended")
	}
	if calls != 4 {
		t.Errorf("%d commits, want 4 (the loop ends with its context)", calls)
	}
	if got := log.String(); strings.Count(got, "level=WARN") != 1 || !strings.Contains(got, `msg="hooks: commit offsets" err="coordinator moved"`) {
		t.Errorf("want one warning, for the failed commit:\n%s", got)
	}
}

// TestDrain: Drain reports handlers that returned within the time, and
// gives up on ones that did not.
func TestDrain(t *testing.T) {
	var wg sync.WaitGroup
	release := make(chan struct{})
	wg.Go(func() { <-release })
	if Drain(&wg, 20*time.Millisecond) {
		t.Fatal("Drain = true while a handler still runs")
	}
	close(release)
	if !Drain(&wg, 10*time.Second) {
		t.Fatal("Drain = false after every handler returned")
	}
}

package engine

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/record"
)

// fakeDeadWriter answers every write with the next error of errs (the last
// one once they run out); a nil error writes the batch.
type fakeDeadWriter struct {
	mu      sync.Mutex
	errs    []func(msgs []kafka.Message) error
	written []kafka.Message
	block   bool // block until ctx ends
}

func (f *fakeDeadWriter) WriteMessages(ctx context.Context, msgs ...kafka.Message) error {
	f.mu.Lock()
	if f.block {
		f.mu.Unlock()
		<-ctx.Done()
		return ctx.Err()
	}
	defer f.mu.Unlock()
	var e func([]kafka.Message) error
	if len(f.errs) > 0 {
		e = f.errs[0]
		if len(f.errs) > 1 {
			f.errs = f.errs[1:]
		}
	}
	if e != nil {
		if err := e(msgs); err != nil {
			return err
		}
	}
	f.written = append(f.written, msgs...)
	return nil
}

func (f *fakeDeadWriter) Close() error { return nil }

func newTestDeadLetters(w MessageWriter, queue int, maxAge time.Duration) (*deadLetters, *metrics) {
	m := newMetrics(prometheus.NewRegistry(), 100)
	return newDeadLetters(w, "dq.dead", queue, maxAge, slog.New(slog.DiscardHandler), m), m
}

// A dead letter the broker refuses as too large goes again without its
// value (its size in dq-payload-bytes); one that keeps failing is dropped
// after maxAge, counted, and never blocks the queue behind it for longer.
func TestDeadLettersTooLargeAndExpired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		unknown := func([]kafka.Message) error { return kafka.UnknownTopicOrPartition }
		fw := &fakeDeadWriter{errs: []func([]kafka.Message) error{
			func([]kafka.Message) error { return kafka.WriteErrors{kafka.MessageSizeTooLarge} },
			nil,     // the letter without its value is written
			unknown, // the second letter: the topic is gone from now on
		}}
		d, m := newTestDeadLetters(fw, 10, time.Minute)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { d.run(t.Context(), stop, deadDrain) })

		d.enqueue(kafka.Message{Key: []byte("big"), Value: make([]byte, 10)})
		time.Sleep(time.Second) // past the first retry's backoff
		synctest.Wait()
		fw.mu.Lock()
		if len(fw.written) != 1 || fw.written[0].Value != nil || !hasHeader(fw.written[0], record.HeaderPayloadBytes, "10") {
			t.Fatalf("too-large dead letter written as %+v", fw.written)
		}
		fw.mu.Unlock()

		d.enqueue(kafka.Message{Key: []byte("lost")})
		time.Sleep(2 * time.Minute) // retried with backoff past maxAge
		synctest.Wait()
		if n := value(m.deadDropped.WithLabelValues("expired")); n != 1 {
			t.Errorf("expired drops %v, want 1", n)
		}
		if n := value(m.deadErrors.WithLabelValues("unknown_topic")); n < 2 {
			t.Errorf("unknown_topic errors %v", n)
		}
		if n := value(m.deadQueued); n != 0 {
			t.Errorf("queued gauge %v", n)
		}
		close(stop)
		wg.Wait()
	})
}

// The queue is bounded (a full one drops and counts), and shutdown waits at
// most the drain for a broker that does not answer, then drops what is
// left.
func TestDeadLettersBoundedQueueAndDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fw := &fakeDeadWriter{block: true}
		d, m := newTestDeadLetters(fw, 2, time.Hour)
		for range 5 {
			d.enqueue(kafka.Message{Key: []byte("x")})
		}
		if n := value(m.deadDropped.WithLabelValues("queue_full")); n != 3 {
			t.Errorf("queue_full drops %v, want 3", n)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { d.run(t.Context(), stop, deadDrain) })
		synctest.Wait() // the first write blocks
		begin := time.Now()
		close(stop)
		wg.Wait()
		if took := time.Since(begin); took != deadDrain {
			t.Errorf("shutdown took %v, want the drain %v", took, deadDrain)
		}
		if n := value(m.deadDropped.WithLabelValues("shutdown")); n != 2 {
			t.Errorf("shutdown drops %v, want 2", n)
		}
	})
}

func hasHeader(m kafka.Message, key, value string) bool {
	for _, h := range m.Headers {
		if h.Key == key && string(h.Value) == value {
			return true
		}
	}
	return false
}

// value reads a counter or gauge.
func value(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue() + m.GetGauge().GetValue()
}

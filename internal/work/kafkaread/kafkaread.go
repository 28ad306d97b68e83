// Package kafkaread is the consuming seam to Kafka that the worker
// (package worker) and the outcome hooks' consumer (internal/work) share:
// the part of a kafka-go Reader they use, the fetch that outlasts a broker
// outage, and the loop that commits finished offsets. Each consumer keeps
// its own idea of what is finished; this package owns how a fetch fails
// and how commits are paced, so both consumers fail the same way.
package kafkaread

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/retry"
)

// Reader is the part of a *kafka.Reader (a consumer group member) that
// the consumers use; tests put a fake in its place.
type Reader interface {
	FetchMessage(ctx context.Context) (kafka.Message, error)
	CommitMessages(ctx context.Context, msgs ...kafka.Message) error
	Stats() kafka.ReaderStats
	Close() error
}

// Fetcher fetches records one at a time and outlasts a failing broker:
// a failed fetch is logged at WARN and tried again after a backoff (100
// ms doubling to 5 s, reset by a success), for as long as ctx lasts.
type Fetcher struct {
	R   Reader
	Log *slog.Logger
	// Name starts the warning and the error of a closed reader
	// ("worker", "hooks").
	Name string

	bo retry.Backoff
}

// Next returns the next record. ok is false when the loop must stop:
// err is nil when ctx ended (a stop), and names the consumer when the
// reader was closed under it (io.EOF from kafka-go: nothing more will
// come, so retrying would spin).
func (f *Fetcher) Next(ctx context.Context) (m kafka.Message, ok bool, err error) {
	if f.bo.Min == 0 {
		f.bo = retry.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second, NoJitter: true}
	}
	for {
		m, err := f.R.FetchMessage(ctx)
		if err == nil {
			f.bo.Reset()
			return m, true, nil
		}
		if ctx.Err() != nil {
			return kafka.Message{}, false, nil
		}
		if errors.Is(err, io.EOF) {
			return kafka.Message{}, false, fmt.Errorf("%s: kafka reader closed", f.Name)
		}
		delay := f.bo.Next()
		f.Log.Warn(f.Name+": fetch", "err", err, "retry_in", delay)
		if !retry.Sleep(ctx, delay) {
			return kafka.Message{}, false, nil
		}
	}
}

// CommitEvery calls commit every interval until ctx ends, each call with
// 10 s to finish; a failure is logged at WARN (not after ctx ended: a
// stop cancels the commit in flight, and the caller commits once more
// after its handlers finished). The final commit is the caller's.
func CommitEvery(ctx context.Context, interval time.Duration, log *slog.Logger, name string, commit func(context.Context) error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := commit(cctx); err != nil && ctx.Err() == nil {
				log.Warn(name+": commit offsets", "err", err)
			}
			cancel()
		}
	}
}

// Drain waits at most d for a consumer's handlers (wg) to return at
// shutdown and reports whether they did; on false the caller cancels them
// and leaves their records uncommitted.
func Drain(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

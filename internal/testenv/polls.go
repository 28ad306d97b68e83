package testenv

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Stamped is a record and the time PollFetches returned it.
type Stamped struct {
	R  *kgo.Record
	At time.Time
}

// Polls polls a franz-go client on a goroutine of its own and stamps each
// fetch as PollFetches returns it, so that a benchmark's bookkeeping
// never delays a poll: what a consumer measuring lag needs.
type Polls struct {
	// C carries the records of each non-empty fetch.
	C      <-chan []Stamped
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// StampPolls starts polling cl until Stop (which does not close cl).
func StampPolls(cl *kgo.Client) *Polls {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan []Stamped, 1<<16)
	p := &Polls{C: ch, cancel: cancel}
	p.wg.Go(func() {
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			at := time.Now()
			var batch []Stamped
			fs.EachRecord(func(r *kgo.Record) { batch = append(batch, Stamped{r, at}) })
			if len(batch) > 0 {
				select {
				case ch <- batch:
				case <-ctx.Done():
				}
			}
		}
	})
	return p
}

// Stop ends the polling and waits for its goroutine.
func (p *Polls) Stop() {
	p.cancel()
	p.wg.Wait()
}

// Quantile is the q-quantile of ds (nearest rank), 0 when empty.
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[max(0, min(len(s)-1, int(math.Ceil(q*float64(len(s))))-1))]
}

// LagDist prints the p50, p99, p99.9 and max of ds in milliseconds.
func LagDist(ds []time.Duration) string {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return fmt.Sprintf("p50 %.1f  p99 %.1f  p99.9 %.1f  max %.1f ms",
		ms(Quantile(ds, 0.5)), ms(Quantile(ds, 0.99)), ms(Quantile(ds, 0.999)), ms(Quantile(ds, 1)))
}

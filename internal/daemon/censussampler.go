package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/delayq/delayq/api"
)

// The gauge sampler: every gaugeSampleEvery while the daemon runs, the
// totals GET /v1/stats computes (scheduled, firing, dead, overdue) and the
// journal depth, into a ring of the last gaugeSamplesKept samples (an
// hour), which GET /v1/history answers as its gauges. The samples live in
// this daemon's memory only: a restart starts an empty ring, and each
// daemon of a namespace has its own. A sample whose Redis read fails is
// skipped (a gap in the series), not written as zeros.

const (
	gaugeSampleEvery = 15 * time.Second
	gaugeSamplesKept = int(time.Hour / gaugeSampleEvery)
)

// gaugeSampler keeps the samples.
type gaugeSampler struct {
	every time.Duration
	mu    sync.Mutex
	ring  []api.Gauge // oldest first once full: ring[next:] then ring[:next]
	next  int
	full  bool
}

func newGaugeSampler(every time.Duration, keep int) *gaugeSampler {
	return &gaugeSampler{every: every, ring: make([]api.Gauge, keep)}
}

// run takes a sample now and every g.every until ctx ends; sample answers
// false when it has none to give (Redis down).
func (g *gaugeSampler) run(ctx context.Context, sample func(ctx context.Context) (api.Gauge, bool)) {
	t := time.NewTicker(g.every)
	defer t.Stop()
	for {
		if s, ok := sample(ctx); ok {
			g.add(s)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (g *gaugeSampler) add(s api.Gauge) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ring[g.next] = s
	g.next++
	if g.next == len(g.ring) {
		g.next, g.full = 0, true
	}
}

// since is the samples taken at or after from, oldest first.
func (g *gaugeSampler) since(from time.Time) []api.Gauge {
	g.mu.Lock()
	defer g.mu.Unlock()
	all := g.ring[:g.next]
	if g.full {
		all = append(append([]api.Gauge{}, g.ring[g.next:]...), g.ring[:g.next]...)
	}
	out := []api.Gauge{}
	for _, s := range all {
		if !s.At.Before(from) {
			out = append(out, s)
		}
	}
	return out
}

// sampleGauges reads one sample: the store's figures summed as GET
// /v1/stats sums them, and the journal depth.
func (a *App) sampleGauges(ctx context.Context) (api.Gauge, bool) {
	st, e := a.core.storeFor()
	if e != nil {
		return api.Gauge{}, false
	}
	g := api.Gauge{At: api.Time{Time: time.Now().UTC().Truncate(time.Millisecond)}}
	err := a.core.inStore(ctx, func(ctx context.Context) error {
		shards, err := st.Stats(ctx)
		for _, s := range shards {
			g.Scheduled += s.Scheduled
			g.Firing += s.Firing
			g.Dead += s.Dead
			g.Overdue += s.Overdue
		}
		return err
	})
	if err != nil {
		return api.Gauge{}, false
	}
	g.JournalDepth = a.core.journalDepth()
	return g, true
}

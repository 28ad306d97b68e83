package daemon

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delayq/delayq/api"
	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
)

// The census endpoints (see redisstore's census.go for what they read):
//
//	GET /v1/counts                          the tasks per type and state
//	GET /v1/load?horizon=1h&step=5m&type=T  the tasks due per step of the next horizon
//	GET /v1/history?window=1h&step=1m       the tasks finished per step of the last window, and the gauges
//
// GET /v1/counts scans the shards' sets (capped): its answer is cached for
// countsTTL and shared by every caller, and callers that arrive while a
// scan runs wait for it, so a console left open by many operators costs
// one scan per countsTTL. The scan runs on its own context (bounded by
// censusTimeout), not the first caller's: one caller hanging up does not
// fail the others. GET /v1/load and GET /v1/history are not cached: their
// overall figures are one ZCOUNT per step and shard.

// The census' limits.
const (
	countsTTL     = 5 * time.Second
	censusTimeout = 30 * time.Second
	maxBuckets    = 288 // buckets of a load, points of a history
	maxHorizon    = 7 * 24 * time.Hour
	maxWindow     = 24 * time.Hour
	minCensusStep = time.Second
)

// census is the daemon's state of the census endpoints: the cached counts
// and the gauge sampler (censussampler.go).
type census struct {
	// capPerSet is the members scanned per set and shard by GET /v1/counts
	// and GET /v1/load (0: redisstore.CensusCap); tests lower it
	capPerSet atomic.Int64

	mu      sync.Mutex
	at      time.Time     // when val was read
	val     *api.Counts   // nil before the first scan
	running chan struct{} // closed when the running scan ends; nil when none runs
	lastErr error         // the error of the last scan (nil: it succeeded)

	gauges *gaugeSampler
}

func newCensus() *census {
	return &census{gauges: newGaugeSampler(gaugeSampleEvery, gaugeSamplesKept)}
}

// counts answers the cached counts, or scans (once, for every caller
// waiting) when they are older than countsTTL.
func (cn *census) counts(ctx context.Context, scan func(ctx context.Context) (*api.Counts, error)) (*api.Counts, error) {
	cn.mu.Lock()
	for {
		if cn.val != nil && time.Since(cn.at) < countsTTL {
			v := cn.val
			cn.mu.Unlock()
			return v, nil
		}
		if cn.running == nil {
			break
		}
		ch := cn.running
		cn.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ch:
		}
		cn.mu.Lock()
		if cn.lastErr != nil && (cn.val == nil || time.Since(cn.at) >= countsTTL) {
			err := cn.lastErr
			cn.mu.Unlock()
			return nil, err
		}
	}
	ch := make(chan struct{})
	cn.running = ch
	cn.mu.Unlock()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), censusTimeout)
	v, err := scan(sctx)
	cancel()
	cn.mu.Lock()
	cn.running, cn.lastErr = nil, err
	if err == nil {
		cn.val, cn.at = v, time.Now()
	}
	cn.mu.Unlock()
	close(ch)
	return v, err
}

func (a *App) handleCounts(c *call) (int, any, *wire.Error) {
	if _, e := query(c); e != nil {
		return 0, nil, e
	}
	st, e := a.core.storeFor()
	if e != nil {
		return 0, nil, e
	}
	v, err := a.census.counts(c.Context(), func(ctx context.Context) (*api.Counts, error) {
		cs, err := st.Census(ctx, int(a.census.capPerSet.Load()))
		a.core.noteStore(err)
		if err != nil {
			return nil, err
		}
		return countsOf(cs), nil
	})
	if err != nil {
		if c.Context().Err() != nil {
			return 0, nil, wire.Unavailable("counts: the request ended before the scan")
		}
		return 0, nil, a.bulkStoreError("counts", err)
	}
	return http.StatusOK, v, nil
}

// countsOf is the store's census as the API answers it, sorted by type.
func countsOf(cs *redisstore.Census) *api.Counts {
	out := &api.Counts{At: api.Time{Time: cs.At}, Types: make([]api.TypeCount, 0, len(cs.Types)),
		Totals: figures(cs.Totals), Sampled: cs.Sampled, Scanned: cs.Scanned}
	for typ, tc := range cs.Types {
		out.Types = append(out.Types, api.TypeCount{Type: typ, CountFigures: figures(tc)})
	}
	slices.SortFunc(out.Types, func(a, b api.TypeCount) int { return cmp.Compare(a.Type, b.Type) })
	return out
}

func figures(tc redisstore.TypeCounts) api.CountFigures {
	return api.CountFigures{Scheduled: tc.Scheduled, Retrying: tc.Retrying, Paused: tc.Paused, Succeeded: tc.Succeeded, Dead: tc.Dead}
}

// queryDuration reads an optional duration parameter (def when absent)
// between least and most; bad says what is wrong ("" when nothing is).
func queryDuration(q url.Values, name string, def, least, most time.Duration) (time.Duration, *wire.Error) {
	v, ok := q[name]
	if !ok {
		return def, nil
	}
	d, err := time.ParseDuration(v[0])
	if err != nil || d < least || d > most {
		return 0, wire.InvalidTask(fmt.Sprintf("%s: %q is not a duration between %v and %v (such as \"5m\")",
			name, task.Truncate(v[0], 32), least, most))
	}
	return d, nil
}

// spanQuery reads a span (horizon, window) and its step: at most
// maxBuckets steps in the span.
func spanQuery(q url.Values, span string, defSpan, maxSpan, defStep time.Duration) (time.Duration, time.Duration, *wire.Error) {
	sp, e := queryDuration(q, span, defSpan, minCensusStep, maxSpan)
	if e != nil {
		return 0, 0, e
	}
	step, e := queryDuration(q, "step", defStep, minCensusStep, maxSpan)
	if e != nil {
		return 0, 0, e
	}
	if step > sp {
		return 0, 0, wire.InvalidTask(fmt.Sprintf("step: %v is longer than the %s (%v)", step, span, sp))
	}
	if n := (sp + step - 1) / step; n > maxBuckets {
		return 0, 0, wire.InvalidTask(fmt.Sprintf("step: %v makes %d steps in the %s of %v; at most %d", step, n, span, sp, maxBuckets))
	}
	return sp, step, nil
}

func (a *App) handleLoad(c *call) (int, any, *wire.Error) {
	q, e := query(c, "horizon", "step", "type")
	if e != nil {
		return 0, nil, e
	}
	horizon, step, e := spanQuery(q, "horizon", time.Hour, maxHorizon, 5*time.Minute)
	if e != nil {
		return 0, nil, e
	}
	typ, e := queryType(q, "leave it out for every type")
	if e != nil {
		return 0, nil, e
	}
	st, e := a.core.storeFor()
	if e != nil {
		return 0, nil, e
	}
	var l *redisstore.Load
	err := a.inCensus(c.Context(), func(ctx context.Context) (err error) {
		l, err = st.Load(ctx, redisstore.LoadQuery{Horizon: horizon, Step: step, Type: typ, Cap: int(a.census.capPerSet.Load())})
		return err
	})
	if err != nil {
		return 0, nil, a.bulkStoreError("load", err)
	}
	out := api.Load{From: api.Time{Time: l.From}, Step: api.Duration(step), Horizon: api.Duration(horizon), Overdue: l.Overdue,
		Buckets: make([]api.LoadBucket, len(l.Buckets)), Types: make([]api.TypeLoad, 0, len(l.Types)), Sampled: l.Sampled}
	for i, n := range l.Buckets {
		out.Buckets[i] = api.LoadBucket{Start: api.Time{Time: l.From.Add(time.Duration(i) * step)}, Count: n}
	}
	for t, tl := range l.Types {
		out.Types = append(out.Types, api.TypeLoad{Type: t, Counts: tl.Counts, Overdue: tl.Overdue})
	}
	slices.SortFunc(out.Types, func(a, b api.TypeLoad) int { return cmp.Compare(a.Type, b.Type) })
	return http.StatusOK, out, nil
}

func (a *App) handleHistory(c *call) (int, any, *wire.Error) {
	q, e := query(c, "window", "step")
	if e != nil {
		return 0, nil, e
	}
	window, step, e := spanQuery(q, "window", time.Hour, maxWindow, time.Minute)
	if e != nil {
		return 0, nil, e
	}
	st, e := a.core.storeFor()
	if e != nil {
		return 0, nil, e
	}
	var ps []redisstore.HistoryPoint
	err := a.inCensus(c.Context(), func(ctx context.Context) (err error) {
		ps, err = st.History(ctx, window, step)
		return err
	})
	if err != nil {
		return 0, nil, a.bulkStoreError("history", err)
	}
	out := api.History{Step: api.Duration(step), Window: api.Duration(window), Points: make([]api.HistoryPoint, len(ps)),
		Gauges: a.census.gauges.since(time.Now().Add(-window))}
	for i, p := range ps {
		out.Points[i] = api.HistoryPoint{At: api.Time{Time: p.At}, Succeeded: p.Succeeded, Dead: p.Dead}
	}
	return http.StatusOK, out, nil
}

// inCensus runs a census read (load, history) like inStore, with the
// census' longer bound: its work grows with the shards and the steps.
func (a *App) inCensus(ctx context.Context, op func(ctx context.Context) error) error {
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(a.cfg.RedisTimeout, censusTimeout))
	defer cancel()
	err := op(octx)
	a.core.noteStore(err)
	return err
}

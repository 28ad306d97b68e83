package worker

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/internal/pause"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/retry"
)

// PauseView says which task types are paused. delayq's own is the pause
// state in etcd that `dq types pause` and POST /v1/types/{type}/pause
// write: [NewLivePause] gives it to embedded workers, as the work binary
// applies it. Its methods are called concurrently and must not block.
//
// With Config.Pause set, a claimed task whose type is paused is parked in
// Redis instead of running: it keeps its due time and its attempt (parking
// is not an attempt) and waits, invisible to the event processes, until
// its type is resumed and the task is unparked (the daemon's resume
// endpoint does it at once). The worker also reconciles every
// Config.PauseReconcile: every type with parked tasks that the view does
// not say is paused is unparked, which repairs a park that landed after
// its type's resume had unparked it.
type PauseView interface {
	// Paused reports whether tasks of typ must not run now.
	Paused(typ string) bool
	// Synced reports whether the view is known to be current. While it is
	// not (e.g. before it was read the first time), the reconciler unparks
	// nothing: an empty view would unpark types still paused.
	Synced() bool
}

// parkStore is what parking and the reconciler need of the store.
type parkStore interface {
	ParkMany(ctx context.Context, ps []redisstore.Park) (int, error)
	Unpark(ctx context.Context, typ string) (int, error)
	ParkedTypes(ctx context.Context) (map[string]int64, error)
}

// defaultPauseReconcile is the default of Config.PauseReconcile.
const defaultPauseReconcile = 10 * time.Second

// splitPaused separates the items whose type the PauseView says is
// paused.
func (w *Worker) splitPaused(ready []*item) (run, paused []*item) {
	v := w.cfg.Pause
	if v == nil {
		return ready, nil
	}
	run = ready[:0:0]
	for _, it := range ready {
		if v.Paused(it.t.Type) {
			paused = append(paused, it)
		} else {
			run = append(run, it)
		}
	}
	return run, paused
}

// parkItems parks claimed items of paused types: one ParkMany per type (so
// that what each parked is counted by type), retried while Redis fails.
// Every item ends as finished (its offset may be committed): parked, or
// found fired again, cancelled or finished meanwhile (nothing of ours to
// park). The park gives the claim up, whatever it answers about the task.
func (w *Worker) parkItems(ctx context.Context, items []*item) {
	byType := make(map[string][]*item)
	for _, it := range items {
		byType[it.t.Type] = append(byType[it.t.Type], it)
	}
	for _, typ := range slices.Sorted(maps.Keys(byType)) {
		w.parkType(ctx, typ, byType[typ])
	}
}

func (w *Worker) parkType(ctx context.Context, typ string, items []*item) {
	ps := make([]redisstore.Park, len(items))
	for i, it := range items {
		ps[i] = redisstore.Park{ID: it.t.ID, Gen: it.t.Gen, Type: typ, Owner: it.cl.value, Shard: it.t.Shard}
	}
	bo := redisBackoff()
	for {
		// a retry after a lost answer is safe: a task parked by the first
		// try has a new generation, so the second finds it stale
		n, err := w.parker.ParkMany(ctx, ps)
		w.met.parkedAdd(typ, n) // also what a partly failed call parked
		if ctx.Err() != nil {
			for _, it := range items {
				w.claims.release(context.WithoutCancel(ctx), it.cl)
				w.end(it.m, false)
			}
			return
		}
		if err == nil {
			if n < len(items) {
				w.log.Debug("some tasks of a paused type were not parked: fired again, cancelled or finished meanwhile",
					"type", typ, "parked", n, "records", len(items))
			}
			for _, it := range items {
				it.log.Debug("parked: its type is paused", "type", typ)
				w.met.handledInc(typ, outParked)
				w.end(it.m, true)
			}
			return
		}
		w.met.redisRetries.WithLabelValues("park").Add(float64(len(items)))
		delay := bo.Next()
		w.log.Warn("redis: parking tasks of a paused type failed; retrying", "type", typ, "err", err,
			"records", len(items), "retry_in", delay)
		retry.Sleep(ctx, delay) // ctx's end is handled above
	}
}

// reconcileLoop unparks, every Config.PauseReconcile until ctx ends, the
// parked tasks of every type the PauseView does not say is paused.
func (w *Worker) reconcileLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.PauseReconcile)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.reconcile(ctx)
	}
}

// reconcile runs one pass of reconcileLoop. Each work process runs it:
// Unpark is safe to repeat and to race.
func (w *Worker) reconcile(ctx context.Context) {
	v := w.cfg.Pause
	if !v.Synced() {
		return
	}
	parked, err := w.parker.ParkedTypes(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("pause reconcile: read parked types", "err", err)
		}
		return
	}
	for _, typ := range slices.Sorted(maps.Keys(parked)) {
		if parked[typ] <= 0 || v.Paused(typ) {
			continue
		}
		if !v.Synced() {
			return // asked after Paused: a view that lost its sync meanwhile is not trusted
		}
		n, err := w.parker.Unpark(ctx, typ)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			w.log.Warn("pause reconcile: unpark", "type", typ, "err", err)
			continue
		}
		w.met.reconcileUnparked.Add(float64(n))
		if n > 0 {
			w.log.Info("pause reconcile: unparked tasks of a type that is not paused", "type", typ, "tasks", n)
		}
	}
}

// LivePauseOptions configure [NewLivePause].
type LivePauseOptions struct {
	// Namespace of the pause state in etcd; it must match the other delayq
	// processes (default "dq").
	Namespace string
	Logger    *slog.Logger // default: discard
}

// LivePause is a [PauseView] of delayq's pause state in etcd (what
// `dq types pause|resume` and the daemon's /v1/types/{type}/pause and
// /resume write), kept current through a watch — what the work binary
// applies.
//
// Set it as Config.Pause: Worker.Run then watches the state for as long as
// it runs (a change applies within about a second). Until the state was
// listed once (etcd unreachable at start) no type is paused; while etcd is
// unreachable later, the last state stays in force.
type LivePause struct {
	w       *pause.Watcher
	running atomic.Bool
}

// NewLivePause returns the live pause state of a namespace, read from etcd
// through cli. It does not connect; the caller closes cli after the
// worker's Run returned.
func NewLivePause(cli *clientv3.Client, o LivePauseOptions) (*LivePause, error) {
	if o.Namespace == "" {
		o.Namespace = "dq"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	pw, err := pause.NewWatcher(cli, o.Namespace, o.Logger.With("component", "pause"))
	if err != nil {
		return nil, fmt.Errorf("worker: live pause: %w", err)
	}
	return &LivePause{w: pw}, nil
}

// Run keeps the state current until ctx ends (Worker.Run calls it for the
// LivePause of its Config). A second Run while one runs only waits for
// ctx.
func (p *LivePause) Run(ctx context.Context) error {
	if !p.running.CompareAndSwap(false, true) {
		<-ctx.Done()
		return nil
	}
	defer p.running.Store(false)
	return p.w.Run(ctx)
}

// Paused implements [PauseView].
func (p *LivePause) Paused(typ string) bool { return p.w.Paused(typ) }

// Synced implements [PauseView].
func (p *LivePause) Synced() bool { return p.w.Synced() }

// Types lists the paused types, sorted.
func (p *LivePause) Types() []string { return p.w.Types() }

// Ready is closed once the state was listed for the first time.
func (p *LivePause) Ready() <-chan struct{} { return p.w.Ready() }

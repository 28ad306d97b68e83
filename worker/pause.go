package worker

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/internal/pause"
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

// LivePauseOptions configure [NewLivePause].
type LivePauseOptions struct {
	// Namespace of the pause state in etcd; it must match the other delayq
	// processes (default "dq").
	Namespace string
	Logger    *slog.Logger // default: slog.Default()
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
		o.Logger = slog.Default()
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

package pause

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/internal/etcdwatch"
)

// Watcher keeps a namespace's pause state in memory, current through an
// etcd watch: Paused, Types and Synced read it without blocking and are
// safe for concurrent use. Until Run listed the state once, no type is
// paused.
type Watcher struct {
	m *etcdwatch.Map[time.Time] // paused type -> when it was paused
}

// NewWatcher returns the watcher of namespace ns's pause state. Call Run.
func NewWatcher(cli *clientv3.Client, ns string, log *slog.Logger) (*Watcher, error) {
	if err := checkNS(ns); err != nil {
		return nil, err
	}
	if cli == nil {
		return nil, errors.New("pause watcher: no etcd client")
	}
	prefix := Prefix(ns)
	// a key naming no valid type is no paused type; an undecodable value
	// still means paused (the key alone does), at the zero time
	dec := func(name string, val []byte) (time.Time, bool) {
		_, at, ok := decode("", []byte(name), val)
		return at, ok
	}
	m := etcdwatch.New(cli, prefix, dec, log, "pause state", etcdwatch.ChangeLog(slog.LevelInfo, "paused"))
	return &Watcher{m: m}, nil
}

// Paused reports whether typ is paused in the current view.
func (w *Watcher) Paused(typ string) bool {
	_, ok := w.m.Snapshot()[typ]
	return ok
}

// Types lists the paused types of the current view, sorted.
func (w *Watcher) Types() []string {
	m := w.m.Snapshot()
	if m == nil {
		return []string{}
	}
	return slices.Sorted(maps.Keys(m))
}

// Snapshot is a copy of the current view: each paused type and when it
// was paused.
func (w *Watcher) Snapshot() map[string]time.Time {
	m := w.m.Snapshot()
	if m == nil {
		return map[string]time.Time{}
	}
	return maps.Clone(m)
}

// Synced reports whether the view is known to be current: Run listed the
// state and its watch is established. It is false before the first list
// and from a watch failure until the next list.
func (w *Watcher) Synced() bool { return w.m.Synced() }

// Ready is closed once Run listed the state the first time.
func (w *Watcher) Ready() <-chan struct{} { return w.m.Ready() }

// Revision is the etcd revision the view reflects (0 before the first
// list).
func (w *Watcher) Revision() int64 { return w.m.Revision() }

// Run keeps the view current until ctx ends: it lists the state, then
// watches for changes from the next revision; when the watch fails (etcd
// unreachable, a compacted revision, no leader) it lists again after a
// backoff. Readers keep the last view meanwhile. It returns nil when ctx
// ends.
func (w *Watcher) Run(ctx context.Context) error { return w.m.Run(ctx) }

// watch applies changes from revision from on until the watch fails or ctx
// ends, and returns why (clientv3 reports a compacted revision as
// rpctypes.ErrCompacted).
func (w *Watcher) watch(ctx context.Context, from int64) error { return w.m.Watch(ctx, from) }

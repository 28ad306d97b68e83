package etcdwatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Decode turns the value stored under name (the key with the prefix
// trimmed) into a view entry; ok false leaves name out of the view.
type Decode[V any] func(name string, value []byte) (v V, ok bool)

// Map is the view of the keys under one etcd prefix. Until Run listed the
// prefix once, it is empty.
type Map[V any] struct {
	cli    *clientv3.Client
	prefix string
	decode Decode[V]
	log    *slog.Logger
	what   string
	opts   options

	snap      atomic.Pointer[map[string]V] // immutable once stored
	rev       atomic.Int64
	synced    atomic.Bool
	ready     chan struct{}
	readyOnce sync.Once
}

// Run timings: how long it waits before listing again after the watch
// failed, doubling up to the ceiling.
const (
	relistFloor   = 100 * time.Millisecond
	relistCeiling = 2 * time.Second
)

// An Option tunes a Map.
type Option func(*options)

type options struct {
	changeLevel slog.Level
	countKey    string
}

// ChangeLog sets how each applied watch response is logged: at level
// (slog.LevelDebug by default) and, when countKey is not empty, with the
// number of entries in the new view under that attribute key.
func ChangeLog(level slog.Level, countKey string) Option {
	return func(o *options) {
		o.changeLevel = level
		o.countKey = countKey
	}
}

// New returns the view of the keys under prefix; decode turns each value
// into an entry. what names the thing watched in log lines and errors
// ("pause state", "rate-limit rules"). A nil log discards. Call Run.
func New[V any](cli *clientv3.Client, prefix string, decode Decode[V], log *slog.Logger, what string, opts ...Option) *Map[V] {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Map[V]{
		cli:    cli,
		prefix: prefix,
		decode: decode,
		log:    log,
		what:   what,
		opts:   options{changeLevel: slog.LevelDebug},
		ready:  make(chan struct{}),
	}
	for _, o := range opts {
		o(&m.opts)
	}
	return m
}

// Snapshot is the current view, nil before the first list (a nil map reads
// as empty). It is shared and immutable: do not modify it.
func (m *Map[V]) Snapshot() map[string]V {
	if p := m.snap.Load(); p != nil {
		return *p
	}
	return nil
}

// Revision is the etcd revision the view reflects (0 before the first
// list).
func (m *Map[V]) Revision() int64 { return m.rev.Load() }

// Synced reports whether the view is known to be current: Run listed the
// prefix and its watch is established. It is false before the first list
// and from a watch failure until the next list.
func (m *Map[V]) Synced() bool { return m.synced.Load() }

// Ready is closed once Run listed the prefix the first time.
func (m *Map[V]) Ready() <-chan struct{} { return m.ready }

// List reads every entry under prefix once, leaving out the names whose
// values do not decode, and returns them with the revision read. It
// returns the client's error unwrapped.
func List[V any](ctx context.Context, cli *clientv3.Client, prefix string, decode Decode[V]) (map[string]V, int64, error) {
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, err
	}
	out := make(map[string]V, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		name := strings.TrimPrefix(string(kv.Key), prefix)
		if v, ok := decode(name, kv.Value); ok {
			out[name] = v
		}
	}
	return out, resp.Header.Revision, nil
}

// Run keeps the view current until ctx ends: it lists the prefix, then
// watches for changes from the next revision; when the watch fails (etcd
// unreachable, a compacted revision, no leader) it lists again after a
// backoff. Readers keep the last view meanwhile. It returns nil when ctx
// ends.
func (m *Map[V]) Run(ctx context.Context) error {
	wait := relistFloor
	for {
		snap, rev, err := List(ctx, m.cli, m.prefix, m.decode)
		if err != nil {
			err = fmt.Errorf("list %s: %w", m.what, err)
		} else {
			m.publish(snap, rev)
			m.synced.Store(true)
			wait = relistFloor
			err = m.Watch(ctx, rev+1)
			m.synced.Store(false)
		}
		if ctx.Err() != nil {
			return nil
		}
		m.log.Warn(m.what+" watch interrupted; listing again", "error", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		wait = min(2*wait, relistCeiling)
	}
}

func (m *Map[V]) publish(snap map[string]V, rev int64) {
	m.snap.Store(&snap)
	m.rev.Store(rev)
	m.readyOnce.Do(func() { close(m.ready) })
}

// errWatchClosed means the watch channel closed while ctx was still live.
var errWatchClosed = errors.New("watch channel closed")

// Watch applies changes from revision from on until the watch fails or ctx
// ends, and returns why (nil when ctx ended; clientv3 reports a compacted
// revision as rpctypes.ErrCompacted). Run calls it after each list; it
// neither lists nor sets Synced.
func (m *Map[V]) Watch(ctx context.Context, from int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range m.cli.Watch(wctx, m.prefix, clientv3.WithPrefix(), clientv3.WithRev(from)) {
		if err := resp.Err(); err != nil {
			return fmt.Errorf("watch %s from revision %d: %w", m.what, from, err)
		}
		if len(resp.Events) == 0 {
			continue
		}
		next := make(map[string]V)
		if cur := m.snap.Load(); cur != nil {
			next = maps.Clone(*cur)
		}
		for _, ev := range resp.Events {
			name := strings.TrimPrefix(string(ev.Kv.Key), m.prefix)
			switch ev.Type {
			case mvccpb.PUT:
				if v, ok := m.decode(name, ev.Kv.Value); ok {
					next[name] = v
				} else {
					delete(next, name)
				}
			case mvccpb.DELETE:
				delete(next, name)
			}
		}
		m.publish(next, resp.Header.Revision)
		from = resp.Header.Revision + 1
		attrs := []any{"revision", resp.Header.Revision, "events", len(resp.Events)}
		if m.opts.countKey != "" {
			attrs = append(attrs, m.opts.countKey, len(next))
		}
		m.log.Log(ctx, m.opts.changeLevel, m.what+" changed", attrs...)
	}
	if ctx.Err() != nil {
		return nil
	}
	return errWatchClosed
}

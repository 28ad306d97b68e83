package ratelimit

import (
	"context"
	"encoding/json"
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

// RuleSource gives the rule of a task type; the Limiter asks it once per
// type per batch. *Rules and StaticRules implement it.
type RuleSource interface {
	Rule(typ string) (Rule, bool)
}

// StaticRules is a fixed RuleSource (tests, benchmarks, a worker without
// etcd).
type StaticRules map[string]Rule

// Rule returns the rule of typ.
func (s StaticRules) Rule(typ string) (Rule, bool) {
	r, ok := s[typ]
	return r, ok
}

// Rules keeps the rate-limit rules of a namespace in etcd, one JSON value
// per task type under /<ns>/limits/<type>. Put, Delete, Get and List go to
// etcd; Run keeps an in-memory snapshot current through a watch, and Rule
// and Snapshot read that snapshot without blocking.
type Rules struct {
	cli    *clientv3.Client
	prefix string // "/<ns>/limits/"
	log    *slog.Logger

	snap      atomic.Pointer[map[string]Rule] // immutable once stored
	rev       atomic.Int64                    // etcd revision the snapshot reflects
	ready     chan struct{}
	readyOnce sync.Once
}

// Watcher timings.
const (
	relistFloor   = 100 * time.Millisecond
	relistCeiling = 2 * time.Second
)

// NewRules returns the rule store of namespace ns. Call Run to keep the
// snapshot (Rule, Snapshot) current; Put, Delete, Get and List work
// without it.
func NewRules(cli *clientv3.Client, ns string, log *slog.Logger) (*Rules, error) {
	if ns == "" || strings.Contains(ns, "/") {
		return nil, fmt.Errorf("namespace %q: must be non-empty without '/'", ns)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Rules{cli: cli, prefix: "/" + ns + "/limits/", log: log, ready: make(chan struct{})}, nil
}

func (r *Rules) key(typ string) string { return r.prefix + typ }

// Put stores the rule of typ, replacing any previous one. Both are
// validated first (errors wrap ErrInvalidType or ErrInvalidRule).
func (r *Rules) Put(ctx context.Context, typ string, rule Rule) error {
	if err := ValidateType(typ); err != nil {
		return err
	}
	if err := rule.Validate(); err != nil {
		return err
	}
	b, err := json.Marshal(rule)
	if err != nil {
		return fmt.Errorf("encode rule: %w", err)
	}
	if _, err := r.cli.Put(ctx, r.key(typ), string(b)); err != nil {
		return fmt.Errorf("put rule %s: %w", typ, err)
	}
	return nil
}

// Delete removes the rule of typ and reports whether there was one.
func (r *Rules) Delete(ctx context.Context, typ string) (bool, error) {
	if err := ValidateType(typ); err != nil {
		return false, err
	}
	resp, err := r.cli.Delete(ctx, r.key(typ))
	if err != nil {
		return false, fmt.Errorf("delete rule %s: %w", typ, err)
	}
	return resp.Deleted > 0, nil
}

// Get reads the rule of typ from etcd (a linearizable read).
func (r *Rules) Get(ctx context.Context, typ string) (Rule, bool, error) {
	if err := ValidateType(typ); err != nil {
		return Rule{}, false, err
	}
	resp, err := r.cli.Get(ctx, r.key(typ))
	if err != nil {
		return Rule{}, false, fmt.Errorf("get rule %s: %w", typ, err)
	}
	if len(resp.Kvs) == 0 {
		return Rule{}, false, nil
	}
	rule, err := decodeRule(resp.Kvs[0].Value)
	if err != nil {
		return Rule{}, false, fmt.Errorf("stored rule %s: %w", typ, err)
	}
	return rule, true, nil
}

// List reads every rule from etcd. A stored value that does not decode
// (written by something other than Put) is logged and left out.
func (r *Rules) List(ctx context.Context) (map[string]Rule, error) {
	m, _, err := r.list(ctx)
	return m, err
}

func (r *Rules) list(ctx context.Context) (map[string]Rule, int64, error) {
	resp, err := r.cli.Get(ctx, r.prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("list rules: %w", err)
	}
	m := make(map[string]Rule, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if typ, rule, ok := r.decodeKV(kv); ok {
			m[typ] = rule
		}
	}
	return m, resp.Header.Revision, nil
}

func (r *Rules) decodeKV(kv *mvccpb.KeyValue) (string, Rule, bool) {
	typ := strings.TrimPrefix(string(kv.Key), r.prefix)
	if err := ValidateType(typ); err != nil {
		r.log.Warn("ignoring rate-limit rule with a bad key", "key", string(kv.Key), "error", err)
		return "", Rule{}, false
	}
	rule, err := decodeRule(kv.Value)
	if err != nil {
		r.log.Warn("ignoring rate-limit rule that does not decode", "type", typ, "error", err)
		return "", Rule{}, false
	}
	return typ, rule, true
}

// Rule returns the current rule of typ from the snapshot (a copy). Before
// Run loaded the rules the first time, there are none.
func (r *Rules) Rule(typ string) (Rule, bool) {
	m := r.snap.Load()
	if m == nil {
		return Rule{}, false
	}
	rule, ok := (*m)[typ]
	if !ok {
		return Rule{}, false
	}
	return rule.clone(), true
}

// Snapshot returns a copy of every rule currently known.
func (r *Rules) Snapshot() map[string]Rule {
	m := r.snap.Load()
	if m == nil {
		return map[string]Rule{}
	}
	out := make(map[string]Rule, len(*m))
	for k, v := range *m {
		out[k] = v.clone()
	}
	return out
}

// Revision is the etcd revision the snapshot reflects (0 before the first
// load).
func (r *Rules) Revision() int64 { return r.rev.Load() }

// Ready is closed once Run loaded the rules for the first time. A worker
// that must not run anything unlimited at start waits for it.
func (r *Rules) Ready() <-chan struct{} { return r.ready }

// Run keeps the snapshot current until ctx ends: it lists the rules, then
// watches for changes from the next revision; when the watch fails (etcd
// unreachable, compacted revision, leader lost) it lists again after a
// backoff. Readers keep the last snapshot meanwhile. It returns nil when
// ctx ends.
func (r *Rules) Run(ctx context.Context) error {
	wait := relistFloor
	for {
		m, rev, err := r.list(ctx)
		if err == nil {
			r.publish(m, rev)
			wait = relistFloor
			err = r.watch(ctx, rev+1)
		}
		if ctx.Err() != nil {
			return nil
		}
		r.log.Warn("rate-limit rules watch interrupted; listing again", "error", err, "retry_in", wait)
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

func (r *Rules) publish(m map[string]Rule, rev int64) {
	r.snap.Store(&m)
	r.rev.Store(rev)
	r.readyOnce.Do(func() { close(r.ready) })
}

// errWatchClosed means the watch channel closed while ctx was still live.
var errWatchClosed = errors.New("watch channel closed")

// watch applies changes from revision from on until the watch fails or ctx
// ends. It returns the reason (clientv3 reports a compacted revision as
// rpctypes.ErrCompacted).
func (r *Rules) watch(ctx context.Context, from int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range r.cli.Watch(wctx, r.prefix, clientv3.WithPrefix(), clientv3.WithRev(from)) {
		if err := resp.Err(); err != nil {
			return fmt.Errorf("watch rules from revision %d: %w", from, err)
		}
		if len(resp.Events) == 0 {
			continue
		}
		var next map[string]Rule
		if cur := r.snap.Load(); cur != nil {
			next = maps.Clone(*cur)
		}
		if next == nil {
			next = make(map[string]Rule)
		}
		for _, ev := range resp.Events {
			switch ev.Type {
			case mvccpb.PUT:
				if typ, rule, ok := r.decodeKV(ev.Kv); ok {
					next[typ] = rule
				} else {
					delete(next, strings.TrimPrefix(string(ev.Kv.Key), r.prefix))
				}
			case mvccpb.DELETE:
				delete(next, strings.TrimPrefix(string(ev.Kv.Key), r.prefix))
			}
		}
		r.publish(next, resp.Header.Revision)
		from = resp.Header.Revision + 1
		r.log.Debug("rate-limit rules changed", "revision", resp.Header.Revision, "events", len(resp.Events))
	}
	if ctx.Err() != nil {
		return nil
	}
	return errWatchClosed
}

package ratelimit

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/internal/etcdwatch"
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
	m      *etcdwatch.Map[Rule] // the snapshot Run keeps current
}

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
	r := &Rules{cli: cli, prefix: "/" + ns + "/limits/", log: log}
	r.m = etcdwatch.New(cli, r.prefix, r.decode, log, "rate-limit rules")
	return r, nil
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
	if err := ValidateStoredType(typ); err != nil {
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
	if err := ValidateStoredType(typ); err != nil {
		return Rule{}, false, err
	}
	resp, err := r.cli.Get(ctx, r.key(typ))
	if err != nil {
		return Rule{}, false, fmt.Errorf("get rule %s: %w", typ, err)
	}
	if len(resp.Kvs) == 0 {
		return Rule{}, false, nil
	}
	rule, err := decodeRule(resp.Kvs[0].Value, Rule.validateStored)
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
	m, rev, err := etcdwatch.List(ctx, r.cli, r.prefix, r.decode)
	if err != nil {
		return nil, 0, fmt.Errorf("list rules: %w", err)
	}
	return m, rev, nil
}

// decode reads the rule stored under key r.prefix+typ; a bad key or a value
// that does not decode is logged and left out.
func (r *Rules) decode(typ string, value []byte) (Rule, bool) {
	if err := ValidateStoredType(typ); err != nil {
		r.log.Warn("ignoring rate-limit rule with a bad key", "key", r.prefix+typ, "error", err)
		return Rule{}, false
	}
	rule, err := decodeRule(value, Rule.validateStored)
	if err != nil {
		r.log.Warn("ignoring rate-limit rule that does not decode", "type", typ, "error", err)
		return Rule{}, false
	}
	return rule, true
}

// Rule returns the current rule of typ from the snapshot (a copy). Before
// Run loaded the rules the first time, there are none.
func (r *Rules) Rule(typ string) (Rule, bool) {
	rule, ok := r.m.Snapshot()[typ]
	if !ok {
		return Rule{}, false
	}
	return rule.clone(), true
}

// Snapshot returns a copy of every rule currently known.
func (r *Rules) Snapshot() map[string]Rule {
	m := r.m.Snapshot()
	out := make(map[string]Rule, len(m))
	for k, v := range m {
		out[k] = v.clone()
	}
	return out
}

// Revision is the etcd revision the snapshot reflects (0 before the first
// load).
func (r *Rules) Revision() int64 { return r.m.Revision() }

// Ready is closed once Run loaded the rules for the first time. A worker
// that must not run anything unlimited at start waits for it.
func (r *Rules) Ready() <-chan struct{} { return r.m.Ready() }

// Run keeps the snapshot current until ctx ends: it lists the rules, then
// watches for changes from the next revision; when the watch fails (etcd
// unreachable, compacted revision, leader lost) it lists again after a
// backoff. Readers keep the last snapshot meanwhile. It returns nil when
// ctx ends.
func (r *Rules) Run(ctx context.Context) error { return r.m.Run(ctx) }

// watch applies changes from revision from on until the watch fails or ctx
// ends. It returns the reason (clientv3 reports a compacted revision as
// rpctypes.ErrCompacted).
func (r *Rules) watch(ctx context.Context, from int64) error { return r.m.Watch(ctx, from) }

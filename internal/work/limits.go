package work

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/ratelimit"
	"github.com/delayq/delayq/worker"
)

// limits are the per-type rate limits of the work binary: rules watched in
// etcd (DQ_ETCD_ENDPOINTS), enforced in Redis by ratelimit.Limiter.
//
// The worker does not wait for etcd: until the rules watcher has listed the
// rules once (etcd unreachable at start), its snapshot is empty and every
// task type runs unlimited; once etcd answers, the rules apply within a
// second. While etcd is unreachable later, the last rules stay in force.
// A failing Limiter (Redis down) defers the micro-batch instead (fail
// closed; see worker.Limiter).
type limits struct {
	etcd  *clientv3.Client
	rules *ratelimit.Rules
	lim   *ratelimit.Limiter
	log   *slog.Logger
}

// newLimits connects lazily (etcd need not be up) to the rules in etcd.
func newLimits(ctx context.Context, ec config.Etcd, ns string, rdb redis.UniversalClient, reg prometheus.Registerer, log *slog.Logger) (*limits, error) {
	cli, err := ec.EtcdClient(ctx)
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	log = log.With("component", "limits")
	rules, err := ratelimit.NewRules(cli, ns, log)
	if err != nil {
		cli.Close()
		return nil, err
	}
	lim, err := ratelimit.NewLimiter(rdb, rules, ratelimit.Options{Namespace: ns, Registerer: reg})
	if err != nil {
		cli.Close()
		return nil, err
	}
	return &limits{etcd: cli, rules: rules, lim: lim, log: log}, nil
}

// Run watches the rules until ctx ends.
func (l *limits) Run(ctx context.Context) error { return l.rules.Run(ctx) }

// Close closes the etcd client (after Run returned).
func (l *limits) Close() error { return l.etcd.Close() }

// Limits reports whether a rule may hold tasks of typ back now
// (worker.LimitScoper).
func (l *limits) Limits(typ string) bool { return l.lim.Limits(typ) }

// Admit implements worker.Limiter.
func (l *limits) Admit(ctx context.Context, items []worker.LimitItem) ([]worker.LimitDecision, error) {
	in := make([]ratelimit.Item, len(items))
	for i, it := range items {
		in[i] = ratelimit.Item(it)
	}
	ds, err := l.lim.Admit(ctx, in)
	if err != nil {
		return nil, err
	}
	out := make([]worker.LimitDecision, len(ds))
	for i := range ds {
		d := &ds[i] // the ticket points into ds: no copy of the decision boxed per item
		out[i] = worker.LimitDecision{Run: d.Run, NotBefore: d.NotBefore, Reason: d.Reason, Ticket: d,
			RenewEvery: d.RenewEvery(), HoldFor: d.SlotTTL(), HeldUntil: d.HeldUntil()}
	}
	return out, nil
}

var _ worker.LimitRenewer = (*limits)(nil)

// Renew implements worker.LimitRenewer: the worker extends a running
// item's concurrency slot every RenewEvery, so a handler longer than the
// rule's slot_ttl keeps it.
func (l *limits) Renew(ctx context.Context, it worker.LimitItem, d worker.LimitDecision) (bool, error) {
	rd, ok := d.Ticket.(*ratelimit.Decision)
	if !ok {
		return true, nil
	}
	return l.lim.Refresh(ctx, ratelimit.Item(it), *rd)
}

var _ worker.LimitHolder = (*limits)(nil)

// Hold implements worker.LimitHolder: a retried task of an ordered keyed
// rule keeps its place in its value's order (ratelimit.Limiter.Hold).
func (l *limits) Hold(ctx context.Context, it worker.LimitItem, until time.Time) error {
	return l.lim.Hold(ctx, ratelimit.Item(it), until)
}

// Done implements worker.Limiter: it frees the item's concurrency slot.
func (l *limits) Done(ctx context.Context, it worker.LimitItem, d worker.LimitDecision) {
	rd, ok := d.Ticket.(*ratelimit.Decision)
	if !ok {
		return
	}
	if err := l.lim.Done(ctx, ratelimit.Item(it), *rd); err != nil {
		l.log.Debug("free concurrency slot", "task_id", it.ID, "type", it.Type, "err", err)
	}
}

package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/internal/ratelimit"
)

// LiveLimitsOptions configure [NewLiveLimits].
type LiveLimitsOptions struct {
	// Namespace of the rules in etcd and the limits' keys in Redis; it
	// must match the other delayq processes (default "dq").
	Namespace string
	// Registerer receives the delayq_limit_* metrics when set.
	Registerer prometheus.Registerer
	Logger     *slog.Logger // default: slog.Default()
}

// LiveLimits is a [Limiter] that applies delayq's live per-type rate limits:
// the rules stored in etcd (the ones `dq limits` and the daemon's
// /v1/limits manage), enforced in Redis together with every other worker
// of the namespace — what the work binary does. Window quotas, token
// buckets and concurrency limits apply; a concurrency slot is renewed while
// its handler runs (a [LimitRenewer]), so the limit holds for handlers that
// run longer than the rule's slot_ttl, and is freed when the handler
// returns. A handler whose slot is lost — renewals not confirmed within
// the slot_ttl by the worker's clock (a paused process, an unreachable
// Redis), or a renewal that finds it gone — has its context cancelled with
// [ErrLimitSlotLost] before another task can take the slot.
//
// Set it as Config.Limiter: Worker.Run then watches the rules for as long
// as it runs (a change applies within about a second). Until the rules were
// listed once (etcd unreachable at start) no type is limited; while etcd is
// unreachable later, the last rules stay in force. When Redis cannot
// answer, the worker defers the batch (fail closed).
type LiveLimits struct {
	rules   *ratelimit.Rules
	lim     *ratelimit.Limiter
	log     *slog.Logger
	running atomic.Bool
}

// NewLiveLimits returns the live limits of a namespace, read from etcd
// through cli and enforced in rdb. It does not connect; the caller closes
// cli and rdb after the worker's Run returned.
func NewLiveLimits(cli *clientv3.Client, rdb redis.UniversalClient, o LiveLimitsOptions) (*LiveLimits, error) {
	if cli == nil || rdb == nil {
		return nil, errors.New("worker: live limits need an etcd and a Redis client")
	}
	if o.Namespace == "" {
		o.Namespace = "dq"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	log := o.Logger.With("component", "limits")
	rules, err := ratelimit.NewRules(cli, o.Namespace, log)
	if err != nil {
		return nil, fmt.Errorf("worker: live limits: %w", err)
	}
	lim, err := ratelimit.NewLimiter(rdb, rules, ratelimit.Options{Namespace: o.Namespace, Registerer: o.Registerer})
	if err != nil {
		return nil, fmt.Errorf("worker: live limits: %w", err)
	}
	return &LiveLimits{rules: rules, lim: lim, log: log}, nil
}

// Run keeps the rules current until ctx ends (Worker.Run calls it for the
// LiveLimits of its Config). A second Run while one runs only waits for
// ctx.
func (l *LiveLimits) Run(ctx context.Context) error {
	if !l.running.CompareAndSwap(false, true) {
		<-ctx.Done()
		return nil
	}
	defer l.running.Store(false)
	return l.rules.Run(ctx)
}

// Ready is closed once the rules were listed for the first time.
func (l *LiveLimits) Ready() <-chan struct{} { return l.rules.Ready() }

// Admit implements [Limiter].
func (l *LiveLimits) Admit(ctx context.Context, items []LimitItem) ([]LimitDecision, error) {
	in := make([]ratelimit.Item, len(items))
	for i, it := range items {
		in[i] = ratelimit.Item(it)
	}
	ds, err := l.lim.Admit(ctx, in)
	if err != nil {
		return nil, err
	}
	out := make([]LimitDecision, len(ds))
	for i := range ds {
		d := &ds[i] // the ticket points into ds: no copy of the decision boxed per item
		out[i] = LimitDecision{Run: d.Run, NotBefore: d.NotBefore, Reason: d.Reason, Ticket: d,
			RenewEvery: d.RenewEvery(), HoldFor: d.SlotTTL(), HeldUntil: d.HeldUntil()}
	}
	return out, nil
}

var _ LimitRenewer = (*LiveLimits)(nil)

// Renew implements [LimitRenewer]: it extends the item's concurrency slot
// by its slot_ttl (the rule's when the slot was taken).
func (l *LiveLimits) Renew(ctx context.Context, it LimitItem, d LimitDecision) (bool, error) {
	rd, ok := d.Ticket.(*ratelimit.Decision)
	if !ok {
		return true, nil
	}
	return l.lim.Refresh(ctx, ratelimit.Item(it), *rd)
}

var _ LimitHolder = (*LiveLimits)(nil)

// Hold implements [LimitHolder]: a task of a type whose rule has a key or
// header scope (and is ordered) that goes to retry at until keeps its
// place in its value's order; later tasks of the value wait behind it.
// Other types cost nothing.
func (l *LiveLimits) Hold(ctx context.Context, it LimitItem, until time.Time) error {
	return l.lim.Hold(ctx, ratelimit.Item(it), until)
}

// Done implements [Limiter]: it frees the item's concurrency slot.
// Limits reports whether a rule may hold tasks of typ back now
// (LimitScoper).
func (l *LiveLimits) Limits(typ string) bool { return l.lim.Limits(typ) }

func (l *LiveLimits) Done(ctx context.Context, it LimitItem, d LimitDecision) {
	rd, ok := d.Ticket.(*ratelimit.Decision)
	if !ok {
		return
	}
	if err := l.lim.Done(ctx, ratelimit.Item(it), *rd); err != nil {
		l.log.Debug("free concurrency slot", "task_id", it.ID, "type", it.Type, "err", err)
	}
}

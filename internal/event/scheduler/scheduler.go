package scheduler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/delayq/delayq/internal/event/etcdlease"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/retry"
	"github.com/delayq/delayq/internal/schedule"
	"github.com/delayq/delayq/internal/task"
)

// taskStore is what the scheduler needs of the Redis store.
type taskStore interface {
	Schedule(ctx context.Context, subs []redisstore.Submit) ([]redisstore.Result, error)
	Cancel(ctx context.Context, id string) error
	Get(ctx context.Context, id string) (*task.Task, error)
}

// Config configures a Scheduler.
type Config struct {
	Client    *clientv3.Client
	Namespace string
	// Store is the Redis task store the ticks are materialized in.
	Store taskStore
	// ID names this process in the election (its value).
	ID string
	// TTL is the session lease TTL (rounded up to whole seconds).
	TTL time.Duration
	// Interval is the time between two passes of the leader (a change of
	// a schedule starts one at once).
	Interval time.Duration
	// Lookahead is how far ahead of their time ticks are materialized; it
	// must exceed Interval.
	Lookahead time.Duration
	// Log receives lifecycle logs; nil discards them.
	Log *slog.Logger
	// Metrics may be nil.
	Metrics *Metrics
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Scheduler campaigns for the scheduler leadership and, while it leads,
// materializes the ticks of every schedule. It is started with Run.
type Scheduler struct {
	cfg    Config
	log    *slog.Logger
	m      *Metrics
	sched  *schedule.Store
	ttl    time.Duration
	margin time.Duration

	leading atomic.Bool
	// badRev remembers the schedule revisions that did not compile, so
	// that each is logged once (leader goroutine only).
	badRev map[string]int64
	// view is the leader's view of the schedules (view.go); nil when
	// not leading, or after a failed pass (leader goroutine only).
	view *view
	// planAll plans every schedule in every pass, due or not: the
	// tests' reference for what planning only the due ones must match.
	planAll bool
}

// errFenced ends a leadership whose state write failed its fence.
var errFenced = errors.New("fenced: the scheduler election key is gone")

// errLeaseLate skips a pass: etcd has not confirmed the lease recently
// enough to vouch for the leadership.
var errLeaseLate = errors.New("etcd has not confirmed the lease recently: pass skipped")

// New checks the configuration and returns a scheduler.
func New(cfg Config) (*Scheduler, error) {
	switch {
	case cfg.Client == nil || cfg.Store == nil:
		return nil, errors.New("scheduler: Client and Store are required")
	case cfg.Namespace == "" || strings.Contains(cfg.Namespace, "/"):
		return nil, fmt.Errorf("scheduler: namespace %q: non-empty, without slashes", cfg.Namespace)
	case cfg.ID == "":
		return nil, errors.New("scheduler: ID is required")
	case cfg.Interval <= 0 || cfg.Lookahead <= cfg.Interval:
		return nil, fmt.Errorf("scheduler: lookahead %s must exceed interval %s (> 0)", cfg.Lookahead, cfg.Interval)
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 3 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	m := cfg.Metrics
	if m == nil {
		m = newUnregisteredMetrics()
	}
	ttl := (cfg.TTL + time.Second - 1) / time.Second * time.Second // whole seconds, as the lease
	return &Scheduler{
		cfg: cfg, log: log.With("component", "scheduler"), m: m,
		sched: schedule.NewStore(cfg.Client, cfg.Namespace),
		// the margin covers the keep-alive answer's way back (as in
		// package leader), but at most a quarter of the TTL: answers come
		// every TTL/3 or so, and a short TTL must not skip most passes
		ttl: ttl, margin: min(max(500*time.Millisecond, ttl/6), ttl/4),
		badRev: map[string]int64{},
	}, nil
}

// Leading reports whether this process leads the scheduler now.
func (s *Scheduler) Leading() bool { return s.leading.Load() }

// Run campaigns and leads until ctx ends; then it resigns and revokes its
// session, so that another process takes over at once.
func (s *Scheduler) Run(ctx context.Context) error {
	wait := retry.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	for ctx.Err() == nil {
		sess, err := etcdlease.New(ctx, s.cfg.Client, s.ttl, s.margin)
		if err != nil {
			if ctx.Err() == nil {
				s.m.Errors.WithLabelValues(opSession).Inc()
				s.log.Warn("scheduler etcd session", "err", err)
			}
			if !retry.Sleep(ctx, wait.Next()) {
				break
			}
			continue
		}
		wait.Reset()
		s.runSession(ctx, sess)
		sess.Stop(ctx)
	}
	return nil
}

// session is the scheduler's own etcd session with the time of etcd's
// last keep-alive answer (internal/etcdlease): work is only done while
// etcd confirmed the lease within TTL − margin.
type session = etcdlease.Session

// runSession campaigns with one session until the session ends or ctx
// does; a leadership that ends by its fence campaigns again.
func (s *Scheduler) runSession(ctx context.Context, ss *session) {
	// Everything below runs under a context the session's death cancels
	// (Campaign does not watch its own session, etcd#19597).
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ss.Ctx(), cancel)
	defer stop()
	wait := retry.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	for sctx.Err() == nil {
		if err := s.campaignAndLead(sctx, ss); err != nil && sctx.Err() == nil {
			s.log.Warn("scheduler leadership", "err", err)
			retry.Sleep(sctx, wait.Next())
			continue
		}
		wait.Reset()
	}
}

// campaignAndLead campaigns once, and leads after a verified win until
// ctx ends or the fence fails; it resigns before it returns.
func (s *Scheduler) campaignAndLead(ctx context.Context, ss *session) error {
	prefix := strings.TrimSuffix(schedule.ElectionPrefix(s.cfg.Namespace), "/")
	e := concurrency.NewElection(ss.Session, prefix)
	key := fmt.Sprintf("%s/%x", prefix, int64(ss.Lease()))
	if err := e.Campaign(ctx, s.cfg.ID); err != nil {
		// The candidate key may be left behind (etcd#21128, or the
		// context ended while the put was on its way).
		s.deleteCandidate(ctx, key, ss.Lease())
		if ctx.Err() != nil {
			return nil
		}
		s.m.Errors.WithLabelValues(opCampaign).Inc()
		return fmt.Errorf("campaign: %w", err)
	}
	rev := e.Rev()
	defer s.resign(ctx, e.Key(), rev)
	// Phantom leadership (etcd#19597): the key must exist with our lease
	// and revision.
	gctx, cancel := context.WithTimeout(ctx, s.ttl)
	resp, err := s.cfg.Client.Get(gctx, e.Key())
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("verify leadership: %w", err)
	}
	if len(resp.Kvs) != 1 || clientv3.LeaseID(resp.Kvs[0].Lease) != ss.Lease() || resp.Kvs[0].CreateRevision != rev {
		// as package leader does: a session that lost its key is not to
		// be trusted; a new one campaigns
		_ = ss.Close()
		return fmt.Errorf("campaign returned without our key %s: closing the session", e.Key())
	}
	fence := clientv3.Compare(clientv3.CreateRevision(e.Key()), "=", rev)
	s.leading.Store(true)
	s.m.Leader.Set(1)
	s.log.Info("leading the scheduler", "key", e.Key(), "rev", rev)
	err = s.lead(ctx, fence, ss.ValidUntil)
	s.leading.Store(false)
	s.m.Leader.Set(0)
	s.m.Schedules.Set(0)
	if errors.Is(err, errFenced) {
		s.m.Errors.WithLabelValues(opFenced).Inc()
		s.log.Warn("scheduler leadership lost: fenced", "key", e.Key())
		return nil // campaign again (a dead session ends runSession)
	}
	s.log.Info("stopped leading the scheduler", "key", e.Key())
	return err
}

// resign deletes our election key if it is still the one we created,
// bounded to two seconds even after ctx ended. A lease that is gone took
// the key with it.
func (s *Scheduler) resign(ctx context.Context, key string, rev int64) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_, err := s.cfg.Client.Txn(rctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		s.log.Warn("scheduler resign", "key", key, "err", err)
	}
}

// deleteCandidate removes our candidate key left by a failed campaign.
func (s *Scheduler) deleteCandidate(ctx context.Context, key string, lease clientv3.LeaseID) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_, _ = s.cfg.Client.Txn(rctx).
		If(clientv3.Compare(clientv3.LeaseValue(key), "=", lease)).
		Then(clientv3.OpDelete(key)).Commit()
}

// lead runs passes every Interval, and at once after a change under the
// schedules prefix, until ctx ends (nil) or a pass is fenced (errFenced).
// A pass that loads the view (view.go) starts a watch from the view's
// revision; the events are applied before the next pass.
func (s *Scheduler) lead(ctx context.Context, fence clientv3.Cmp, validUntil func() time.Time) error {
	changes := make(chan struct{}, 1)
	var w *watcher // the watch that keeps s.view current
	s.view = nil
	defer func() { w.stop(); s.view = nil }()

	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	fails, late := 0, 0
	for {
		w = s.catchUp(w)
		err := s.guardedPass(ctx, fence, validUntil)
		w = s.follow(ctx, w, changes)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, errFenced):
			return err
		case errors.Is(err, errLeaseLate):
			// a keep-alive answer a little late skips a pass (the
			// lookahead covers it); say so when it lasts
			if late++; late%20 == 0 {
				s.log.Warn("scheduler passes skipped: etcd does not confirm the lease", "skipped_passes", late)
			}
		case err != nil:
			fails++
			if fails == 1 || fails%20 == 0 {
				s.log.Warn("scheduler pass", "err", err, "failed_passes", fails)
			}
		case fails > 0:
			s.log.Info("scheduler pass succeeds again", "failed_passes", fails)
			fails = 0
		}
		if !errors.Is(err, errLeaseLate) {
			late = 0
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-changes:
		}
	}
}

// guardedPass runs one pass unless etcd has not confirmed the lease
// recently enough to vouch for our leadership.
func (s *Scheduler) guardedPass(ctx context.Context, fence clientv3.Cmp, validUntil func() time.Time) error {
	if !time.Now().Before(validUntil()) {
		s.m.Errors.WithLabelValues(opLeaseLate).Inc()
		return errLeaseLate
	}
	// A pass must not outlive the lease it was started under.
	pctx, cancel := context.WithDeadline(ctx, validUntil())
	defer cancel()
	start := time.Now()
	// A pass that has nothing to write never meets the fence: check it
	// first, so that a leader whose key is gone stops at once (and says
	// so in delayq_scheduler_leader).
	resp, err := s.cfg.Client.Txn(pctx).If(fence).Commit()
	if err != nil {
		return s.fail(opLoad, fmt.Errorf("check leadership: %w", err))
	}
	if !resp.Succeeded {
		return errFenced
	}
	err = s.pass(pctx, s.cfg.Now(), fence)
	s.m.Pass.Observe(time.Since(start).Seconds())
	return err
}

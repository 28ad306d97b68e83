package leader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/internal/event/etcdlease"
	"github.com/delayq/delayq/internal/retry"
)

// Lead is one leadership of one shard, handed to the LeadFunc.
type Lead struct {
	Shard int
	// Token is the fencing token: the election key's create revision,
	// captured right after a verified Campaign. Every store mutation for
	// the shard carries it.
	Token int64
	// Stop is closed when the process gives the shard back (rebalancing,
	// shutdown): finish the unit of work in hand, then return. The context
	// passed with the Lead ends instead when leadership is lost: stop at once.
	Stop <-chan struct{}
	// ValidUntil is the earliest time the session lease may have expired
	// on the etcd server, judged from the last keep-alive answer minus a
	// margin. Do not start work past it (RELIABILITY rule 3).
	ValidUntil func() time.Time
}

// LeadFunc does the work of a led shard. It runs until ctx ends (leadership
// lost: return at once), Stop is closed (give back: finish, then return
// nil) or the work fails (e.g. fenced). The manager resigns the shard after
// it returned, never before.
type LeadFunc func(ctx context.Context, l Lead) error

// Config configures a Manager.
type Config struct {
	Client    *clientv3.Client
	Namespace string
	// Shards is the initial shard count; SetShards raises it later.
	Shards int
	// ID names this process among live members; it must be unique.
	ID string
	// TTL is the session lease TTL (rounded up to whole seconds, at least 1s).
	TTL time.Duration
	// Lead runs the work of each shard this process leads.
	Lead LeadFunc
	// Log receives lifecycle logs; nil discards them.
	Log *slog.Logger
	// Metrics may be nil.
	Metrics *Metrics
	// Jitter is the largest random delay before a campaign (default 50ms),
	// so that processes reacting to the same event do not all campaign at
	// once.
	Jitter time.Duration
	// ShutdownTimeout bounds the graceful give-back of every shard when
	// Run's context ends (default 15s).
	ShutdownTimeout time.Duration
}

// Manager keeps one etcd session per process and leads a fair share of
// the shards. It is started with Run.
type Manager struct {
	cfg    Config
	ttlSec int
	ttl    time.Duration
	margin time.Duration
	log    *slog.Logger
	m      *Metrics

	ready   atomic.Bool
	mu      sync.Mutex
	leading map[int]int64 // shard -> token
	lease   clientv3.LeaseID
	// sessCtx is the current session's context (nil without one): every
	// shard's work derives from it, so a session that ended is not ready
	// even before the session loop has noticed (see Ready).
	sessCtx context.Context
	// shards (under mu) is the count leadership is balanced over; it
	// only grows (SetShards). grow wakes the session loop when it did.
	shards int
	grow   chan struct{}

	// stragglers are shard goroutines that may still be blocked in etcd's
	// Campaign clean-up (it resigns with the client's context, which waits
	// for etcd to come back); they end when etcd answers or the client is
	// closed, and never start work.
	stragglers sync.WaitGroup
}

// New checks the configuration and returns a manager.
func New(cfg Config) (*Manager, error) {
	if cfg.Client == nil || cfg.Lead == nil {
		return nil, errors.New("leader: Client and Lead are required")
	}
	if cfg.Namespace == "" || strings.ContainsAny(cfg.Namespace, "/") {
		return nil, fmt.Errorf("leader: namespace %q: non-empty, without slashes", cfg.Namespace)
	}
	if cfg.Shards < 1 {
		return nil, fmt.Errorf("leader: shards %d: at least 1", cfg.Shards)
	}
	if cfg.ID == "" || strings.Contains(cfg.ID, "/") {
		return nil, fmt.Errorf("leader: process id %q: non-empty, without slashes", cfg.ID)
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 3 * time.Second
	}
	if cfg.Jitter <= 0 {
		cfg.Jitter = 50 * time.Millisecond
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 15 * time.Second
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	sec := int((cfg.TTL + time.Second - 1) / time.Second)
	ttl := time.Duration(sec) * time.Second
	// Keep-alives go out every TTL/3 (checked every 500ms); the margin
	// covers the answer's way back.
	margin := max(500*time.Millisecond, ttl/6)
	m := &Manager{
		cfg: cfg, ttlSec: sec, ttl: ttl, margin: margin, log: log, m: cfg.Metrics,
		leading: map[int]int64{},
		shards:  cfg.Shards, grow: make(chan struct{}, 1),
	}
	if cfg.Metrics != nil {
		cfg.Metrics.ShardCount.Set(float64(cfg.Shards))
		if cfg.Metrics.info != nil {
			cfg.Metrics.info.attach(cfg.ID, m.Leading)
		}
	}
	return m, nil
}

// SetShards raises the shard count the manager balances over to n. It may
// be called at any time, before or during Run, from any goroutine; an n
// that is not larger than the current count is ignored (shard counts only
// grow). A running session reconciles at once: this process campaigns for
// its share of the new shards and keeps the ones it leads.
func (m *Manager) SetShards(n int) {
	m.mu.Lock()
	if n <= m.shards {
		m.mu.Unlock()
		return
	}
	m.shards = n
	// set under the lock, like shards_led: two growths cannot publish
	// their counts in the other order
	if m.m != nil {
		m.m.ShardCount.Set(float64(n))
	}
	m.mu.Unlock()
	m.log.Info("shard count grows", "shards", n)
	select {
	case m.grow <- struct{}{}:
	default: // a wake-up is pending already; the loop reads the count then
	}
}

// Shards returns the shard count the manager balances over.
func (m *Manager) Shards() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.shards
}

// Ready is nil while an etcd session is up. A session whose context
// ended is not up, whether or not the session loop has noticed yet: shard
// work stops on that same context, so once it stopped because the session
// ended, Ready already says so.
func (m *Manager) Ready() error {
	m.mu.Lock()
	sctx := m.sessCtx
	m.mu.Unlock()
	if m.ready.Load() && sctx != nil && sctx.Err() == nil {
		return nil
	}
	return errors.New("no etcd session")
}

// Leading returns the shards this process leads, ascending.
func (m *Manager) Leading() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]int, 0, len(m.leading))
	for s := range m.leading {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Lease is the current session's lease (0 without a session).
func (m *Manager) Lease() clientv3.LeaseID {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lease
}

// Run keeps a session and leads shards until ctx ends; then it gives every
// shard back (the LeadFuncs finish their work in hand), resigns, and
// revokes the session so that other processes take over at once.
func (m *Manager) Run(ctx context.Context) error {
	defer m.waitStragglers()
	var old clientv3.LeaseID
	wait := retry.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	for ctx.Err() == nil {
		s, err := m.newSession(ctx)
		if err != nil {
			if ctx.Err() == nil {
				m.log.Warn("etcd session", "err", err)
			}
			if !retry.Sleep(ctx, wait.Next()) {
				break
			}
			continue
		}
		wait.Reset()
		if old != 0 {
			// The previous lease may still hold keys on the server (the
			// client gave up on it first, or etcd restored it after a
			// restart): revoke it so its shards are free at once.
			etcdlease.Revoke(ctx, m.cfg.Client, old)
		}
		old = s.Lease()
		m.runSession(ctx, s)
	}
	return nil
}

// waitStragglers waits a second for the shard goroutines still running
// (see Manager.stragglers) before Run returns.
func (m *Manager) waitStragglers() {
	done := make(chan struct{})
	go func() { m.stragglers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		m.log.Warn("shard goroutines still wait for etcd; they end when the etcd client is closed")
	}
}

// setLeading records that this process leads a shard (on) or no longer
// does, and publishes the count.
func (m *Manager) setLeading(shard int, token int64, on bool) {
	m.mu.Lock()
	if on {
		m.leading[shard] = token
	} else {
		delete(m.leading, shard)
	}
	// the gauge changes under the same lock as the map, so that two
	// changes cannot publish their counts in the other order (a stale
	// gauge summed to 17 of 16 shards across processes)
	if m.m != nil {
		m.m.ShardsLed.Set(float64(len(m.leading)))
	}
	m.mu.Unlock()
}

// clearLeading records that this process leads no shard.
func (m *Manager) clearLeading() {
	m.mu.Lock()
	clear(m.leading)
	if m.m != nil {
		m.m.ShardsLed.Set(0)
	}
	m.mu.Unlock()
}

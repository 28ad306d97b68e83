package leader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
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
	Shards    int
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
	base   time.Time // monotonic base for lease freshness

	ready   atomic.Bool
	mu      sync.Mutex
	leading map[int]int64 // shard -> token
	lease   clientv3.LeaseID
	// sessCtx is the current session's context (nil without one): every
	// shard's work derives from it, so a session that ended is not ready
	// even before the session loop has noticed (see Ready).
	sessCtx context.Context

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
	return &Manager{
		cfg: cfg, ttlSec: sec, ttl: ttl, margin: margin, log: log, m: cfg.Metrics,
		base: time.Now(), leading: map[int]int64{},
	}, nil
}

// MembersPrefix is the etcd prefix of the live members of a namespace.
func MembersPrefix(ns string) string { return "/" + ns + "/members/" }

// ShardsPrefix is the etcd prefix of every shard election of a namespace.
func ShardsPrefix(ns string) string { return "/" + ns + "/shards/" }

// ElectionPrefix is the key prefix of shard i's election, with the
// trailing slash.
func ElectionPrefix(ns string, shard int) string {
	return ShardsPrefix(ns) + strconv.Itoa(shard) + "/"
}

// campaignKey is the candidate key concurrency.Election creates for a lease.
func campaignKey(ns string, shard int, lease clientv3.LeaseID) string {
	return ElectionPrefix(ns, shard) + fmt.Sprintf("%x", int64(lease))
}

// ParseElectionKey returns the shard of an election key.
func ParseElectionKey(ns, key string) (int, bool) {
	rest, ok := strings.CutPrefix(key, ShardsPrefix(ns))
	if !ok {
		return 0, false
	}
	num, _, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, false
	}
	s, err := strconv.Atoi(num)
	return s, err == nil && s >= 0
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
	wait := newBackoff(100*time.Millisecond, 2*time.Second)
	for ctx.Err() == nil {
		s, err := m.newSession(ctx)
		if err != nil {
			if ctx.Err() == nil {
				m.log.Warn("etcd session", "err", err)
			}
			if !sleepCtx(ctx, wait.next()) {
				break
			}
			continue
		}
		wait.reset()
		if old != 0 {
			// The previous lease may still hold keys on the server (the
			// client gave up on it first, or etcd restored it after a
			// restart): revoke it so its shards are free at once.
			m.revoke(ctx, old)
		}
		old = s.Lease()
		m.runSession(ctx, s)
	}
	return nil
}

func (m *Manager) waitStragglers() {
	done := make(chan struct{})
	go func() { m.stragglers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		m.log.Warn("shard goroutines still wait for etcd; they end when the etcd client is closed")
	}
}

func (m *Manager) revoke(ctx context.Context, id clientv3.LeaseID) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_, _ = m.cfg.Client.Revoke(rctx, id)
}

// session is a concurrency.Session plus the time of its last keep-alive
// answer.
type session struct {
	*concurrency.Session
	m      *Manager
	answer atomic.Int64 // since m.base
	kaDone chan struct{}
}

func (s *session) answered(at time.Time) {
	d := int64(at.Sub(s.m.base))
	for {
		old := s.answer.Load()
		if d <= old || s.answer.CompareAndSwap(old, d) {
			return
		}
	}
}

func (s *session) validUntil() time.Time {
	return s.m.base.Add(time.Duration(s.answer.Load()) + s.m.ttl - s.m.margin)
}

func (m *Manager) newSession(ctx context.Context) (*session, error) {
	gctx, cancel := context.WithTimeout(ctx, m.ttl)
	defer cancel()
	g, err := m.cfg.Client.Grant(gctx, int64(m.ttlSec))
	if err != nil {
		return nil, fmt.Errorf("grant lease: %w", err)
	}
	cs, err := concurrency.NewSession(m.cfg.Client, concurrency.WithLease(g.ID), concurrency.WithTTL(m.ttlSec))
	if err != nil {
		m.revoke(ctx, g.ID)
		return nil, fmt.Errorf("session: %w", err)
	}
	s := &session{Session: cs, m: m, kaDone: make(chan struct{})}
	// The server started the lease before its answer arrived; the margin
	// covers the answer's way back (as for every keep-alive answer).
	s.answered(time.Now())
	ka, err := m.cfg.Client.KeepAlive(cs.Ctx(), g.ID)
	if err != nil {
		_ = cs.Close()
		return nil, fmt.Errorf("keep-alive: %w", err)
	}
	go func() {
		defer close(s.kaDone)
		for range ka {
			s.answered(time.Now())
		}
	}()
	if m.m != nil {
		m.m.Sessions.Inc()
	}
	return s, nil
}

// cand is one candidate key of a shard election.
type cand struct {
	rev   int64
	id    string
	lease clientv3.LeaseID
}

// shardRun is this process' campaign for, and leadership of, one shard.
type shardRun struct {
	shard  int
	cancel context.CancelFunc
	stop   chan struct{}
	done   chan struct{} // goroutine exited

	mu       sync.Mutex
	state    int // runCampaigning, runLeading, runEnded
	key      string
	token    int64
	workDone chan struct{} // closed when the LeadFunc returned
	giving   bool          // stop was closed
}

const (
	runCampaigning = iota
	runLeading
	runEnded
)

// giveBack asks the shard's work to finish and resign; a campaign is
// simply cancelled.
func (r *shardRun) giveBack() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.giving {
		return
	}
	r.giving = true
	close(r.stop)
	if r.state == runCampaigning {
		r.cancel()
	}
}

// quiesced returns a channel closed once the run can no longer do any
// work; the run's context must have been cancelled first.
func (r *shardRun) quiesced() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state == runLeading {
		return r.workDone
	}
	r.state = runEnded // a campaign that returns now finds this and gives up
	c := make(chan struct{})
	close(c)
	return c
}

type runEvent struct {
	run     *shardRun
	won     bool
	ended   bool
	dropped int64 // an orphan delete finished (create revision)
}

// loop is the state of one session.
type loop struct {
	m        *Manager
	s        *session
	sessCtx  context.Context
	members  map[string]bool
	cands    []map[string]cand
	runs     map[int]*shardRun
	rev      int64 // etcd revision the view reflects
	dropping map[int64]bool
	events   chan runEvent
	closing  chan struct{} // closed when the loop stops reading events
}

func (m *Manager) runSession(ctx context.Context, s *session) {
	m.mu.Lock()
	m.lease, m.sessCtx = s.Lease(), s.Ctx()
	m.mu.Unlock()
	l := &loop{
		m: m, s: s, sessCtx: s.Ctx(),
		members:  map[string]bool{},
		cands:    make([]map[string]cand, m.cfg.Shards),
		runs:     map[int]*shardRun{},
		dropping: map[int64]bool{},
		events:   make(chan runEvent, 4*m.cfg.Shards),
		closing:  make(chan struct{}),
	}
	for i := range l.cands {
		l.cands[i] = map[string]cand{}
	}
	defer func() {
		m.ready.Store(false)
		m.mu.Lock()
		m.lease, m.sessCtx = 0, nil
		m.mu.Unlock()
		<-s.kaDone
	}()
	m.log.Info("etcd session up", "lease", fmt.Sprintf("%x", int64(s.Lease())), "ttl", m.ttl)
	graceful := l.serve(ctx)
	close(l.closing)
	if graceful {
		l.shutdown(ctx)
		return
	}
	l.abort()
}

// memberKey is this process' membership key.
func (l *loop) memberKey() string { return MembersPrefix(l.m.cfg.Namespace) + l.m.cfg.ID }

// serve runs the session until ctx ends (true) or the session dies (false).
func (l *loop) serve(ctx context.Context) bool {
	m := l.m
	c := m.cfg.Client
	if _, err := c.Put(l.sessCtx, l.memberKey(), m.cfg.ID, clientv3.WithLease(l.s.Lease())); err != nil {
		m.log.Warn("register member", "err", err)
		_ = l.s.Close()
		return ctx.Err() != nil
	}
	wch, wcancel := l.resync()
	defer func() {
		if wcancel != nil {
			wcancel()
		}
	}()
	if wch != nil {
		m.ready.Store(true)
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	armed := false
	arm := func() {
		if !armed {
			armed = true
			settle.Reset(20 * time.Millisecond)
		}
	}
	arm()
	for {
		var retry <-chan time.Time
		if wch == nil {
			retry = time.After(200 * time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return true
		case <-l.sessCtx.Done():
			m.log.Warn("etcd session lost", "lease", fmt.Sprintf("%x", int64(l.s.Lease())))
			return false
		case <-retry:
			wch, wcancel = l.resync()
			if wch != nil {
				m.ready.Store(true)
				arm()
			}
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil || wr.Canceled {
				wcancel()
				wch, wcancel = nil, nil
				continue
			}
			for _, ev := range wr.Events {
				l.apply(ev)
			}
			if wr.Header.Revision > l.rev {
				l.rev = wr.Header.Revision
			}
			arm()
		case ev := <-l.events:
			l.handle(ev)
			arm()
		case <-settle.C:
			armed = false
			l.reconcile()
		case <-tick.C:
			l.reconcile()
		}
	}
}

// resync reads the namespace's members and elections and watches them from
// there on. It returns a nil channel when etcd did not answer.
func (l *loop) resync() (clientv3.WatchChan, context.CancelFunc) {
	m := l.m
	ns := m.cfg.Namespace
	gctx, cancel := context.WithTimeout(l.sessCtx, m.ttl)
	resp, err := m.cfg.Client.Get(gctx, "/"+ns+"/", clientv3.WithPrefix())
	cancel()
	if err != nil {
		if l.sessCtx.Err() == nil {
			m.log.Warn("read elections", "err", err)
		}
		return nil, nil
	}
	clear(l.members)
	for i := range l.cands {
		clear(l.cands[i])
	}
	for _, kv := range resp.Kvs {
		l.put(kv)
	}
	l.rev = resp.Header.Revision
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(l.sessCtx))
	wch := m.cfg.Client.Watch(wctx, "/"+ns+"/", clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	return wch, wcancel
}

func (l *loop) apply(ev *clientv3.Event) {
	if ev.Type == mvccpb.PUT {
		l.put(ev.Kv)
		return
	}
	key := string(ev.Kv.Key)
	ns := l.m.cfg.Namespace
	if id, ok := strings.CutPrefix(key, MembersPrefix(ns)); ok {
		delete(l.members, id)
		return
	}
	if s, ok := ParseElectionKey(ns, key); ok && s < len(l.cands) {
		delete(l.cands[s], key)
	}
}

func (l *loop) put(kv *mvccpb.KeyValue) {
	key := string(kv.Key)
	ns := l.m.cfg.Namespace
	if id, ok := strings.CutPrefix(key, MembersPrefix(ns)); ok {
		l.members[id] = true
		return
	}
	if s, ok := ParseElectionKey(ns, key); ok && s < len(l.cands) {
		l.cands[s][key] = cand{rev: kv.CreateRevision, id: string(kv.Value), lease: clientv3.LeaseID(kv.Lease)}
	}
}

// first is the lowest candidate of a shard: the leader, or the campaigner
// that will lead.
func (l *loop) first(s int) (string, cand, bool) {
	var bk string
	var best cand
	found := false
	for k, c := range l.cands[s] {
		if !found || c.rev < best.rev {
			bk, best, found = k, c, true
		}
	}
	return bk, best, found
}

func (l *loop) handle(ev runEvent) {
	if ev.dropped != 0 {
		delete(l.dropping, ev.dropped)
		return
	}
	r := ev.run
	if ev.won {
		return
	}
	if ev.ended {
		if l.runs[r.shard] == r {
			delete(l.runs, r.shard)
		}
	}
}

func (m *Manager) setLeading(shard int, token int64, on bool) {
	m.mu.Lock()
	if on {
		m.leading[shard] = token
	} else {
		delete(m.leading, shard)
	}
	n := len(m.leading)
	m.mu.Unlock()
	if m.m != nil {
		m.m.ShardsLed.Set(float64(n))
	}
}

const (
	leaving     = "\x00leaving"     // our own key, run ended or ending
	unavailable = "\x00unavailable" // held by a key of an old session of ours
)

// reconcile compares the view with the plan and acts on the difference.
func (l *loop) reconcile() {
	m := l.m
	self := m.cfg.ID
	lease := l.s.Lease()
	leaders := make([]string, m.cfg.Shards)
	for s := range leaders {
		_, c, found := l.first(s)
		r := l.runs[s]
		if r == nil {
			l.dropOrphans(s)
			switch {
			case !found:
			case c.id == self && c.lease == lease:
				leaders[s] = leaving
			case c.id == self:
				leaders[s] = unavailable
			default:
				leaders[s] = c.id
			}
			continue
		}
		r.mu.Lock()
		state, rkey, token, giving := r.state, r.key, r.token, r.giving
		r.mu.Unlock()
		_, ownSeen := l.cands[s][campaignKey(m.cfg.Namespace, s, lease)]
		switch {
		case giving || state == runEnded:
			leaders[s] = leaving
		case state == runLeading && l.rev >= token && !ownSeen:
			// The view is past our key's creation and the key is gone
			// (lease revoked, key deleted): we lost the shard. Stop now.
			m.log.Warn("leader key vanished; stepping down", "shard", s, "key", rkey)
			r.cancel()
			leaders[s] = leaving
		case state == runCampaigning && ownSeen && found && c.lease != lease:
			// We are queued behind another candidate: withdraw (Campaign
			// resigns our key when its context ends).
			r.cancel()
			leaders[s] = c.id
		default:
			leaders[s] = self
		}
	}
	members := make([]string, 0, len(l.members))
	for p := range l.members {
		members = append(members, p)
	}
	plan := Decide(View{Self: self, Members: members, Leaders: leaders})
	if len(plan.Acquire)+len(plan.Release) > 0 {
		m.log.Debug("rebalance", "members", len(members), "acquire", plan.Acquire, "release", plan.Release, "view", leaders)
	}
	for _, s := range plan.Release {
		if r := l.runs[s]; r != nil {
			m.log.Info("giving shard back", "shard", s)
			r.giveBack()
		}
	}
	for _, s := range plan.Acquire {
		if l.runs[s] == nil {
			l.start(s)
		}
	}
}

func (l *loop) start(shard int) {
	ctx, cancel := context.WithCancel(l.sessCtx)
	r := &shardRun{shard: shard, cancel: cancel, stop: make(chan struct{}), done: make(chan struct{}), workDone: make(chan struct{})}
	l.runs[shard] = r
	l.m.stragglers.Add(1)
	go func() {
		defer l.m.stragglers.Done()
		defer close(r.done)
		defer cancel()
		l.runShard(ctx, r)
		r.mu.Lock()
		r.state = runEnded
		r.mu.Unlock()
		l.send(runEvent{run: r, ended: true})
	}()
}

func (l *loop) send(ev runEvent) {
	select {
	case l.events <- ev:
	case <-l.closing:
	}
}

// runShard campaigns for a shard, verifies the win, runs the work and
// resigns.
func (l *loop) runShard(ctx context.Context, r *shardRun) {
	m := l.m
	d := time.Duration(rand.Int64N(int64(m.cfg.Jitter)))
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return
	}
	prefix := ElectionPrefix(m.cfg.Namespace, r.shard)
	// NewElection appends the "/" itself.
	e := concurrency.NewElection(l.s.Session, strings.TrimSuffix(prefix, "/"))
	key := campaignKey(m.cfg.Namespace, r.shard, l.s.Lease())
	// Campaign runs under a context that the session's death cancels (it
	// does not watch its own session, etcd#19597).
	m.log.Debug("campaign", "shard", r.shard)
	if err := e.Campaign(ctx, m.cfg.ID); err != nil {
		if ctx.Err() == nil {
			m.log.Warn("campaign", "shard", r.shard, "err", err)
		}
		// The candidate key may be left behind: on errors (etcd#21128), and
		// when the context ended while the put was on its way.
		l.deleteKey(ctx, key)
		return
	}
	// From here on the key is ours (or gone): every way out that does not
	// lead resigns it, whether or not our context ended.
	//
	// Phantom leadership (etcd#19597): make sure the key still exists with
	// our lease and revision.
	gctx, cancel := context.WithTimeout(ctx, m.ttl)
	resp, err := m.cfg.Client.Get(gctx, e.Key())
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("verify leadership", "shard", r.shard, "err", err)
		}
		l.resign(ctx, r.shard, e.Key(), e.Rev())
		return
	}
	if len(resp.Kvs) != 1 || clientv3.LeaseID(resp.Kvs[0].Lease) != l.s.Lease() || resp.Kvs[0].CreateRevision != e.Rev() {
		m.log.Error("campaign returned without a key: closing the session", "shard", r.shard, "key", e.Key())
		_ = l.s.Close()
		return
	}
	token := e.Rev()
	r.mu.Lock()
	if r.state == runEnded || ctx.Err() != nil {
		r.mu.Unlock()
		l.resign(ctx, r.shard, e.Key(), token)
		return
	}
	r.state, r.key, r.token = runLeading, e.Key(), token
	r.mu.Unlock()
	m.setLeading(r.shard, token, true)

	if m.m != nil {
		m.m.LeaderChanges.WithLabelValues("acquired").Inc()
	}
	m.log.Info("leading shard", "shard", r.shard, "token", token)
	l.send(runEvent{run: r, won: true})
	err = m.cfg.Lead(ctx, Lead{Shard: r.shard, Token: token, Stop: r.stop, ValidUntil: l.s.validUntil})
	close(r.workDone)
	m.setLeading(r.shard, token, false)
	r.mu.Lock()
	giving := r.giving
	r.mu.Unlock()
	change := "lost"
	if giving && err == nil && ctx.Err() == nil {
		change = "released"
	}
	if m.m != nil {
		m.m.LeaderChanges.WithLabelValues(change).Inc()
	}
	if err != nil {
		m.log.Warn("shard work ended", "shard", r.shard, "token", token, "err", err)
	} else {
		m.log.Info("stopped leading shard", "shard", r.shard, "token", token, "change", change)
	}
	if l.sessCtx.Err() != nil {
		return // the lease is gone or about to be revoked: so is the key
	}
	l.resign(ctx, r.shard, e.Key(), token)
}

// resign deletes our election key if it is still the one we created
// (what Election.Resign does, but retried and bounded; Resign forgets its
// state after a failed request, etcd#22123). If etcd does not answer, the
// session is closed: the lease takes the key with it.
func (l *loop) resign(ctx context.Context, shard int, key string, rev int64) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		_, err = l.m.cfg.Client.Txn(rctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
			Then(clientv3.OpDelete(key)).Commit()
		if err == nil || rctx.Err() != nil {
			break
		}
	}
	if err != nil && l.sessCtx.Err() == nil {
		l.m.log.Error("resign failed: closing the session", "shard", shard, "err", err)
		_ = l.s.Close()
	}
}

// deleteKey removes a candidate key of ours left by a campaign that
// ended. The run still exists, so no newer campaign of ours can own the
// key; leftovers are retried by reconcile (dropOrphans).
func (l *loop) deleteKey(ctx context.Context, key string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_, err := l.m.cfg.Client.Txn(rctx).
		If(clientv3.Compare(clientv3.LeaseValue(key), "=", l.s.Lease())).
		Then(clientv3.OpDelete(key)).Commit()
	if err != nil && l.sessCtx.Err() == nil {
		l.m.log.Warn("remove candidate key", "key", key, "err", err)
	}
}

// dropOrphans deletes candidate keys of this session that no run owns
// (left behind by an ended campaign). Each delete is tied to the key's
// create revision, so it can never remove a newer campaign's key.
func (l *loop) dropOrphans(shard int) {
	lease := l.s.Lease()
	for key, c := range l.cands[shard] {
		if c.lease != lease || l.dropping[c.rev] {
			continue
		}
		l.dropping[c.rev] = true
		l.m.log.Debug("removing orphaned candidate key", "shard", shard, "key", key)
		l.m.stragglers.Add(1)
		go func() {
			defer l.m.stragglers.Done()
			ctx, cancel := context.WithTimeout(l.sessCtx, 2*time.Second)
			defer cancel()
			_, _ = l.m.cfg.Client.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(key), "=", c.rev)).
				Then(clientv3.OpDelete(key)).Commit()
			l.send(runEvent{dropped: c.rev})
		}()
	}
}

// abort ends every run at once after the session died: cancel, and wait
// until no work runs. Campaigns stuck in etcd clean-up are left behind.
func (l *loop) abort() {
	for _, r := range l.runs {
		r.cancel()
	}
	for _, r := range l.runs {
		<-r.quiesced()
	}
	l.waitRuns(time.Second)
	l.m.clearLeading()
}

// shutdown gives every shard back: the member key goes first (others see
// one member less and take the shards we resign at once), then each shard's
// work finishes its batch and resigns, then the session is revoked.
func (l *loop) shutdown(ctx context.Context) {
	m := l.m
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.ShutdownTimeout)
	defer cancel()
	dctx, dcancel := context.WithTimeout(sctx, time.Second)
	_, _ = m.cfg.Client.Delete(dctx, l.memberKey())
	dcancel()
	for _, r := range l.runs {
		r.giveBack()
	}
	for _, r := range l.runs {
		select {
		case <-r.done:
		case <-sctx.Done():
			r.cancel()
		}
	}
	for _, r := range l.runs {
		<-r.quiesced()
	}
	l.waitRuns(time.Second)
	l.m.clearLeading()
	if err := l.s.Close(); err != nil {
		m.log.Warn("revoke session", "err", err)
	} else {
		m.log.Info("etcd session revoked")
	}
}

// waitRuns waits a little for the run goroutines to exit and drops them.
func (l *loop) waitRuns(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for s, r := range l.runs {
		select {
		case <-r.done:
		case <-t.C:
			return
		}
		delete(l.runs, s)
	}
}

func (m *Manager) clearLeading() {
	m.mu.Lock()
	clear(m.leading)
	m.mu.Unlock()
	if m.m != nil {
		m.m.ShardsLed.Set(0)
	}
}

// backoff is a capped exponential delay with jitter.
type backoff struct {
	min, max, cur time.Duration
}

func newBackoff(lo, hi time.Duration) *backoff { return &backoff{min: lo, max: hi} }

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	return b.cur/2 + time.Duration(rand.Int64N(int64(b.cur/2)+1))
}

func (b *backoff) reset() { b.cur = 0 }

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

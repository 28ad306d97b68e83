package leader

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/internal/election"
)

// cand is one candidate key of a shard election.
type cand struct {
	rev   int64
	id    string
	lease clientv3.LeaseID
}

// runEvent is what shard runs (and orphan deletes) report to the loop.
type runEvent struct {
	run     *shardRun
	won     bool
	ended   bool
	dropped int64 // an orphan delete finished (create revision)
}

// loop is the state of one session: a view of the namespace's members
// and election candidates, kept by a watch, and the shard runs of this
// session. One goroutine (serve) owns it; reconcile compares the view with
// Decide's plan over the manager's current shard count and starts or gives
// back shard runs, which report back on events.
type loop struct {
	m       *Manager
	s       *session
	sessCtx context.Context
	members map[string]bool
	// cands holds the candidates of every shard in the watch, those at or
	// above the current count too (a process that learnt of a growth first
	// campaigns there): when the count grows, they are known already.
	cands    map[int]map[string]cand
	runs     map[int]*shardRun
	rev      int64 // etcd revision the view reflects
	dropping map[int64]bool
	events   chan runEvent
	closing  chan struct{} // closed when the loop stops reading events
}

// runSession runs one session's loop until ctx ends (the shards are given
// back) or the session dies (every run is cancelled).
func (m *Manager) runSession(ctx context.Context, s *session) {
	m.mu.Lock()
	m.lease, m.sessCtx = s.Lease(), s.Ctx()
	m.mu.Unlock()
	l := &loop{
		m: m, s: s, sessCtx: s.Ctx(),
		members:  map[string]bool{},
		cands:    map[int]map[string]cand{},
		runs:     map[int]*shardRun{},
		dropping: map[int64]bool{},
		events:   make(chan runEvent, 4*m.Shards()),
		closing:  make(chan struct{}),
	}
	defer func() {
		m.ready.Store(false)
		m.mu.Lock()
		m.lease, m.sessCtx = 0, nil
		m.mu.Unlock()
		<-s.KeepAliveDone()
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
func (l *loop) memberKey() string { return election.MembersPrefix(l.m.cfg.Namespace) + l.m.cfg.ID }

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
		case <-m.grow:
			// SetShards raised the count: reconcile reads it and campaigns
			// for this process' share of the new shards.
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
	clear(l.cands)
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
	if id, ok := strings.CutPrefix(key, election.MembersPrefix(ns)); ok {
		delete(l.members, id)
		return
	}
	if s, ok := election.ParseElectionKey(ns, key); ok {
		delete(l.cands[s], key)
		if len(l.cands[s]) == 0 {
			delete(l.cands, s)
		}
	}
}

func (l *loop) put(kv *mvccpb.KeyValue) {
	key := string(kv.Key)
	ns := l.m.cfg.Namespace
	if id, ok := strings.CutPrefix(key, election.MembersPrefix(ns)); ok {
		l.members[id] = true
		return
	}
	if s, ok := election.ParseElectionKey(ns, key); ok {
		if l.cands[s] == nil {
			l.cands[s] = map[string]cand{}
		}
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

const (
	leaving     = "\x00leaving"     // our own key, run ended or ending
	unavailable = "\x00unavailable" // held by a key of an old session of ours
)

// reconcile compares the view with the plan and acts on the difference.
// The plan covers the shards below the manager's current count; it is read
// once, so one reconcile sees one count.
func (l *loop) reconcile() {
	m := l.m
	self := m.cfg.ID
	lease := l.s.Lease()
	leaders := make([]string, m.Shards())
	since := make([]int64, len(leaders)) // our leaderships' tokens (see View.Since)
	for s := range leaders {
		_, c, found := l.first(s)
		r := l.runs[s]
		if r == nil {
			l.dropOrphans(s)
			if found {
				leaders[s] = l.holder(c)
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
		case state == runCampaigning && (r.withdrawn || ownSeen && found && c.lease != lease):
			// We are queued behind another candidate: withdraw (Campaign
			// resigns our key when its context ends). Until the run has
			// ended the shard is not ours, whether or not our key is gone
			// yet: counting it would put us over our target, and we would
			// give back a shard we lead.
			r.withdrawn = true
			r.cancel()
			leaders[s] = leaving
			if found {
				leaders[s] = l.holder(c)
			}
		default:
			leaders[s] = self
			if state == runLeading {
				since[s] = token
			}
		}
	}
	members := make([]string, 0, len(l.members))
	for p := range l.members {
		members = append(members, p)
	}
	plan := Decide(View{Self: self, Members: members, Leaders: leaders, Since: since})
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

// holder is the view's entry for a shard whose lowest candidate is c,
// when no run of this session counts for the shard (there is none, or its
// campaign was withdrawn).
func (l *loop) holder(c cand) string {
	switch {
	case c.id == l.m.cfg.ID && c.lease == l.s.Lease():
		return leaving
	case c.id == l.m.cfg.ID:
		return unavailable
	default:
		return c.id
	}
}

// send reports to the loop, unless it no longer reads events.
func (l *loop) send(ev runEvent) {
	select {
	case l.events <- ev:
	case <-l.closing:
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

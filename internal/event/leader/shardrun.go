package leader

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/delayq/delayq/internal/election"
)

// shardRun is this process' campaign for, and leadership of, one shard.
// The loop starts one (start) for each shard the plan acquires; its
// goroutine (runShard) campaigns, verifies the win, runs the LeadFunc and
// resigns, then reports back on the loop's events. The loop gives it back
// (giveBack) when the plan releases the shard, or cancels it when the
// leadership is lost.
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

	// withdrawn is set by the loop (and read only by it) when it cancelled
	// the campaign because another candidate is ahead.
	withdrawn bool
}

// States of a shardRun; they only move forward.
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

// start creates the run of a shard and its goroutine, under a context
// derived from the session's.
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
	prefix := election.ElectionPrefix(m.cfg.Namespace, r.shard)
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
	// Hand over only a lease etcd confirmed within TTL − margin (rule 3):
	// a campaign that took long on a starved machine can win with a lease
	// whose last keep-alive answer is already too old to vouch for it.
	if !l.s.Confirmed(ctx, m.ttl) {
		if ctx.Err() == nil {
			m.log.Warn("won the shard, but etcd has not confirmed the lease for too long: giving it back", "shard", r.shard)
		}
		l.resign(ctx, r.shard, e.Key(), token)
		return
	}
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
	err = m.cfg.Lead(ctx, Lead{Shard: r.shard, Token: token, Stop: r.stop, ValidUntil: l.s.ValidUntil})
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

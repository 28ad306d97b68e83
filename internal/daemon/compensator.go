package daemon

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/delayq/delayq/internal/daemon/journal"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/retry"
	"github.com/delayq/delayq/internal/shardmap"
)

// replayBatch is how many journal entries one replay step reads (a page)
// and schedules in one store call.
const replayBatch = 500

// idlePoll bounds how long an idle compensator waits for a wake-up before
// it looks at the journal again (covers a lost wake-up).
const idlePoll = time.Second

// passGap is the least time between two passes that left entries in
// place: each pass reads the entries it leaves again.
const passGap = 50 * time.Millisecond

// compensator replays the journal into Redis. It runs from the start, so a
// restarted daemon replays what an earlier run left.
//
// A pass reads the journal from its oldest entry, a page (replayBatch) at
// a time (journal.PeekAfter), schedules a page's entries through the store
// in one call (idempotent by id, absolute due times, applied in order) and
// removes the ones Redis has. Entries are kept per failure domain: a shard
// on a Redis Cluster, the whole server otherwise. An entry of a shard known
// down (shardhealth.go) is left in place without trying it, and an entry
// whose write fails blocks its shard for the rest of the pass: every later
// entry of that shard stays too, even one Redis took (it is applied again
// after the earlier one). An id's entries share its shard, so they are
// applied in order. The pass goes on past the entries it keeps, so a dead
// master's thousands of entries never hold back another shard's. On a
// single server a failure ends the pass.
//
// An entry whose write ran but was not confirmed by the replicas
// (DQ_REDIS_REPLICA_ACKS: redisstore.ErrNotReplicated) blocks nothing: it
// stays and is confirmed again by every pass until the replicas confirm
// it (hold). A written entry (journalrecord.go) is replayed in confirm
// mode: created if a failover lost it, left as it is otherwise, so that a
// change made since (a reschedule through another daemon) is never undone.
//
// An entry is written at most once: its replay carries a token (the
// journal's id and the entry's seq, redisstore.Submit.Replay) that its
// shard remembers for a day, and a replay of a token the shard has seen
// is a confirmation. A daemon killed between applying an entry and
// removing it replays it again after its restart; written again it
// would set back a change made meanwhile through another daemon (seen:
// a task rescheduled later fired at its journaled due time).
//
// An entry with a later entry of its id in the journal is dropped
// unreplayed: each entry is the task's whole content, so the latest alone
// decides it, and whether it is written or only confirmed.
//
// Order: while an entry of an id waits, the API journals new schedules of
// the id's lane too (lanes.go), so a later submission never overtakes it.
//
// A page's entries share one store call, so a write to a master that has
// just died holds the other shards' entries of its page until it fails
// (DQ_REDIS_TIMEOUT at most); that happens once, then its shards are
// known down.
//
// Failures: while Redis does not answer at all, and after a pass that met
// any other failure (e.g. OOM on a single server, a journal read), the
// compensator waits with a capped exponential backoff (50ms to 2s), cut
// short once Redis is seen answering. Entries of shards known down wait
// for a wake-up (new entries, or a shard back: the store keeper's probe),
// at least passGap after the pass, at most idlePoll. An entry Redis
// rejects for good (the id exists in a state that no longer accepts other
// content) or one that cannot be decoded is removed and logged at warn
// with its id: nothing loops forever on a poison entry.
type compensator struct {
	core *core
}

// Run replays until ctx ends; it finishes the page in progress first.
func (c *compensator) Run(ctx context.Context) error {
	a := c.core
	bo := retry.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second, NoJitter: true}
	for ctx.Err() == nil {
		if a.jr.Len() == 0 {
			c.idle(ctx)
			continue
		}
		st := a.store.Load()
		if st == nil || !a.redisUp.Load() {
			c.backoff(ctx, bo.Next())
			continue
		}
		p := c.pass(ctx, st)
		switch {
		case p.failed != nil:
			d := bo.Next()
			a.log.Debug("journal replay deferred", "error", p.failed, "retry_in", d, "journal_depth", a.jr.Len())
			c.backoff(ctx, d)
		case p.kept > 0:
			bo.Reset()
			if retry.Sleep(ctx, passGap) {
				c.idle(ctx)
			}
		default:
			bo.Reset()
		}
	}
	return nil
}

// backoff waits d, or less when Redis is seen back (the store keeper's
// ping); new journal entries do not shorten it.
func (c *compensator) backoff(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			return
		case <-c.core.kick:
			if c.core.redisUp.Load() && c.core.store.Load() != nil {
				return
			}
		}
	}
}

func (c *compensator) idle(ctx context.Context) {
	t := time.NewTimer(idlePoll)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-c.core.kick:
	case <-t.C:
	}
}

// replayPass is one pass over the journal.
type replayPass struct {
	core    *core
	st      *redisstore.Store
	m       shardmap.Map        // routes the pass' decisions, whatever the map does meanwhile
	blocked map[int]bool        // failure domains with an entry kept in this pass
	held    map[string]bool     // ids with an entry applied but not confirmed by the replicas in this pass
	removed int                 // entries replayed or dropped
	kept    int                 // entries left in place
	failed  error               // why the pass stopped early or met an unexpected error
	done    []journal.Entry     // of the current page: to remove
	subs    []redisstore.Submit // of the current page: to schedule
	sent    []journal.Entry     // the entries of subs
	written []journal.Entry     // of the current page: unwritten entries that reached Redis, to mark written
}

// pass replays what it can of the journal. It stops at a page's end when
// ctx ends; the entries appended meanwhile are for the next pass.
func (c *compensator) pass(ctx context.Context, st *redisstore.Store) *replayPass {
	a := c.core
	p := &replayPass{core: a, st: st, m: st.Map(), blocked: make(map[int]bool), held: make(map[string]bool)}
	budget := a.jr.Len() + replayBatch
	for after := uint64(0); budget > 0 && ctx.Err() == nil; {
		entries, err := a.jr.PeekAfter(ctx, after, min(replayBatch, budget))
		if err != nil {
			a.log.Error("journal peek failed", "error", err)
			p.failed = err
			break
		}
		if len(entries) == 0 {
			break
		}
		budget -= len(entries)
		after = entries[len(entries)-1].Seq
		// The page runs to its end even when ctx ends meanwhile.
		if !p.page(context.WithoutCancel(ctx), entries) {
			break
		}
	}
	if p.removed > 0 {
		a.log.Info("journal entries replayed", "count", p.removed, "kept", p.kept, "journal_depth", a.jr.Len())
	}
	return p
}

// domain is the failure domain of id's entries: its shard on a cluster.
func (p *replayPass) domain(id string) int {
	if !p.core.cluster {
		return 0
	}
	return p.m.Shard(id)
}

// keep leaves e in place and blocks its domain for the rest of the pass.
func (p *replayPass) keep(e journal.Entry) {
	p.blocked[p.domain(e.ID)] = true
	p.kept++
}

// hold leaves e in place although the primary applied it: its replicas
// did not confirm it (redisstore.ErrNotReplicated), so a failover may
// still undo it. The shard goes on (the write ran: the task fires from
// Redis on time); e is applied again by every pass until the replicas
// confirm it, and so is every later entry of its id, which stays too, so
// that the id ends with its latest submission whichever entries are
// confirmed first.
func (p *replayPass) hold(e journal.Entry) {
	p.held[e.ID] = true
	p.kept++
}

// page replays one page and reports whether the pass goes on.
func (p *replayPass) page(ctx context.Context, entries []journal.Entry) bool {
	p.done, p.subs, p.sent, p.written = p.done[:0], p.subs[:0], p.sent[:0], p.written[:0]
	p.sort(ctx, entries)
	if len(p.subs) > 0 {
		p.replay(ctx)
	}
	return p.commit(ctx)
}

// sort sorts a page's entries: dropped (superseded by a later entry of
// their id, or unreadable), kept (their domain is blocked or their shard
// known down), or to replay (subs, sent).
func (p *replayPass) sort(ctx context.Context, entries []journal.Entry) {
	a := p.core
	now := a.now()
	for _, e := range entries {
		if a.lanes.shared(e.ID) && a.supersededIn(ctx, e) {
			// a later submission of the id is in the journal: it alone
			// decides the task's content (and whether it is only confirmed)
			p.done = append(p.done, e)
			continue
		}
		if p.blocked[p.domain(e.ID)] || a.down.downFor(p.m, e.ID, now) {
			p.keep(e)
			continue
		}
		t, written, err := decodeJournalEntry(e.ID, e.Data)
		if err != nil {
			a.log.Warn("dropping unreadable journal entry", "task_id", e.ID, "seq", e.Seq, "error", err)
			p.done = append(p.done, e)
			continue
		}
		// a written entry is confirmed, not written again (journalrecord.go);
		// any other is written once: its token makes a second replay of it
		// (this daemon died before it removed it) a confirmation
		p.subs = append(p.subs, redisstore.Submit{Task: t, Confirm: written,
			Replay: a.jr.ID() + ":" + strconv.FormatUint(e.Seq, 36)})
		p.sent = append(p.sent, e)
	}
}

// replay schedules the page's subs in one store call and settles each
// entry: done, kept or held; one that reached Redis, or may have, is
// marked written (journalrecord.go).
func (p *replayPass) replay(ctx context.Context) {
	a := p.core
	octx, cancel := a.opContext(ctx)
	res, err := p.st.Schedule(octx, p.subs)
	cancel()
	// the chaos suite's crash point: Redis has the page, the journal still
	// holds every entry of it unwritten (the replay token's case)
	faultPoint("after-replay")
	a.noteResults(p.m, res, err)
	for i := range res {
		r, e := &res[i], p.sent[i]
		if p.settle(r, e) && !p.subs[i].Confirm && mayHaveRun(r.Err) {
			// it reached Redis, or may have (a timeout, a reset):
			// confirmed from now on, never written again over a change
			// made meanwhile (journalrecord.go)
			p.written = append(p.written, journal.Entry{Seq: e.Seq, Data: encodeJournalData(p.subs[i].Task, true)})
		}
	}
}

// settle decides what becomes of entry e after the store's result r; it
// reports whether e stays in the journal.
func (p *replayPass) settle(r *redisstore.Result, e journal.Entry) (kept bool) {
	a := p.core
	switch {
	case p.blocked[p.domain(e.ID)]:
		// an earlier entry of its domain stays: this one is applied
		// again after it
		p.keep(e)
	case errors.Is(r.Err, redisstore.ErrNotReplicated), p.held[e.ID]:
		p.hold(e)
	case r.Outcome == redisstore.Rejected:
		a.log.Warn("journal entry rejected by the store; dropped", "task_id", r.ID,
			"state", r.State, "journaled_at", e.At, "error", r.Err)
		p.done = append(p.done, e)
		return false
	case r.Err != nil:
		p.keep(e)
		if !a.cluster || !redisstore.IsUnavailable(r.Err) {
			p.failed = r.Err // a shard known down waits for its probe instead
		}
	default:
		p.done = append(p.done, e)
		return false
	}
	return true
}

// commit marks the page's written entries and removes its done ones; it
// reports whether the pass goes on.
func (p *replayPass) commit(ctx context.Context) bool {
	a := p.core
	if err := a.jr.Rewrite(ctx, p.written...); err != nil {
		// they stay unwritten: the next pass writes them again
		a.log.Error("journal rewrite failed", "error", err)
		p.failed = err
	}
	if len(p.done) > 0 {
		seqs := make([]uint64, len(p.done))
		for i, e := range p.done {
			seqs[i] = e.Seq
		}
		if err := a.jr.Remove(ctx, seqs...); err != nil {
			// they stay: nothing after them may be applied in this pass
			a.log.Error("journal remove failed", "error", err)
			p.failed = err
			p.kept += len(p.done)
			return false
		}
		for _, e := range p.done {
			a.lanes.done(e.ID)
		}
		p.removed += len(p.done)
		a.m.replayed.Add(float64(len(p.done)))
	}
	return a.cluster || len(p.blocked) == 0 // a single server: one failure ends the pass
}

// mayHaveRun reports whether a schedule call that answered err may have
// written its task: it succeeded, ran without the replicas' confirmation,
// or failed after it was sent.
func mayHaveRun(err error) bool {
	return err == nil || errors.Is(err, redisstore.ErrNotReplicated) ||
		(redisstore.IsUnavailable(err) && !redisstore.NotRun(err))
}

// supersededIn reports whether a later entry of e's id is in the journal
// (a bbolt read: called only when e's lane holds more than one entry).
func (co *core) supersededIn(ctx context.Context, e journal.Entry) bool {
	latest, ok, err := co.jr.Lookup(ctx, e.ID)
	return err == nil && ok && latest.Seq > e.Seq
}

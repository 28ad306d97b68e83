package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/delayq/delayq/internal/daemon/journal"
	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/shardmap"
	"github.com/delayq/delayq/internal/task"
)

// The write path of the ingest core: a decoded task passes the API's
// checks that need the daemon's settings (the topic policy, the Kafka
// record size), then goes to Redis in one store call per group or batch,
// or to the journal (schedule). The compensator (compensator.go) replays
// the journal later.

// noteTypes remembers the types of scheduled tasks.
func (co *core) noteTypes(subs []redisstore.Submit) {
	for i := range subs {
		co.seen.note(subs[i].Task.Type)
	}
}

// scheduleOne schedules the task decode returns (given the time of
// acceptance), grouped with concurrent calls by the coalescer; a refused
// task's answer has Err set.
func (co *core) scheduleOne(ctx context.Context, decode func(time.Time) (redisstore.Submit, *wire.Error)) wire.Scheduled {
	sub, e := decode(co.now())
	if e == nil {
		traceTask(ctx, sub.Task)              // trace.go: before the record size check
		e = co.topics().check(sub.Task.Topic) // topics.go
	}
	if e == nil {
		e = co.checkRecordSize(sub.Task)
	}
	if e != nil {
		return wire.Scheduled{Err: e}
	}
	return co.coalesce.schedule(ctx, sub)
}

// scheduleMany schedules the n tasks decode returns in one store call; the
// answers are in order, a refused task's with Err set.
func (co *core) scheduleMany(ctx context.Context, n int, decode func(int, time.Time) (redisstore.Submit, *wire.Error)) []wire.Scheduled {
	now := co.now()
	results := make([]wire.Scheduled, n)
	subs := make([]redisstore.Submit, 0, n)
	pos := make([]int, 0, n)
	for i := range n {
		sub, e := decode(i, now)
		if e == nil {
			traceTask(ctx, sub.Task)              // trace.go: before the record size check
			e = co.topics().check(sub.Task.Topic) // topics.go
		}
		if e == nil {
			e = co.checkRecordSize(sub.Task)
		}
		if e != nil {
			results[i].Err = e
			continue
		}
		subs = append(subs, sub)
		pos = append(pos, i)
	}
	if len(subs) > 0 {
		for j, s := range co.schedule(ctx, subs) {
			results[pos[j]] = s
		}
	}
	return results
}

// checkRecordSize refuses a task whose Kafka record would be larger than
// DQ_MAX_RECORD_BYTES: the broker would refuse it at every fire, so it
// would never run.
func (co *core) checkRecordSize(t *task.Task) *wire.Error {
	n := record.Size(t)
	if int64(n) <= co.cfg.MaxRecordBytes {
		return nil
	}
	return &wire.Error{Status: http.StatusRequestEntityTooLarge, Code: wire.CodeRecordTooLarge,
		Message: fmt.Sprintf("task %s: its Kafka record would be %d bytes (payload %d, key, headers and framing %d), over the limit of %d bytes (DQ_MAX_RECORD_BYTES)",
			task.Truncate(t.ID, 64), n, len(t.Payload), n-len(t.Payload), co.cfg.MaxRecordBytes)}
}

// schedule stores tasks in Redis, or journals them. A task is journaled
// when
//   - Redis does not answer (a single server, every master of a cluster)
//     or the store is not open yet;
//   - an earlier submission of its id, or of an id of the same lane,
//     waits in the journal (lanes.go), or an earlier item of its id in
//     subs is journaled: each id's submissions are applied in order;
//   - its shard is known down (a cluster: shardhealth.go), so that no
//     request waits for a dead master;
//   - its write fails unavailable (redisstore.IsUnavailable: refused,
//     timed out, refused writes, not replicated in time, ...); on a
//     cluster that is the failing shard's tasks only.
//
// The others go to Redis in one store call: during one master's outage
// the tasks of the other masters' shards are stored as usual. The results
// are in the order of subs.
func (co *core) schedule(ctx context.Context, subs []redisstore.Submit) []wire.Scheduled {
	co.noteTypes(subs) // for GET /v1/types (types.go)
	sc := scheduleCall{subs: subs, out: make([]wire.Scheduled, len(subs)), why: make([]uint8, len(subs))}
	st := co.store.Load()
	if st == nil || !co.redisUp.Load() {
		for i := range sc.why {
			sc.why[i] = whyRedisDown
		}
		co.journalWhy(ctx, subs, sc.why, sc.out)
		return sc.out
	}
	m := st.Map()
	if send, pos := co.holdBack(ctx, &sc, m); len(send) > 0 {
		co.storeSent(ctx, &sc, st, m, send, pos)
	}
	if sc.held != nil {
		co.journalWhy(ctx, subs, sc.why, sc.out)
	}
	return sc.out
}

// scheduleCall is what one schedule call decided: the answers, why each
// task is journaled (0: it is not) and the ids it journaled.
type scheduleCall struct {
	subs []redisstore.Submit
	out  []wire.Scheduled
	why  []uint8
	held map[string]bool // ids with an item journaled by this call
}

// hold journals subs[i] for reason w.
func (sc *scheduleCall) hold(i int, w uint8) {
	if sc.held == nil {
		sc.held = make(map[string]bool)
	}
	sc.held[sc.subs[i].Task.ID] = true
	sc.why[i] = w
}

// holdBack journals, without trying Redis, the tasks whose shard is known
// down and those with an earlier submission of their id in the journal
// (or earlier in subs), and returns the others to send, with pos[j] the
// index in subs of send[j] (pos nil: send is subs).
func (co *core) holdBack(ctx context.Context, sc *scheduleCall, m shardmap.Map) (send []redisstore.Submit, pos []int) {
	now := co.now()
	for i := range sc.subs {
		id := sc.subs[i].Task.ID
		switch {
		case co.down.downFor(m, id, now):
			sc.hold(i, whyShardDown)
		case sc.held[id] || co.inJournal(ctx, id):
			sc.hold(i, whyOrder)
		}
	}
	if sc.held == nil {
		return sc.subs, nil
	}
	send, pos = make([]redisstore.Submit, 0, len(sc.subs)), make([]int, 0, len(sc.subs))
	for i := range sc.subs {
		if sc.why[i] == 0 {
			send, pos = append(send, sc.subs[i]), append(pos, i)
		}
	}
	return send, pos
}

// storeSent stores send in one store call and settles each result (pos as
// holdBack returns it).
func (co *core) storeSent(ctx context.Context, sc *scheduleCall, st *redisstore.Store, m shardmap.Map, send []redisstore.Submit, pos []int) {
	octx, cancel := co.opContext(ctx)
	res, err := st.Schedule(octx, send)
	cancel()
	co.noteResults(m, res, err)
	var counts [5]int
	for j := range res {
		i := j
		if pos != nil {
			i = pos[j]
		}
		co.settle(sc, i, &res[j], &counts)
	}
	for o, n := range counts {
		if n > 0 {
			co.m.scheduled.WithLabelValues(redisstore.Outcome(o).String()).Add(float64(n))
		}
	}
}

// settle turns the store's result r of subs[i] into its answer, or into a
// reason to journal it, and counts the outcome.
func (co *core) settle(sc *scheduleCall, i int, r *redisstore.Result, counts *[5]int) {
	switch {
	case sc.held[r.ID]:
		// A later item of an id whose earlier item is journaled is
		// journaled too (even if Redis took it): the replay must end
		// with the latest submission.
		sc.why[i] = whyOrder
		if mayHaveRun(r.Err) {
			sc.why[i] = whyOrderRun // it reached Redis, or may have
		}
	case errors.Is(r.Err, redisstore.ErrNotReplicated):
		// in Redis, it fires on time; the journal confirms it
		sc.hold(i, whyUnconfirmed)
	case r.Err != nil && redisstore.IsUnavailable(r.Err) && !redisstore.NotRun(r.Err):
		sc.hold(i, whyMaybeRun)
	case r.Err != nil && redisstore.IsUnavailable(r.Err):
		sc.hold(i, whyUnavailable)
	case r.Outcome == redisstore.Rejected:
		counts[redisstore.Rejected]++
		sc.out[i] = wire.Scheduled{ID: r.ID, Err: wire.Conflict(rejectedMessage(r))}
	case r.Err != nil || r.Outcome < redisstore.Created || r.Outcome > redisstore.Updated:
		sc.out[i] = wire.Scheduled{ID: r.ID, Err: co.internalError("schedule", r.Err, "task_id", r.ID, "outcome", r.Outcome)}
	default:
		counts[r.Outcome]++
		o := r.Outcome.String()
		sc.out[i] = wire.Scheduled{ID: r.ID, State: r.State, Outcome: o, Kept: wire.KeptOf(o, r.State, sc.subs[i].Relative),
			DueAt: r.DueAt, Shard: r.Shard}
	}
}

// journalWhy journals the tasks of subs that have a reason in why, in the
// order of subs, and counts the reasons.
func (co *core) journalWhy(ctx context.Context, subs []redisstore.Submit, why []uint8, out []wire.Scheduled) {
	idx := make([]int, 0, len(subs))
	var counts [len(whyReason)]int
	for i, w := range why {
		if w != 0 {
			idx = append(idx, i)
			counts[w]++
		}
	}
	// the compensator has nothing to do for tasks of shards known down
	wake := !co.cluster || counts[whyRedisDown] > 0 || counts[whyOrder] > 0 || counts[whyUnconfirmed] > 0
	if !co.appendJournal(ctx, subs, idx, why, out, wake) {
		return
	}
	for w, n := range counts {
		if n > 0 {
			co.m.journaled.WithLabelValues(whyReason[w]).Add(float64(n))
		}
	}
}

// appendJournal is journal; it reports whether the append succeeded, and
// wakes the compensator only if wake. The lanes of the ids count the
// entries from before the append (lanes.go).
func (co *core) appendJournal(ctx context.Context, subs []redisstore.Submit, idx []int, why []uint8, out []wire.Scheduled, wake bool) bool {
	if len(idx) == 0 {
		return true
	}
	entries := make([]journal.Entry, len(idx))
	now := co.now()
	for j, i := range idx {
		t := subs[i].Task
		written := why[i] == whyUnconfirmed || why[i] == whyMaybeRun || why[i] == whyOrderRun
		entries[j] = journal.Entry{ID: t.ID, Data: encodeJournalData(t, written), At: now}
		co.lanes.add(t.ID)
	}
	_, err := co.jr.Append(context.WithoutCancel(ctx), entries...)
	for _, i := range idx {
		t := subs[i].Task
		if err != nil {
			co.lanes.done(t.ID)
			out[i] = wire.Scheduled{ID: t.ID, Err: wire.Unavailable("redis cannot take the task now and the journal write failed")}
			continue
		}
		out[i] = wire.Scheduled{ID: t.ID, State: task.StateJournaled, Outcome: wire.OutcomeJournaled, DueAt: t.DueAt,
			Shard: co.shardOf(t.ID)}
	}
	if err != nil {
		co.log.Error("journal append failed", "tasks", len(idx), "error", err)
		return false
	}
	co.m.scheduled.WithLabelValues(wire.OutcomeJournaled).Add(float64(len(idx)))
	if wake {
		co.wake()
	}
	return true
}

// Why a task of a schedule call is journaled; 0: it is not.
const (
	whyRedisDown uint8 = iota + 1
	whyShardDown
	whyUnavailable
	whyOrder
	whyUnconfirmed // written, but the replicas did not confirm it: a written journal entry
	whyMaybeRun    // unavailable after it was sent (a timeout, a reset): it may have run, a written entry too
	whyOrderRun    // whyOrder for an item that was sent and may have run: a written entry
)

var whyReason = [...]string{whyRedisDown: reasonRedisDown, whyShardDown: reasonShardDown, whyUnavailable: reasonUnavailable,
	whyOrder: reasonOrder, whyUnconfirmed: reasonUnconfirmed, whyMaybeRun: reasonUnavailable, whyOrderRun: reasonOrder}

func rejectedMessage(r *redisstore.Result) string {
	return fmt.Sprintf("task %s exists and is %s: a task can take other content only while it waits", r.ID, r.State)
}

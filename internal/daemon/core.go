package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/daemon/journal"
	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/lograte"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/shardmap"
	"github.com/delayq/delayq/internal/task"
)

// core is the daemon's ingest core: the write path and what it knows of
// Redis, below the HTTP surface. It owns the Redis client and the store
// (the store keeper opens it and watches Redis: storekeeper.go), the
// journal and its lanes (lanes.go, journalrecord.go), the compensator
// that replays it (compensator.go), the coalescer (coalescer.go) and the
// health of Redis and of its shards (health.go, shardhealth.go).
//
// Its API, to the handlers and to an embedded producer through App:
//
//   - scheduleOne, scheduleMany (ingest.go): the API's checks of a
//     decoded task (topic policy, record size), then Redis or the journal;
//   - storeFor, storeForID, writable, journaled, inStore, storeError,
//     internalError: the store for an operation that cannot be journaled
//     (reads, reschedule, cancel, the operator API), with the 503 answers
//     while Redis is down and the bookkeeping of what its errors say;
//   - shardOf, shardCount, shardsDown, report (/readyz), journal depth.
//
// It knows nothing of HTTP beyond the API's answers (package wire).
type core struct {
	cfg Config
	log *slog.Logger
	m   *metrics
	now func() time.Time

	rdb     redis.UniversalClient
	cluster bool // rdb is a Redis Cluster client: each shard is its own failure domain
	// unconfirmed warns of writes whose replicas did not confirm them
	// (DQ_REDIS_REPLICA_ACKS), once a minute
	unconfirmed lograte.Warner
	store       atomic.Pointer[redisstore.Store] // nil until Redis answered once
	// redisUp: Redis answers. A single server: it answered the last
	// operation or ping. A cluster: some master answered the store
	// keeper's ping (the shards known down are in down).
	redisUp atomic.Bool
	down    shardHealth             // shards known down (cluster only; shardhealth.go)
	refused atomic.Pointer[refusal] // Redis answers but refused the last write (OOM, READONLY, ...)
	// misconfig is why Redis refuses delayq's settings (TLS, login,
	// permission; config.Misconfigured), nil while it does not.
	misconfig atomic.Pointer[string]
	jr        *journal.Journal
	// jrFailing is the journal check's failure last logged, nil while it
	// passes (health.go).
	jrFailing atomic.Pointer[string]
	lanes     *lanes        // journal entries per lane of ids (lanes.go)
	kick      chan struct{} // wakes the compensator (new journal entry, Redis or a shard back)
	seen      seenTypes     // task types scheduled since start (GET /v1/types)

	keeper   *storeKeeper
	comp     *compensator
	coalesce *coalescer
}

// newCore opens the journal, counts its lanes, registers the ingest
// metrics on reg, builds the Redis client and tries once to open the
// store (storeKeeper.tryOpen: only a fatal cause is an error). On an
// error nothing stays open.
func newCore(ctx context.Context, cfg Config, log *slog.Logger, reg *prometheus.Registry) (*core, error) {
	co := &core{cfg: cfg, log: log, now: time.Now, kick: make(chan struct{}, 1), lanes: newLanes(),
		unconfirmed: lograte.Warner{Log: log, Every: time.Minute}}
	jr, err := journal.Open(cfg.JournalDir)
	if err != nil {
		return nil, err
	}
	co.jr = jr
	if err := co.lanes.load(ctx, jr); err != nil {
		_ = jr.Close()
		return nil, err
	}
	co.m = newMetrics(reg,
		func() float64 { return float64(co.jr.Len()) },
		func() float64 { return gauge(co.redisUp.Load()) },
		func() float64 { return gauge(co.redisWritable()) },
		func() float64 { return float64(len(co.shardsDown())) })
	reg.MustRegister(newShardGauges(ctx, co.statsReader, log.With("component", "gauges")))
	var ha *config.RedisHA
	if co.rdb, ha, err = cfg.RedisClientHA(log); err != nil {
		_ = jr.Close()
		return nil, err
	}
	reg.MustRegister(ha) // delayq_redis_failovers_total
	_, co.cluster = co.rdb.(*redis.ClusterClient)
	co.keeper = &storeKeeper{core: co}
	co.comp = &compensator{core: co}
	co.coalesce = newCoalescer(co)
	if err := co.keeper.tryOpen(ctx); err != nil {
		_ = co.close()
		return nil, err
	}
	return co, nil
}

func gauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// close closes the journal (entries left are replayed by the next start),
// then the Redis client.
func (co *core) close() error {
	return errors.Join(co.jr.Close(), co.rdb.Close())
}

// journalDepth is the number of journal entries waiting for replay.
func (co *core) journalDepth() int { return co.jr.Len() }

// setRedisUp records whether Redis answered and logs the transitions.
func (co *core) setRedisUp(up bool, cause error) {
	if co.redisUp.Swap(up) == up {
		return
	}
	if up {
		co.log.Info("redis reachable")
		co.wake()
	} else {
		co.log.Warn("redis unreachable; schedules go to the journal", "error", cause)
	}
}

// noteRedis records the result of a Redis operation.
func (co *core) noteRedis(err error) {
	co.noteMisconfig(err)
	switch {
	case err == nil:
		co.setRedisUp(true, nil)
	case redisstore.IsUnavailable(err) && !redisAnswered(err):
		co.m.redisErrs.Inc()
		co.setRedisUp(false, err)
	default:
		// Redis answered, with an error; a refused write (OOM, READONLY,
		// ...) is recorded by noteWrite.
		co.m.redisErrs.Inc()
		co.setRedisUp(true, nil)
	}
}

// wake nudges the compensator without blocking.
func (co *core) wake() {
	select {
	case co.kick <- struct{}{}:
	default:
	}
}

// opContext bounds one Redis operation. It is detached from the request's
// cancellation: a client hanging up must not abort a write half-way.
func (co *core) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), co.cfg.RedisTimeout)
}

// shardOf is the shard a new task of id goes to: by the namespace's map
// once the store is open, by DQ_SHARDS before (a journaled task shows it;
// the replay routes it by the map of its time).
func (co *core) shardOf(id string) int {
	if st := co.store.Load(); st != nil {
		return st.Shard(id)
	}
	return shardmap.ShardOf(id, co.cfg.Shards)
}

// shardCount is the namespace's shard count as the daemon routes by it.
func (co *core) shardCount() int {
	if st := co.store.Load(); st != nil {
		return st.Shards()
	}
	return co.cfg.Shards
}

// inStore runs one store operation under the op context (opContext) and
// records what its error says about Redis.
func (co *core) inStore(ctx context.Context, op func(ctx context.Context) error) error {
	octx, cancel := co.opContext(ctx)
	defer cancel()
	err := op(octx)
	co.noteStore(err)
	return err
}

// storeFor returns the store, or the 503 answer while it is not open or
// Redis is known to be down (the store keeper pings it every second).
func (co *core) storeFor() (*redisstore.Store, *wire.Error) {
	st := co.store.Load()
	switch {
	case st == nil:
		return nil, wire.Unavailable("redis has not been reachable since the daemon started")
	case !co.redisUp.Load():
		return nil, wire.Unavailable("redis is unreachable")
	}
	return st, nil
}

// storeForID is storeFor for an operation on id: 503 also while the id's
// shard is known down (a cluster), without waiting for its master.
func (co *core) storeForID(id string) (*redisstore.Store, *wire.Error) {
	st, e := co.storeFor()
	if e == nil && co.down.downFor(st.Map(), id, co.now()) {
		return nil, wire.Unavailable("redis is unreachable for the shard of task " + id)
	}
	return st, e
}

// inJournal reports whether an entry of id waits in the journal: its
// lane's count, then (only when the lane is busy) the journal's id index,
// so that an id that merely shares a lane with a journaled one is not
// journaled behind it. A failed lookup answers true: journaling keeps the
// order either way.
func (co *core) inJournal(ctx context.Context, id string) bool {
	if !co.lanes.busy(id) {
		return false
	}
	_, ok, err := co.jr.Lookup(ctx, id)
	return ok || err != nil
}

// journaled returns the journal's latest entry for id, if any.
func (co *core) journaled(ctx context.Context, id string) (*task.Task, bool, *wire.Error) {
	if !co.lanes.busy(id) { // no entry of its lane: no I/O
		return nil, false, nil
	}
	e, ok, err := co.jr.Lookup(ctx, id)
	if err != nil {
		co.log.Error("journal lookup failed", "task_id", id, "error", err)
		return nil, false, wire.Internal("journal lookup failed")
	}
	if !ok {
		return nil, false, nil
	}
	t, err := decodeJournalData(e.ID, e.Data)
	if err != nil {
		co.log.Error("unreadable journal entry", "task_id", id, "seq", e.Seq, "error", err)
		return nil, false, wire.Internal("unreadable journal entry")
	}
	t.State, t.Attempt, t.Shard = task.StateJournaled, 1, co.shardOf(id)
	return t, true, nil
}

// storeError maps a store error of an operation on id to the answer.
func (co *core) storeError(id string, err error) *wire.Error {
	var se *redisstore.StateError
	switch {
	case errors.Is(err, redisstore.ErrNotFound):
		return wire.NotFound("task " + id + " not found")
	case errors.As(err, &se):
		return wire.Conflict(fmt.Sprintf("task %s is %s", id, se.State))
	case errors.Is(err, redisstore.ErrNotReplicated):
		// a failover may still undo the change: never a 2xx (issue 39)
		return wire.OutcomeUnknown("task " + id + ": the change ran on the Redis primary but its replicas did not confirm it in time (DQ_REDIS_REPLICA_ACKS); send it again")
	case redisstore.IsUnavailable(err):
		return wire.Unavailable("redis is " + redisCondition(err))
	}
	return co.internalError("store", err, "task_id", id)
}

// noteStore records a store error that is not an answer about a task.
// On a cluster an operation that reached no master says nothing of the
// others: the store keeper's ping decides whether Redis is down.
func (co *core) noteStore(err error) {
	var se *redisstore.StateError
	if errors.Is(err, redisstore.ErrNotFound) || errors.As(err, &se) {
		err = nil // Redis answered
	}
	if co.cluster && redisstore.IsUnavailable(err) && !redisAnswered(err) {
		co.noteMisconfig(err)
		co.m.redisErrs.Inc()
		return
	}
	co.noteRedis(err)
}

// writable checks that id can be changed in Redis now: the store is open,
// the id's shard is not known down and the journal holds no newer version
// of it.
func (co *core) writable(ctx context.Context, id string) (*redisstore.Store, *wire.Error) {
	st, e := co.storeForID(id)
	if e != nil {
		return nil, e
	}
	_, ok, e := co.journaled(ctx, id)
	if e != nil {
		return nil, e
	}
	if ok {
		return nil, wire.Unavailable("task " + id + " is journaled (redis was unreachable); retry once it is replayed")
	}
	return st, nil
}

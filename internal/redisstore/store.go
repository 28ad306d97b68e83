package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/shardmap"
	"github.com/delayq/delayq/internal/task"
)

// Sentinel errors of the store. Callers test them with errors.Is.
var (
	ErrNotFound      = errors.New("task not found")
	ErrConflict      = errors.New("task is not in a state that allows this")
	ErrFenced        = errors.New("fenced: a newer shard leader exists")
	ErrStale         = errors.New("stale generation: the task was fired again or changed")
	ErrShardMismatch = errors.New("namespace layout differs from this build's")
)

// StateError is returned (wrapping ErrConflict) when a task exists but is in
// a state that forbids the operation.
type StateError struct {
	ID    string
	State task.State
}

func (e *StateError) Error() string {
	return fmt.Sprintf("task %s is %s", e.ID, e.State)
}
func (e *StateError) Unwrap() error { return ErrConflict }

// Options configure a Store.
type Options struct {
	Namespace string        // default "dq"
	Shards    int           // shard count of a new namespace, default 16; an existing namespace keeps its own map
	Retention time.Duration // how long finished records stay readable; default 24h
	// ReplicaAcks is the number of replicas that must confirm a durable
	// write (durable.go) before it counts as done; 0: the primary's answer
	// suffices. AckTimeout bounds the wait (default 500ms). WaitAOF waits
	// with WAITAOF instead: the primary's AOF fsync and ReplicaAcks
	// replicas' (Redis 7.2 or later; New refuses it otherwise).
	ReplicaAcks int
	AckTimeout  time.Duration
	WaitAOF     bool
}

// Store is delayq's Redis task store. It is safe for concurrent use.
type Store struct {
	rdb       redis.UniversalClient
	k         keys
	retention time.Duration
	takes     []atomic.Uint32 // per shard, to purge finished records every few takes
	purgeMore []atomic.Bool   // per shard: the last take's purge was full (see purgeBacklog)
	m         atomic.Pointer[shardmap.Map]
	reloaded  atomic.Int64 // unix ns of the last mirror read
	// pack: a script call may span shards (packCalls); set by New for a
	// client of one redis-server that is not a Redis Cluster node
	pack bool
	// durable writes (durable.go): replicas to wait for, how long, WAITAOF
	acks       int
	ackTimeout time.Duration
	waitAOF    bool
	// migratingRetries counts the calls sent again while their slot
	// migrated (retryMigrating, call.go)
	migratingRetries atomic.Int64
}

// New opens the store of a namespace. The first process of a namespace
// records o.Shards as its shard count; a later one follows the namespace's
// map whatever its own o.Shards (Map tells which; callers log a
// difference). ErrShardMismatch is left for a namespace written with
// another bucket layout.
func New(ctx context.Context, rdb redis.UniversalClient, o Options) (*Store, error) {
	if o.Namespace == "" {
		o.Namespace = "dq"
	}
	if o.Shards == 0 {
		o.Shards = 16
	}
	if o.Retention == 0 {
		o.Retention = 24 * time.Hour
	}
	if o.Shards < 1 || o.Shards > 4096 {
		return nil, fmt.Errorf("shards %d: must be between 1 and 4096", o.Shards)
	}
	if o.ReplicaAcks < 0 || o.ReplicaAcks > 16 {
		return nil, fmt.Errorf("replica acks %d: must be between 0 and 16", o.ReplicaAcks)
	}
	if o.AckTimeout <= 0 {
		o.AckTimeout = 500 * time.Millisecond
	}
	s := &Store{rdb: rdb, k: newKeys(o.Namespace), retention: o.Retention, takes: make([]atomic.Uint32, shardmap.MaxShards),
		purgeMore: make([]atomic.Bool, shardmap.MaxShards),
		acks:      o.ReplicaAcks, ackTimeout: o.AckTimeout, waitAOF: o.WaitAOF}
	// first: on a node of several masters the meta key may answer MOVED
	if err := s.probeCluster(ctx); err != nil {
		return nil, err
	}
	if err := s.checkMeta(ctx, o.Shards); err != nil {
		return nil, err
	}
	if err := s.checkWaitAOF(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// ErrClusterNode is New's answer to a client of one address that reaches
// a node of a Redis Cluster of several masters: most shards would answer
// MOVED. A cluster client is needed (go-redis' ClusterClient; the
// binaries: several addresses in DQ_REDIS_ADDRS, or DQ_REDIS_CLUSTER).
var ErrClusterNode = errors.New("redis: the address is a node of a Redis Cluster of several masters")

// probeCluster sets s.pack. A client of one address (*redis.Client) may
// reach a standalone redis-server, whose script calls may span shards, or
// a node of a Redis Cluster (a cluster's configuration endpoint, a cluster
// of one master), which refuses a script whose keys are in several slots
// (CROSSSLOT): there every call stays within one shard, as with a cluster
// client. CLUSTER SLOTS tells them apart (the least-privilege ACL allows
// it): a standalone server answers it with an error.
func (s *Store) probeCluster(ctx context.Context) error {
	c, ok := s.rdb.(*redis.Client)
	if !ok {
		return nil // a cluster client: one call per shard
	}
	// CLUSTER SLOTS, not SHARDS: Redis 6 lacks SHARDS (its error would read
	// as a standalone server), and go-redis' cluster routing, hence the
	// least-privilege ACL, uses SLOTS
	slots, err := c.ClusterSlots(ctx).Result() //nolint:staticcheck // SA1019: see above
	if err != nil {
		if _, answered := errors.AsType[redis.Error](err); answered {
			s.pack = true // "cluster support disabled" (or not permitted): one redis-server
			return nil
		}
		return fmt.Errorf("probe for Redis Cluster (CLUSTER SLOTS): %w", err)
	}
	masters := map[string]bool{}
	for _, sl := range slots {
		if len(sl.Nodes) > 0 {
			masters[sl.Nodes[0].Addr] = true
		}
	}
	if len(masters) > 1 {
		return fmt.Errorf("%w (%s, %d masters): use a cluster client (DQ_REDIS_CLUSTER=true, or several DQ_REDIS_ADDRS)",
			ErrClusterNode, c.Options().Addr, len(masters))
	}
	return nil // a cluster of one master: every slot is here, one call per shard
}

func (s *Store) checkMeta(ctx context.Context, initial int) error {
	if err := s.rdb.HSetNX(ctx, s.k.meta, "shards", strconv.Itoa(initial)).Err(); err != nil {
		return fmt.Errorf("store shard count: %w", err)
	}
	s.rdb.HSetNX(ctx, s.k.meta, "buckets", strconv.Itoa(BucketsPerShard))
	m, err := s.rdb.HGetAll(ctx, s.k.meta).Result()
	if err != nil {
		return fmt.Errorf("read namespace meta: %w", err)
	}
	sm, err := mirrorMap(m)
	if err != nil {
		return fmt.Errorf("namespace %q: %w", s.k.ns, err)
	}
	s.m.Store(&sm)
	s.reloaded.Store(time.Now().UnixNano())
	if m["buckets"] != strconv.Itoa(BucketsPerShard) {
		return fmt.Errorf("%w: namespace %q has %s buckets per shard, this build uses %d",
			ErrShardMismatch, s.k.ns, m["buckets"], BucketsPerShard)
	}
	return nil
}

// Namespace is the store's namespace.
func (s *Store) Namespace() string { return s.k.ns }

// Shards is the number of shards of the map the store routes by.
func (s *Store) Shards() int { return s.Map().Count }

// Shard is the shard a new task of this id goes to (while the map grows,
// an existing one may still live on its old shard: see Map.Old).
func (s *Store) Shard(id string) int { return s.Map().Shard(id) }

// Client is the underlying Redis client.
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// Ping checks that Redis answers.
func (s *Store) Ping(ctx context.Context) error { return s.rdb.Ping(ctx).Err() }

var stateNames = map[string]task.State{
	"s": task.StateScheduled, "r": task.StateRetrying, "F": task.StateFired,
	"f": task.StateFired, // written by takes before they left records as they are
	"S": task.StateSucceeded, "d": task.StateDead, "c": task.StateCancelled,
	"D": task.StateDelivered, // answered for a delivered task (taken_state), never stored
}

// recordHeader is the size of a record's binary header (see common.lua).
const recordHeader = 1 + 4 + 2 + 6

// decodeRecord turns a stored record into a task. When only the body is
// unreadable, the returned task still carries the header (state,
// generation, attempt, due time) along with the error, so that a caller can
// acknowledge or dead-letter that exact generation.
func decodeRecord(id, rec string, shard int) (*task.Task, error) {
	if len(rec) < recordHeader {
		return nil, fmt.Errorf("record of %s: %w: %d bytes", id, task.ErrCorrupt, len(rec))
	}
	st, ok := stateNames[rec[:1]]
	if !ok {
		return nil, fmt.Errorf("record of %s: %w: state %q", id, task.ErrCorrupt, rec[:1])
	}
	b := []byte(rec)
	gen := binary.BigEndian.Uint32(b[1:5])
	att := binary.BigEndian.Uint16(b[5:7])
	due := uint48(b[7:13])
	t := &task.Task{ID: id, State: st, Gen: uint64(gen), Attempt: int(att), DueAt: task.FromMillis(due), Shard: shard}
	if err := task.DecodeBodyOwned(b[recordHeader:], t); err != nil {
		return t, fmt.Errorf("record of %s: %w", id, err)
	}
	return t, nil
}

// reply is the {code, state, due} answer most scripts give.
type reply struct {
	code  int64
	state task.State
	due   time.Time
}

func parseReply(v any, at int) (reply, error) {
	a, ok := v.([]any)
	if !ok || len(a) < at+3 {
		return reply{}, fmt.Errorf("unexpected script reply %v", v)
	}
	code, _ := a[at].(int64)
	st, _ := a[at+1].(string)
	due, _ := a[at+2].(int64)
	return reply{code: code, state: stateNames[st], due: task.FromMillis(due)}, nil
}

// dueArg is the due argument scripts take: absolute ms, or "+ms" relative to Redis TIME.
func dueArg(at time.Time, delay time.Duration, relative bool) string {
	if relative {
		return "+" + strconv.FormatInt(max(delay.Milliseconds(), 0), 10)
	}
	return strconv.FormatInt(task.Millis(at), 10)
}

// relScoreArg is a relative due time as schedule.lua takes it: "+<delay
// ms><fraction>", the fraction being the four decimals of bucket b's part
// of the due-set score (".0010" for bucket 1: b/1024, rounded as
// dueScoreArg and due_score round it), so that the script formats only
// the integer due time it adds the delay to, not a float per task.
func relScoreArg(delay time.Duration, b int) string {
	return dueArg(time.Time{}, delay, true) + bucketFraction[b]
}

// bucketFraction[b] is b/1024 with four decimals, without its "0": ".0010".
var bucketFraction = func() (f [BucketsPerShard]string) {
	for b := range f {
		f[b] = strconv.FormatFloat(float64(b)/BucketsPerShard, 'f', 4, 64)[1:]
	}
	return f
}()

// dueScoreArg is an absolute due time (ms) of a task of bucket b as
// schedule.lua takes it: its due-set score, due + b/1024 with four
// decimals, the same number as due_score in common.lua formats (the sum
// is exact in a float64 before the year 2248, and both round it
// correctly), so that the script does not parse the bucket and format a
// float per task.
func dueScoreArg(ms int64, b int) string {
	return strconv.FormatFloat(float64(ms)+float64(b)/BucketsPerShard, 'f', 4, 64)
}

// newRecord is the record of new task t due at ms (unix ms) as
// schedule.lua writes it: record('s', 0, 1, due, body) of common.lua —
// state 's', generation 0 (4 bytes), attempt 1 (2 bytes), the due time (6
// bytes, big-endian), then the body (task.EncodeBody).
func newRecord(ms int64, t *task.Task) []byte {
	rec := make([]byte, 13, 13+64+len(t.Payload))
	rec[0] = 's'
	binary.BigEndian.PutUint16(rec[5:7], 1)
	putUint48(rec[7:13], uint64(ms))
	return task.AppendBody(rec, t)
}

// putUint48 and uint48 write and read the 6-byte big-endian integers of
// records and receipts (times in unix ms; struct's I6 in the scripts).
func putUint48(b []byte, v uint64) {
	binary.BigEndian.PutUint16(b, uint16(v>>32))
	binary.BigEndian.PutUint32(b[2:], uint32(v))
}

func uint48(b []byte) int64 {
	return int64(binary.BigEndian.Uint16(b))<<32 | int64(binary.BigEndian.Uint32(b[2:]))
}

func conflict(id string, r reply) error {
	return &StateError{ID: id, State: r.state}
}
